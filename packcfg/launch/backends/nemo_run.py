"""The `nemo-run` backend: runs the bundle's own `nemo_run_driver.py`, which builds a real `nemo_run`
Experiment (SlurmExecutor + LocalTunnel, or LocalExecutor). `nemo_run` is imported only there (inside
the driver), never on the lint or render path.

NeMo-Run keeps its files under `$NEMORUN_HOME`; packcfg points that at `<bundle>/nemorun` so a job's
files stay with its bundle, and runs the driver in its own interpreter: NeMo-Run 0.11.1 reads
NEMORUN_HOME into module constants at import time (`nemo_run.config`, and the job-folder files of its
local and Slurm schedulers), so it must be set before `import nemo_run`, and its global state stays out
of ours. Status, logs and cancel go through the same driver, which uses NeMo-Run's public
`Experiment.from_id(id)` with `.status(return_dict=True)`, `.logs(task)` and `.cancel(task)`
(nemo_run 0.11.1, `nemo_run/run/experiment.py`); the experiment id is chosen by the driver and passed to
`Experiment(id=...)`, so no private field is read.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from packcfg.launch import LaunchError
from packcfg.launch.bundle import DRIVER, JobBundle
from packcfg.launch.state import (
    CANCELLED,
    CLUSTER_MISMATCH,
    COMPLETED,
    FAILED,
    PENDING,
    RUNNING,
    UNKNOWN,
    JobRecord,
)

EXECUTORS = ("slurm", "local")
# Not "nemo_run": NeMo-Run rewrites every "/nemo_run" in its paths (its in-container run dir name).
NEMORUN_HOME = "nemorun"
SUBMIT_LOG = "logs/nemo_run_submit.log"
# torchx's AppState names (NeMo-Run's task states) in packcfg's words.
_STATES = {
    "UNSUBMITTED": PENDING,
    "SUBMITTED": PENDING,
    "PENDING": PENDING,
    "RUNNING": RUNNING,
    "SUCCEEDED": COMPLETED,
    "FAILED": FAILED,
    "CANCELLED": CANCELLED,
    "UNKNOWN": UNKNOWN,
}
# Which task decides the job's state, most telling first: a failed data prep fails the job.
_PRECEDENCE = (FAILED, CANCELLED, RUNNING, PENDING, UNKNOWN, COMPLETED)


def _check_nemo_run() -> None:
    if importlib.util.find_spec("nemo_run") is None:
        raise LaunchError("the nemo-run backend needs NeMo-Run: pip install 'packcfg[nemo-run]'")


def job_status(tasks: dict[str, dict[str, Any]]) -> tuple[str, str]:
    """(packcfg status, native state) of an experiment from its tasks' NeMo-Run states; the native
    state names the deciding task unless it is the training task."""
    if not tasks:
        return UNKNOWN, "no tasks"
    mapped = {name: _STATES.get(str(info.get("state")), UNKNOWN) for name, info in tasks.items()}
    for status in _PRECEDENCE:
        names = [name for name, s in mapped.items() if s == status]
        if names:
            name = "train" if "train" in names else names[0]
            state = str(tasks[name].get("state"))
            return status, state if name == "train" else f"{name} {state}"
    raise AssertionError("unreachable: _PRECEDENCE covers every status")


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
        (bundle_dir / "logs").mkdir(exist_ok=True)
        if self.executor == "slurm" and shutil.which("scontrol"):
            # The cluster NeMo-Run's sbatch reaches: status, logs and cancel ask it (SLURM_CONF).
            from packcfg.launch.backends.slurm import submission_cluster
            from packcfg.launch.bundle import now_utc

            target = submission_cluster()
            record.cluster, record.slurm_conf = target.name, target.conf
            record.submitted_at = now_utc()
        # A LocalExecutor task runs to completion inside the driver; a Slurm submission takes seconds.
        result = _driver(
            bundle_dir,
            ["--executor", self.executor],
            timeout=None if self.executor == "local" else 300,
            log=bundle_dir / SUBMIT_LOG,
            what="submit",
        )
        tasks = result.get("tasks") or {}
        train = tasks.get("train") or {}
        record.extra.update(
            {
                "executor": self.executor,
                "experiment_id": result.get("experiment_id"),
                "experiment_dir": result.get("experiment_dir"),
                "handle": train.get("handle"),
                # Each task's job folder (NeMo-Run's `local_dir`): where its logs are, for `logs -f`.
                "task_dirs": {name: info.get("local_dir") for name, info in tasks.items()},
            }
        )
        record.submit_command = [" ".join(["python3", DRIVER, "--executor", self.executor])]
        if self.executor == "slurm":
            job_id = str(train.get("job_id") or "")
            if not re.fullmatch(r"\d+", job_id):
                raise LaunchError(f"NeMo-Run returned no Slurm job id (handle {train.get('handle')!r})")
            record.native_id = job_id
            prep = tasks.get("data-prep") or {}
            record.pack_native_id = str(prep["job_id"]) if prep.get("job_id") else None
        else:
            record.native_id = str(result.get("experiment_id"))
        record.status, record.native_state = job_status(tasks)
        record.log_paths = [str(p) for p in self.log_paths(record)]

    def refresh(self, record: JobRecord) -> None:
        problem = _cluster_mismatch(record)
        if problem:
            record.native_state = f"{CLUSTER_MISMATCH} ({problem})"  # the status is kept
            return
        tasks = _driver(
            Path(record.bundle_dir), ["--status", _experiment_id(record)], what="status", record=record
        )
        record.status, record.native_state = job_status(tasks)
        if record.extra.get("executor") == "local" and record.status in (PENDING, RUNNING, UNKNOWN):
            # NeMo-Run's local scheduler only knows the processes of the interpreter that started them;
            # packcfg's LocalExecutor runs in the foreground, so a task left unfinished was interrupted.
            record.status = FAILED
            record.native_state = f"{record.native_state} (the NeMo-Run driver is gone)"

    def cancel(self, record: JobRecord) -> None:
        if record.extra.get("executor") != "slurm":
            # NeMo-Run 0.11.1's local scheduler cannot cancel from another process (`Experiment.cancel`
            # reaches torchx's LocalScheduler._cancel_existing, which only knows its own processes).
            raise LaunchError("a NeMo-Run LocalExecutor job runs in the foreground; stop it with Ctrl-C")
        problem = _cluster_mismatch(record)
        if problem:
            raise LaunchError(f"job {record.id} not cancelled: {CLUSTER_MISMATCH} ({problem})")
        tasks = _driver(
            Path(record.bundle_dir), ["--cancel", _experiment_id(record)], what="cancel", record=record
        )
        status, native = job_status(tasks)
        if status not in (CANCELLED, COMPLETED, FAILED):
            raise LaunchError(f"job {record.id}: NeMo-Run did not cancel it (state {native})")
        record.status, record.native_state = status, native

    def log_paths(self, record: JobRecord) -> list[Path]:
        """The log files in each task's job folder (as `Experiment.status` named it at submission)."""
        paths: list[Path] = []
        for folder in (record.extra.get("task_dirs") or {}).values():
            if not folder or not Path(folder).is_dir():
                continue
            found = sorted(
                p for p in Path(folder).rglob("*") if p.is_file() and p.suffix in (".out", ".err", ".log")
            )
            # torchx (LocalExecutor) writes stdout.log and stderr.log, and both again in combined.log.
            combined = {p.parent for p in found if p.name == "combined.log"}
            paths += [
                p for p in found if not (p.parent in combined and p.name in ("stdout.log", "stderr.log"))
            ]
        submit_log = Path(record.bundle_dir) / SUBMIT_LOG
        return [*paths, submit_log] if submit_log.is_file() else paths

    def read_logs(self, record: JobRecord) -> str:
        """Every task's log as NeMo-Run's `Experiment.logs(task)` prints it."""
        problem = _cluster_mismatch(record)
        if problem:
            raise LaunchError(f"job {record.id}: {CLUSTER_MISMATCH} ({problem}); logs not read")
        return _driver(
            Path(record.bundle_dir),
            ["--logs", _experiment_id(record)],
            what="logs",
            text=True,
            record=record,
        )


def _cluster_mismatch(record: JobRecord) -> str | None:
    """Why the cluster the recorded SLURM_CONF reaches is not the one the job went to (None: it is, or
    the record names none: a LocalExecutor job, or a record from before packcfg kept the cluster)."""
    if not record.cluster:
        return None
    from packcfg.launch.backends.slurm import Cluster, cluster_mismatch

    return cluster_mismatch(Cluster.of(record))


def _experiment_id(record: JobRecord) -> str:
    exp_id = record.extra.get("experiment_id")
    if not exp_id:
        raise LaunchError(f"job {record.id}: the record names no NeMo-Run experiment")
    return str(exp_id)


def _driver(
    bundle_dir: Path,
    args: list[str],
    *,
    what: str,
    timeout: float | None = 120,
    log: Path | None = None,
    text: bool = False,
    record: JobRecord | None = None,
) -> Any:
    """Run the bundle's driver with NEMORUN_HOME pointing into the bundle; returns its JSON result
    (or, with `text`, what it printed). With `record`, NeMo-Run's Slurm commands ask the cluster the
    job went to (its SLURM_CONF)."""
    env = {**os.environ, "NEMORUN_HOME": str(bundle_dir / NEMORUN_HOME)}
    if record is not None and record.slurm_conf:
        env["SLURM_CONF"] = record.slurm_conf
    with tempfile.TemporaryDirectory(prefix="packcfg-nemo-run-") as tmp:
        result_file = Path(tmp) / "result.json"
        cmd = [sys.executable, DRIVER, *args]
        if not text:
            cmd += ["--result", str(result_file)]
        out_path = log or Path(tmp) / "driver.log"
        try:
            with open(out_path, "wb") as out:
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
            raise LaunchError(f"NeMo-Run {what}: no answer within {timeout:.0f} s") from None
        output = out_path.read_text(encoding="utf-8", errors="replace")
        if proc.returncode != 0 or not (text or result_file.is_file()):
            where = f"see {log}" if log else _last_line(output)
            raise LaunchError(f"NeMo-Run {what} failed (exit {proc.returncode}): {where}")
        return output if text else json.loads(result_file.read_text())


def _last_line(output: str) -> str:
    lines = [line for line in output.strip().splitlines() if line.strip()]
    return lines[-1].strip() if lines else "no output"
