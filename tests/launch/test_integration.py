"""End to end on real systems: the tiny CPU recipe trained through `packcfg launch` with the local
backend (torchrun, 2 processes), as a real Slurm job, and through a real NeMo-Run Experiment on that
Slurm. No stubs: each test waits for COMPLETED and reads the metrics the trainer wrote."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from packcfg.launch.state import JobRecord, JobStore

from .conftest import SHORT_RUN, TINY, packcfg

pytestmark = [pytest.mark.slow, pytest.mark.torchrun]

# The single-node CI cluster has no GPUs: request cores (one per torchrun process) instead.
CPU = ["launch.device=cpu"]


def overrides(*extra: str) -> list[str]:
    return [arg for o in (*SHORT_RUN, *extra) for arg in ("-o", o)]


def only_record(state: Path) -> JobRecord:
    (rec,) = JobStore(state).all()
    return rec


def assert_trained(rec: JobRecord, steps: int = 4) -> None:
    assert rec.status == "COMPLETED", rec
    metrics = Path(rec.bundle_dir) / "output" / "metrics.jsonl"
    rows = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
    losses = [r["loss"] for r in rows if "loss" in r]
    assert len(losses) == steps, rows
    assert all(loss == loss and loss > 0 for loss in losses)  # finite, positive
    assert losses[-1] < losses[0]  # it learned something


def launch_and_wait(state: Path, *args: str) -> tuple[JobRecord, str]:
    out = packcfg(
        "launch", str(TINY), *args, "--state-dir", str(state), "--wait", "--timeout", "540", timeout=600
    )
    rec = only_record(state)
    logs = packcfg("logs", rec.id, "--state-dir", str(state)).stdout
    assert out.returncode == 0, f"{out.stdout}\n{out.stderr}\n--- job logs ---\n{logs}"
    return rec, logs


def test_local_backend_trains_end_to_end(tmp_path: Path) -> None:
    state = tmp_path / "state"
    rec, logs = launch_and_wait(state, *overrides(), "--backend", "local")
    assert rec.backend == "local" and rec.exit_code == 0
    assert_trained(rec)
    assert "packed" in logs and "world 2" in logs  # data prep ran, then 2 torchrun processes
    status = packcfg("status", rec.id, "--state-dir", str(state))
    assert "COMPLETED" in status.stdout


def test_local_cancel_stops_the_process_group(tmp_path: Path) -> None:
    state = tmp_path / "state"
    out = packcfg(
        "launch", str(TINY), "-o", "train.train_iters=100000", "--backend", "local", "--state-dir", str(state)
    )
    assert out.returncode == 0, out.stderr
    rec = only_record(state)
    out = packcfg("cancel", rec.id, "--state-dir", str(state))
    assert out.returncode == 0 and "CANCELLED" in out.stdout
    pid = int(rec.native_id or 0)
    for _ in range(100):
        if not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2]:
            break
        time.sleep(0.1)
    else:
        pytest.fail("the local job is still running after cancel")
    assert only_record(state).status == "CANCELLED"


def test_slurm_backend_real_job(tmp_path: Path, slurm: None) -> None:
    state = tmp_path / "state"
    rec, logs = launch_and_wait(state, *overrides(*CPU), "--backend", "slurm")
    assert rec.backend == "slurm" and rec.native_id and rec.pack_native_id
    assert_trained(rec)
    # The data-prep job ran first; the training job depended on it (afterok).
    assert (Path(rec.bundle_dir) / "logs" / f"pack-{rec.pack_native_id}.out").read_text().count("wrote") >= 1
    assert "world 2" in logs
    assert rec.native_state == "COMPLETED" and rec.exit_code == 0


def test_slurm_cancel(tmp_path: Path, slurm: None) -> None:
    state = tmp_path / "state"
    out = packcfg(
        "launch",
        str(TINY),
        *overrides(*CPU, "train.train_iters=100000"),
        "--backend",
        "slurm",
        "--state-dir",
        str(state),
    )
    assert out.returncode == 0, out.stderr
    rec = only_record(state)
    out = packcfg("cancel", rec.id, "--state-dir", str(state))
    assert out.returncode == 0 and "CANCELLED" in out.stdout
    for _ in range(60):
        status = json.loads(packcfg("status", rec.id, "--json", "--state-dir", str(state)).stdout)
        if status["native_state"] and status["native_state"].startswith("CANCELLED"):
            break
        time.sleep(1)
    assert status["status"] == "CANCELLED", status


def test_nemo_run_backend_real_experiment_on_slurm(tmp_path: Path, slurm: None, nemo_run: None) -> None:
    state = tmp_path / "state"
    rec, logs = launch_and_wait(state, *overrides(*CPU), "--backend", "nemo-run")
    assert rec.backend == "nemo-run" and rec.extra["executor"] == "slurm"
    assert rec.extra["handle"].endswith(f"/{rec.native_id}")
    assert Path(rec.extra["experiment_dir"]).is_dir()
    assert_trained(rec)
    assert "world 2" in logs


def test_nemo_run_local_executor(tmp_path: Path, nemo_run: None) -> None:
    state = tmp_path / "state"
    rec, logs = launch_and_wait(state, *overrides(), "--backend", "nemo-run", "--executor", "local")
    assert rec.extra["executor"] == "local" and rec.native_state == "SUCCEEDED"
    assert_trained(rec)
    assert logs.count("step     4/4") == 1  # each log shown once


def _venv_without_packcfg(root: Path) -> Path:
    """A venv whose interpreter sees the system's site-packages as a plain path (torch, megatron,
    pyarrow...), without running that folder's .pth files: packcfg's editable install is not there."""
    import site
    import subprocess
    import sys

    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    (site_dir,) = venv.glob("lib/python3*/site-packages")
    (site_dir / "system_site.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    torchrun = venv / "bin" / "torchrun"
    torchrun.write_text(f'#!/bin/sh\nexec "{venv}/bin/python" -m torch.distributed.run "$@"\n')
    torchrun.chmod(0o755)
    return venv


@pytest.mark.slurm
def test_rendered_bundle_runs_by_hand_where_packcfg_is_not_installed(tmp_path: Path, slurm: None) -> None:
    """Issue 16: `sbatch sbatch.sh` by hand, from another folder, in an environment where packcfg cannot
    be imported: the bundle carries packcfg (lib/), --chdir, logs/, and packs the data itself."""
    import subprocess

    venv = _venv_without_packcfg(tmp_path)
    env = {"PATH": f"{venv}/bin:/usr/bin:/bin", "HOME": str(tmp_path), "LANG": "C.UTF-8"}
    probe = subprocess.run(
        ["python3", "-c", "import torch, megatron.core, pyarrow; import packcfg"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert probe.returncode != 0 and "No module named 'packcfg'" in probe.stderr  # truly not installed
    bundle = tmp_path / "bundle"
    out = packcfg("render", str(TINY), "--out", str(bundle), *[a for o in SHORT_RUN for a in ("--set", o)])
    assert out.returncode == 0, out.stderr
    assert (bundle / "logs").is_dir() and "--gpus" not in (bundle / "sbatch.sh").read_text()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    job = subprocess.run(
        ["sbatch", "--parsable", str(bundle / "sbatch.sh")],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
    )
    assert job.returncode == 0, job.stderr
    job_id = job.stdout.strip().split(";")[0]
    from packcfg.launch.backends.slurm import job_state, normalise

    deadline = time.monotonic() + 540
    state = "PENDING"
    while time.monotonic() < deadline:
        state, _ = job_state(job_id)
        if normalise(state) in ("COMPLETED", "FAILED", "CANCELLED"):
            break
        time.sleep(2)
    log = bundle / "logs" / f"train-{job_id}.out"
    text = log.read_text() if log.exists() else "(no log)"
    assert normalise(state) == "COMPLETED", f"{state}\n{text}"
    assert not list(elsewhere.iterdir())  # nothing landed where sbatch was run
    metrics = bundle / "output" / "metrics.jsonl"
    losses = [json.loads(line)["loss"] for line in metrics.read_text().splitlines() if '"loss"' in line]
    assert len(losses) == 4 and losses[-1] < losses[0]
    assert "world 2" in text and "wrote runs/tiny_cpu_sft/packed/train.parquet" in text
