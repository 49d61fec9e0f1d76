"""The lint gate: errors refuse the launch with the lint diagnostics; `--allow CODE` lets exactly that
code through and is recorded (who, when) in the manifest; an allow of one code unblocks no other."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from packcfg.core.diagnostics import Severity
from packcfg.launch import service
from packcfg.lint.engine import lint_config

from .conftest import TINY, packcfg

# Packing specs present but offline packing switched off: a packing-rule error.
PACKING_OFF = "dataset.enable_offline_packing=false"
# A key packcfg's own launch section does not know: a schema error (another code).
UNKNOWN_KEY = "launch.no_such_key=1"


def error_codes(*overrides: str) -> set[str]:
    return {d.code for d in lint_config([TINY], list(overrides)) if d.severity == Severity.ERROR}


@pytest.fixture(scope="module")
def codes() -> tuple[str, str]:
    first, second = error_codes(PACKING_OFF), error_codes(UNKNOWN_KEY)
    assert len(first) == 1 and len(second) == 1 and first != second, (first, second)
    assert not error_codes(), "the tiny recipe itself must lint clean"
    return next(iter(first)), next(iter(second))


def test_violation_is_refused_with_the_diagnostics(tmp_path: Path, codes: tuple[str, str]) -> None:
    state = tmp_path / "state"
    out = packcfg("launch", str(TINY), "-o", PACKING_OFF, "--backend", "local", "--state-dir", str(state))
    assert out.returncode == 1
    # The lint text reporter's output: file:line:col: CODE message, and the summary line.
    assert "tiny_cpu_sft.yaml:" in out.stdout and f" {codes[0]} " in out.stdout
    assert "1 error" in out.stdout
    assert "refusing to launch" in out.stderr and "--allow" in out.stderr
    assert "Traceback" not in out.stderr
    assert not state.exists()  # nothing recorded, nothing rendered


def test_allow_proceeds_and_is_recorded(tmp_path: Path, codes: tuple[str, str]) -> None:
    bundle = tmp_path / "bundle"
    out = packcfg(
        "launch",
        str(TINY),
        "-o",
        PACKING_OFF,
        "--backend",
        "local",
        "--allow",
        codes[0],
        "--dry-run",
        "--bundle-dir",
        str(bundle),
        "--state-dir",
        str(tmp_path / "state"),
        env={"USER": "alice"},
    )
    assert out.returncode == 0, out.stderr
    assert "would run" in out.stdout
    manifest = json.loads((bundle / "manifest.json").read_text())
    (allowed,) = manifest["gate"]["allowed"]
    assert allowed["code"] == codes[0]
    assert allowed["by"] == "alice"
    assert allowed["at"] and allowed["at"].endswith("Z")
    assert len(allowed["findings"]) == 1 and "enable_offline_packing" in allowed["findings"][0]
    assert manifest["gate"]["lint"]["errors"] == 1


def test_allow_of_one_code_does_not_unblock_another(tmp_path: Path, codes: tuple[str, str]) -> None:
    out = packcfg(
        "launch",
        str(TINY),
        "-o",
        PACKING_OFF,
        "-o",
        UNKNOWN_KEY,
        "--backend",
        "local",
        "--allow",
        codes[0],
        "--dry-run",
        "--state-dir",
        str(tmp_path / "state"),
    )
    assert out.returncode == 1
    assert f"({codes[1]})" in out.stderr  # only the code still blocking is named
    assert f" {codes[1]} " in out.stdout and f" {codes[0]} " in out.stdout  # every finding shown
    with pytest.raises(service.GateRefused) as err:
        service.gate_and_render([TINY], [PACKING_OFF, UNKNOWN_KEY], allow=[codes[0]])
    assert {d.code for d in err.value.gate.blocking} == {codes[1]}
    # Both allowed: it proceeds, and both are recorded.
    bundle, gate = service.gate_and_render(
        [TINY], [PACKING_OFF, UNKNOWN_KEY], allow=[codes[0], codes[1].lower()]
    )
    assert sorted(a["code"] for a in bundle.manifest["gate"]["allowed"]) == sorted(codes)


def test_allow_without_a_finding_is_not_recorded(tmp_path: Path) -> None:
    directory, bundle, gate = service.render([TINY], tmp_path / "b", allow=["PK999"])
    assert gate.unused_allows == ["PK999"]
    assert bundle.manifest["gate"]["allowed"] == []


def test_render_is_gated_too(tmp_path: Path, codes: tuple[str, str]) -> None:
    out = packcfg("render", str(TINY), "--set", PACKING_OFF, "--out", str(tmp_path / "b"))
    assert out.returncode == 1 and f" {codes[0]} " in out.stdout
    out = packcfg(
        "render",
        str(TINY),
        "--set",
        PACKING_OFF,
        "--allow",
        codes[0],
        "--out",
        str(tmp_path / "b"),
        env={"SOURCE_DATE_EPOCH": "1700000000", "USER": "bob"},
    )
    assert out.returncode == 0, out.stderr
    (allowed,) = json.loads((tmp_path / "b" / "manifest.json").read_text())["gate"]["allowed"]
    assert (allowed["by"], allowed["at"]) == ("bob", "2023-11-14T22:13:20Z")
