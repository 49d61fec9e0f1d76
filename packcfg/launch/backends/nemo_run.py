"""The `nemo-run` backend: runs the bundle's own `nemo_run_driver.py`, which builds a real `nemo_run`
Experiment (SlurmExecutor + LocalTunnel, or LocalExecutor). `nemo_run` is imported only here (inside
the driver), never on the lint or render path.

NeMo-Run keeps its files under `$NEMORUN_HOME`; packcfg points that at `<bundle>/nemo_run` so a job's
files stay with its bundle. Slurm jobs are then followed like the `slurm` backend's (squeue/sacct).
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import re
import sys
from pathlib import Path
from typing import Any

from packcfg.launch import LaunchError
from packcfg.launch.backends import slurm
from packcfg.launch.bundle import DRIVER, JobBundle
from packcfg.launch.state import CANCELLED, COMPLETED, FAILED, PENDING, UNKNOWN, JobRecord

EXECUTORS = ("slurm", "local")


def _load_driver(bundle_dir: Path) -> Any:
    path = bundle_dir / DRIVER
    name = f"packcfg_nemo_run_driver_{abs(hash(str(path)))}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise LaunchError(f"{path}: cannot load the NeMo-Run driver")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _import_nemo_run() -> Any:
    try:
        import nemo_run
    except ImportError as exc:
        raise LaunchError(
            f"the nemo-run backend needs NeMo-Run: pip install 'packcfg[nemo-run]' ({exc})"
        ) from None
    return nemo_run


class NemoRunBackend:
    name = "nemo-run"

    def __init__(self, executor: str = "slurm") -> None:
        if executor not in EXECUTORS:
            raise LaunchError(f"--executor {executor!r}: choose from {', '.join(EXECUTORS)}")
        self.executor = executor

    def plan(self, bundle_dir: Path, bundle: JobBundle) -> list[list[str]]:
        return [["python3", str(bundle_dir / DRIVER), "--executor", self.executor]]

    def submit(self, bundle_dir: Path, bundle: JobBundle, record: JobRecord) -> None:
        run = _import_nemo_run()
        home = bundle_dir / "nemo_run"
        home.mkdir(exist_ok=True)
        run.config.set_nemorun_home(str(home))
        driver = _load_driver(bundle_dir)
        console = io.StringIO()
        try:
            # NeMo-Run prints rich progress; keep it in a log file of the bundle instead of the terminal.
            with contextlib.redirect_stdout(console):
                result = driver.submit(self.executor)
        except Exception as exc:  # NeMo-Run raises many types; the user needs one line and the log
            (bundle_dir / "logs").mkdir(exist_ok=True)
            (bundle_dir / "logs" / "nemo_run_submit.log").write_text(console.getvalue())
            raise LaunchError(f"NeMo-Run could not submit: {exc.__class__.__name__}: {exc}") from None
        finally:
            sys.stdout.flush()
        (bundle_dir / "logs").mkdir(exist_ok=True)
        (bundle_dir / "logs" / "nemo_run_submit.log").write_text(console.getvalue())
        record.extra.update(
            {
                "executor": self.executor,
                "experiment_id": result.get("experiment_id"),
                "experiment_dir": result.get("experiment_dir"),
                "handle": result.get("handle"),
            }
        )
        record.submit_command = [" ".join(self.plan(bundle_dir, bundle)[0])]
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
            record.status = COMPLETED if state == "SUCCEEDED" else FAILED if state else UNKNOWN
            if state in ("CANCELLED",):
                record.status = CANCELLED
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
        submit_log = Path(record.bundle_dir) / "logs" / "nemo_run_submit.log"
        return [*paths, submit_log] if submit_log.is_file() else paths
