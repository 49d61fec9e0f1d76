"""The `local` backend: run the bundle's torchrun.sh on this machine, detached, in its own session."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from packcfg.launch import LaunchError
from packcfg.launch.bundle import JobBundle
from packcfg.launch.state import CANCELLED, COMPLETED, FAILED, RUNNING, JobRecord

LOG = "logs/local.out"
EXIT_CODE = "logs/exit_code"
# Runs the job and records its exit status, so `packcfg status` can tell success from failure after
# this process is gone. Paths arrive as positional arguments: nothing is interpolated into the code.
_WRAPPER = 'bash "$1"; rc=$?; printf "%s\\n" "$rc" > "$2.tmp" && mv "$2.tmp" "$2"; exit "$rc"'
_MARKER = "packcfg-local-job"


STOP_GRACE = 10.0  # seconds between SIGTERM and SIGKILL when a local job is stopped


def _pid(record: JobRecord) -> int | None:
    try:
        pid = int(record.native_id or "")
    except ValueError:
        return None
    return pid if pid > 1 else None


def _stat(pid: int) -> tuple[str, int, int] | None:
    """(state, ppid, start time in ticks) of a process, or None when there is none."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()
        return fields[0], int(fields[1]), int(fields[19])
    except (OSError, ValueError, IndexError):
        return None


def _alive(pid: int) -> bool:
    """True when `pid` runs (not a zombie) and is one of our wrappers (not a recycled pid)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    st = _stat(pid)
    return st is not None and st[0] != "Z" and _MARKER.encode() in cmdline


def _tree(root: int) -> dict[int, int]:
    """`root` and every process descended from it (pid -> start time): torchrun starts its ranks in
    sessions of their own, so the process group alone does not reach them."""
    children: dict[int, list[int]] = {}
    starts: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        st = _stat(int(entry.name))
        if st is None:
            continue
        children.setdefault(st[1], []).append(int(entry.name))
        starts[int(entry.name)] = st[2]
    out: dict[int, int] = {}
    todo = [root]
    while todo:
        pid = todo.pop()
        if pid in out or pid not in starts:
            continue
        out[pid] = starts[pid]
        todo.extend(children.get(pid, []))
    return out


def _running(procs: dict[int, int]) -> dict[int, int]:
    """The processes of `procs` still running (same start time: not a recycled pid; not a zombie)."""
    out = {}
    for pid, start in procs.items():
        st = _stat(pid)
        if st is not None and st[2] == start and st[0] != "Z":
            out[pid] = start
    return out


def _signal_all(procs: dict[int, int], sig: int) -> None:
    groups = set()
    for pid in procs:
        try:
            groups.add(os.getpgid(pid))
        except OSError:
            pass
    for group in groups:
        if group > 1:
            try:
                os.killpg(group, sig)
            except (ProcessLookupError, PermissionError):
                pass
    for pid in _running(procs):
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def stop_tree(root: int, grace: float = STOP_GRACE, reap: Callable[[], None] | None = None) -> bool:
    """SIGTERM to every process group of `root`'s tree (torchrun and its ranks), wait up to `grace`
    seconds, then SIGKILL what is left, and wait for it. True when nothing of the tree survives."""
    procs = _tree(root)
    if not procs:
        return True
    _signal_all(procs, signal.SIGTERM)
    for sig, wait_s in ((signal.SIGKILL, grace), (None, 10.0)):
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            if reap is not None:
                reap()
            # new processes forked meanwhile are caught too (a rank started during shutdown)
            procs.update({p: s for p, s in _tree(root).items() if p not in procs})
            if not _running(procs):
                return True
            time.sleep(0.05)
        if sig is not None:
            _signal_all(_running(procs), sig)
    return not _running(procs)


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
