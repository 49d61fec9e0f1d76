"""The `local` backend: run the bundle's torchrun.sh on this machine, detached, in its own session."""

from __future__ import annotations

import subprocess
from pathlib import Path

from packcfg.core.processes import STOP_GRACE, proc_stat, stop_tree
from packcfg.launch import LaunchError
from packcfg.launch.bundle import JobBundle
from packcfg.launch.state import CANCELLED, COMPLETED, FAILED, RUNNING, JobRecord

LOG = "logs/local.out"
EXIT_CODE = "logs/exit_code"
# Runs the job and records its exit status, so `packcfg status` can tell success from failure after
# this process is gone. Paths arrive as positional arguments: nothing is interpolated into the code.
_WRAPPER = 'bash "$1"; rc=$?; printf "%s\\n" "$rc" > "$2.tmp" && mv "$2.tmp" "$2"; exit "$rc"'
_MARKER = "packcfg-local-job"


def _pid(record: JobRecord) -> int | None:
    try:
        pid = int(record.native_id or "")
    except ValueError:
        return None
    return pid if pid > 1 else None


def _alive(pid: int) -> bool:
    """True when `pid` runs (not a zombie) and is one of our wrappers (not a recycled pid)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    st = proc_stat(pid)
    return st is not None and st[0] != "Z" and _MARKER.encode() in cmdline


class LocalBackend:
    name = "local"

    def __init__(self) -> None:
        self.process: subprocess.Popen[bytes] | None = None

    def _command(self) -> list[str]:
        return ["bash", "-c", _WRAPPER, _MARKER, "torchrun.sh", EXIT_CODE]

    def plan(self, bundle_dir: Path, bundle: JobBundle) -> list[list[str]]:
        return [["bash", str(bundle_dir / "torchrun.sh")]]

    def submit(self, bundle_dir: Path, bundle: JobBundle, record: JobRecord) -> None:
        (bundle_dir / "logs").mkdir(exist_ok=True)
        log = bundle_dir / LOG
        try:
            with open(log, "ab") as out:
                self.process = subprocess.Popen(
                    self._command(),
                    cwd=bundle_dir,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,  # its own process group: cancel kills torchrun and workers
                )
        except OSError as exc:
            raise LaunchError(f"cannot start bash: {exc}") from None
        record.native_id = str(self.process.pid)
        record.status = RUNNING
        record.native_state = "running"
        record.log_paths = [str(log)]
        record.submit_command = ["bash", str(bundle_dir / "torchrun.sh")]

    def refresh(self, record: JobRecord) -> None:
        if record.status == CANCELLED:
            return
        if self.process is not None and str(self.process.pid) == record.native_id:
            self.process.poll()  # reap our own child so it does not linger as a zombie
        exit_file = Path(record.bundle_dir) / EXIT_CODE
        if exit_file.is_file():
            try:
                code = int(exit_file.read_text().strip())
            except ValueError:
                code = -1
            record.exit_code = code
            record.status = COMPLETED if code == 0 else FAILED
            record.native_state = f"exited {code}"
        elif (pid := _pid(record)) is not None and _alive(pid):
            record.status = RUNNING
            record.native_state = "running"
        else:
            record.status = FAILED
            record.native_state = "gone (no exit status recorded)"

    def cancel(self, record: JobRecord, grace: float = STOP_GRACE) -> None:
        """Stop the job's whole process tree (SIGTERM, then SIGKILL after `grace` s) and wait for it."""
        pid = _pid(record)
        if pid is not None and _alive(pid):
            reap = self.process.poll if self.process is not None and self.process.pid == pid else None
            if not stop_tree(pid, grace, reap):
                raise LaunchError(f"job {record.id}: processes of {pid} survived SIGKILL")
            if reap is not None:
                reap()
        record.status = CANCELLED
        record.native_state = "cancelled"

    def log_paths(self, record: JobRecord) -> list[Path]:
        return [Path(p) for p in record.log_paths]
