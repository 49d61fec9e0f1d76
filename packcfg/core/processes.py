"""Process trees: stop a command and everything it started, the ranks torchrun puts in sessions of their own
included (the process group alone does not reach them). Used by `packcfg train` and the `local` launch backend.
Linux: reads /proc.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

STOP_GRACE = 10.0  # seconds between SIGTERM and SIGKILL when a tree is stopped


def proc_stat(pid: int) -> tuple[str, int, int] | None:
    """(state, ppid, start time in ticks) of a process, or None when there is none."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()
        return fields[0], int(fields[1]), int(fields[19])
    except (OSError, ValueError, IndexError):
        return None


def process_tree(root: int) -> dict[int, int]:
    """`root` and every process descended from it (pid -> start time): torchrun starts its ranks in
    sessions of their own, so the process group alone does not reach them."""
    children: dict[int, list[int]] = {}
    starts: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        st = proc_stat(int(entry.name))
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
        st = proc_stat(pid)
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
    procs = process_tree(root)
    if not procs:
        return True
    _signal_all(procs, signal.SIGTERM)
    for sig, wait_s in ((signal.SIGKILL, grace), (None, 10.0)):
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            if reap is not None:
                reap()
            # new processes forked meanwhile are caught too (a rank started during shutdown)
            procs.update({p: s for p, s in process_tree(root).items() if p not in procs})
            if not _running(procs):
                return True
            time.sleep(0.05)
        if sig is not None:
            _signal_all(_running(procs), sig)
    return not _running(procs)
