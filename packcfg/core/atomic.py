"""Safe output for every writer: atomic writes, and one rule for what may be written over.

Atomic: a reader (or a Ctrl-C) sees the old file or the new one, never half of one. Every flow writes
through `atomic_path`: a temporary name in the same folder (`.<name>.<random>.tmp`), then `os.replace`.
While a temporary exists its writer holds an exclusive `flock` on it, so `clean_stale_temps` can tell
a live writer's temporary from the leftover of a killed run.

The output rule (`check_output`, applied by `atomic_path` and usable before any work starts):
- never write over an input of the same command (same resolved path or same inode: symlinks and hard
  links included), whatever `force` says;
- never replace a special file (character/block device, FIFO, socket) or a folder with a regular file;
- never replace a symlink with a regular file: the write is refused unless the caller allows following
  the link (`follow_symlinks=True`), in which case the link's target is written (atomically) and the
  link itself is kept;
- an existing file that the caller does not own (`may_replace(path)` returns False) is replaced only with
  `force` (the command's `--force`).
Every refusal raises `OutputRefused`, whose message is one line naming the path and what to do.
"""

from __future__ import annotations

import errno
import fcntl
import os
import secrets
import shutil
import signal
import stat
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

__all__ = [
    "OutputRefused",
    "atomic_path",
    "atomic_write_bytes",
    "atomic_write_text",
    "check_output",
    "clean_stale_temps",
    "exit_on_signals",
    "temp_dir",
    "temp_name",
]

# the start of this process, approximately (this module is imported early by every command)
_PROCESS_START = time.time()
try:  # the real start time on Linux: now - (uptime - start ticks of /proc/self/stat)
    with open("/proc/self/stat", "rb") as _fh:
        _ticks = int(_fh.read().rsplit(b")", 1)[1].split()[19])
    with open("/proc/uptime", "rb") as _fh:
        _uptime = float(_fh.read().split()[0])
    _PROCESS_START = min(_PROCESS_START, time.time() - (_uptime - _ticks / os.sysconf("SC_CLK_TCK")))
except (OSError, ValueError, IndexError):
    pass


class OutputRefused(OSError):
    """A write that would lose the user's data; the message is one line naming the path. Exit code 2.

    An OSError (strerror None, str() is the message), so a command's existing `except OSError` handler
    already reports it as one line."""


_SPECIAL = {
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFIFO: "a FIFO",
    stat.S_IFSOCK: "a socket",
    stat.S_IFDIR: "a folder",
}


def _kind(st: os.stat_result) -> str | None:
    """What a non-regular file is, in words (None for a regular file)."""
    return _SPECIAL.get(stat.S_IFMT(st.st_mode)) if not stat.S_ISREG(st.st_mode) else None


def check_output(
    path: str | Path,
    *,
    inputs: Iterable[str | Path | None] = (),
    force: bool = False,
    follow_symlinks: bool = False,
    may_replace: Callable[[Path], bool] | None = None,
    what: str = "output",
) -> Path:
    """Check that `path` may be written; return the path to write (the link target when following).

    `inputs`: the files the same command reads (None entries are skipped); `what`: how the message names
    the output (e.g. "--out", "packed file"); `may_replace(path)`: called for an existing regular file,
    False means "not ours" (replaced only with `force`). Raises OutputRefused.
    """
    path = Path(path)
    target = path
    try:
        lst = os.lstat(path)
    except FileNotFoundError:
        lst = None
    except OSError as exc:
        raise OutputRefused(f"{what} {path}: cannot inspect ({exc.strerror or exc})") from None
    if lst is not None and stat.S_ISLNK(lst.st_mode):
        link = os.readlink(path)
        if not follow_symlinks:
            raise OutputRefused(
                f"{what} {path}: is a symlink (to {link}); refusing to replace it with a regular file; "
                "write to the link's target instead"
            )
        target = Path(os.path.realpath(path))
    try:
        st = os.stat(target)
    except FileNotFoundError:
        st = None  # a new file (or a dangling link: its target is created)
    except OSError as exc:
        raise OutputRefused(f"{what} {path}: cannot inspect ({exc.strerror or exc})") from None
    if st is not None:
        kind = _kind(st)
        if kind is not None:
            hint = "" if kind == "a folder" else "; refusing to replace it with a regular file"
            raise OutputRefused(f"{what} {path}: is {kind}{hint}")
    # never over an input of the same command: same resolved path, or the same inode (hard links)
    real = os.path.realpath(target)
    for src in inputs:
        if src is None:
            continue
        src = Path(src)
        same = os.path.realpath(src) == real
        if not same and st is not None:
            with suppress(OSError):
                sst = os.stat(src)
                same = (sst.st_dev, sst.st_ino) == (st.st_dev, st.st_ino)
        if same:
            via = "" if str(src) == str(path) else f" ({src})"
            raise OutputRefused(f"{what} {path}: is an input of this command{via}; refusing to overwrite it")
    if st is not None and may_replace is not None and not force and not may_replace(target):
        raise OutputRefused(
            f"{what} {path}: exists and was not written by packcfg; refusing to overwrite it "
            "(pass --force to replace it)"
        )
    return target


def temp_name(path: str | Path) -> Path:
    """A fresh temporary name beside `path`, by the one pattern: `.<name>.<random>.tmp`."""
    path = Path(path)
    return path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")


def _lock(fd: int) -> None:
    with suppress(OSError):  # a filesystem without flock: the age check in clean_stale_temps remains
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)


_DEFERRED = {signal.SIGINT, signal.SIGTERM}
_critical = 0  # > 0 while a temporary is being created/registered or removed
_pending: int | None = None  # a signal that arrived meanwhile (handled when the section ends)


@contextmanager
def _signals_deferred() -> Iterator[None]:
    """SIGINT/SIGTERM wait until the block ends (then they are acted on).

    Creating a temporary and registering it for cleanup, and the cleanup itself, must not be cut in two
    by a signal: a handler that raises between `os.open` and the `try` would leak the file. The signal
    mask covers this thread; a signal taken by another thread (pyarrow's pools) only trips Python's flag,
    and the handlers of `exit_on_signals` then see `_critical` and postpone."""
    global _critical, _pending
    old = signal.pthread_sigmask(signal.SIG_BLOCK, _DEFERRED)
    _critical += 1
    try:
        yield
    finally:
        _critical -= 1
        signal.pthread_sigmask(signal.SIG_SETMASK, old)
        if _critical == 0 and _pending is not None:
            signum, _pending = _pending, None
            _raise_for(signum)


def _raise_for(signum: int) -> None:
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    raise _Signalled(128 + signum)


def _on_signal(signum: int, frame: object) -> None:
    global _pending
    if _critical:
        _pending = signum
        return
    _raise_for(signum)


def _create_temp(path: Path, directory: bool) -> tuple[Path, int]:
    while True:
        tmp = temp_name(path)
        try:
            if directory:
                os.mkdir(tmp, 0o700)
                fd = os.open(tmp, os.O_RDONLY)
            else:
                fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            continue
        except OSError as exc:  # a read-only folder, a full disk: name the folder, not our temporary
            folder = path.parent if str(path.parent) else Path(".")
            raise OutputRefused(
                f"{path}: cannot write in the folder {folder} ({exc.strerror or exc})"
            ) from None
        _lock(fd)
        return tmp, fd


def _remove(tmp: Path, directory: bool) -> None:
    with _signals_deferred():
        if directory:
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            with suppress(OSError):
                os.unlink(tmp)


def _make_folder(folder: Path, what: str, path: Path) -> None:
    """Create an output's folder (and its parents); OutputRefused naming the output when that fails."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputRefused(
            f"{what} {path}: cannot create its folder {folder} ({exc.strerror or exc})"
        ) from None


@contextmanager
def atomic_path(
    path: str | Path,
    mode: int | None = None,
    *,
    inputs: Iterable[str | Path | None] = (),
    force: bool = False,
    follow_symlinks: bool = False,
    may_replace: Callable[[Path], bool] | None = None,
    what: str = "output",
) -> Iterator[Path]:
    """Yield a temporary path beside `path`; on success it is renamed over `path`, on error removed.

    The output rule (`check_output`, same keyword arguments) is applied first: a symlink, a special file
    or an input of the command is never replaced. `mode` sets the permission bits; by default an
    existing file keeps its own, a new one gets 0o644. A signal (SIGINT, or SIGTERM under
    `exit_on_signals`) at any point removes the temporary.
    """
    path = check_output(
        path,
        inputs=inputs,
        force=force,
        follow_symlinks=follow_symlinks,
        may_replace=may_replace,
        what=what,
    )
    folder = path.parent if str(path.parent) else Path(".")
    _make_folder(folder, what, path)
    tmp: Path | None = None
    fd = -1
    try:
        with _signals_deferred():  # a signal arrives once `tmp` is known, inside this `try`
            tmp, fd = _create_temp(path, directory=False)
        yield tmp
        if mode is None:
            try:
                mode = os.stat(path).st_mode & 0o7777
            except FileNotFoundError:
                mode = 0o644
        os.chmod(tmp, mode)
        # the rule again at the last moment: something may have appeared at `path` meanwhile
        if os.path.islink(path) and not follow_symlinks:
            check_output(path, what=what)
        with suppress(FileNotFoundError):
            kind = _kind(os.stat(path))
            if kind is not None:
                raise OutputRefused(f"{what} {path}: is {kind}; refusing to replace it with a regular file")
        with _signals_deferred():
            os.replace(tmp, path)
            tmp = None
    except BaseException:
        if tmp is not None:
            _remove(tmp, directory=False)
        raise
    finally:
        if fd >= 0:
            os.close(fd)


@contextmanager
def temp_dir(beside: str | Path) -> Iterator[Path]:
    """A locked temporary folder beside `beside` (same pattern as files), removed on exit (signals too)."""
    beside = Path(beside)
    folder = beside.parent if str(beside.parent) else Path(".")
    _make_folder(folder, "output", beside)
    tmp: Path | None = None
    fd = -1
    try:
        with _signals_deferred():
            tmp, fd = _create_temp(beside, directory=True)
        yield tmp
    finally:
        if tmp is not None:
            _remove(tmp, directory=True)
        if fd >= 0:
            os.close(fd)


def clean_stale_temps(folder: str | Path, name: str) -> list[Path]:
    """Remove leftovers of killed runs: `.<name>.<random>.tmp` files/folders in `folder` that are older
    than this process and not locked by a live writer. Returns what was removed."""
    folder = Path(folder) if str(folder) else Path(".")
    prefix, removed = f".{name}.", []
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return removed
    for entry in entries:
        middle = entry.name[len(prefix) : -len(".tmp")]
        if not (entry.name.startswith(prefix) and entry.name.endswith(".tmp") and middle):
            continue
        if "." in middle or not all(c in "0123456789abcdef" for c in middle):
            continue  # not our pattern (e.g. `.a.b.x.tmp` for the output `a.b.x`)
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if stat.S_ISLNK(st.st_mode) or st.st_mtime >= _PROCESS_START:
            continue
        try:
            fd = os.open(entry.path, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError:
            continue
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    continue  # a live writer holds it
            if stat.S_ISDIR(st.st_mode):
                shutil.rmtree(entry.path, ignore_errors=True)
            else:
                with suppress(OSError):
                    os.unlink(entry.path)
            removed.append(Path(entry.path))
        finally:
            os.close(fd)
    return removed


class _Signalled(SystemExit):
    pass


@contextmanager
def exit_on_signals() -> Iterator[None]:
    """Within the block, SIGTERM raises SystemExit(143) and SIGINT KeyboardInterrupt (exit 130), so that
    every `finally` (temporary files, spool folders) runs before the process exits; a signal that lands
    while a temporary is being created or removed is acted on right after. Main thread only."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old_term = signal.signal(signal.SIGTERM, _on_signal)
    old_int = signal.signal(signal.SIGINT, _on_signal)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old_term)
        signal.signal(signal.SIGINT, old_int)


def atomic_write_bytes(path: str | Path, data: bytes, mode: int | None = None, **rule: object) -> None:
    """Write `data` to `path` atomically (fsynced before the rename); `rule`: see `atomic_path`."""
    with atomic_path(path, mode, **rule) as tmp:  # type: ignore[arg-type]
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())


def atomic_write_text(path: str | Path, text: str, mode: int | None = None, **rule: object) -> None:
    """Write `text` as UTF-8 to `path` atomically, line endings as given; `rule`: see `atomic_path`."""
    atomic_write_bytes(path, text.encode("utf-8"), mode, **rule)
