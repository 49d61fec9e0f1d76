"""The demo's output directory: built under a hidden staging name beside it, swapped in when complete.

A reader of `runs/demo` sees the previous complete results or the new complete ones, never a mix: the run
writes into `.demo.partial-<pid>-*`, and only a finished run renames it into place (the old directory is
moved aside first and deleted after). An interrupted or failed run deletes its staging directory; one killed
outright leaves it behind, and the next run removes it once its process id is gone.

Only a previous demo output (or an empty directory) is replaced: any other existing path is refused, so
`--out .` can never delete a user's files.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import signal
import threading
from collections.abc import Iterator
from pathlib import Path

SUMMARY_NAME = "summary.json"
SUMMARY_KIND = "packcfg-demo"  # summary.json's "kind": what marks a directory as a demo output


class OutputDirError(Exception):
    """The output directory cannot be used; the message is one line for the user."""


def is_demo_output(path: Path) -> bool:
    """True when `path` holds a complete previous demo run (its summary.json names the demo)."""
    try:
        data = json.loads((path / SUMMARY_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and data.get("kind") == SUMMARY_KIND


def check_replaceable(target: Path) -> None:
    """Raise OutputDirError unless `target` is absent, an empty directory, or a previous demo output."""
    if not target.name:
        raise OutputDirError(f"{target}: not usable as the demo output directory")
    if not target.exists() and not target.is_symlink():
        return
    if target.is_symlink() or not target.is_dir():
        raise OutputDirError(f"{target} exists and is not a directory; choose another --out")
    if any(target.iterdir()) and not is_demo_output(target):
        raise OutputDirError(
            f"{target} exists and is not a packcfg demo output (no {SUMMARY_NAME} written by "
            "packcfg demo); choose another --out or remove it"
        )


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's live process
        return True
    return True


def remove_stale(parent: Path, name: str) -> None:
    """Delete staging/old directories of `name` left by demo processes that no longer exist."""
    pattern = re.compile(rf"^\.{re.escape(name)}\.(?:partial|old)-(\d+)(?:-.*)?$")
    with contextlib.suppress(OSError):
        for entry in parent.iterdir():
            match = pattern.match(entry.name)
            if match and entry.is_dir() and not _alive(int(match.group(1))):
                shutil.rmtree(entry, ignore_errors=True)


@contextlib.contextmanager
def _sigint_deferred() -> Iterator[None]:
    """Hold Ctrl-C off for the two renames of the swap, so they happen both or neither."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: received.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if received:
        raise KeyboardInterrupt


def swap_into_place(staging: Path, target: Path) -> None:
    """Rename `staging` to `target`, replacing a previous `target` (moved aside, then deleted)."""
    old = target.parent / f".{target.name}.old-{os.getpid()}"
    with _sigint_deferred():
        moved = False
        if target.exists():
            shutil.rmtree(old, ignore_errors=True)
            os.rename(target, old)
            moved = True
        try:
            os.rename(staging, target)
        except OSError:
            if moved:  # put the previous results back rather than leave no output at all
                os.rename(old, target)
            raise
    shutil.rmtree(old, ignore_errors=True)


@contextlib.contextmanager
def staged_output(target: Path) -> Iterator[Path]:
    """Yield a fresh staging directory beside `target`; on normal exit it replaces `target`, on any
    exception (KeyboardInterrupt included) it is deleted and `target` is left as it was."""
    target = Path(os.path.abspath(target))
    check_replaceable(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    remove_stale(target.parent, target.name)
    # mkdir (not mkdtemp, whose 0700 would stay on the renamed output): permissions follow the umask
    staging = target.parent / f".{target.name}.partial-{os.getpid()}-{secrets.token_hex(4)}"
    staging.mkdir()
    try:
        yield staging
        check_replaceable(target)  # someone may have put files there while we ran
        swap_into_place(staging, target)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
