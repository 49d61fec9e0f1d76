"""Reporters: text, json, github, junit (sarif has its own test against the schema)."""

from __future__ import annotations

import json
from xml.etree import ElementTree as ET

import pytest

from packcfg.core.diagnostics import Diagnostic, Edit, Fix, Severity
from packcfg.lint.reporters import FORMATS, get_reporter, summary
from packcfg.lint.reporters.github import escape_data, escape_property

DIAGS = [
    Diagnostic(
        "PK110",
        Severity.ERROR,
        "offline packing needs MBS 1, got 4",
        "r/a.yaml",
        12,
        3,
        fix=Fix("set MBS 1, GBS 16", (Edit("set", ("train", "micro_batch_size"), 1),)),
        title="offline packing needs MBS 1",
        path="train.micro_batch_size",
    ),
    Diagnostic(
        "PK150",
        Severity.WARNING,
        "apply_rope_fusion: false, 50%: slow",
        "r/a,b.yaml",
        3,
        1,
        hint="set model.apply_rope_fusion: true",
        title="rope, fused",
    ),
    Diagnostic("MF400", Severity.INFO, "model family unknown\nset recipe.family", "r/c.yaml", 1, 1),
]
FILES = ["r/a.yaml", "r/a,b.yaml", "r/c.yaml", "r/clean.yaml"]


def test_text_lines_fix_hint_and_summary() -> None:
    out = get_reporter("text")(DIAGS, FILES)
    lines = out.splitlines()
    assert lines[0] == "r/a.yaml:12:3: PK110 offline packing needs MBS 1, got 4"
    assert lines[1] == "    fix: set MBS 1, GBS 16"
    assert lines[2] == "r/a,b.yaml:3:1: PK150 apply_rope_fusion: false, 50%: slow [warning]"
    assert lines[3] == "    hint: set model.apply_rope_fusion: true"
    assert lines[-1] == "1 error, 1 warning, 1 info in 4 files"
    assert "\033[" not in out


def test_text_colour_only_when_asked() -> None:
    assert "\033[31m" in get_reporter("text")(DIAGS, FILES, color=True)


def test_summary_counts() -> None:
    assert summary([], ["a"]) == "0 errors, 0 warnings in 1 file"
    assert summary(DIAGS[:1] * 2, ["a", "b"]) == "2 errors, 0 warnings in 2 files"


def test_json_is_one_array_with_the_contract_fields() -> None:
    data = json.loads(get_reporter("json")(DIAGS, FILES))
    assert isinstance(data, list) and len(data) == 3
    first = data[0]
    for key in ("code", "severity", "message", "file", "line", "column", "fix"):
        assert key in first
    assert first["fix"] == {
        "description": "set MBS 1, GBS 16",
        "edits": [{"action": "set", "path": "train.micro_batch_size", "value": 1}],
    }
    assert data[1]["fix"] is None and data[1]["severity"] == "warning"
    assert json.loads(get_reporter("json")([], FILES)) == []


def test_github_annotations_escape_properties_and_data() -> None:
    lines = get_reporter("github")(DIAGS, FILES).splitlines()
    assert lines[0].startswith(
        "::error file=r/a.yaml,line=12,col=3,title=PK110 offline packing needs MBS 1::"
    )
    assert "file=r/a%2Cb.yaml" in lines[1] and lines[1].startswith("::warning ")
    assert "title=PK150 rope%2C fused" in lines[1]
    assert "50%25" in lines[1] and "%0Ahint: set model.apply_rope_fusion: true" in lines[1]
    assert lines[2].startswith("::notice ") and "unknown%0Aset recipe.family" in lines[2]
    assert len(lines) == 3  # one line per annotation: newlines are escaped


def test_github_escaping_rules() -> None:
    assert escape_data("a%b\r\nc") == "a%25b%0D%0Ac"
    assert escape_property("a:b,c%") == "a%3Ab%2Cc%25"


def test_junit_is_valid_xml_one_suite_per_file() -> None:
    bad = Diagnostic("SC001", Severity.ERROR, "invalid character \x07 here", "r/c.yaml", 2, 1)
    root = ET.fromstring(get_reporter("junit")([*DIAGS, bad], FILES))
    suites = root.findall("testsuite")
    assert [s.get("name") for s in suites] == FILES
    a = suites[0]
    assert a.get("failures") == "1"
    case = a.find("testcase")
    assert case is not None and case.get("name", "").startswith("PK110")
    assert case.find("failure") is not None
    clean = suites[3]
    assert clean.get("tests") == "1" and clean.get("failures") == "0"
    assert clean.find("testcase/failure") is None
    c = suites[2]
    assert c.find("testcase/skipped") is not None  # info is advice, not a failure
    assert root.get("failures") == "3"


def test_unknown_format() -> None:
    with pytest.raises(ValueError, match="unknown output format"):
        get_reporter("xml")
    assert FORMATS == ("text", "json", "sarif", "github", "junit")


# ---- one config, five different violations, every output format -------------------------------------

FIVE = {
    # code: (how the tiny recipe is changed to trigger it)
    "PK110": ("  micro_batch_size: 1\n", "  micro_batch_size: 4\n"),  # offline packing with MBS 4
    "LS301": (
        "  calculate_per_token_loss: true\n",
        "  calculate_per_token_loss: false\n",
    ),  # CP 2, no per-token
    "LS302": ("  average_in_collective: false\n", "  average_in_collective: true\n"),
    "DS701": ("  seq_length: 512\n  seed: 1234\n", "  seq_length: 1024\n  seed: 1234\n"),  # model 512 != 1024
    "PL603": ("  sequence_parallel: false\n", "  sequence_parallel: true\n"),  # SP with TP 1
}


@pytest.fixture
def five_violations(tiny_recipe, tmp_path):
    text = tiny_recipe.read_text().replace("  context_parallel_size: 1\n", "  context_parallel_size: 2\n")
    for old, new in FIVE.values():
        assert old in text
        text = text.replace(old, new, 1)
    path = tmp_path / "five.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("fmt", FORMATS)
def test_five_violations_reported_in_one_run_in_every_format(five_violations, fmt, capsys) -> None:
    from packcfg.cli import main

    assert main(["lint", str(five_violations), "--format", fmt]) == 1
    out = capsys.readouterr().out
    if fmt == "json":
        found = {d["code"] for d in json.loads(out)}
    elif fmt == "sarif":
        found = {r["ruleId"] for r in json.loads(out)["runs"][0]["results"]}
    elif fmt == "junit":
        found = {case.get("name", "").split()[0] for case in ET.fromstring(out).iter("testcase")}
    elif fmt == "github":
        found = {line.split("title=")[1].split()[0] for line in out.splitlines()}
    else:
        found = {line.split()[1] for line in out.splitlines() if line.startswith(str(five_violations))}
    assert set(FIVE) <= found, found
