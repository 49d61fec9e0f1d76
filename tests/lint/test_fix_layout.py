"""`--fix` keeps the user's file (issue 10): only the edited value's characters change. Line endings, BOM,
flow style, indentation, comments, anchors, symlinks, mode and owner stay; hard links are never split."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from packcfg.cli import main
from packcfg.lint.fix import fix_paths

ORIGINAL = (
    "\ufeffmodel: {context_parallel_size: 2, calculate_per_token_loss: false}   # flow\r\n"
    "dataset:\r\n"
    "    seq_length: 4096\r\n"
    "    dataset_kwargs: &kw {x: 1}\r\n"
    "train:\r\n"
    "  micro_batch_size: 1\r\n"
    "  global_batch_size: 8\r\n"
    "recipe: {mode: sft}\r\n"
)


def test_fix_changes_only_the_value_through_a_symlink(tmp_path: Path, capsys) -> None:
    real = tmp_path / "real.yaml"
    real.write_bytes(ORIGINAL.encode("utf-8"))
    os.chmod(real, 0o640)
    link = tmp_path / "exp.yaml"
    link.symlink_to("real.yaml")
    code = main(["lint", str(link), "--fix", "--select", "LS301"])
    assert code == 0, capsys.readouterr()
    assert link.is_symlink() and os.readlink(link) == "real.yaml"
    expected = ORIGINAL.replace("calculate_per_token_loss: false", "calculate_per_token_loss: true")
    assert real.read_bytes() == expected.encode("utf-8")  # BOM, CRLF, flow style, anchor, indentation kept
    assert stat.S_IMODE(os.stat(real).st_mode) == 0o640
    assert "fixed 1 edit in" in capsys.readouterr().err


def test_fix_never_splits_hard_links(tmp_path: Path, capsys) -> None:
    a = tmp_path / "a.yaml"
    a.write_bytes(ORIGINAL.encode("utf-8"))
    os.link(a, tmp_path / "b.yaml")
    code = main(["lint", str(a), "--fix", "--select", "LS301"])
    err = capsys.readouterr().err
    assert code == 1
    assert "hard links" in err and "not fixed" in err
    assert os.stat(a).st_nlink == 2 and a.read_bytes() == ORIGINAL.encode("utf-8")


def test_inserted_key_keeps_every_other_line_byte_for_byte(tmp_path: Path) -> None:
    text = "recipe: {mode: sft}\r\nmodel:\r\n    context_parallel_size: 2   # cp\r\n    seq_length: 4096\r\nx: &a [1, 2]\r\ny: *a\r\n"
    path = tmp_path / "exp.yaml"
    path.write_bytes(text.encode())
    fix_paths([path])
    new = path.read_bytes().decode()
    assert "\n" not in new.replace("\r\n", "")  # no bare LF: endings stay CRLF
    kept = [line for line in new.splitlines(keepends=True) if "calculate_per_token_loss" not in line]
    assert "".join(kept) == text  # everything but the inserted line is the file's own
    assert "calculate_per_token_loss: true" in new


# ---- fuzz: random layouts, one fixable value; every other byte must survive ----------------------------

indent = st.sampled_from(["  ", "    "])
ending = st.sampled_from(["\n", "\r\n"])
comment = st.sampled_from(["", "  # note", "   # a: b {x}", "  #"])
flow_model = st.booleans()


@st.composite
def documents(draw) -> str:
    ind, eol = draw(indent), draw(ending)
    lines = [f"# experiment{draw(comment)}", "recipe: {mode: sft}" + draw(comment)]
    if draw(flow_model):
        lines.append(
            "model: {context_parallel_size: 2, calculate_per_token_loss: false, seq_length: 4096}"
            + draw(comment)
        )
    else:
        body = [f"context_parallel_size: 2{draw(comment)}", f"calculate_per_token_loss: false{draw(comment)}",
                f"seq_length: 4096{draw(comment)}"]  # fmt: skip
        order = draw(st.permutations(body))
        lines += ["model:" + draw(comment)] + [ind + b for b in order]
    lines += ["ddp:", f"{ind}average_in_collective: false{draw(comment)}"]
    if draw(st.booleans()):
        lines += [f"anchors: &base {{a: 1, b: [1, 2]}}{draw(comment)}", "other: *base"]
    if draw(st.booleans()):
        lines += ["logger:", f"{ind}{ind}log_interval: 1"]  # odd indentation of an unrelated section
    bom = "\ufeff" if draw(st.booleans()) else ""
    return bom + eol.join(lines) + (eol if draw(st.booleans()) else "")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(documents())
def test_fix_fuzz_touches_only_the_edited_value(tmp_path: Path, text: str) -> None:
    path = tmp_path / "exp.yaml"
    path.write_bytes(text.encode("utf-8"))
    fix_paths([path])
    expected = text.replace("calculate_per_token_loss: false", "calculate_per_token_loss: true", 1)
    assert path.read_bytes() == expected.encode("utf-8")
    again = fix_paths([path])  # a second pass is a no-op
    assert again.changed == [] and path.read_bytes() == expected.encode("utf-8")


@pytest.mark.parametrize("value", ["'x'", '"x"'])
def test_splice_keeps_the_quoting_style(tmp_path: Path, value: str) -> None:
    from packcfg.core.diagnostics import Edit
    from packcfg.lint.fix import apply_edits

    text = f"a:\n  b: {value}  # c\n"
    new, problems = apply_edits(text, [Edit("set", ("a", "b"), "y")])
    assert problems == [] and new == f"a:\n  b: {value.replace('x', 'y')}  # c\n"
