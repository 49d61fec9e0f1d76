"""Lint knows the target Megatron Bridge release (issue 21, item 4): where it comes from, in which order, and
what the rules do with it beyond their docs examples (tests/lint/test_rule_examples.py runs those)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from packcfg.cli import build_parser, main
from packcfg.core.bridge_version import (
    LEGACY_SPECS_CLASS,
    SPECS_CLASS,
    parse_release,
    target_of,
)
from packcfg.core.config import load_config
from packcfg.core.normalize import normalize
from packcfg.lint.engine import lint_file, lint_text
from packcfg.lint.facts import derive
from packcfg.lint.rules._examples import BASE, bridge_target, edit

LEGACY = edit(
    (
        "  enable_offline_packing: true\n  offline_packing_specs:\n    packed_sequence_size: 4096\n",
        f"  packed_sequence_specs:\n    _target_: {LEGACY_SPECS_CLASS}\n    packed_sequence_size: 4096\n",
    )
)


@pytest.mark.parametrize(
    ("text", "release", "label"),
    [
        ("0.3.1", (0, 3), "0.3.1"),
        ("v0.6.2", (0, 6), "0.6.2"),
        ("0.6", (0, 6), "0.6"),
        (0.6, (0, 6), "0.6"),  # `version: 0.6` in YAML is a float
        ("0.6.0rc1", (0, 6), "0.6.0rc1"),
        ("head", (10**6, 0), "head"),
        ("main", (10**6, 0), "head"),
    ],
)
def test_versions_parse(text, release, label) -> None:
    assert parse_release(text) == (release, label)


@pytest.mark.parametrize("text", ["", "banana", "0", "0.x", True, None, ["0.3.1"]])
def test_non_versions_do_not_parse(text) -> None:
    assert parse_release(text) is None


def _target(config: dict, **kw):
    return target_of(config, **kw)


def test_order_launch_version_then_engine_default_then_spelling() -> None:
    legacy = {"dataset": {"packed_sequence_specs": {"packed_sequence_size": 8}}}
    new = {"dataset": {"hf_dataset": {"path": "x"}, "packed_sequence_specs": {"packed_sequence_size": 8}}}
    named = {**legacy, "launch": {"bridge": {"version": "0.6.2"}}}
    engine = {**new, "launch": {"engine": "bridge"}}
    assert _target(named).label == "0.6.2" and _target(named).explicit
    assert _target(named, from_command_line=True).source == "--bridge-version"
    # engine: bridge without a version is the launcher's default, over the spelling
    assert _target(engine).label == "0.3.1" and _target(engine).reads_current_spelling is False
    # a 0.6-only field wins over the old spelling beside it (an older Bridge cannot read the file anyway)
    assert _target(new).reads_current_spelling is True and not _target(new).explicit
    assert _target(legacy).reads_current_spelling is False and not _target(legacy).explicit
    assert _target(legacy).reads_parquet is None  # 0.3 (npy only) or 0.4/0.5 (Parquet): unknown
    assert not _target({"dataset": {"seq_length": 8}}).known
    # a version that is not one falls through to the spelling
    assert _target({**legacy, "launch": {"bridge": {"version": "latest"}}}).label == "< 0.6"


def test_the_specs_class_is_evidence_too() -> None:
    config = {"dataset": {"packed_sequence_specs": {"_target_": SPECS_CLASS, "packed_sequence_size": 8}}}
    assert _target(config).reads_current_spelling is True


def test_a_base_recipes_spelling_does_not_count(tmp_path: Path) -> None:
    """packcfg's base recipes are 0.3.1 dumps (packed_sequence_specs): only the user's keys decide."""
    path = tmp_path / "o.yaml"
    path.write_text("train:\n  micro_batch_size: 1\n")
    findings = lint_file(path, overrides=["++recipe.base=qwen25_500m_sft_config"])
    assert not [d for d in findings if d.code.startswith("DP")]


def test_flag_is_the_launch_override_on_every_command_that_lints() -> None:
    for command in ("lint", "train", "render", "launch"):
        parser = build_parser(command)
        words = [command, "x.yaml", "--bridge-version", "0.6.2"]
        args = parser.parse_args(words if command != "lint" else ["lint", "--bridge-version", "0.6.2"])
        assert "++launch.bridge.version=0.6.2" in args.overrides, command


def test_a_bad_flag_value_is_one_line_and_exit_2(capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["lint", "--bridge-version", "banana", str(Path(__file__))])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "--bridge-version 'banana': expected a Megatron Bridge release" in err
    assert "Traceback" not in err


def test_the_flag_does_not_invent_a_world_size(tmp_path: Path) -> None:
    """`--bridge-version` makes a launch section; one that only names the Bridge is no job layout."""
    path = tmp_path / "e.yaml"
    path.write_text(BASE.replace("global_batch_size: 128", "global_batch_size: 7"))
    config = load_config([path], ["++launch.bridge.version=0.6.2"])
    assert derive(normalize(config).config).world is None
    assert not [d for d in lint_file(path, overrides=["++launch.bridge.version=0.6.2"]) if d.code == "PL602"]
    with_layout = ["++launch.bridge.version=0.6.2", "++launch.nodes=1", "++launch.gpus_per_node=2"]
    assert [d for d in lint_file(path, overrides=with_layout) if d.code == "PL602"]


def test_old_spelling_with_size_minus_one_is_packing_off_for_every_rule() -> None:
    """Bridge < 0.6: packed_sequence_size <= 0 is no packing (v0.3.1 packed_sequence.py:209-213), so MBS 4 is
    fine there: no PK110, PK103 or PK102, and the facts say no packing."""
    text = edit(("    packed_sequence_size: 4096\n", "    packed_sequence_size: -1\n"), base=LEGACY)
    text = text.replace("  micro_batch_size: 1\n", "  micro_batch_size: 4\n")
    codes = {d.code for d in lint_text(text)}
    assert not codes & {"PK102", "PK103", "PK110", "DS705", "DS707"}, codes
    assert {d.code for d in lint_text(bridge_target(text, "0.3.1"))} == set()
    # the same with the size left out (Bridge's default, -1)
    no_size = text.replace("    packed_sequence_size: -1\n", "")
    assert not {d.code for d in lint_text(no_size)} & {"PK102", "PK103", "PK110"}
    # and a positive size still switches packing on in that spelling
    on = text.replace("packed_sequence_size: -1", "packed_sequence_size: 4096")
    assert "PK110" in {d.code for d in lint_text(on)}


def test_inferred_target_reports_info_without_a_fix_in_json(tmp_path: Path, capsys) -> None:
    path = tmp_path / "legacy.yaml"
    path.write_text(LEGACY)
    assert main(["lint", str(path), "--format", "json", "--strict"]) == 0  # info never fails --strict
    (found,) = [d for d in json.loads(capsys.readouterr().out) if d["code"] == "DP801"]
    assert found["severity"] == "info" and found["fix"] is None
    assert "--bridge-version" in found["hint"]


def test_dp801_fix_moves_the_specs_class_from_the_command_line_target(tmp_path: Path, capsys) -> None:
    path = tmp_path / "legacy.yaml"
    path.write_text(LEGACY)
    assert main(["lint", str(path), "--fix", "--bridge-version", "0.6.2"]) == 0
    text = path.read_text()
    assert f"  offline_packing_specs:\n    _target_: {SPECS_CLASS}\n    packed_sequence_size: 4096\n" in text
    assert LEGACY_SPECS_CLASS not in text and "enable_offline_packing: true" in text


def test_dp801_keeps_a_custom_specs_class_and_says_so() -> None:
    text = bridge_target(LEGACY.replace(LEGACY_SPECS_CLASS, "my.pkg.Specs"), "0.6.2")
    (found,) = [d for d in lint_text(text) if d.code == "DP801"]
    assert found.fix is not None and all(e.path[-1] != "_target_" for e in found.fix.edits)
    assert "my.pkg.Specs" in (found.hint or "")


def test_both_spellings_for_a_bridge_that_reads_only_the_old_one() -> None:
    text = bridge_target(
        LEGACY.replace(
            "  dataset_kwargs:\n",
            "  offline_packing_specs:\n    packed_sequence_size: 4096\n  dataset_kwargs:\n",
        ),
        "0.3.1",
    )
    (found,) = [d for d in lint_text(text) if d.code == "DP801"]
    assert "reads only packed_sequence_specs" in found.message and found.fix is None


@pytest.mark.parametrize(("engine", "fires"), [(None, True), ("bridge", False), ("packcfg", False)])
def test_ds704_npy_only_for_bridge_031_unless_packcfg_runs_the_job(engine, fires) -> None:
    text = BASE.replace(
        "    packed_sequence_size: 4096\n",
        "    packed_sequence_size: 4096\n    packed_val_data_path: v/val.parquet\n",
    )
    text = bridge_target(text, "0.3.1")
    if engine:
        text += f"  engine: {engine}\n"
    found = [d for d in lint_text(text) if d.code == "DS704"]
    assert bool(found) == fires
    if fires:
        assert (
            "Bridge 0.3.1 (launch.bridge.version) reads packed data only as a .npy file" in found[0].message
        )


def test_pk103_names_the_031_meaning_of_a_non_positive_size() -> None:
    text = bridge_target(
        edit(("    packed_sequence_size: 4096\n", "    packed_sequence_size: -1\n")), "0.3.1"
    )
    (found,) = [d for d in lint_text(text) if d.code == "PK103"]
    assert "reads it as packing off and would train unpacked" in found.message
    (current,) = [
        d for d in lint_text(bridge_target(text.rsplit("launch:", 1)[0], "0.6.2")) if d.code == "PK103"
    ]
    assert "train unpacked" not in current.message


def test_cuda_graph_modules_and_scope_are_joined_as_bridge_reads_them() -> None:
    """Bridge 0.6's cuda_graph_module_names joins both lists and drops `full` (found by the 0.6 oracle: a 0.6
    recipe dump carries `cuda_graph_modules: full`, and a user's `cuda_graph_scope: [moe_router]` beside it
    captures the router only, not attention)."""
    graphs = "  cuda_graph_impl: transformer_engine\n  cuda_graph_modules: full\n"
    base = BASE.replace("  calculate_per_token_loss: true\n", "  calculate_per_token_loss: true\n" + graphs)
    assert "CG503" in {d.code for d in lint_text(base)}  # `full` alone: the whole layer, attention included
    router = base.replace(graphs, graphs + "  cuda_graph_scope:\n  - moe_router\n")
    assert "CG503" not in {d.code for d in lint_text(router)}
    attn = base.replace(graphs, graphs + "  cuda_graph_scope:\n  - attn\n")
    assert "CG503" in {d.code for d in lint_text(attn)}
