"""Rule behaviour beyond the docs examples: profiles, legacy spellings in fixes, unknown inputs stay quiet."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from packcfg.lint.engine import lint_text
from packcfg.lint.rules import all_rules
from packcfg.lint.rules._examples import BASE, after, edit
from packcfg.lint.rules.cp import CP2

RULES = all_rules()


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


LAUNCHED = BASE + "launch:\n  nodes: 1\n  gpus_per_node: 8\n"


def test_pl602_checks_evaluation_sizes_with_training_fallbacks() -> None:
    # eval micro-batch 3 x DP 8 = 24 does not divide the (inherited) global batch of 128
    text = LAUNCHED + "validation:\n  eval_micro_batch_size: 3\n"
    (d,) = found(text, "PL602")
    assert "evaluation global batch size 128" in d.message
    assert d.line == text.splitlines().index("  eval_micro_batch_size: 3") + 1
    assert found(LAUNCHED + "validation:\n  eval_global_batch_size: 64\n", "PL602") == []


def test_cg505_reads_the_in_batch_padding_multiple() -> None:
    text = (
        "recipe:\n  family: qwen3_moe\n  mode: sft\n"
        "model:\n  _target_: m.Qwen3MoEModelProvider30B_A3B\n  seq_length: 4096\n  calculate_per_token_loss: true\n"
        "  cuda_graph_impl: transformer_engine\n  cuda_graph_scope:\n  - moe_router\n"
        "dataset:\n  _target_: m.FinetuningDatasetConfig\n  seq_length: 4096\n  enable_in_batch_packing: true\n"
        "  in_batch_packing_pad_to_multiple_of: 8\n"
        "train:\n  micro_batch_size: 2\n  global_batch_size: 32\n"
    )
    (d,) = found(text, "CG505")
    assert "in_batch_packing_pad_to_multiple_of 8" in d.message


def test_ds704_checks_existence_only_with_check_paths(tmp_path) -> None:
    from packcfg.lint.engine import lint_file

    text = edit(
        (
            "    packed_sequence_size: 4096\n",
            "    packed_sequence_size: 4096\n    packed_train_data_path: packed/train.parquet\n"
            "    packed_val_data_path: packed/val-*.parquet\n",
        )
    )
    config = tmp_path / "exp.yaml"
    config.write_text(text)
    assert [d.code for d in lint_file(config)] == []
    missing = [d for d in lint_file(config, check_paths=True) if d.code == "DS704"]
    assert len(missing) == 2 and all("does not exist" in d.message for d in missing)
    (tmp_path / "packed").mkdir()
    (tmp_path / "packed" / "train.parquet").write_bytes(b"")
    (tmp_path / "packed" / "val-0.parquet").write_bytes(b"")
    assert [d.code for d in lint_file(config, check_paths=True)] == []


# Mutating the rules' own examples with hostile values must never crash a rule (an internal error).
_HOSTILE = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-3, max_value=9),
    st.sampled_from(
        [10**30, 1.5, float("nan"), "x", "a2a+p2p", "local", "full_iteration", "attn", [], [1], {}]
    ),
    st.lists(st.sampled_from(["attn", "moe_router", "full", 3]), max_size=3),
    st.dictionaries(
        st.sampled_from(["packed_sequence_size", "pad_seq_to_mult", "_target_"]), st.integers(), max_size=2
    ),
)
_EXAMPLES = [
    t
    for code, r in sorted(RULES.items())
    if code not in ("SC001", "SC004")
    for t in (r.docs.failing, r.docs.passing)
]


@settings(deadline=None, max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(_EXAMPLES), st.lists(st.tuples(st.integers(0, 200), _HOSTILE), min_size=1, max_size=6))
def test_no_rule_crashes_on_mutated_examples(example: str, mutations: list) -> None:
    import yaml

    from packcfg.core.config import merge_documents
    from packcfg.core.yamlsource import load_text
    from packcfg.lint.engine import lint_located

    config = yaml.safe_load(example)
    slots = [(section, key) for section, body in config.items() if isinstance(body, dict) for key in body]
    for index, value in mutations:
        section, key = slots[index % len(slots)]
        if isinstance(config.get(section), dict):
            config[section][key] = value
    crashes: list[str] = []
    lint_located(
        merge_documents([load_text(yaml.safe_dump(config), "m.yaml")], []), on_internal_error=crashes.append
    )
    assert crashes == []
