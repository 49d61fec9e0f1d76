"""`--fix` and `--diff`: exact edits with comments kept, provenance, atomic writes, and a clean re-lint."""

from __future__ import annotations

from pathlib import Path

import pytest

from packcfg.cli import main
from packcfg.core.diagnostics import Edit, Fix, Severity
from packcfg.lint import engine
from packcfg.lint.fix import apply_edits, fix_paths
from packcfg.lint.registry import RULES, Finding, Rule, RuleDocs
from packcfg.lint.settings import Settings

TEXT = """\
# header comment
train:
  micro_batch_size: 4   # too big
  global_batch_size: 8   # gbs

dataset:
  packed_sequence_specs:   # legacy spelling
    packed_sequence_size: 512
    pad_seq_to_mult: 1
  seq_length: 512

model:
  seq_length: 512
  old_knob: 3  # knob
"""


def _diff_lines(before: str, after: str) -> tuple[list[str], list[str]]:
    import difflib

    lines = list(difflib.ndiff(before.splitlines(), after.splitlines()))
    return [ln[2:] for ln in lines if ln.startswith("- ")], [ln[2:] for ln in lines if ln.startswith("+ ")]


def test_set_existing_value_keeps_its_comment() -> None:
    out, problems = apply_edits(TEXT, [Edit("set", ("train", "micro_batch_size"), 1)])
    assert problems == []
    assert _diff_lines(TEXT, out) == (
        ["  micro_batch_size: 4   # too big"],
        ["  micro_batch_size: 1   # too big"],
    )


def test_set_missing_key_goes_to_the_end_of_its_section() -> None:
    out, _ = apply_edits(TEXT, [Edit("set", ("train", "calculate"), True)])
    assert "  global_batch_size: 8   # gbs\n  calculate: true\n\ndataset:" in out
    assert _diff_lines(TEXT, out) == ([], ["  calculate: true"])


def test_set_in_missing_section_creates_it() -> None:
    out, _ = apply_edits(TEXT, [Edit("set", ("ddp", "average_in_collective"), False)])
    assert out.endswith("  old_knob: 3  # knob\nddp:\n  average_in_collective: false\n")


def test_section_whose_last_value_is_a_mapping() -> None:
    text = "dataset:\n  specs:\n    a: 1\n\nmodel:\n  x: 1\n"
    out, _ = apply_edits(text, [Edit("set", ("dataset", "seq_length"), 512)])
    assert out == "dataset:\n  specs:\n    a: 1\n  seq_length: 512\n\nmodel:\n  x: 1\n"


def test_rename_keeps_place_and_comment() -> None:
    out, _ = apply_edits(
        TEXT,
        [
            Edit(
                "rename", ("dataset", "packed_sequence_specs"), new_path=("dataset", "offline_packing_specs")
            ),
            Edit("set", ("dataset", "enable_offline_packing"), True),
        ],
    )
    removed, added = _diff_lines(TEXT, out)
    assert removed == ["  packed_sequence_specs:   # legacy spelling"]
    assert added == ["  offline_packing_specs:   # legacy spelling", "  enable_offline_packing: true"]
    assert out.index("offline_packing_specs") < out.index("  seq_length: 512")


def test_rename_refuses_to_overwrite() -> None:
    _, problems = apply_edits(
        TEXT, [Edit("rename", ("train", "micro_batch_size"), new_path=("train", "global_batch_size"))]
    )
    assert problems and "already set" in problems[0]


def test_delete_last_key_keeps_section_spacing() -> None:
    out, _ = apply_edits(TEXT, [Edit("delete", ("train", "global_batch_size"))])
    assert "  micro_batch_size: 4   # too big\n\ndataset:" in out


_DOCS = RuleDocs(what="w", why="y", failing="a: 1\n", passing="a: 1\n", source="t", fixed="a: 1\n")


@pytest.fixture
def fixable(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two fixable rules standing in for PK110 (a value) and DP801 (a rename + a new key)."""

    def mbs(ctx):
        if ctx.get(("train", "micro_batch_size")) != 1:
            yield Finding(
                "MBS must be 1",
                ("train", "micro_batch_size"),
                fix=Fix("MBS 1", (Edit("set", ("train", "micro_batch_size"), 1),)),
            )

    def legacy(ctx):
        if ctx.has(("model", "old_knob")):
            yield Finding(
                "legacy",
                ("model", "old_knob"),
                fix=Fix(
                    "rename",
                    (
                        Edit("rename", ("model", "old_knob"), new_path=("model", "new_knob")),
                        Edit("set", ("model", "knob_enabled"), True),
                    ),
                ),
            )

    engine.rules()
    for code, fn in (("ZZ961", mbs), ("ZZ962", legacy)):
        monkeypatch.setitem(RULES, code, Rule(code, Severity.ERROR, "t", "ZZ", True, _DOCS, fn))


def _lint_codes(*argv: str) -> set[str]:
    run = engine.lint_paths(list(argv), select="ZZ96")
    return {d.code for d in run.diagnostics}


def test_fix_writes_file_and_relint_is_clean(fixable, tmp_path: Path, capsys) -> None:
    path = tmp_path / "exp.yaml"
    path.write_text(TEXT)
    assert main(["lint", str(path), "--select", "ZZ96", "--fix"]) == 0
    out = capsys.readouterr().out
    assert "0 errors" in out
    text = path.read_text()
    assert "# header comment" in text and "# too big" in text and "# legacy spelling" in text
    assert "micro_batch_size: 1" in text and "  new_knob: 3  # knob\n  knob_enabled: true\n" in text
    assert _lint_codes(str(path)) == set()


def test_diff_prints_and_writes_nothing(fixable, tmp_path: Path, capsys) -> None:
    path = tmp_path / "exp.yaml"
    path.write_text(TEXT)
    assert main(["lint", str(path), "--select", "ZZ96", "--diff"]) == 1
    out = capsys.readouterr().out
    assert out.startswith(f"--- a/{path}\n+++ b/{path}\n")
    assert "-  micro_batch_size: 4   # too big\n+  micro_batch_size: 1   # too big\n" in out
    assert path.read_text() == TEXT


def test_fix_goes_to_the_file_that_set_the_value(fixable, tmp_path: Path) -> None:
    base = tmp_path / "base.yaml"
    base.write_text(TEXT.replace("micro_batch_size: 4", "micro_batch_size: 1"))
    over = tmp_path / "over.yaml"
    over.write_text("# override\ntrain:\n  micro_batch_size: 8  # mine\n")
    outcome = fix_paths([], config_files=[base, over], settings=Settings(select=("ZZ96",)))
    assert str(over) in outcome.changed and str(base) in outcome.changed
    assert over.read_text() == "# override\ntrain:\n  micro_batch_size: 1  # mine\n"
    assert "micro_batch_size: 1   # too big" in base.read_text()  # untouched line
    assert "new_knob: 3  # knob" in base.read_text()  # the rename went where the key is spelled


def test_fix_refuses_values_from_the_command_line(fixable, tmp_path: Path, capsys) -> None:
    path = tmp_path / "exp.yaml"
    original = TEXT.replace("micro_batch_size: 4", "micro_batch_size: 1")
    path.write_text(original)
    code = main(["lint", str(path), "--select", "ZZ961", "-o", "train.micro_batch_size=4", "--fix"])
    err = capsys.readouterr().err
    assert code == 1
    assert "ZZ961: not fixed: part of it is on the command line (train.micro_batch_size=4)" in err
    assert "[train.micro_batch_size (command line: train.micro_batch_size=4)]" in err
    assert path.read_text() == original


PK110_CASE = Path(__file__).parents[1] / "cases" / "PK110_offline_mbs4.yaml"


def test_fix_with_an_override_applies_nothing_of_a_partial_fix(tmp_path: Path, capsys) -> None:
    """Issue 10: with `-o train.micro_batch_size=4` the GBS and pack size were fixed on every pass
    (GBS 128 -> 2, pack size 4096 -> 262144) and "fixed" was printed. The fix is one change: all or nothing."""
    path = tmp_path / "exp.yaml"
    path.write_bytes(PK110_CASE.read_bytes())
    for _ in range(3):
        code = main(["lint", str(path), "train.micro_batch_size=4", "--fix"])
        err = capsys.readouterr().err
        assert code == 1
        assert "PK110: not fixed: part of it is on the command line" in err
        assert "train.global_batch_size (" in err and "fixed" not in err.replace("not fixed", "")
    assert path.read_bytes() == PK110_CASE.read_bytes()


def test_fix_with_a_shared_c_file_is_refused_whole(tmp_path: Path, capsys) -> None:
    """Issue 10: a fix landing in a `-c` file shared by several experiments of one run is refused, naming
    every value that would have to change, so no experiment is left non-equivalent."""
    shared = tmp_path / "shared.yaml"
    shared.write_text("train:\n  micro_batch_size: 4\n  global_batch_size: 128\n")
    text = PK110_CASE.read_text().replace(
        "  micro_batch_size: 4   # carried over from the unpacked run\n", ""
    )
    text = text.replace("  global_batch_size: 128\n", "")
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "exp.yaml").write_text(text)
    (tmp_path / "b" / "exp.yaml").write_text(text.replace("4096", "2048"))
    before = {p: p.read_bytes() for p in (shared, tmp_path / "a" / "exp.yaml", tmp_path / "b" / "exp.yaml")}
    code = main(["lint", str(tmp_path / "a"), str(tmp_path / "b"), "-c", str(shared), "--fix"])
    err = capsys.readouterr().err
    assert code == 1
    assert f"part of it is in {shared}, which other experiments in this run share" in err
    assert {p: p.read_bytes() for p in before} == before


def test_fix_leaves_unparsable_files_alone(fixable, tmp_path: Path, capsys) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("train: [\n")
    assert main(["lint", str(path), "--fix"]) == 1
    assert path.read_text() == "train: [\n"


LEGACY = """\
recipe:
  name: legacy
  family: llama
  mode: sft
model:
  _target_: megatron.bridge.models.llama.llama_provider.Llama3ModelProvider
  seq_length: 512
  context_parallel_size: 2
  calculate_per_token_loss: true
  cross_entropy_loss_fusion: false
  transformer_impl: transformer_engine
  apply_rope_fusion: true
dataset:
  seq_length: 512
  packed_sequence_specs:   # old spelling
    packed_sequence_size: 512
    pad_seq_to_mult: 1
  dataset_kwargs:
    pad_to_max_length: true
train:
  micro_batch_size: 1
  global_batch_size: 8
ddp:
  average_in_collective: false
"""


def test_real_rules_fix_a_legacy_spelling_and_a_value_under_it(tmp_path: Path, capsys) -> None:
    """DP801 renames the legacy section; CP203's edit names the normalised path, which the engine maps back
    to the spelling in the file, so both apply in one run and the re-lint is clean."""
    path = tmp_path / "legacy.yaml"
    path.write_text(LEGACY)
    target = ["++launch.bridge.version=0.6.2"]  # what --bridge-version 0.6.2 adds
    before = {d.code: d for d in engine.lint_file(path, overrides=target)}
    assert {"DP801", "CP203"} <= set(before)
    assert before["CP203"].fix is not None
    assert before["CP203"].fix.edits[0].path == ("dataset", "packed_sequence_specs", "pad_seq_to_mult")
    assert main(["lint", str(path), "--fix", "--bridge-version", "0.6.2"]) == 0
    text = path.read_text()
    assert (
        "  offline_packing_specs:   # old spelling\n    packed_sequence_size: 512\n    pad_seq_to_mult: 4\n"
        in text
    )
    assert "  enable_offline_packing: true\n" in text
    assert "launch" not in text  # the target came from the command line, never written into the file
    fixable = {"PK110", "PK150", "CP203", "LS301", "LS302", "DS701", "DP801", "DP802"}
    assert not fixable & {d.code for d in engine.lint_file(path, overrides=target)}


@pytest.mark.parametrize(
    "args",
    [[], ["--profile", "legacy"], ["--bridge-version", "0.3.1"], ["-o", "launch.bridge.version=0.5.0"]],
    ids=["inferred", "profile-legacy", "flag-0.3.1", "override-0.5.0"],
)
def test_fix_never_renames_for_a_bridge_that_reads_the_old_spelling(tmp_path: Path, args: list[str]) -> None:
    """Bridge < 0.6 reads only packed_sequence_specs: --fix applies the other fixes (CP203) and keeps the
    spelling, whether the target is named or inferred from the spelling itself (issue 21)."""
    path = tmp_path / "legacy.yaml"
    path.write_text(LEGACY)
    assert main(["lint", str(path), "--fix", *args]) == 0
    text = path.read_text()
    assert (
        "  packed_sequence_specs:   # old spelling\n    packed_sequence_size: 512\n    pad_seq_to_mult: 4\n"
        in text
    )
    assert "offline_packing_specs" not in text and "enable_offline_packing" not in text
