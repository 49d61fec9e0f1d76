"""The shape check: SC002 for wrong types / ranges / missing required fields, SC003 for unknown keys."""

from __future__ import annotations

import math

import pytest

from packcfg.core.diagnostics import Severity
from packcfg.core.schema import did_you_mean, edit_distance, json_schema, validate


def codes(config: dict) -> list[tuple[str, tuple[str, ...]]]:
    return [(i.code, i.path) for i in validate(config)]


@pytest.mark.parametrize(
    "value",
    [-1, 0, "two", 1.5, 2.0, True, None.__class__, [1], {"a": 1}],
    ids=["negative", "zero", "string", "float", "whole_float", "bool", "type", "list", "mapping"],
)
def test_micro_batch_size_must_be_a_positive_int(value: object) -> None:
    issues = validate({"train": {"micro_batch_size": value}})
    assert [(i.code, i.path, i.severity) for i in issues] == [
        ("SC002", ("train", "micro_batch_size"), Severity.ERROR)
    ]
    assert "train.micro_batch_size" in issues[0].message


def test_message_shows_the_actual_value() -> None:
    (issue,) = validate({"train": {"global_batch_size": "two"}})
    assert "'two'" in issue.message and "integer" in issue.message


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, 10**400])
def test_non_finite_or_huge_float_rejected(value: float) -> None:
    assert codes({"optimizer": {"lr": value}}) == [("SC002", ("optimizer", "lr"))]


def test_huge_int_does_not_crash() -> None:
    huge = 10**5000  # past Python's int->str limit
    assert validate({"model": {"seq_length": huge}}) == []  # a valid (if silly) positive int
    (issue,) = validate({"model": {"seq_length": -huge}})
    assert "bits" in issue.message


def test_null_allowed_only_where_bridge_has_none() -> None:
    assert validate({"train": {"micro_batch_size": None}}) == []
    assert codes({"model": {"tensor_model_parallel_size": None}}) == [
        ("SC002", ("model", "tensor_model_parallel_size"))
    ]


def test_literal_and_nested_fields() -> None:
    issues = codes(
        {
            "model": {"cuda_graph_impl": "partial", "cuda_graph_scope": [1]},
            "dataset": {"offline_packing_specs": {"pad_cu_seqlens": "yes"}},
        }
    )
    assert ("SC002", ("model", "cuda_graph_impl")) in issues
    assert ("SC002", ("model", "cuda_graph_scope")) in issues
    assert ("SC002", ("dataset", "offline_packing_specs", "pad_cu_seqlens")) in issues


def test_values_with_their_own_rule_are_not_sc002() -> None:
    specs = {"packed_sequence_size": -5, "pad_seq_to_mult": "x", "max_single_sequence_length": 0.5}
    assert validate({"dataset": {"offline_packing_specs": specs}}) == []


def test_section_that_is_not_a_mapping() -> None:
    assert codes({"train": [1, 2]}) == [("SC002", ("train",))]


def test_unknown_bridge_key_is_a_warning_with_did_you_mean() -> None:
    (issue,) = validate({"model": {"tensor_model_paralel_size": 2}})
    assert (issue.code, issue.severity) == ("SC003", Severity.WARNING)
    assert "tensor_model_parallel_size" in issue.message
    assert issue.hint == "did you mean 'tensor_model_parallel_size'?"


def test_unknown_key_far_from_everything_has_no_suggestion() -> None:
    (issue,) = validate({"train": {"completely_new_thing": 1}})
    assert issue.code == "SC003" and issue.hint is None and "did you mean" not in issue.message


def test_unknown_key_in_own_sections_is_an_error() -> None:
    issues = validate({"launch": {"nodez": 2}, "recipe": {"famly": "llama"}})
    assert {(i.code, i.severity, i.path) for i in issues} == {
        ("SC003", Severity.ERROR, ("launch", "nodez")),
        ("SC003", Severity.ERROR, ("recipe", "famly")),
    }


def test_unmodelled_sections_and_targets_pass() -> None:
    config = {
        "peft": {"_target_": "megatron.bridge.peft.lora.LoRA", "anything": 1},
        "comm_overlap": {"whatever": True},
        "mixed_precision": "bf16_mixed",
        "model": {"_target_": "x.Llama3ModelProvider8B", "num_layers": 32, "mrope_section": [16, 24, 24]},
        "dataset": {"dataset_kwargs": {"free_form_key": 1}},
    }
    assert validate(config) == []


def test_unknown_top_level_section() -> None:
    (issue,) = validate({"modle": {}})
    assert issue.code == "SC003" and "'model'" in issue.message


def test_missing_required_seq_length_of_a_defined_dataset() -> None:
    issues = codes({"dataset": {"_target_": "megatron.bridge.training.config.FinetuningDatasetConfig"}})
    assert issues == [("SC002", ("dataset",))]
    assert validate({"dataset": {"enable_offline_packing": True}}) == []  # an override file, not a definition


def test_unknown_family_id_with_suggestion() -> None:
    (issue,) = validate({"recipe": {"family": "lama"}})
    assert issue.code == "SC002" and "'llama'" in issue.message


def test_validate_never_raises_on_garbage() -> None:
    for config in ({1: 2}, {"model": object()}, {"train": {"micro_batch_size": object()}}, [], None):
        validate(config)  # type: ignore[arg-type]


def test_edit_distance_and_did_you_mean() -> None:
    assert edit_distance("kitten", "sitting") == 3
    assert edit_distance("abc", "abc") == 0
    assert did_you_mean("seq_lenght", frozenset({"seq_length", "seed"})) == "seq_length"
    assert did_you_mean("zzzz", frozenset({"seq_length"})) is None


def test_json_schema_describes_the_config() -> None:
    schema = json_schema()
    assert {"recipe", "launch", "model", "train", "dataset"} <= set(schema["properties"])
    defs = schema["$defs"]
    train = defs["Train"]["properties"]["micro_batch_size"]
    assert {"type": "integer", "minimum": 1} in train["anyOf"]
    assert defs["Launch"]["additionalProperties"] is False


def test_experiment_model_validates_a_recipe(tiny_recipe) -> None:
    import yaml

    from packcfg.core.schema import Experiment

    exp = Experiment.model_validate(yaml.safe_load(tiny_recipe.read_text()))
    assert exp.train.micro_batch_size == 1
    assert exp.dataset.offline_packing_specs.packed_sequence_size == 512


def test_energon_dataset_requires_its_loader_fields() -> None:
    issues = validate(
        {
            "dataset": {
                "_target_": "megatron.bridge.data.builders.energon.EnergonDatasetConfig",
                "seq_length": 8,
            }
        }
    )
    assert sorted(i.message.split(" is missing")[0] for i in issues) == [
        "dataset.micro_batch_size",
        "dataset.task_encoder",
    ]
