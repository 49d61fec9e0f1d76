"""`packcfg lint | explain | rules | schema` through the real CLI: output and the exit-code contract."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from packcfg.cli import main
from packcfg.core.diagnostics import Severity
from packcfg.lint import engine
from packcfg.lint.registry import RULES, Finding, Rule, RuleDocs

_DOCS = RuleDocs(what="w", why="y", failing="a: 1\n", passing="a: 1\n", source="test")


@pytest.fixture
def warn_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    """A rule that warns on `train.warn_me`, to test --strict without depending on a domain rule."""

    def check(ctx):
        if ctx.has(("train", "warn_me")):
            yield Finding("warn_me is set", ("train", "warn_me"))

    engine.rules()
    monkeypatch.setitem(RULES, "ZZ950", Rule("ZZ950", Severity.WARNING, "warns", "ZZ", False, _DOCS, check))


def _run(argv: list[str], capsys) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_clean_recipe_exits_0(tiny_recipe: Path, capsys) -> None:
    code, out, err = _run(["lint", str(tiny_recipe)], capsys)
    assert code == 0, out + err
    assert out.strip().endswith("in 1 file")


def test_no_paths_is_a_usage_error(capsys) -> None:
    code, out, err = _run(["lint"], capsys)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "nothing to lint" in err


def test_missing_path_exits_2_with_one_line(tmp_path: Path, capsys) -> None:
    code, _, err = _run(["lint", str(tmp_path / "nope.yaml")], capsys)
    assert code == 2
    assert "nope.yaml: no such file" in err and "Traceback" not in err


def test_unparsable_file_is_a_finding_not_exit_2(tmp_path: Path, capsys) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("train: [\n")
    code, out, _ = _run(["lint", str(bad)], capsys)
    assert code == 1
    assert f"{bad}:1:9: SC001" in out


def test_json_output_and_output_file(tmp_path: Path, capsys) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("a: 1\na: 2\n")
    code, out, _ = _run(["lint", str(bad), "--format", "json", "--select", "SC001"], capsys)
    assert code == 1
    (item,) = json.loads(out)
    assert (item["code"], item["line"], item["column"], item["file"]) == ("SC001", 2, 1, str(bad))
    report = tmp_path / "out" / "report.json"
    report.parent.mkdir()
    code, out, _ = _run(["lint", str(bad), "--format", "json", "--output", str(report)], capsys)
    assert code == 1 and out == ""
    assert json.loads(report.read_text())[0]["code"] == "SC001"


def test_strict_turns_warnings_into_exit_1(warn_rule, tmp_path: Path, capsys) -> None:
    cfg = tmp_path / "w.yaml"
    cfg.write_text("train:\n  warn_me: 1\n")
    assert _run(["lint", str(cfg), "--select", "ZZ950"], capsys)[0] == 0
    assert _run(["lint", str(cfg), "--select", "ZZ950", "--strict"], capsys)[0] == 1


def test_config_files_without_paths_lint_one_merged_experiment(warn_rule, tmp_path: Path, capsys) -> None:
    base = tmp_path / "base.yaml"
    base.write_text("train:\n  micro_batch_size: 1\n")
    over = tmp_path / "over.yaml"
    over.write_text("train:\n  warn_me: 1\n")
    code, out, _ = _run(
        ["lint", "-c", str(base), "-c", str(over), "--select", "ZZ950", "--format", "json"], capsys
    )
    assert code == 0
    (item,) = json.loads(out)
    assert item["file"] == str(over) and item["line"] == 2
    code, out, _ = _run(["lint", "-c", str(base), "-o", "train.warn_me=2", "--select", "ZZ950"], capsys)
    assert "train.warn_me=2 (command line): ZZ950" in out


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        (["--select", "NOPE"], "unknown rule code or prefix 'NOPE'"),
        (["-o", "novalue"], "expected KEY=VALUE"),
        (["--fix", "--diff"], "exclusive"),
        (["-c", "missing.yaml"], "no such file"),
    ],
)
def test_bad_arguments_exit_2_with_one_line(tiny_recipe: Path, extra: list[str], words: str, capsys) -> None:
    code, _, err = _run(["lint", str(tiny_recipe), *extra], capsys)
    assert code == 2
    assert words in err and err.count("\n") == 1


def test_bad_settings_exit_2(tmp_path: Path, capsys) -> None:
    (tmp_path / "pyproject.toml").write_text('[tool.packcfg]\nprofile = "ancient"\n')
    cfg = tmp_path / "x.yaml"
    cfg.write_text("a: 1\n")
    code, _, err = _run(["lint", str(cfg)], capsys)
    assert code == 2 and "profile must be one of" in err and "pyproject.toml" in err


def test_bad_pack_metadata_exit_2(tiny_recipe: Path, tmp_path: Path, capsys) -> None:
    meta = tmp_path / "meta.json"
    meta.write_text("[1, 2]")
    code, _, err = _run(["lint", str(tiny_recipe), "--pack-metadata", str(meta)], capsys)
    assert code == 2 and "list of objects" in err


def test_explain_prints_every_part(capsys) -> None:
    code, out, _ = _run(["explain", "sc001"], capsys)
    assert code == 0
    for part in ("SC001 (error)", "What it checks:", "Why:", "Fails:", "Passes:", "Source:"):
        assert part in out


def test_explain_unknown_code_exits_2(capsys) -> None:
    code, out, err = _run(["explain", "ZZ000"], capsys)
    assert code == 2 and out == "" and "packcfg rules" in err


def test_rules_table_and_json(capsys) -> None:
    code, out, _ = _run(["rules"], capsys)
    assert code == 0 and out.splitlines()[0].split() == ["code", "severity", "fix", "title"]
    assert any(line.startswith("SC001") for line in out.splitlines())
    code, out, _ = _run(["rules", "--format", "json"], capsys)
    rows = json.loads(out)
    assert {"code", "severity", "fixable", "title"} <= set(rows[0])
    assert [r["code"] for r in rows] == sorted(r["code"] for r in rows)


def test_schema_prints_json_schema(capsys) -> None:
    pytest.importorskip("packcfg.core.schema")
    code, out, _ = _run(["schema"], capsys)
    assert code == 0
    assert isinstance(json.loads(out), dict)


def test_module_entry_point_runs(tiny_recipe: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "packcfg", "lint", str(tiny_recipe), "--format", "json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == []
