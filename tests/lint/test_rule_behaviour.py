"""Rule behaviour beyond the docs examples: profiles, legacy spellings in fixes, unknown inputs stay quiet."""

from __future__ import annotations

from packcfg.lint.engine import lint_text
from packcfg.lint.rules._examples import BASE, after, edit
from packcfg.lint.rules.cp import CP2


def found(text: str, code: str, profile: str = "current"):
    return [d for d in lint_text(text, profile=profile) if d.code == code]


MTP = after("  calculate_per_token_loss: true", "  mtp_num_layers: 1\n")


def test_mf410_is_a_warning_now_and_an_error_under_legacy() -> None:
    (current,) = found(MTP, "MF410")
    (legacy,) = found(MTP, "MF410", profile="legacy")
    assert (current.severity.value, legacy.severity.value) == ("warning", "error")
    assert "documented as unsupported" in current.message


def test_mf410_names_the_thd_cp_leak_with_context_parallel() -> None:
    text = after("  calculate_per_token_loss: true", "  mtp_num_layers: 1\n", base=CP2)
    (d,) = found(text, "MF410")
    assert "PR 4494" in d.message and "CP 2" in d.message


def test_cp203_uses_the_profile_alignment_multiple() -> None:
    text = after(
        "  context_parallel_size: 2",
        "  tensor_model_parallel_size: 2\n  sequence_parallel: true\n",
        base=edit(
            ("    packed_sequence_size: 4096\n", "    packed_sequence_size: 4096\n    pad_seq_to_mult: 4\n"),
            base=CP2,
        ),
    )
    assert found(text, "CP203") == []  # current: M = lcm(4, 4) = 4
    (legacy,) = found(text, "CP203", profile="legacy")  # legacy: M = 2*CP*TP = 8
    assert "M = 8" in legacy.message
    assert [e.value for e in legacy.fix.edits] == [8]


def test_fix_edits_target_the_legacy_spelling_where_written() -> None:
    text = edit(
        ("  enable_offline_packing: true\n  offline_packing_specs:\n", "  packed_sequence_specs:\n"),
        ("  micro_batch_size: 1\n", "  micro_batch_size: 2\n"),
    )
    (d,) = found(text, "PK110")
    paths = {".".join(e.path) for e in d.fix.edits}
    assert "dataset.packed_sequence_specs.packed_sequence_size" in paths
    # the diagnostic points at train.micro_batch_size as written
    assert d.line == text.splitlines().index("  micro_batch_size: 2") + 1


def test_rules_with_unknown_inputs_stay_quiet() -> None:
    # no launch section: world size unknown, so PL601/PL602 cannot fire whatever the batch sizes
    text = edit(("  global_batch_size: 128\n", "  global_batch_size: 3\n"))
    assert found(text, "PL602") == []
    # a wrong-typed CP is SC002 only: no CP rule guesses at it
    bad_cp = after("  calculate_per_token_loss: true", "  context_parallel_size: two\n")
    codes = {d.code for d in lint_text(bad_cp)}
    assert "SC002" in codes and not codes & {"CP201", "CP203", "LS301", "LS304"}


def test_pretraining_with_cp_needs_no_fine_tuning_loss_settings() -> None:
    text = (
        "model:\n  seq_length: 4096\n  context_parallel_size: 2\n  cross_entropy_loss_fusion: false\n"
        "dataset:\n  _target_: megatron.bridge.training.config.GPTDatasetConfig\n  seq_length: 4096\n"
        "ddp:\n  average_in_collective: true\n"
    )
    assert lint_text(text) == []


def test_base_example_is_clean_in_both_profiles() -> None:
    assert lint_text(BASE) == [] and lint_text(BASE, profile="legacy") == []
