"""Every file in tests/cases is a config that must fail: its `# expect: CODE line N` header lines name the
codes and the 1-based lines where `packcfg lint --strict --format json` must report them."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from packcfg.cli import main
from packcfg.lint.rules import all_rules

CASES = Path(__file__).resolve().parents[1] / "cases"
CASE_FILES = sorted(CASES.glob("*.yaml"))
EXPECT = re.compile(r"^#\s*expect:\s*([A-Z]{2}\d{3})\s+line\s+(\d+)\s*$")
ARGS = re.compile(r"^#\s*args:\s*(.+)$")  # extra CLI arguments; paths relative to tests/cases


def expectations(path: Path) -> list[tuple[str, int]]:
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.startswith("#"):
            break
        match = EXPECT.match(line)
        if match:
            out.append((match.group(1), int(match.group(2))))
    return out


def extra_args(path: Path) -> list[str]:
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.startswith("#"):
            break
        match = ARGS.match(line)
        if match:
            return [str(CASES / a) if (CASES / a).exists() else a for a in match.group(1).split()]
    return []


def lint_json(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, list[dict]]:
    code = main(["lint", "--strict", "--format", "json", *args])
    return code, json.loads(capsys.readouterr().out)


def test_every_rule_has_a_case() -> None:
    covered = {code for path in CASE_FILES for code, _ in expectations(path)}
    assert set(all_rules()) - covered == set()


@pytest.mark.parametrize("path", CASE_FILES, ids=lambda p: p.stem)
def test_case_reports_expected_code_at_line(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    expected = expectations(path)
    assert expected, f"{path.name}: no '# expect: CODE line N' header"
    assert path.stem.split("_", 1)[0] in {code for code, _ in expected}, "file name starts with its code"
    exit_code, diagnostics = lint_json(capsys, *extra_args(path), str(path))
    got = {(d["code"], d["line"]) for d in diagnostics}
    for code, line in expected:
        assert (code, line) in got, f"{code} expected at line {line}; got {sorted(got)}"
    info_only = all(all_rules()[code].severity.value == "info" for code, _ in expected)
    blocking = [d for d in diagnostics if d["severity"] != "info"]
    assert exit_code == (1 if blocking else 0)
    if not info_only:
        assert exit_code == 1


def test_pk110_gives_the_equivalent_config(capsys: pytest.CaptureFixture[str]) -> None:
    _, diagnostics = lint_json(capsys, str(CASES / "PK110_offline_mbs4.yaml"))
    (pk110,) = [d for d in diagnostics if d["code"] == "PK110"]
    assert "micro_batch_size 1" in pk110["message"]
    assert "global_batch_size 32" in pk110["message"]
    assert "packed_sequence_size 16384" in pk110["message"]
    edits = {e["path"]: e["value"] for e in pk110["fix"]["edits"]}
    assert edits == {
        "train.micro_batch_size": 1,
        "train.global_batch_size": 32,
        "dataset.offline_packing_specs.packed_sequence_size": 16384,
        # the fix finishes the job: seq_lengths that matched the pack size, and paths that name it
        "model.seq_length": 16384,
        "dataset.seq_length": 16384,
        "dataset.offline_packing_specs.packed_train_data_path": "/data/sft/squad/packed/16384/training.parquet",
        "dataset.offline_packing_specs.packed_metadata_path": "/data/sft/squad/packed/16384/metadata.json",
    }


def test_pk110_fix_writes_the_expected_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "PK110_offline_mbs4.yaml"
    shutil.copy(CASES / "PK110_offline_mbs4.yaml", target)
    main(["lint", "--fix", str(target)])
    capsys.readouterr()
    assert target.read_text(encoding="utf-8") == (CASES / "fixed" / "PK110_offline_mbs4.yaml").read_text(
        encoding="utf-8"
    )


def test_real_command_line_exit_code() -> None:
    """One case through a real `python -m packcfg` process (the others run in-process for speed)."""
    path = CASES / "CP203_pad_mult_sp.yaml"
    proc = subprocess.run(
        [sys.executable, "-m", "packcfg", "lint", "--strict", "--format", "json", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 1
    assert ("CP203", 35) in {(d["code"], d["line"]) for d in json.loads(proc.stdout)}
