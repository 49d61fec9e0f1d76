"""SARIF 2.1.0 output, validated against the schema in tests/lint/data.

The official OASIS schema could not be fetched offline; `sarif-schema-2.1.0-subset.json` is a hand-written,
faithful subset of it (see its `$comment`): every object packcfg emits, with the official property names,
types, required fields, enums and `additionalProperties: false`.
"""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from packcfg.core.diagnostics import Diagnostic, Edit, Fix, Severity
from packcfg.lint.engine import rules
from packcfg.lint.reporters import get_reporter

SCHEMA = json.loads((Path(__file__).parent / "data" / "sarif-schema-2.1.0-subset.json").read_text())


def _validate(log: dict) -> None:
    jsonschema.validate(log, SCHEMA, format_checker=jsonschema.Draft7Validator.FORMAT_CHECKER)


def test_schema_subset_is_a_valid_draft7_schema() -> None:
    jsonschema.Draft7Validator.check_schema(SCHEMA)
    with pytest.raises(jsonschema.ValidationError):
        _validate(
            {"version": "2.1.0", "runs": [{"tool": {"driver": {"name": "x"}}, "results": [{"ruleId": "A"}]}]}
        )


def test_sarif_log_is_valid_and_complete(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    diags = [
        Diagnostic("SC001", Severity.ERROR, "bad", str(tmp_path / "recipes" / "a.yaml"), 3, 5, title="t"),
        Diagnostic(
            "SC004",
            Severity.WARNING,
            "w",
            "recipes/b.yaml",
            1,
            1,
            hint="h",
            path="a.b",
            fix=Fix("d", (Edit("set", ("a", "b"), 1),)),
        ),
        Diagnostic("SC001", Severity.INFO, "i", "train.micro_batch_size=4 (command line)", 1, 1),
    ]
    log = json.loads(get_reporter("sarif")(diags, ["recipes/a.yaml", "recipes/b.yaml"]))
    _validate(log)
    run = log["runs"][0]
    driver = run["tool"]["driver"]
    assert driver["name"] == "packcfg"
    ids = [r["id"] for r in driver["rules"]]
    assert ids == sorted(rules())
    for r in driver["rules"]:
        assert r["fullDescription"]["text"] and r["helpUri"].startswith("https://")
    first, second, third = run["results"]
    assert first["ruleId"] == "SC001" and first["level"] == "error"
    loc = first["locations"][0]["physicalLocation"]
    assert loc["artifactLocation"]["uri"] == "recipes/a.yaml"  # relative to the CWD (repository root in CI)
    assert loc["region"] == {"startLine": 3, "startColumn": 5}
    assert ids[first["ruleIndex"]] == "SC001"
    assert second["level"] == "warning" and second["properties"]["fix"]["edits"][0]["path"] == "a.b"
    assert third["level"] == "note" and "locations" not in third
    assert third["message"]["text"] == "i (set on the command line: train.micro_batch_size=4)"


def test_sarif_of_a_real_lint_run_is_valid(tmp_path: Path, monkeypatch) -> None:
    from packcfg.lint.engine import lint_paths

    monkeypatch.chdir(tmp_path)
    (tmp_path / "bad.yaml").write_text("a: 1\na: 2\n")
    (tmp_path / "tab.yaml").write_text("a:\n\tb: 1\n")
    run = lint_paths(["."])
    log = json.loads(get_reporter("sarif")(run.diagnostics, run.files))
    _validate(log)
    uris = {
        r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] for r in log["runs"][0]["results"]
    }
    assert uris == {"bad.yaml", "tab.yaml"}
