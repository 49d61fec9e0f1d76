"""The engine: every rule, positions, suppressions, settings, overlaps, crash isolation, order."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from packcfg.core.diagnostics import Edit, Fix, Severity
from packcfg.lint import engine
from packcfg.lint.registry import RULES, Finding, Rule, RuleDocs
from packcfg.lint.settings import Settings

_DOCS = RuleDocs(what="w", why="y", failing="a: 1\n", passing="a: 1\n", source="test")


def _install(monkeypatch: pytest.MonkeyPatch, code: str, check, severity: str = "error") -> None:
    engine.rules()  # register the real rules first, so the fake one replaces (not precedes) them
    monkeypatch.setitem(
        RULES,
        code,
        Rule(
            code=code,
            severity=Severity(severity),
            title=f"test rule {code}",
            group=code[:2],
            fixable=False,
            docs=_DOCS,
            check=check,
        ),
    )


def _only(*codes: str) -> Settings:
    return Settings(select=codes)


CONFIG = """\
train:
  micro_batch_size: 4   # packcfg: ignore[ZZ902]
  global_batch_size: 8
model:
  seq_length: 512
"""


@pytest.fixture
def fake_rules(monkeypatch: pytest.MonkeyPatch) -> None:
    def mbs(ctx) -> Iterator[Finding]:
        yield Finding(f"MBS is {ctx.get(('train', 'micro_batch_size'))}", ("train", "micro_batch_size"))

    def missing(ctx) -> Iterator[Finding]:
        yield Finding(
            "needs model.calculate_per_token_loss",
            ("model", "calculate_per_token_loss"),
            fix=Fix("set it", (Edit("set", ("model", "calculate_per_token_loss"), True),)),
        )

    def crash(ctx) -> Iterator[Finding]:
        raise RuntimeError("boom")

    _install(monkeypatch, "ZZ901", mbs)
    _install(monkeypatch, "ZZ902", mbs, "warning")
    _install(monkeypatch, "ZZ903", missing, "warning")
    _install(monkeypatch, "ZZ904", crash)


def test_every_rule_reports_with_positions_and_titles(fake_rules, capsys) -> None:
    diags = engine.lint_text(CONFIG, "x.yaml", settings=_only("ZZ"))
    # ZZ902 is suppressed on its line; ZZ903's key is missing, so it points at the `model` section
    assert [(d.code, d.line, d.column) for d in diags] == [("ZZ901", 2, 3), ("ZZ903", 4, 1)]
    by_code = {d.code: d for d in diags}
    assert by_code["ZZ901"].message == "MBS is 4"
    assert by_code["ZZ901"].title == "test rule ZZ901"
    assert by_code["ZZ901"].path == "train.micro_batch_size"
    assert by_code["ZZ903"].fix is not None
    # a crashing rule is an internal error on stderr naming it; the others still ran
    err = capsys.readouterr().err
    assert "internal error" in err and "ZZ904" in err and "boom" in err


def test_sorted_by_file_line_column_code(fake_rules) -> None:
    diags = engine.lint_text(CONFIG, "x.yaml", settings=_only("ZZ"))
    assert diags == sorted(diags, key=lambda d: (d.file, d.line, d.column, d.code))


def test_suppression_comment_hides_only_that_code_on_that_line(fake_rules) -> None:
    codes = {d.code for d in engine.lint_text(CONFIG, settings=_only("ZZ"))}
    assert "ZZ902" not in codes and "ZZ901" in codes
    text = CONFIG.replace("# packcfg: ignore[ZZ902]", "# packcfg: ignore[zz901, ZZ902]")
    codes = {d.code for d in engine.lint_text(text, settings=_only("ZZ"))}
    assert codes == {"ZZ903"}


def test_select_ignore_and_severity(fake_rules) -> None:
    assert {d.code for d in engine.lint_text(CONFIG, select="ZZ903")} == {"ZZ903"}
    assert {d.code for d in engine.lint_text(CONFIG, settings=_only("ZZ"), ignore="ZZ90")} == set()
    assert {
        d.code for d in engine.lint_text(CONFIG, settings=Settings(select=("ZZ",), ignore=("ZZ901",)))
    } == {"ZZ903"}
    settings = Settings(select=("ZZ",), severity={"ZZ903": Severity.ERROR})
    (d,) = [d for d in engine.lint_text(CONFIG, settings=settings) if d.code == "ZZ903"]
    assert d.severity is Severity.ERROR


def test_pk101_hides_mode_specific_micro_batch_rules(monkeypatch) -> None:
    def fire(ctx):
        yield Finding("x", ("train", "micro_batch_size"))

    for code in ("PK101", "PK110", "PK111", "PK112"):
        _install(monkeypatch, code, fire)
    codes = {d.code for d in engine.lint_text(CONFIG, select="PK1")}
    assert codes == {"PK101"}
    monkeypatch.setitem(
        RULES, "PK101", Rule("PK101", Severity.ERROR, "t", "PK", False, _DOCS, lambda ctx: iter(()))
    )
    codes = {d.code for d in engine.lint_text(CONFIG, select="PK1")}
    assert codes == {"PK110", "PK111", "PK112"}


def test_empty_file_is_an_empty_mapping_not_sc001() -> None:
    # rules.md rev 3, SC001: OmegaConf.load reads an empty or comment-only file as {} (a no-op override file)
    assert engine.lint_text("# nothing yet\n", "e.yaml") == []


def test_unparsable_file_reports_sc001_and_runs_no_rule(fake_rules, capsys) -> None:
    diags = engine.lint_text("train: [\n", "bad.yaml")
    assert [d.code for d in diags] == ["SC001"]
    assert diags[0].title
    assert "ZZ904" not in capsys.readouterr().err


def test_duplicate_key_is_reported_and_rules_still_run(fake_rules) -> None:
    text = "train:\n  micro_batch_size: 4\n  micro_batch_size: 2\n"
    codes = [d.code for d in engine.lint_text(text, select="SC,ZZ901")]
    assert codes == ["SC001", "ZZ901"]


def test_lint_config_merges_files_and_points_at_the_setter(fake_rules, tmp_path: Path) -> None:
    base = tmp_path / "base.yaml"
    base.write_text(CONFIG)
    over = tmp_path / "over.yaml"
    over.write_text("train:\n  micro_batch_size: 2\n")
    (d,) = engine.lint_config([base, over], settings=_only("ZZ901"))
    assert (d.file, d.line, d.message) == (str(over), 2, "MBS is 2")
    (d,) = engine.lint_config([base, over], ["train.micro_batch_size=3"], settings=_only("ZZ901"))
    assert d.file == "train.micro_batch_size=3 (command line)" and d.message == "MBS is 3"
    (d,) = engine.lint_file(base, config_files=[over], settings=_only("ZZ901"))
    assert d.file == str(over)


def test_lint_paths_expands_directories_in_stable_order(fake_rules, tmp_path: Path) -> None:
    (tmp_path / "b").mkdir()
    (tmp_path / ".hidden").mkdir()
    for rel in ("b/z.yaml", "b/a.yml", "a.yaml", ".hidden/x.yaml", ".dot.yaml", "notes.txt"):
        (tmp_path / rel).write_text(CONFIG)
    run = engine.lint_paths([tmp_path], settings=_only("ZZ901"))
    names = [Path(f).relative_to(tmp_path).as_posix() for f in run.files]
    assert names == ["a.yaml", "b/a.yml", "b/z.yaml"]
    assert len(run.diagnostics) == 3 and not run.errors


def test_lint_paths_reports_missing_path_as_error(tmp_path: Path) -> None:
    run = engine.lint_paths([tmp_path / "nope.yaml"])
    assert run.errors and "no such file" in run.errors[0]


def test_parallel_batches_give_the_same_result(fake_rules, tmp_path: Path, monkeypatch) -> None:
    from packcfg.lint import parallel

    for i in range(12):
        (tmp_path / f"r{i:02}.yaml").write_text(CONFIG.replace("4", str(i + 2)))
    serial = engine.lint_paths([tmp_path], settings=_only("ZZ901"), jobs=1)
    monkeypatch.setattr(parallel, "PARALLEL_THRESHOLD", 2)
    pooled = engine.lint_paths([tmp_path], settings=_only("ZZ901"), jobs=2)
    assert [d.to_dict() for d in pooled.diagnostics] == [d.to_dict() for d in serial.diagnostics]
    assert pooled.files == serial.files


def test_a_crashing_stage_is_an_internal_error_not_a_traceback(monkeypatch, capsys) -> None:
    import packcfg.lint.facts as facts

    def broken(config, profile):
        raise ValueError("facts broke")

    monkeypatch.setattr(facts, "derive", broken)
    diags = engine.lint_text("train:\n  micro_batch_size: 1\n  micro_batch_size: 2\n")
    assert [d.code for d in diags] == ["SC001"]  # the loader's finding survives
    assert "facts.derive" in capsys.readouterr().err


def test_cli_exit_2_when_nothing_could_run(monkeypatch, tmp_path: Path, capsys) -> None:
    import packcfg.lint.facts as facts
    from packcfg.cli import main

    monkeypatch.setattr(facts, "derive", lambda config, profile: 1 / 0)
    cfg = tmp_path / "x.yaml"
    cfg.write_text("train:\n  micro_batch_size: 1\n")
    assert main(["lint", str(cfg)]) == 2
    assert "internal error" in capsys.readouterr().err
