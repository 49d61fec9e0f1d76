"""Atomic file writes: a reader (or a Ctrl-C) sees the old file or the new one, never half of one.

Every flow writes through here: a temporary name in the same folder, fsync, then `os.replace`.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def atomic_path(path: str | Path, mode: int | None = None) -> Iterator[Path]:
    """Yield a temporary path beside `path`; on success it is renamed over `path`, on error removed.

    `mode` sets the permission bits; by default an existing file keeps its own, a new one gets 0o644.
    """
    path = Path(path)
    folder = path.parent if str(path.parent) else Path(".")
    folder.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=folder)
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        if mode is None:
            try:
                mode = os.stat(path).st_mode & 0o7777
            except FileNotFoundError:
                mode = 0o644
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def atomic_write_bytes(path: str | Path, data: bytes, mode: int | None = None) -> None:
    """Write `data` to `path` atomically (fsynced before the rename)."""
    with atomic_path(path, mode) as tmp:
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())


def atomic_write_text(path: str | Path, text: str, mode: int | None = None) -> None:
    """Write `text` as UTF-8 to `path` atomically, line endings as given."""
    atomic_write_bytes(path, text.encode("utf-8"), mode)
