"""Job records (atomic, prefix lookup, corrupt files), the duplicate-config refusal, the state-dir
default, and the Slurm backend's command construction and state mapping (subprocess stubbed)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from packcfg.launch import LaunchError, service
from packcfg.launch.backends import slurm as slurm_backend
from packcfg.launch.state import JobRecord, JobStore, default_state_dir

from .conftest import TINY, packcfg


def record(job_id: str, digest: str = "0" * 64, **kw: object) -> JobRecord:
    return JobRecord(id=job_id, backend="local", config_hash=digest, bundle_dir="/nowhere", **kw)


def test_save_load_roundtrip_and_atomic(tmp_path: Path) -> None:
    store = JobStore(tmp_path)
    r = record("tiny-20260101T000000-abcdef12", native_id="42", extra={"k": [1, 2]})
    store.save(r)
    assert store.load(r.id) == r
    files = sorted(p.name for p in store.jobs_dir.iterdir())
    assert files == [f"{r.id}.json"]  # no temporary file left behind
    assert json.loads((store.jobs_dir / files[0]).read_text())["native_id"] == "42"


def test_prefix_lookup_ambiguity_and_missing(tmp_path: Path) -> None:
    store = JobStore(tmp_path)
    store.save(record("tiny-a1"))
    store.save(record("tiny-a2"))
    store.save(record("other-b"))
    assert store.load("other").id == "other-b"
    with pytest.raises(LaunchError, match="ambiguous"):
        store.load("tiny-a")
    with pytest.raises(LaunchError, match="no job"):
        store.load("zzz")
    with pytest.raises(LaunchError, match="not a job id"):
        store.load("../etc/passwd")


def test_corrupt_record_does_not_hide_others(tmp_path: Path) -> None:
    store = JobStore(tmp_path)
    store.save(record("good"))
    (store.jobs_dir / "bad.json").write_text("{not json")
    assert [r.id for r in store.all()] == ["good"]
    with pytest.raises(LaunchError, match="unreadable job record"):
        store.load("bad")


def test_default_state_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PACKCFG_STATE_DIR", str(tmp_path / "s"))
    assert default_state_dir() == tmp_path / "s"
    monkeypatch.delenv("PACKCFG_STATE_DIR")
    monkeypatch.delenv("XDG_STATE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert default_state_dir() == tmp_path / ".local" / "state" / "packcfg"


def test_same_config_hash_is_refused_unless_force(tmp_path: Path) -> None:
    bundle, _ = service.gate_and_render([TINY], [], backend="local")
    store = JobStore(tmp_path / "state")
    store.save(record("earlier-job", bundle.config_hash, status="COMPLETED"))
    out = packcfg("launch", str(TINY), "--backend", "local", "--state-dir", str(store.root))
    assert out.returncode == 1
    assert "already submitted as earlier-job (COMPLETED)" in out.stderr and "--force" in out.stderr
    assert [r.id for r in store.all()] == ["earlier-job"]
    # A different config (one override) is a different hash: not a duplicate.
    other, _ = service.gate_and_render([TINY], ["train.train_iters=3"], backend="local")
    assert other.config_hash != bundle.config_hash
    # --force passes the check (a dry run submits nothing but shows it got past).
    out = packcfg(
        "launch", str(TINY), "--backend", "local", "--state-dir", str(store.root), "--force", "--dry-run"
    )
    assert out.returncode == 0, out.stderr


def test_status_logs_cancel_cli_on_records(tmp_path: Path) -> None:
    store = JobStore(tmp_path)
    log = tmp_path / "job.log"
    log.write_text("hello from the job\n")
    store.save(
        record(
            "finished-job",
            status="COMPLETED",
            native_id="1",
            log_paths=[str(log)],
            created_at="2026-01-01T00:00:00Z",
        )
    )
    out = packcfg("status", "--state-dir", str(tmp_path))
    assert out.returncode == 0 and "finished-job" in out.stdout and "COMPLETED" in out.stdout
    out = packcfg("status", "finished", "--json", "--state-dir", str(tmp_path))
    assert json.loads(out.stdout)["status"] == "COMPLETED"
    out = packcfg("logs", "finished-job", "--state-dir", str(tmp_path))
    assert out.stdout == "hello from the job\n"
    out = packcfg("logs", "finished-job", "-f", "--state-dir", str(tmp_path), timeout=60)
    assert out.returncode == 0 and out.stdout == "hello from the job\n"  # finished: prints, returns
    out = packcfg("cancel", "finished-job", "--state-dir", str(tmp_path))
    assert out.returncode == 0 and "already COMPLETED" in out.stdout
    out = packcfg("status", "nope", "--state-dir", str(tmp_path))
    assert out.returncode == 2 and out.stderr.startswith("packcfg: no job") and "Traceback" not in out.stderr


# --- Slurm backend: command construction with subprocess stubbed ----------------------------------


class FakeSlurm:
    def __init__(self, answers: dict[str, subprocess.CompletedProcess[str]]) -> None:
        self.answers = answers
        self.calls: list[tuple[list[str], Path | None]] = []

    def __call__(self, cmd, cwd=None, timeout=60, env=None):  # same signature as slurm._run
        self.calls.append((list(cmd), cwd))
        out = self.answers.get(cmd[0])
        return out or subprocess.CompletedProcess(cmd, 0, "", "")


def done(stdout: str, rc: int = 0, stderr: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.CompletedProcess([], rc, stdout, stderr)


def test_sbatch_submits_pack_first_then_train_with_dependency(tmp_path: Path, monkeypatch) -> None:
    bundle, _ = service.gate_and_render([TINY], [], backend="slurm")
    directory = bundle.write(tmp_path / "b")
    ids = iter(["101", "102;cluster"])
    fake = FakeSlurm({})
    config = "ClusterName             = alpha\nSLURM_CONF              = /etc/slurm/slurm.conf\n"
    monkeypatch.setattr(
        slurm_backend,
        "_run",
        lambda cmd, cwd=None, timeout=60, env=None: (
            fake.calls.append((list(cmd), cwd)) or done(config if cmd[0] == "scontrol" else next(ids) + "\n")
        ),
    )
    monkeypatch.delenv("SLURM_CONF", raising=False)
    r = record("j")
    slurm_backend.SlurmBackend().submit(directory, bundle, r)
    assert [c for c, _ in fake.calls] == [
        ["scontrol", "show", "config"],  # the cluster the job goes to, recorded first
        ["sbatch", "--parsable", "pack.sbatch.sh"],
        ["sbatch", "--parsable", "--dependency=afterok:101", "sbatch.sh"],
    ]
    assert all(cwd == directory for c, cwd in fake.calls if c[0] == "sbatch")
    assert (r.native_id, r.pack_native_id, r.status) == ("102", "101", "PENDING")
    # sbatch printed `102;cluster` (sent with -M / SBATCH_CLUSTERS): later commands pass -M cluster
    assert (r.cluster, r.slurm_conf, r.cluster_flag) == ("cluster", "/etc/slurm/slurm.conf", True)
    assert r.log_paths == [str(directory / "logs/pack-101.out"), str(directory / "logs/train-102.out")]


def test_sbatch_skips_data_prep_when_packed_data_exists(tmp_path: Path, monkeypatch) -> None:
    bundle, _ = service.gate_and_render([TINY], [], backend="slurm")
    directory = bundle.write(tmp_path / "b")
    (directory / bundle.packed_data).parent.mkdir(parents=True)
    (directory / bundle.packed_data).write_bytes(b"x")
    fake = FakeSlurm({"sbatch": done("7\n")})
    monkeypatch.setattr(slurm_backend, "_run", fake)
    r = record("j")
    slurm_backend.SlurmBackend().submit(directory, bundle, r)
    assert [c for c, _ in fake.calls if c[0] == "sbatch"] == [["sbatch", "--parsable", "sbatch.sh"]]
    assert r.pack_native_id is None


def test_sbatch_failure_is_one_line_and_cancels_the_pack_job(tmp_path: Path, monkeypatch) -> None:
    bundle, _ = service.gate_and_render([TINY], [], backend="slurm")
    directory = bundle.write(tmp_path / "b")
    answers = iter(
        [done("55\n"), done("", 1, "sbatch: error: Batch job submission failed: Invalid account\n")]
    )
    calls: list[list[str]] = []

    def fake(cmd, cwd=None, timeout=60, env=None):
        calls.append(list(cmd))
        return done("") if cmd[0] in ("scancel", "scontrol") else next(answers)

    monkeypatch.setattr(slurm_backend, "_run", fake)
    with pytest.raises(LaunchError, match="^sbatch failed: sbatch: error: .*Invalid account$"):
        slurm_backend.SlurmBackend().submit(directory, bundle, record("j"))
    assert calls[-1] == ["scancel", "55"]


@pytest.mark.parametrize(
    ("squeue", "sacct", "scontrol", "expected"),
    [
        ("RUNNING\n", None, None, ("RUNNING", "RUNNING", None)),
        ("PENDING\n", None, None, ("PENDING", "PENDING", None)),
        ("", "COMPLETED|0:0\n", None, ("COMPLETED", "COMPLETED", 0)),
        ("", "CANCELLED by 0|0:15\n", None, ("CANCELLED by 0", "CANCELLED", 0)),
        ("", "OUT_OF_MEMORY|0:125\n", None, ("OUT_OF_MEMORY", "FAILED", 0)),
        ("", "FAILED|3:0\n", None, ("FAILED", "FAILED", 3)),
        ("", "", "JobId=5 JobState=TIMEOUT Reason=TimeLimit ExitCode=0:1\n", ("TIMEOUT", "FAILED", 0)),
        ("", "", "", ("UNKNOWN", "UNKNOWN", None)),
    ],
)
def test_state_mapping(squeue, sacct, scontrol, expected, monkeypatch) -> None:
    answers = {
        "squeue": done(squeue),
        "sacct": done(sacct or "", 0 if sacct is not None else 1),
        "scontrol": done(scontrol or "", 0 if scontrol else 1),
    }
    monkeypatch.setattr(slurm_backend, "_run", lambda cmd, cwd=None, timeout=60, env=None: answers[cmd[0]])
    monkeypatch.setattr(slurm_backend.shutil, "which", lambda name: f"/usr/bin/{name}")
    r = record("j", native_id="5")
    r.backend = "slurm"
    slurm_backend.SlurmBackend().refresh(r)
    assert (r.native_state, r.status, r.exit_code) == expected


def test_training_cancelled_by_failed_data_prep_is_failed(monkeypatch) -> None:
    states = {"9": ("CANCELLED", 0), "8": ("FAILED", 1)}
    monkeypatch.setattr(
        slurm_backend, "job_answer", lambda job_id, target: slurm_backend.JobAnswer(*states[job_id])
    )
    r = record("j", native_id="9", pack_native_id="8")
    slurm_backend.SlurmBackend().refresh(r)
    assert r.status == "FAILED" and r.native_state == "CANCELLED (data prep job 8 FAILED)"
