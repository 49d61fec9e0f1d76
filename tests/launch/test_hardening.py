"""Issue 10/16 hardening of the launch flow: nothing the user had is lost (render's output folder),
concurrent launches submit once, corrupt job records never break the readers, secrets never land in a
bundle, a signal to `launch --backend local` leaves no process behind, and the gate blames only lines
the user wrote. Each test fails on the code before the fix (the old behaviour is named in it)."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from packcfg.launch import LaunchError, service
from packcfg.launch.bundle import JobBundle, render_bundle
from packcfg.launch.state import JobRecord, JobStore
from packcfg.lint.engine import lint_config

from .conftest import REPO_ROOT, TINY, packcfg

COMMENTED = "# my experiment: keep this comment\n"


def user_config(folder: Path, name: str = "config.yaml") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(COMMENTED + TINY.read_text())
    return path


# --- 1. data loss: render's output folder ---------------------------------------------------------


def test_render_into_the_config_folder_keeps_the_config(tmp_path: Path) -> None:
    """Old: `render config.yaml -o .` replaced the user's config.yaml (comments lost), exit 0."""
    config = user_config(tmp_path / "exp")
    before = config.read_bytes()
    out = packcfg("render", "config.yaml", "--out", ".", cwd=tmp_path / "exp")
    assert out.returncode == 2, out.stdout
    assert "already holds files that packcfg did not write (config.yaml)" in out.stderr
    assert out.stderr.count("\n") == 1 and "Traceback" not in out.stderr
    assert config.read_bytes() == before
    # The deprecated spelling `-o .` (as the issue wrote it) the same.
    out = packcfg("render", "config.yaml", "-o", ".", cwd=tmp_path / "exp")
    assert out.returncode == 2 and "did not write (config.yaml)" in out.stderr.splitlines()[-1]
    assert config.read_bytes() == before
    assert sorted(p.name for p in (tmp_path / "exp").iterdir()) == ["config.yaml"]  # nothing written
    # --force writes the other files, but never over an input of the command.
    out = packcfg("render", "config.yaml", "--out", ".", "--force", cwd=tmp_path / "exp")
    assert out.returncode == 2
    assert "config.yaml: is an input of this command" in out.stderr
    assert config.read_bytes() == before


def test_render_refuses_a_folder_with_foreign_files(tmp_path: Path) -> None:
    """Old: any sbatch.sh in the folder was silently replaced."""
    out_dir = tmp_path / "jobs"
    out_dir.mkdir()
    mine = out_dir / "sbatch.sh"
    mine.write_text("#!/bin/bash\n# my hand-tuned script\n")
    with pytest.raises(LaunchError, match="did not write \\(sbatch.sh\\).*--force"):
        service.render([TINY], out_dir)
    assert mine.read_text().endswith("hand-tuned script\n")
    directory, _, _ = service.render([TINY], out_dir, force=True)
    assert "hand-tuned" not in mine.read_text()
    assert (directory / "manifest.json").is_file()


def test_rerender_over_its_own_bundle_but_not_over_edits(tmp_path: Path) -> None:
    directory, _, _ = service.render([TINY], tmp_path / "b")
    service.render([TINY], tmp_path / "b", ["train.train_iters=3"])  # same experiment: replaced
    assert "train_iters: 3" in (directory / "config.yaml").read_text()
    (directory / "logs" / "train-1.out").write_text("job output\n")  # the job's own files stay
    service.render([TINY], tmp_path / "b")
    assert (directory / "logs" / "train-1.out").read_text() == "job output\n"
    (directory / "sbatch.sh").write_text((directory / "sbatch.sh").read_text() + "# my edit\n")
    with pytest.raises(LaunchError, match="sbatch.sh: exists and was not written by packcfg"):
        service.render([TINY], tmp_path / "b")
    assert (directory / "sbatch.sh").read_text().endswith("# my edit\n")
    # Another experiment's bundle is not this one's to replace.
    with pytest.raises(LaunchError, match="holds the bundle of another experiment \\(tiny_cpu_sft\\)"):
        service.render([TINY], tmp_path / "b", ["launch.job_name=other"])


def test_bundle_never_writes_through_a_symlink_or_over_a_special_file(tmp_path: Path) -> None:
    directory, _, _ = service.render([TINY], tmp_path / "b")
    target = tmp_path / "precious.txt"
    target.write_text("precious\n")
    (directory / "torchrun.sh").unlink()
    (directory / "torchrun.sh").symlink_to(target)
    with pytest.raises(LaunchError, match="torchrun.sh: is a symlink"):
        service.render([TINY], tmp_path / "b", force=True)
    assert target.read_text() == "precious\n" and (directory / "torchrun.sh").is_symlink()
    (directory / "torchrun.sh").unlink()
    os.mkfifo(directory / "torchrun.sh")
    with pytest.raises(LaunchError, match="torchrun.sh: is a FIFO"):
        service.render([TINY], tmp_path / "b", force=True)


def test_launch_bundle_dir_holding_the_config_is_refused(tmp_path: Path) -> None:
    config = user_config(tmp_path / "exp")
    before = config.read_bytes()
    out = packcfg(
        "launch",
        str(config),
        "--backend",
        "local",
        "--dry-run",
        "--bundle-dir",
        str(tmp_path / "exp"),
        "--state-dir",
        str(tmp_path / "state"),
    )
    assert out.returncode == 2 and "did not write" in out.stderr
    assert config.read_bytes() == before


# --- 2. races: five concurrent launches of one config submit once ----------------------------------

FAKE_SLURM = {
    "sbatch": """#!/bin/bash
# counts its calls; prints a job id as `sbatch --parsable` does
echo "$*" >> "$FAKE_SLURM_LOG"
sleep 0.3
echo "$$"
""",
    "squeue": "#!/bin/bash\necho PENDING\n",
    "scontrol": "#!/bin/bash\nexit 1\n",
    "scancel": '#!/bin/bash\necho "scancel $*" >> "$FAKE_SLURM_LOG"\n',
}


def fake_slurm(tmp_path: Path) -> dict[str, str]:
    bin_dir = tmp_path / "fakebin"
    bin_dir.mkdir(exist_ok=True)
    for name, text in FAKE_SLURM.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    return {
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "FAKE_SLURM_LOG": str(tmp_path / "sbatch.log"),
    }


def sbatch_calls(tmp_path: Path) -> list[str]:
    log = tmp_path / "sbatch.log"
    return log.read_text().splitlines() if log.exists() else []


def test_five_concurrent_launches_submit_once(tmp_path: Path) -> None:
    """Old: all five submitted (10 sbatch calls) and only one job record survived."""
    env = {**os.environ, **fake_slurm(tmp_path)}
    state = tmp_path / "state"
    cmd = [
        sys.executable,
        "-m",
        "packcfg",
        "launch",
        str(TINY),
        "--backend",
        "slurm",
        "--state-dir",
        str(state),
    ]
    procs = [
        subprocess.Popen(
            cmd, cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for _ in range(5)
    ]
    results = [(p.wait(timeout=300), p.stdout.read(), p.stderr.read()) for p in procs]  # type: ignore[union-attr]
    codes = sorted(rc for rc, _, _ in results)
    assert codes == [0, 1, 1, 1, 1], results
    assert sum("already submitted" in err for _, _, err in results) == 4
    train = [c for c in sbatch_calls(tmp_path) if c.endswith("sbatch.sh") and "pack" not in c]
    assert len(train) == 1, sbatch_calls(tmp_path)
    records, corrupt = JobStore(state).scan()
    assert corrupt == [] and len(records) == 1 and records[0].status == "PENDING"


def test_duplicate_check_and_record_write_are_one_critical_section(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Five threads submit one config while the duplicate check is slow (a busy shared file system):
    without the lock every thread reads "no earlier submission" before any record is written."""
    store = JobStore(tmp_path / "state")
    original = JobStore.active_with_hash

    def slow(self: JobStore, digest: str) -> list[JobRecord]:
        found = original(self, digest)
        time.sleep(0.2)
        return found

    monkeypatch.setattr(JobStore, "active_with_hash", slow)
    be = SlowBackend(store)
    b = tiny_bundle()
    outcomes: list[str] = []

    def go() -> None:
        try:
            service.submit(store, b, be)
            outcomes.append("submitted")
        except service.DuplicateJob:
            outcomes.append("refused")

    threads = [threading.Thread(target=go) for _ in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes) == ["refused"] * 4 + ["submitted"]
    assert len(be.lock_free_during_submit) == 1 and len(store.all()) == 1


class SlowBackend:
    """A backend whose submission takes a while and checks that nobody holds the store lock."""

    name = "local"

    def __init__(self, store: JobStore, barrier: threading.Barrier | None = None) -> None:
        self.store = store
        self.barrier = barrier
        self.lock_free_during_submit: list[bool] = []

    def plan(self, bundle_dir, bundle):  # noqa: ANN001
        return []

    def submit(self, bundle_dir, bundle, record):  # noqa: ANN001
        import fcntl

        fd = os.open(self.store.jobs_dir / ".lock", os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            self.lock_free_during_submit.append(True)
        except BlockingIOError:
            self.lock_free_during_submit.append(False)
        finally:
            os.close(fd)
        if self.barrier is not None:
            self.barrier.wait(timeout=30)  # all submissions in flight at once, or BrokenBarrierError
        record.native_id, record.status = "1", "RUNNING"

    def refresh(self, record):  # noqa: ANN001
        pass

    def cancel(self, record):  # noqa: ANN001
        record.status = "CANCELLED"


def tiny_bundle(**launch: object) -> JobBundle:
    config = yaml.safe_load(TINY.read_text())
    config["launch"].update(launch)
    return render_bundle(config)


def test_launches_of_different_configs_do_not_wait_on_each_other(tmp_path: Path) -> None:
    store = JobStore(tmp_path / "state")
    be = SlowBackend(store, threading.Barrier(3))
    bundles = [tiny_bundle(job_name=f"exp{i}") for i in range(3)]
    errors: list[BaseException] = []

    def go(b: JobBundle) -> None:
        try:
            service.submit(store, b, be)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=go, args=(b,)) for b in bundles]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors  # the three submissions were in flight together (the barrier was passed)
    assert be.lock_free_during_submit == [True, True, True]  # the lock is never held while submitting
    assert len(store.all()) == 3


# --- 3. tolerant readers and failed submissions -----------------------------------------------------


def good(job_id: str, digest: str = "0" * 64, **kw: object) -> JobRecord:
    return JobRecord(id=job_id, backend="local", config_hash=digest, bundle_dir="/nowhere", **kw)


CORRUPT = {
    "truncated": '{"id": "truncated", "backend": "lo',
    "empty": "",
    "notobject": "[1, 2, 3]",
    "badtypes": json.dumps(
        {"id": "badtypes", "backend": "local", "config_hash": "x", "bundle_dir": "/", "log_paths": "x"}
    ),
    "badstatus": json.dumps(
        {"id": "badstatus", "backend": "local", "config_hash": "x", "bundle_dir": "/", "status": 5}
    ),
    "binary": "\udcff",
}


def corrupt_store(tmp_path: Path) -> JobStore:
    store = JobStore(tmp_path / "state")
    log = tmp_path / "job.log"
    log.write_text("hello\n")
    store.save(good("finished-job", status="COMPLETED", native_id="1", log_paths=[str(log)]))
    for name, text in CORRUPT.items():
        (store.jobs_dir / f"{name}.json").write_bytes(text.encode("utf-8", "surrogateescape"))
    return store


def test_status_lists_the_good_records_and_warns_about_each_corrupt_one(tmp_path: Path) -> None:
    """Old: a corrupt record was silently skipped, or (a JSON list) crashed `status` with a traceback."""
    store = corrupt_store(tmp_path)
    out = packcfg("status", "--state-dir", str(store.root))
    assert out.returncode == 0, out.stderr
    assert "finished-job" in out.stdout and "COMPLETED" in out.stdout
    warnings = out.stderr.splitlines()
    assert len(warnings) == len(CORRUPT) and "Traceback" not in out.stderr
    for name in CORRUPT:
        assert any(
            w.startswith("packcfg: warning: ") and f"{name}.json: unreadable job record" in w
            for w in warnings
        )
    out = packcfg("status", "--json", "--state-dir", str(store.root))
    assert out.returncode == 0 and [r["id"] for r in json.loads(out.stdout)] == ["finished-job"]


@pytest.mark.parametrize("command", ["status", "logs", "cancel"])
def test_asking_for_a_corrupt_record_is_exit_2_naming_the_file(tmp_path: Path, command: str) -> None:
    store = corrupt_store(tmp_path)
    for name in CORRUPT:
        out = packcfg(command, name, "--state-dir", str(store.root))
        assert out.returncode == 2, (name, out.stdout, out.stderr)
        assert f"{name}.json: unreadable job record" in out.stderr and "Traceback" not in out.stderr
        assert out.stderr.count("\n") == 1
    # The good job is still handled, by full id or by prefix.
    out = packcfg(command, "finished", "--state-dir", str(store.root))
    assert out.returncode == 0, out.stderr
    assert "Traceback" not in out.stderr


def test_failed_or_cancelled_earlier_submissions_do_not_block_a_retry(tmp_path: Path) -> None:
    """Old: "already submitted ... (FAILED); pass --force" after a failed sbatch."""
    env = fake_slurm(tmp_path)
    state = tmp_path / "state"
    bundle, _ = service.gate_and_render([TINY], [], backend="slurm")
    store = JobStore(state)
    store.save(good("earlier-failed", bundle.config_hash, status="FAILED"))
    store.save(good("earlier-cancelled", bundle.config_hash, status="CANCELLED"))
    (store.jobs_dir / "broken.json").write_text("{")
    out = packcfg("launch", str(TINY), "--backend", "slurm", "--state-dir", str(state), env=env)
    assert out.returncode == 0, out.stderr
    # A corrupt record cannot be checked for being a duplicate: launch says so, naming the file.
    assert f"packcfg: warning: {store.jobs_dir / 'broken.json'}: unreadable job record" in out.stderr
    # A queued one does block (and a completed one would).
    out = packcfg("launch", str(TINY), "--backend", "slurm", "--state-dir", str(state), env=env)
    assert out.returncode == 1 and "already submitted as" in out.stderr and "(PENDING)" in out.stderr
    assert "earlier-failed" not in out.stderr


def test_failed_submission_is_recorded_failed_then_retry_goes_through(tmp_path: Path) -> None:
    env = fake_slurm(tmp_path)
    bad_sbatch = tmp_path / "fakebin" / "sbatch"
    bad_sbatch.write_text('#!/bin/bash\necho "sbatch: error: Invalid account" >&2\nexit 1\n')
    state = tmp_path / "state"
    out = packcfg("launch", str(TINY), "--backend", "slurm", "--state-dir", str(state), env=env)
    assert out.returncode == 2 and "sbatch failed" in out.stderr
    (rec,) = JobStore(state).all()
    assert rec.status == "FAILED" and rec.native_state.startswith("submission failed: sbatch failed")
    fake_slurm(tmp_path)  # a working sbatch again
    out = packcfg("launch", str(TINY), "--backend", "slurm", "--state-dir", str(state), env=env)
    assert out.returncode == 0, out.stderr


def test_record_left_submitting_by_a_dead_launch_does_not_block(tmp_path: Path) -> None:
    store = JobStore(tmp_path)
    bundle = tiny_bundle()
    dead = subprocess.run(["true"]).returncode  # noqa: F841 (a pid that has exited)
    proc = subprocess.Popen(["true"])
    proc.wait()
    import socket

    store.save(
        good(
            "crashed-launch",
            bundle.config_hash,
            native_state=service.SUBMITTING,
            extra={"submitter": {"pid": proc.pid, "host": socket.gethostname()}},
        )
    )
    record = service.submit(store, bundle, SlowBackend(store))
    assert record.status == "RUNNING"
    assert store.load("crashed-launch").status == "FAILED"


# --- 4. secrets -------------------------------------------------------------------------------------

SECRET = "hf_abcdefghijklmnopqrstuvwxyz123456"


@pytest.mark.parametrize(
    ("section", "key"),
    [("logger", "wandb_api_key"), ("tokenizer", "hf_token"), ("checkpoint", "s3_secret_access_key")],
)
def test_literal_secrets_anywhere_are_refused_with_their_line(tmp_path: Path, section: str, key: str) -> None:
    """Old: keys outside `launch` were copied into config.yaml of every bundle with no warning."""
    config = user_config(tmp_path)
    text = config.read_text().replace(f"\n{section}:\n", f"\n{section}:\n  {key}: {SECRET}\n", 1)
    config.write_text(text)
    line = text.splitlines().index(f"  {key}: {SECRET}") + 1
    out = packcfg("render", str(config), "--out", str(tmp_path / "b"))
    assert out.returncode == 2
    assert f"{config}:{line}:3: {section}.{key} holds a literal secret-looking value" in out.stderr
    assert "${oc.env:" in out.stderr and SECRET not in out.stderr
    assert out.stderr.count("\n") == 1 and not (tmp_path / "b").exists()
    # From the environment: accepted, and only the reference is written.
    config.write_text(text.replace(SECRET, "${oc.env:MY_SECRET}"))
    out = packcfg("render", str(config), "--out", str(tmp_path / "b"))
    assert out.returncode == 0, out.stderr
    assert "${oc.env:MY_SECRET}" in (tmp_path / "b" / "config.yaml").read_text()


def test_launch_env_literal_secret_refused_and_file_names_allowed(tmp_path: Path) -> None:
    with pytest.raises(LaunchError, match="launch.env.MY_SERVICE_TOKEN holds a literal secret"):
        service.gate_and_render([TINY], [f"launch.env={{MY_SERVICE_TOKEN: {SECRET}}}"])
    # Old: MY_TOKEN_FILE (a path) was refused as a secret.
    bundle, _ = service.gate_and_render(
        [TINY],
        [
            "launch.env={MY_TOKEN_FILE: /run/secrets/token, HF_TOKEN: $HF_TOKEN, WANDB_API_KEY: '${oc.env:WB}'}"
        ],
    )
    assert bundle.manifest["env"] == {
        "names": ["MY_TOKEN_FILE", "HF_TOKEN", "WANDB_API_KEY"],
        "from_environment": ["HF_TOKEN", "WB"],
    }
    assert b'export WANDB_API_KEY="${WB}"' in bundle.files["torchrun.sh"]


def test_bundle_with_launch_env_is_private_whatever_the_umask(tmp_path: Path) -> None:
    """Old: 0644/0755 whatever was in them."""
    old = os.umask(0o000)
    try:
        directory, bundle, _ = service.render([TINY], tmp_path / "b", ["launch.env={NOTE: hello}"])
        plain, _, _ = service.render([TINY], tmp_path / "plain")
    finally:
        os.umask(old)
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in directory.rglob("*") if p.is_file()}
    assert modes["torchrun.sh"] == 0o700 and modes["config.yaml"] == 0o600 and modes["manifest.json"] == 0o600
    assert set(modes.values()) <= {0o600, 0o700}
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    manifest = json.loads((directory / "manifest.json").read_text())
    assert manifest["env"]["names"] == ["NOTE"] and "hello" not in json.dumps(manifest)
    assert stat.S_IMODE((plain / "config.yaml").stat().st_mode) == 0o644


# --- 6. the gate blames only what the user wrote ----------------------------------------------------


def no_launch_section(tmp_path: Path, **model: object) -> Path:
    config = yaml.safe_load(TINY.read_text())
    del config["launch"]
    config["model"].update(model)
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def test_backend_flag_is_not_an_override_line(tmp_path: Path) -> None:
    """Old: `launch.backend=slurm (command line): PL601 world size 1`, an error plain lint never showed."""
    config = no_launch_section(tmp_path, tensor_model_parallel_size=2)
    assert not [d for d in lint_config([config]) if d.severity.value == "error"]  # plain lint: clean
    out = packcfg(
        "launch", str(config), "--backend", "slurm", "--dry-run", "--state-dir", str(tmp_path / "s")
    )
    assert "launch.backend=slurm (command line)" not in out.stdout + out.stderr and "PL601" not in out.stdout
    assert out.returncode == 2
    line = config.read_text().splitlines().index("  tensor_model_parallel_size: 2") + 1
    assert out.stderr.startswith("packcfg: --backend slurm: the job would start 1 process(es)")
    assert "launch.nodes 1 (not set: default) x launch.gpus_per_node 1 (not set: default)" in out.stderr
    assert f"TP 2 ({config}:{line}:3)" in out.stderr and out.stderr.count("\n") == 1


def test_gate_reports_exactly_what_plain_lint_reports(tmp_path: Path) -> None:
    config = no_launch_section(tmp_path)
    bundle, gate = service.gate_and_render([config], ["train.train_iters=5"], backend="slurm")
    plain = lint_config([config], ["train.train_iters=5"])
    assert [(d.code, d.file, d.line) for d in gate.diagnostics] == [(d.code, d.file, d.line) for d in plain]
    assert bundle.config["launch"]["backend"] == "slurm"  # the flag is recorded in the bundle's config
    assert bundle.manifest["sources"]["overrides"] == ["train.train_iters=5"]
    assert bundle.manifest["sources"]["backend_flag"] == "slurm"


def test_world_size_from_the_config_is_located_in_the_file(tmp_path: Path) -> None:
    config = no_launch_section(tmp_path, tensor_model_parallel_size=2)
    text = config.read_text() + "launch:\n  backend: local\n  gpus_per_node: 2\n"
    config.write_text(text)
    service.gate_and_render([config], [])  # world 2, TP 2: fine
    # A flag that makes the config's own launch section wrong is named as the flag; PL601 stays lint's.
    with pytest.raises(service.GateRefused) as err:
        service.gate_and_render([config], ["launch.gpus_per_node=3"], backend="slurm")
    (pl601,) = [d for d in err.value.gate.blocking if d.code == "PL601"]
    assert pl601.file == "launch.gpus_per_node=3 (command line)"  # an override the user did write


# --- 5. signals: launch --backend local forwards SIGTERM/SIGINT to the whole job --------------------

FAKE_TORCHRUN = f"""#!{sys.executable}
# A torchrun that starts two "ranks" in sessions of their own (as torch elastic does) and, on SIGTERM,
# exits without stopping them: the worst case for orphans.
import os, signal, subprocess, sys, time
pids = os.environ["FAKE_PIDS"]
ranks = [subprocess.Popen(["sleep", "600"], start_new_session=True) for _ in range(2)]
with open(pids, "a") as fh:
    fh.write("\\n".join(str(p) for p in [os.getpid(), *[r.pid for r in ranks]]) + "\\n")
signal.signal(signal.SIGTERM, lambda *a: os._exit(1))
time.sleep(600)
"""


def running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_to_local_launch_stops_every_process(tmp_path: Path, sig: signal.Signals) -> None:
    """Old: the launch exited and torchrun and its ranks kept running."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "torchrun").write_text(FAKE_TORCHRUN)
    (bin_dir / "torchrun").chmod(0o755)
    packed = tmp_path / "packed.parquet"
    packed.write_bytes(b"")  # present: the job goes straight to torchrun
    pids = tmp_path / "pids"
    state = tmp_path / "state"
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "FAKE_PIDS": str(pids)}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "packcfg",
            "launch",
            str(TINY),
            "--backend",
            "local",
            "--wait",
            "--state-dir",
            str(state),
            "-o",
            f"dataset.offline_packing_specs.packed_train_data_path={packed}",
        ],
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and (not pids.exists() or len(pids.read_text().split()) < 3):
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.1)
    started = [int(p) for p in pids.read_text().split()]
    assert len(started) == 3 and all(running(p) for p in started)
    time.sleep(0.3)  # the launch is waiting now
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + sig, err
    assert "stopped job" in err and "Traceback" not in err
    survivors = [p for p in started if running(p)]
    for p in survivors:  # clean up before failing
        os.kill(p, signal.SIGKILL)
    assert survivors == []
    (rec,) = JobStore(state).all()
    assert rec.status == "CANCELLED"


def test_launch_wait_shows_training_progress(tmp_path: Path) -> None:
    """Issue 16, old: `launch --wait` printed only state changes, never a training step."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "torchrun").write_text(
        '#!/bin/bash\nfor i in 1 2; do echo "step     $i/2 | loss 7.0$i"; sleep 0.2; done\n'
    )
    (bin_dir / "torchrun").chmod(0o755)
    packed = tmp_path / "packed.parquet"
    packed.write_bytes(b"")
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}"}
    out = packcfg(
        "launch",
        str(TINY),
        "--backend",
        "local",
        "--wait",
        "--state-dir",
        str(tmp_path / "state"),
        "-o",
        f"dataset.offline_packing_specs.packed_train_data_path={packed}",
        env=env,
    )
    assert out.returncode == 0, out.stderr
    assert "step     1/2 | loss 7.01" in out.stdout and "step     2/2 | loss 7.02" in out.stdout
    assert out.stdout.count("step     2/2") == 1


def test_corrupt_record_names_reach_the_terminal_escaped(tmp_path: Path) -> None:
    store = corrupt_store(tmp_path)
    (store.jobs_dir / "evil\n::warning file=x::pwned\x1b[31m.json").write_text("{")
    out = packcfg("status", "--state-dir", str(store.root))
    assert out.returncode == 0
    assert "\x1b" not in out.stderr and "\n::warning" not in out.stderr
    assert "evil\\n::warning file=x::pwned\\x1b[31m.json: unreadable job record" in out.stderr
