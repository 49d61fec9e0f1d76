"""`--fix` on a file it cannot write (read-only file or folder): one clear line, exit 2, no traceback (issue 10)."""

from __future__ import annotations

import shutil
from pathlib import Path

from packcfg.cli import main

CASE = Path(__file__).resolve().parents[1] / "cases" / "PK110_offline_mbs4.yaml"


def test_fix_that_cannot_be_written_exits_2_with_one_line(tmp_path: Path, monkeypatch, capsys) -> None:
    target = tmp_path / "exp.yaml"
    shutil.copy(CASE, target)
    before = target.read_bytes()

    def refuse(*_a, **_k):
        raise PermissionError(13, "Permission denied")

    # a read-only folder as root cannot be made with chmod; the write itself is refused instead
    monkeypatch.setattr("packcfg.lint.fix.atomic_path", refuse)
    rc = main(["lint", str(target), "--fix"])
    err = capsys.readouterr().err
    assert rc == 2
    assert "Traceback" not in err
    assert "not fixed: cannot write it (Permission denied)" in err
    assert "fixed 7 edits" not in err
    assert target.read_bytes() == before
