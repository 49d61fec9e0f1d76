"""The lint command's user surface: ruff-like conveniences, the JSON schema version, the pre-commit mode,
and the hardening of issue 10 (empty --select, unreadable folders, escaped output, --output over an input)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import yaml

from packcfg.cli import main

ROOT = Path(__file__).resolve().parents[2]
CASES = ROOT / "tests" / "cases"
FAILING = CASES / "PK110_offline_mbs4.yaml"  # one PK110 error
CLEAN = ROOT / "recipes" / "tiny_cpu_sft.yaml"

K8S = """\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: trainer
spec:
  replicas: 1
---
apiVersion: v1
kind: Service
metadata:
  name: trainer
"""

WORKFLOW = """\
name: ci
on: [push, pull_request]
jobs:
  test:
    runs-on: ubuntu-latest
    steps:
      - uses: actions/checkout@v4
      - run: python -m pytest
"""


def run(capsys: pytest.CaptureFixture[str], *argv: str | Path) -> tuple[int, str, str]:
    code = main(["lint", *map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err


# --- ruff-like conveniences ----------------------------------------------------------------------------------


def test_output_format_is_a_deprecated_alias_of_format(capsys) -> None:
    a = run(capsys, FAILING, "--format", "json")
    b = run(capsys, FAILING, "--output-format", "json")
    assert a[:2] == b[:2] and a[0] == 1 and a[2] == ""
    assert b[2] == "packcfg: warning: --output-format is deprecated, use --format (see CHANGELOG.md)\n"
    assert json.loads(b[1])[0]["code"] == "PK110"


def test_exit_zero_keeps_the_report_but_exits_0(capsys) -> None:
    code, out, _ = run(capsys, FAILING, "--exit-zero")
    assert code == 0 and "PK110" in out
    code, _, err = run(capsys, FAILING, "--exit-zero", "--strict")
    assert code == 0
    # could-not-run is still 2
    code, _, err = run(capsys, "/nonexistent/x.yaml", "--exit-zero")
    assert code == 2 and "no such file" in err


def test_statistics_counts_per_code(tmp_path: Path, capsys) -> None:
    shutil.copy(FAILING, tmp_path / "a.yaml")
    shutil.copy(FAILING, tmp_path / "b.yaml")
    shutil.copy(CASES / "PK150_unfused_rope.yaml", tmp_path / "c.yaml")
    code, out, _ = run(capsys, tmp_path, "--statistics")
    assert code == 1
    lines = out.splitlines()
    first = lines[0].split()
    assert first[:2] == ["2", "PK110"], out  # most frequent first
    assert "[*]" in lines[0]  # fixable
    assert any(line.split()[:2] == ["1", "PK150"] for line in lines), out
    assert "PK110 offline packing needs" not in out  # counts, not the findings
    assert lines[-1].endswith("in 3 files")

    code, out, _ = run(capsys, tmp_path, "--statistics", "--format", "json")
    rows = {r["code"]: r for r in json.loads(out)}
    assert rows["PK110"] == {
        "version": 1,
        "code": "PK110",
        "severity": "error",
        "title": rows["PK110"]["title"],
        "count": 2,
        "fixable": True,
    }


def test_statistics_refuses_formats_it_cannot_print(capsys) -> None:
    code, _, err = run(capsys, FAILING, "--statistics", "--format", "sarif")
    assert code == 2 and "--statistics" in err


def test_json_elements_carry_the_schema_version(capsys) -> None:
    _, out, _ = run(capsys, FAILING, "--format", "json")
    data = json.loads(out)
    assert isinstance(data, list) and data
    for element in data:
        assert element["version"] == 1
        assert {"code", "severity", "message", "file", "line", "column", "fix"} <= set(element)


# --- pre-commit: experiment configs only ---------------------------------------------------------------------


def test_experiments_only_skips_manifests_and_workflows_silently(tmp_path: Path, capsys) -> None:
    (tmp_path / "deploy.yaml").write_text(K8S)
    (tmp_path / "ci.yml").write_text(WORKFLOW)
    (tmp_path / "compose.yaml").write_text("services:\n  web:\n    image: nginx\n")
    code, out, err = run(capsys, "--experiments-only", *sorted(tmp_path.iterdir()))
    assert (code, out, err) == (0, "", "")


def test_experiments_only_still_lints_experiment_configs(tmp_path: Path, capsys) -> None:
    (tmp_path / "deploy.yaml").write_text(K8S)
    shutil.copy(FAILING, tmp_path / "exp.yaml")
    code, out, _ = run(capsys, "--experiments-only", tmp_path / "deploy.yaml", tmp_path / "exp.yaml")
    assert code == 1 and "PK110" in out and "deploy.yaml" not in out and "in 1 file" in out
    # a broken experiment config is still reported (it names Bridge sections)
    (tmp_path / "broken.yaml").write_text("model:\n  seq_length: [4096\ntrain:\n  micro_batch_size: 1\n")
    code, out, _ = run(capsys, "--experiments-only", tmp_path / "broken.yaml")
    assert code == 1 and "SC001" in out


def test_explicitly_named_file_keeps_reporting_without_the_flag(tmp_path: Path, capsys) -> None:
    (tmp_path / "deploy.yaml").write_text(K8S)
    code, out, _ = run(capsys, tmp_path / "deploy.yaml")
    assert code == 1 and "SC001" in out


def test_pre_commit_hook_uses_experiments_only() -> None:
    hooks = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())
    (hook,) = [h for h in hooks if h["id"] == "packcfg-lint"]
    assert "--experiments-only" in hook["entry"].split()


# --- issue 10: --select '' -----------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["", " , "])
def test_empty_select_is_exit_2_not_every_rule_off(value: str, capsys) -> None:
    code, out, err = run(capsys, FAILING, "--select", value)
    assert code == 2 and "no codes selected" in err and out == ""


def test_empty_select_in_settings_file_is_exit_2(tmp_path: Path, capsys) -> None:
    (tmp_path / "packcfg.toml").write_text("select = []\n")
    shutil.copy(FAILING, tmp_path / "exp.yaml")
    code, _, err = run(capsys, tmp_path / "exp.yaml")
    assert code == 2 and "no codes selected" in err


# --- issue 10: unreadable folders and files while walking ----------------------------------------------------


def test_unreadable_subfolder_is_exit_2_with_its_name(tmp_path: Path, monkeypatch, capsys) -> None:
    shutil.copy(CLEAN, tmp_path / "ok.yaml")
    locked = tmp_path / "locked"
    locked.mkdir()
    shutil.copy(FAILING, locked / "hidden_error.yaml")
    real_scandir = os.scandir

    def scandir(path="."):  # root ignores permission bits: simulate what chmod 000 does for a user
        if os.fspath(path) == os.fspath(locked):
            raise PermissionError(13, "Permission denied", os.fspath(path))
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", scandir)
    code, out, err = run(capsys, tmp_path)
    assert code == 2
    assert str(locked) in err and "cannot read folder" in err and "Permission denied" in err
    assert len(err.strip().splitlines()) == 1


def test_unreadable_file_in_a_folder_is_exit_2(tmp_path: Path, monkeypatch, capsys) -> None:
    from packcfg.core import config as core_config

    shutil.copy(CLEAN, tmp_path / "ok.yaml")
    shutil.copy(CLEAN, tmp_path / "secret.yaml")
    real = core_config.load_file

    def load_file(path, *a, **kw):
        if Path(path).name == "secret.yaml":
            raise PermissionError(13, "Permission denied", str(path))
        return real(path, *a, **kw)

    monkeypatch.setattr(core_config, "load_file", load_file)
    code, _, err = run(capsys, tmp_path)
    assert code == 2 and "secret.yaml" in err and "Traceback" not in err


# --- issue 10: nothing from a file name or value reaches the terminal raw -----------------------------------

EVIL = "evil\n::warning file=x.yaml,line=1::pwned\x1b[31m\u202e.yaml"


def test_text_output_escapes_control_characters_in_file_names(tmp_path: Path, capsys) -> None:
    target = tmp_path / EVIL
    shutil.copy(FAILING, target)
    code, out, _ = run(capsys, target)
    assert code == 1
    assert "\x1b" not in out and "\u202e" not in out
    assert not any(line.startswith("::") for line in out.splitlines()), out
    assert "\\n::warning" in out and "\\x1b[31m" in out
    # one finding = one line (plus its fix line) and the summary
    assert len(out.splitlines()) == 3


def test_github_output_cannot_start_a_second_workflow_command(tmp_path: Path, capsys) -> None:
    target = tmp_path / EVIL
    shutil.copy(FAILING, target)
    _, out, _ = run(capsys, target, "--format", "github")
    lines = out.splitlines()
    assert len(lines) == 1 and lines[0].startswith("::error ")
    assert "\x1b" not in out and "\u202e" not in out


def test_text_output_escapes_values_from_the_config(tmp_path: Path, capsys) -> None:
    target = tmp_path / "exp.yaml"
    target.write_text(
        FAILING.read_text().replace(
            "  micro_batch_size: 4\n", '  micro_batch_size: "4\\n::error::x\\u001b[2J"\n'
        )
    )
    _, out, _ = run(capsys, target)
    assert "\x1b" not in out and not any(line.startswith("::") for line in out.splitlines()), out


def test_errors_on_stderr_are_escaped_too(tmp_path: Path, capsys) -> None:
    code, _, err = run(capsys, tmp_path / "no\nsuch\x1b.yaml")
    assert code == 2 and "\x1b" not in err and len(err.strip().splitlines()) == 1


# --- issue 10: --output never replaces an input ----------------------------------------------------------


def test_output_over_the_linted_file_is_refused(tmp_path: Path, capsys) -> None:
    target = tmp_path / "a.yaml"
    shutil.copy(FAILING, target)
    before = target.read_bytes()
    code, out, err = run(capsys, target, "--output", target)
    assert code == 2 and "input" in err and str(target) in err
    assert target.read_bytes() == before


def test_output_over_an_input_found_in_a_folder_or_a_c_file_is_refused(tmp_path: Path, capsys) -> None:
    shutil.copy(FAILING, tmp_path / "a.yaml")
    over = tmp_path / "over.yaml"
    over.write_text("train:\n  global_batch_size: 128\n")
    before = over.read_bytes()
    assert run(capsys, tmp_path, "--output", tmp_path / "a.yaml")[0] == 2
    assert run(capsys, tmp_path / "a.yaml", "-c", over, "--output", over)[0] == 2
    assert over.read_bytes() == before
    # the same file through another name (a hard link) is the same input
    os.link(tmp_path / "a.yaml", tmp_path / "alias.txt")
    assert run(capsys, tmp_path / "a.yaml", "--output", tmp_path / "alias.txt")[0] == 2


def test_output_elsewhere_is_written(tmp_path: Path, capsys) -> None:
    shutil.copy(FAILING, tmp_path / "a.yaml")
    report = tmp_path / "report.json"
    code, out, _ = run(capsys, tmp_path / "a.yaml", "--format", "json", "--output", report)
    assert code == 1 and out == "" and json.loads(report.read_text())[0]["code"] == "PK110"


def test_output_over_a_file_skipped_by_experiments_only_is_refused(tmp_path: Path, capsys) -> None:
    manifest = tmp_path / "deploy.yaml"
    manifest.write_text(K8S)
    shutil.copy(FAILING, tmp_path / "exp.yaml")
    code, _, err = run(capsys, "--experiments-only", tmp_path, "--output", manifest)
    assert code == 2 and "input" in err
    assert manifest.read_text() == K8S


def test_experiments_only_does_not_hand_deep_nesting_to_the_yaml_parser(tmp_path: Path, capsys) -> None:
    """libyaml slows down quadratically with flow depth (minutes at 200,000 levels): decide on the top-level
    keys instead, and let the lint report the experiment's SC004."""
    import time

    deep = "[" * 200_000 + "]" * 200_000
    (tmp_path / "manifest.yaml").write_text(f"kind: {deep}\n")
    (tmp_path / "exp.yaml").write_text(f"model: {deep}\n")
    start = time.perf_counter()
    code, out, _ = run(capsys, "--experiments-only", tmp_path)
    assert time.perf_counter() - start < 10
    assert code == 1 and "SC004" in out and "exp.yaml" in out and "manifest.yaml" not in out
