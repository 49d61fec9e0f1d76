"""The one check every input path passes before it is opened: a regular file (or a folder where a folder is
expected), never a FIFO, socket or device, which would block or never end (`/dev/zero`, a named pipe).

`check_input(path, what=..., kind=...)` stats the path (following symlinks) and raises one line naming it:
missing, a symlink loop, permission denied, a folder where a file is expected, or a special file. The
error type is the caller's (`error=PackingError`, `ConfigError`, ...), so each flow keeps its exit-2
handler; by default `InputRefused`, an OSError whose str() is the message. Standard library only.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

__all__ = ["InputRefused", "check_input", "describe_os_error"]


class InputRefused(OSError):
    """An input path that is not what the command reads; the message is one line naming it. Exit code 2."""


_KINDS = {
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFIFO: "a FIFO (named pipe)",
    stat.S_IFSOCK: "a socket",
}


def describe_os_error(exc: OSError) -> str:
    """An OSError in a few words: `symlink loop` for ELOOP, else its strerror."""
    if exc.errno == errno.ELOOP:
        return "symlink loop"
    return exc.strerror or str(exc)


def check_input(
    path: str | Path,
    *,
    what: str = "",
    kind: str = "file",
    error: type[Exception] = InputRefused,
    max_bytes: int | None = None,
) -> Path:
    """Check that `path` can be read as `kind` ("file", "dir" or "any": a file or a folder); return it.

    `what` prefixes the message (e.g. "--pack-metadata"); `error` is the exception raised (its single
    argument is the one-line message); `max_bytes`: a regular file larger than this is refused (files read
    whole into memory: settings, metadata JSON)."""
    path = Path(path)
    where = f"{what} {path}" if what else str(path)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        if os.path.islink(path):
            raise error(f"{where}: no such file (a broken symlink to {os.readlink(path)})") from None
        raise error(f"{where}: no such file{' or folder' if kind != 'file' else ''}") from None
    except OSError as exc:
        raise error(f"{where}: cannot read ({describe_os_error(exc)})") from None
    except ValueError as exc:  # an embedded NUL byte
        raise error(f"{where}: not a valid path ({exc})") from None
    mode = st.st_mode
    if stat.S_ISDIR(mode):
        if kind == "file":
            raise error(f"{where}: is a directory, expected a file")
    elif stat.S_ISREG(mode):
        if kind == "dir":
            raise error(f"{where}: not a directory")
    else:
        special = _KINDS.get(stat.S_IFMT(mode), "a special file")
        expected = {"file": "a regular file", "dir": "a directory"}.get(kind, "a regular file or a directory")
        raise error(f"{where}: is {special}, not {expected}; refusing to read it")
    if max_bytes is not None and stat.S_ISREG(mode) and st.st_size > max_bytes:
        raise error(
            f"{where}: {st.st_size:,} bytes, more than the {max_bytes:,} such a file can sensibly hold; refusing "
            "to read it"
        )
    if not os.access(path, os.R_OK | (os.X_OK if stat.S_ISDIR(mode) else 0)):
        raise error(f"{where}: cannot read (permission denied)")
    return path
