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
