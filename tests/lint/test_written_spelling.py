"""Findings name keys as the user wrote them (issue 24 item 4): a file that spells the specs section
`dataset.packed_sequence_specs` (Bridge < 0.6) reads `packed_sequence_specs` back in every message, hint, fix,
JSON/SARIF `path` and gate line, never the normalised `offline_packing_specs`; an override is labelled as typed.

The rules under test are found, not listed: every rule whose own failing example (or further firing example)
has a finding or a fix edit inside `dataset.offline_packing_specs`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from packcfg.cli import main
from packcfg.lint.engine import lint_text
from packcfg.lint.rules import all_rules

CURRENT, LEGACY = "offline_packing_specs", "packed_sequence_specs"
SPECS_PATH = f"dataset.{CURRENT}"


def _touches_specs(d) -> bool:
    paths = [d.path or ""] + ([e.path and ".".join(e.path) for e in d.fix.edits] if d.fix else [])
    return any(p.startswith(SPECS_PATH) for p in paths)


def _spec_rule_examples() -> dict[str, str]:
    found: dict[str, str] = {}
    for code, rule in sorted(all_rules().items()):
        for text in [rule.docs.failing, *(e.yaml for e in rule.docs.examples if e.fires)]:
            if f"  {CURRENT}:\n" not in text or "launch:\n  bridge:" in text:
                continue  # only the current spelling, with no target release named (the legacy file sets none)
            if any(d.code == code and _touches_specs(d) for d in lint_text(text)):
                found[code] = text
                break
    return found


EXAMPLES = _spec_rule_examples()
# Examples that mean something else under the old spelling: a packed_sequence_size <= 0 in packed_sequence_specs
# is "packing off" to Bridge < 0.6 (DP801 says so), so PK103 is shown a size that is no integer there instead.
OTHER_MEANING = {"PK103": ("    packed_sequence_size: 0\n", "    packed_sequence_size: null\n")}


def test_every_rule_that_names_a_specs_key_is_covered() -> None:
    """The discovery finds the rules a grep of the rule modules finds (spec_path / SPECS users)."""
    assert {"CP203", "CP204", "CG501", "CG503", "CG504", "DP803", "DS702", "DS703", "DS704", "DS705", "DS706",
            "PK103", "PK110"} <= set(EXAMPLES)  # fmt: skip


def _legacy(text: str) -> str:
    out = text.replace("  enable_offline_packing: true\n", "").replace(f"  {CURRENT}:\n", f"  {LEGACY}:\n")
    assert CURRENT not in out
    return out


def _lint(capsys, path: Path, fmt: str, *extra: str) -> str:
    main(["lint", str(path), "--format", fmt, *extra])
    return capsys.readouterr().out


@pytest.mark.parametrize("code", sorted(EXAMPLES))
def test_legacy_file_reads_its_own_spelling_back(code: str, tmp_path: Path, capsys) -> None:
    path = tmp_path / f"{code}_legacy.yaml"
    text = _legacy(EXAMPLES[code])
    if code in OTHER_MEANING:
        assert OTHER_MEANING[code][0] in text
        text = text.replace(*OTHER_MEANING[code])
    path.write_text(text)
    lines = path.read_text().splitlines()

    found = [d for d in json.loads(_lint(capsys, path, "json")) if d["code"] == code]
    assert found, f"{code} does not fire on the legacy spelling"
    for d in found:
        words = json.dumps([d["message"], d["hint"], d["fix"], d["path"]])
        assert CURRENT not in words, d
        if d["path"].startswith("dataset."):
            assert d["path"].startswith(f"dataset.{LEGACY}") or not d["path"].startswith(SPECS_PATH), d
        if d["path"].startswith(
            f"dataset.{LEGACY}."
        ):  # its file and line: the key as written (or its section)
            key = d["path"].rsplit(".", 1)[1]
            assert d["file"] == str(path), d
            assert lines[d["line"] - 1].strip().startswith((f"{key}:", f"{LEGACY}:")), d
    if any(d["path"].startswith(f"dataset.{LEGACY}") for d in found):
        assert any(LEGACY in d["message"] or d["path"].startswith(f"dataset.{LEGACY}") for d in found)

    out = _lint(capsys, path, "text").splitlines()
    text = [
        line
        for i, line in enumerate(out)
        if f" {code} " in line or (line.startswith("    ") and f" {code} " in out[i - 1])
    ]
    assert text and not any(CURRENT in line for line in text), text

    sarif = json.loads(_lint(capsys, path, "sarif"))
    results = [r for r in sarif["runs"][0]["results"] if r["ruleId"] == code]
    assert results
    for r in results:
        assert CURRENT not in json.dumps([r["message"], r.get("properties", {})]), r
        where = r.get("properties", {}).get("configPath", "")
        assert not where.startswith(SPECS_PATH), r


def test_cp203_and_dp803_name_packed_sequence_specs(tmp_path: Path, capsys) -> None:
    """The issue's own case: CP203's and DP803's texts and paths, and the gate line that blocks a render."""
    case = Path(__file__).parents[1] / "cases" / "CP203_pad_mult_sp.yaml"
    text = _legacy(case.read_text()).replace("training.parquet", "training.npy")
    path = tmp_path / "legacy.yaml"
    path.write_text(text)
    by_code = {d["code"]: d for d in json.loads(_lint(capsys, path, "json"))}
    assert by_code["CP203"]["message"].startswith(f"{LEGACY}.pad_seq_to_mult 4 is not a multiple of M = 8")
    assert by_code["CP203"]["path"] == f"dataset.{LEGACY}.pad_seq_to_mult"
    assert by_code["CP203"]["fix"]["edits"][0]["path"] == f"dataset.{LEGACY}.pad_seq_to_mult"
    assert by_code["DP803"]["message"].startswith(f"{LEGACY}.packed_train_data_path ")
    assert by_code["DP803"]["path"] == f"dataset.{LEGACY}.packed_train_data_path"

    code = main(["render", str(path), "--out", str(tmp_path / "bundle")])
    gate = [
        line for line in capsys.readouterr().out.splitlines() if "DP801" not in line and "rename" not in line
    ]
    assert code == 1 and any(f"CP203 {LEGACY}.pad_seq_to_mult 4" in line for line in gate), gate
    assert not any(CURRENT in line for line in gate), (
        gate
    )  # only DP801, about the spelling itself, names both


def test_positional_override_is_labelled_as_typed(tmp_path: Path, capsys) -> None:
    case = Path(__file__).parents[1] / "cases" / "PK110_offline_mbs2.yaml"
    for how in (["train.micro_batch_size=4"], ["-o", "train.micro_batch_size=4"], ["--set", "train.micro_batch_size=4"]):  # fmt: skip
        text = _lint(capsys, case, "text", *how)
        assert text.startswith("train.micro_batch_size=4 (command line): PK110 "), text
        assert "<-o" not in text
    [d] = [
        d for d in json.loads(_lint(capsys, case, "json", "train.micro_batch_size=4")) if d["code"] == "PK110"
    ]
    assert (d["file"], d["line"], d["column"]) == ("train.micro_batch_size=4 (command line)", 1, 1)
    [r] = [r for r in json.loads(_lint(capsys, case, "sarif", "++train.micro_batch_size=4"))["runs"][0]["results"]
           if r["ruleId"] == "PK110"]  # fmt: skip
    assert r["message"]["text"].endswith("(set on the command line: ++train.micro_batch_size=4)")
    assert "locations" not in r


def test_a_flag_that_stands_for_an_override_keeps_its_spelling() -> None:
    """`--recipe NAME` is `++recipe.base=NAME` to the loader, but its label is what the user typed."""
    from packcfg.core.cli_args import TypedOverride
    from packcfg.core.config import is_override_source, override_source, override_words

    label = override_source(TypedOverride("++launch.bridge.version=0.6.2", "--bridge-version 0.6.2"))
    assert label == "--bridge-version 0.6.2 (command line)"
    assert is_override_source(label) and override_words(label) == "--bridge-version 0.6.2"
    assert override_source("+train.x=1") == "+train.x=1 (command line)"


def test_schema_findings_name_the_written_section(tmp_path: Path, capsys) -> None:
    """SC003 (unknown key) and SC002 (wrong type) come from the schema, which reads the normalised config:
    their messages still say the file's spelling (the specs section, train.eval_micro_batch_size)."""
    case = Path(__file__).parents[1] / "cases" / "CP203_pad_mult_sp.yaml"
    text = _legacy(case.read_text()).replace(
        "    pad_seq_to_mult: 4\n", "    pad_seq_to_mult: 8\n    pad_cu_seqlen: true\n"
    )
    text = text.replace("  train_iters: 1500\n", "  train_iters: 1500\n  eval_micro_batch_size: two\n")
    path = tmp_path / "legacy.yaml"
    path.write_text(text)
    found = json.loads(_lint(capsys, path, "json"))
    [sc003] = [d for d in found if d["code"] == "SC003"]
    assert sc003["message"].startswith(f"unknown key dataset.{LEGACY}.pad_cu_seqlen in dataset.{LEGACY} ")
    assert sc003["path"] == f"dataset.{LEGACY}.pad_cu_seqlen"
    [sc002] = [d for d in found if d["code"] == "SC002"]
    assert "train.eval_micro_batch_size" in sc002["message"] and "validation." not in sc002["message"], sc002
    assert sc002["path"] == "train.eval_micro_batch_size"
