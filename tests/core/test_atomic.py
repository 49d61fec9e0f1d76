"""Atomic writes: the old file or the new one, never half of one; nothing left behind."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from packcfg.core.atomic import atomic_path, atomic_write_text


def test_replaces_keeps_mode_and_leaves_no_temp(tmp_path: Path) -> None:
    target = tmp_path / "x.yaml"
    target.write_text("a: 1\n")
    os.chmod(target, 0o640)
    atomic_write_text(target, "a: 2\n")
    assert target.read_text() == "a: 2\n"
    assert (os.stat(target).st_mode & 0o777) == 0o640
    assert [p.name for p in tmp_path.iterdir()] == ["x.yaml"]


def test_new_file_gets_requested_mode(tmp_path: Path) -> None:
    target = tmp_path / "sub" / "run.sh"
    atomic_write_text(target, "echo hi\n", mode=0o755)
    assert (os.stat(target).st_mode & 0o777) == 0o755


def test_failure_keeps_the_old_file_and_removes_the_temp(tmp_path: Path) -> None:
    target = tmp_path / "data.parquet"
    target.write_bytes(b"old")
    with pytest.raises(KeyboardInterrupt):
        with atomic_path(target) as tmp:
            tmp.write_bytes(b"half")
            raise KeyboardInterrupt
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["data.parquet"]


# ------------------------------------------------------------------ the output rule (issue 10)

import fcntl  # noqa: E402
import re  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

from packcfg.core.atomic import (  # noqa: E402
    OutputRefused,
    atomic_write_bytes,
    check_output,
    clean_stale_temps,
    temp_dir,
    temp_name,
)


def test_refuses_writing_over_an_input_by_name_symlink_or_hard_link(tmp_path: Path) -> None:
    src = tmp_path / "data.jsonl"
    src.write_text("{}\n")
    link = tmp_path / "link.jsonl"
    link.symlink_to(src)
    hard = tmp_path / "hard.jsonl"
    os.link(src, hard)
    for out, follow in ((src, False), (tmp_path / "." / "data.jsonl", False), (link, True), (hard, False)):
        with pytest.raises(OutputRefused, match="input of this command"):
            atomic_write_text(out, "x", inputs=[src], follow_symlinks=follow)
    # `force` never allows it
    with pytest.raises(OutputRefused, match=re.escape(str(hard))):
        check_output(hard, inputs=[src], force=True)
    assert src.read_text() == "{}\n"
    # an output that names the input through a symlinked *input* path is caught too
    with pytest.raises(OutputRefused):
        check_output(src, inputs=[link])


def test_special_files_are_never_replaced(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(OutputRefused, match="FIFO"):
        atomic_write_text(fifo, "x")
    assert (os.stat(fifo).st_mode & 0o170000) == 0o010000  # still a FIFO
    with pytest.raises(OutputRefused, match="character device"):
        check_output("/dev/null", force=True)
    with pytest.raises(OutputRefused, match="folder"):
        atomic_write_text(tmp_path, "x")
    assert [p.name for p in tmp_path.iterdir()] == ["pipe"]  # no temporary left behind


def test_dev_full_is_not_replaced_even_through_a_symlink(tmp_path: Path) -> None:
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full")
    link = tmp_path / "out.bin"
    link.symlink_to("/dev/full")
    with pytest.raises(OutputRefused, match="character device"):
        atomic_write_bytes(link, b"x", follow_symlinks=True)
    with pytest.raises(OutputRefused, match="symlink"):
        atomic_write_bytes(link, b"x")
    assert link.is_symlink() and os.readlink(link) == "/dev/full"
    assert (os.stat("/dev/full").st_mode & 0o170000) == 0o020000


def test_symlink_refused_unless_following_then_the_target_is_written(tmp_path: Path) -> None:
    target = tmp_path / "real.yaml"
    target.write_text("old\n")
    link = tmp_path / "cfg.yaml"
    link.symlink_to("real.yaml")
    with pytest.raises(OutputRefused, match=r"cfg\.yaml: is a symlink \(to real\.yaml\)"):
        atomic_write_text(link, "new\n")
    assert link.is_symlink() and target.read_text() == "old\n"
    atomic_write_text(link, "new\n", follow_symlinks=True)
    assert link.is_symlink() and target.read_text() == "new\n"
    # a dangling link is refused too (writing would silently create a file elsewhere or replace the link)
    dangling = tmp_path / "gone.yaml"
    dangling.symlink_to(tmp_path / "nowhere.yaml")
    with pytest.raises(OutputRefused, match="symlink"):
        check_output(dangling)


def test_a_file_that_is_not_ours_needs_force(tmp_path: Path) -> None:
    out = tmp_path / "packed.parquet"
    out.write_bytes(b"theirs")
    with pytest.raises(OutputRefused, match=r"not written by packcfg.*--force"):
        atomic_write_bytes(out, b"ours", may_replace=lambda p: False)
    assert out.read_bytes() == b"theirs"
    atomic_write_bytes(out, b"ours", may_replace=lambda p: False, force=True)
    assert out.read_bytes() == b"ours"
    atomic_write_bytes(out, b"again", may_replace=lambda p: True)
    assert out.read_bytes() == b"again"
    # a new file never asks
    atomic_write_bytes(tmp_path / "new.parquet", b"x", may_replace=lambda p: False)


def test_output_refused_is_an_oserror_with_the_message_as_text(tmp_path: Path) -> None:
    try:
        check_output("/dev/null")
    except OSError as exc:  # existing `except OSError` handlers report it as one line
        assert exc.strerror is None and "/dev/null" in str(exc) and "\n" not in str(exc)
    else:
        raise AssertionError("not refused")


def test_temp_names_follow_one_pattern(tmp_path: Path) -> None:
    seen = []
    with atomic_path(tmp_path / "a.parquet") as tmp:
        seen.append(tmp.name)
        tmp.write_bytes(b"x")
    with temp_dir(tmp_path / "a.parquet") as d:
        seen.append(d.name)
    seen.append(temp_name(tmp_path / "a.parquet").name)
    for name in seen:
        assert re.fullmatch(r"\.a\.parquet\.[0-9a-f]{8}\.tmp", name), name
    assert [p.name for p in tmp_path.iterdir()] == ["a.parquet"]


def _old(path: Path) -> None:
    past = time.time() - 3600
    os.utime(path, (past, past), follow_symlinks=False)


def test_clean_stale_temps_removes_old_unlocked_leftovers_only(tmp_path: Path) -> None:
    stale_file = tmp_path / ".out.parquet.0123abcd.tmp"
    stale_file.write_bytes(b"x" * 100)
    stale_dir = tmp_path / ".out.parquet.89abcdef.tmp"
    stale_dir.mkdir()
    (stale_dir / "tokens.bin").write_bytes(b"y")
    fresh = tmp_path / ".out.parquet.feedface.tmp"  # newer than this process: maybe a live writer
    fresh.write_bytes(b"z")
    locked = tmp_path / ".out.parquet.00000001.tmp"
    locked.write_bytes(b"w")
    other = tmp_path / ".other.parquet.0123abcd.tmp"  # another output's temporary
    other.write_bytes(b"o")
    user = tmp_path / ".out.parquet.notes.tmp"  # not our pattern
    user.write_bytes(b"u")
    for p in (stale_file, stale_dir, locked, other, user):
        _old(p)
    fd = os.open(locked, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX)
    # the lock must be held by another open file description to count (flock is per description)
    try:
        removed = clean_stale_temps(tmp_path, "out.parquet")
    finally:
        os.close(fd)
    assert sorted(p.name for p in removed) == sorted([stale_file.name, stale_dir.name])
    assert not stale_file.exists() and not stale_dir.exists()
    assert fresh.exists() and locked.exists() and other.exists() and user.exists()


def test_a_live_writers_temp_survives_another_process_cleaning(tmp_path: Path) -> None:
    out = tmp_path / "x.bin"
    with atomic_path(out) as tmp:
        tmp.write_bytes(b"partial")
        _old(tmp)
        code = (
            "import sys; from packcfg.core.atomic import clean_stale_temps; "
            "print(len(clean_stale_temps(sys.argv[1], 'x.bin')))"
        )
        proc = subprocess.run(
            [sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, check=True
        )
        assert proc.stdout.strip() == "0" and tmp.exists()
    assert out.read_bytes() == b"partial"


def test_a_killed_writers_temp_is_removed_by_the_next_run(tmp_path: Path) -> None:
    code = (
        "import os, sys, time; from packcfg.core.atomic import atomic_path\n"
        "with atomic_path(sys.argv[1]) as tmp:\n"
        "    tmp.write_bytes(b'x' * 1000); print(tmp, flush=True); time.sleep(60)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code, str(tmp_path / "big.bin")], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    tmp = Path(proc.stdout.readline().strip())
    proc.kill()
    proc.wait()
    assert tmp.exists()  # SIGKILL: no cleanup ran
    time.sleep(0.1)  # the next run starts later (process start times are known to ~10 ms)
    code = (
        "import sys; from packcfg.core.atomic import clean_stale_temps; "
        "print(len(clean_stale_temps(sys.argv[1], 'big.bin')))"
    )
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True)
    assert out.stdout.strip() == "1" and not tmp.exists()


def test_exit_on_signals_turns_sigterm_into_exit_143_after_cleanup(tmp_path: Path) -> None:
    import signal

    from packcfg.core.atomic import exit_on_signals

    target = tmp_path / "out.bin"
    with pytest.raises(SystemExit) as info:
        with exit_on_signals():
            with atomic_path(target) as tmp:
                tmp.write_bytes(b"partial")
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(1)  # the handler raises at the next bytecode
    assert info.value.code == 143
    assert list(tmp_path.iterdir()) == []
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL or callable(signal.getsignal(signal.SIGTERM))


def test_a_signal_while_a_temporary_is_created_is_acted_on_once_it_is_registered(tmp_path: Path) -> None:
    import signal

    from packcfg.core import atomic
    from packcfg.core.atomic import exit_on_signals

    real_create = atomic._create_temp

    def create_then_signal(path: Path, directory: bool):  # the signal lands right after os.open
        made = real_create(path, directory)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.2)
        return made

    atomic._create_temp = create_then_signal
    try:
        with pytest.raises(SystemExit):
            with exit_on_signals():
                with atomic_path(tmp_path / "x.bin") as tmp:
                    tmp.write_bytes(b"never")
    finally:
        atomic._create_temp = real_create
    assert list(tmp_path.iterdir()) == []
