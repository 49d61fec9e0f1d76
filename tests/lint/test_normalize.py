"""Legacy spellings map to current ones, remembering where each value was written; never raises."""

from __future__ import annotations

import copy

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from packcfg.core.normalize import normalize


def test_legacy_specs_become_offline_packing_specs_plus_flag() -> None:
    raw = {"dataset": {"packed_sequence_specs": {"packed_sequence_size": 4096}}}
    out = normalize(raw)
    assert out.config["dataset"] == {
        "offline_packing_specs": {"packed_sequence_size": 4096},
        "enable_offline_packing": True,
    }
    assert out.renamed == {("dataset", "offline_packing_specs"): ("dataset", "packed_sequence_specs")}


def test_null_legacy_specs_do_not_switch_packing_on() -> None:
    out = normalize({"dataset": {"packed_sequence_specs": None}})
    assert out.config["dataset"] == {"offline_packing_specs": None}


def test_explicit_flag_is_kept() -> None:
    out = normalize(
        {"dataset": {"packed_sequence_specs": {"packed_sequence_size": 8}, "enable_offline_packing": False}}
    )
    assert out.config["dataset"]["enable_offline_packing"] is False


def test_current_spelling_wins_and_legacy_key_stays() -> None:
    raw = {"dataset": {"packed_sequence_specs": {"a": 1}, "offline_packing_specs": {"b": 2}}}
    out = normalize(raw)
    assert out.config["dataset"]["offline_packing_specs"] == {"b": 2}
    assert out.config["dataset"]["packed_sequence_specs"] == {"a": 1}
    assert out.renamed == {}


def test_pack_sequences_in_batch_renamed() -> None:
    out = normalize({"dataset": {"pack_sequences_in_batch": True}})
    assert out.config["dataset"] == {"enable_in_batch_packing": True}
    assert out.renamed[("dataset", "enable_in_batch_packing")] == ("dataset", "pack_sequences_in_batch")


def test_train_eval_sizes_move_to_validation() -> None:
    out = normalize(
        {"train": {"micro_batch_size": 1, "eval_micro_batch_size": 2, "eval_global_batch_size": 8}}
    )
    assert out.config["train"] == {"micro_batch_size": 1}
    assert out.config["validation"] == {"eval_micro_batch_size": 2, "eval_global_batch_size": 8}
    assert out.renamed[("validation", "eval_micro_batch_size")] == ("train", "eval_micro_batch_size")


def test_validation_spelling_wins_over_train() -> None:
    out = normalize({"train": {"eval_iters": 5}, "validation": {"eval_iters": 7}})
    assert out.config["validation"]["eval_iters"] == 7
    assert out.config["train"]["eval_iters"] == 5


def test_input_is_never_mutated() -> None:
    raw = {"dataset": {"packed_sequence_specs": {"packed_sequence_size": 1}}, "train": {"eval_iters": 3}}
    before = copy.deepcopy(raw)
    out = normalize(raw)
    out.config["dataset"]["offline_packing_specs"]["packed_sequence_size"] = 99
    assert raw == before


def test_garbage_top_level() -> None:
    for raw in (None, 3, "text", [1, 2], {"dataset": 5, "train": [1], "validation": "x"}):
        normalize(raw)  # type: ignore[arg-type]


values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
    lambda children: (
        st.lists(children, max_size=3)
        | st.dictionaries(
            st.sampled_from(
                [
                    "dataset",
                    "train",
                    "validation",
                    "packed_sequence_specs",
                    "pack_sequences_in_batch",
                    "eval_iters",
                    "x",
                ]
            ),
            children,
            max_size=4,
        )
    ),
    max_leaves=12,
)


# no deadline: a loaded CI machine must not turn a slow example into a failure
@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.dictionaries(st.sampled_from(["dataset", "train", "validation", "model", 1]), values, max_size=4))
def test_normalize_is_total(raw: dict) -> None:
    before = repr(raw)
    normalize(raw)
    assert repr(raw) == before
