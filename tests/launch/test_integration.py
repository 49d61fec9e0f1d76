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
