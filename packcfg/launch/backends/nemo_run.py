"""The `nemo-run` backend: runs the bundle's own `nemo_run_driver.py`, which builds a real `nemo_run`
Experiment (SlurmExecutor + LocalTunnel, or LocalExecutor). `nemo_run` is imported only here (inside
the driver), never on the lint or render path.

NeMo-Run keeps its files under `$NEMORUN_HOME`; packcfg points that at `<bundle>/nemorun` so a job's
files stay with its bundle, and runs the driver in its own interpreter. Slurm jobs are then followed
like the `slurm` backend's (squeue/sacct).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

from packcfg.launch import LaunchError
from packcfg.launch.backends import slurm
from packcfg.launch.bundle import DRIVER, JobBundle
from packcfg.launch.state import CANCELLED, COMPLETED, FAILED, PENDING, UNKNOWN, JobRecord

EXECUTORS = ("slurm", "local")
# Not "nemo_run": NeMo-Run rewrites every "/nemo_run" in its paths (its in-container run dir name).
NEMORUN_HOME = "nemorun"


def _check_nemo_run() -> None:
    if importlib.util.find_spec("nemo_run") is None:
        raise LaunchError("the nemo-run backend needs NeMo-Run: pip install 'packcfg[nemo-run]'")


class NemoRunBackend:
    name = "nemo-run"

    def __init__(self, executor: str = "slurm") -> None:
        if executor not in EXECUTORS:
            raise LaunchError(f"--executor {executor!r}: choose from {', '.join(EXECUTORS)}")
        self.executor = executor

    def plan(self, bundle_dir: Path, bundle: JobBundle) -> list[list[str]]:
        return [["python3", str(bundle_dir / DRIVER), "--executor", self.executor]]

    def submit(self, bundle_dir: Path, bundle: JobBundle, record: JobRecord) -> None:
        _check_nemo_run()
        if "/nemo_run" in str(bundle_dir):
            raise LaunchError(
                f"{bundle_dir}: NeMo-Run rewrites paths containing '/nemo_run'; use another folder"
            )
        logs = bundle_dir / "logs"
        logs.mkdir(exist_ok=True)
        result_file = logs / "nemo_run_result.json"
        # The driver runs in its own interpreter: NeMo-Run reads NEMORUN_HOME into module constants at
        # import time, so it must be set before `import nemo_run`, and its global state stays out of ours.
        env = {**os.environ, "NEMORUN_HOME": str(bundle_dir / NEMORUN_HOME)}
        cmd = [sys.executable, DRIVER, "--executor", self.executor, "--result", str(result_file)]
        # A LocalExecutor task runs to completion inside the driver; a Slurm submission takes seconds.
        timeout = None if self.executor == "local" else 300
        try:
            with open(logs / "nemo_run_submit.log", "wb") as out:
                proc = subprocess.run(
                    cmd,
                    cwd=bundle_dir,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    timeout=timeout,
                    check=False,
                )
        except subprocess.TimeoutExpired:
            raise LaunchError(
                f"NeMo-Run did not submit within {timeout} s (see {logs / 'nemo_run_submit.log'})"
            ) from None
        if proc.returncode != 0 or not result_file.is_file():
            raise LaunchError(
                f"NeMo-Run could not submit (exit {proc.returncode}); see {logs / 'nemo_run_submit.log'}"
            )
        result = json.loads(result_file.read_text())
        record.extra.update(
            {
                "executor": self.executor,
                "experiment_id": result.get("experiment_id"),
                "experiment_dir": result.get("experiment_dir"),
                "handle": result.get("handle"),
            }
        )
        record.submit_command = [" ".join(["python3", DRIVER, "--executor", self.executor])]
        if self.executor == "slurm":
            match = re.search(r"(\d+)\s*$", str(result.get("handle") or ""))
            if not match:
                raise LaunchError(f"NeMo-Run returned no Slurm job id (handle {result.get('handle')!r})")
            record.native_id = match.group(1)
            record.status = PENDING
            record.native_state = "PENDING"
        else:
            state = str(result.get("state") or "")
            record.native_id = str(result.get("experiment_id"))
            record.native_state = state
            record.status = {"SUCCEEDED": COMPLETED, "CANCELLED": CANCELLED}.get(
                state, FAILED if state else UNKNOWN
            )
        record.log_paths = [str(p) for p in self.log_paths(record)]

    def refresh(self, record: JobRecord) -> None:
        if record.extra.get("executor") == "slurm" and record.native_id:
            slurm.SlurmBackend().refresh(record)

    def cancel(self, record: JobRecord) -> None:
        if record.extra.get("executor") == "slurm" and record.native_id:
            slurm.SlurmBackend().cancel(record)
            return
        if not record.terminal:
            raise LaunchError("a NeMo-Run LocalExecutor job runs in the foreground; stop it with Ctrl-C")
        record.status = record.status if record.terminal else CANCELLED

    def log_paths(self, record: JobRecord) -> list[Path]:
        paths: list[Path] = []
        exp_dir = record.extra.get("experiment_dir")
        if exp_dir and Path(exp_dir).is_dir():
            paths = sorted(
                p for p in Path(exp_dir).rglob("*") if p.is_file() and p.suffix in (".out", ".err", ".log")
            )
            # torchx (LocalExecutor) writes stdout.log and stderr.log, and both again in combined.log.
            combined = {p.parent for p in paths if p.name == "combined.log"}
            paths = [
                p for p in paths if not (p.parent in combined and p.name in ("stdout.log", "stderr.log"))
            ]
        submit_log = Path(record.bundle_dir) / "logs" / "nemo_run_submit.log"
        return [*paths, submit_log] if submit_log.is_file() else paths
