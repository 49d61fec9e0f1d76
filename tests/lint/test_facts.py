"""Derived facts follow rules.md's definitions; wrong-typed inputs become unknown, never a crash."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from packcfg.core.normalize import normalize
from packcfg.lint.facts import alignment_multiple, derive


def facts(config: dict, profile: str = "current"):
    return derive(normalize(config).config, profile)


@pytest.mark.parametrize(
    ("cp", "tp", "sp", "current", "legacy"),
    [
        (1, 1, False, 1, 1),
        (2, 1, False, 4, 4),
        (1, 2, True, 2, 4),  # SP alone: CP*TP = 2 (legacy 2*CP*TP = 4)
        (2, 2, True, 4, 8),  # lcm(4, 4) vs 8
        (4, 2, True, 8, 16),
        (2, 8, True, 16, 32),
        (2, 8, False, 4, 4),  # SP off: TP does not count
        (3, 2, True, 6, 12),  # lcm(6, 6)
        (2, 3, True, 12, 12),  # lcm(4, 6)
    ],
)
def test_alignment_multiple_per_profile(cp: int, tp: int, sp: bool, current: int, legacy: int) -> None:
    assert alignment_multiple(cp, tp, sp, "current") == current
    assert alignment_multiple(cp, tp, sp, "legacy") == legacy
    model = {"context_parallel_size": cp, "tensor_model_parallel_size": tp, "sequence_parallel": sp}
    assert facts({"model": model}).align_multiple == current
    assert facts({"model": model}, "legacy").align_multiple == legacy


def test_alignment_includes_eval_cp() -> None:
    f = facts({"model": {"context_parallel_size": 2}, "dist": {"eval_context_parallel_size": 3}})
    assert (f.cp, f.eval_cp, f.align_multiple) == (2, 3, 12)


def test_alignment_unknown_when_inputs_wrong_typed() -> None:
    assert facts({"model": {"context_parallel_size": "2"}}).align_multiple is None
    assert facts({"model": {"sequence_parallel": "yes"}}).align_multiple is None


@pytest.mark.parametrize(
    ("config", "family", "source"),
    [
        (
            {"recipe": {"family": "qwen3_next"}, "model": {"_target_": "x.Llama3ModelProvider8B"}},
            "qwen3_next",
            "recipe.family",
        ),
        (
            {"model": {"_target_": "megatron.bridge.models.llama.llama_provider.Llama3ModelProvider8B"}},
            "llama",
            "model._target_",
        ),
        ({"model": {"_target_": "m.Qwen3NextModelProvider80B_A3B"}}, "qwen3_next", "model._target_"),
        ({"model": {"_target_": "m.Qwen25VLModelProvider"}}, "qwen25_vl", "model._target_"),
        ({"model": {"_target_": "m.GLM45AirModelProvider106B"}}, "glm45", "model._target_"),
        ({"model": {"_target_": "m.Gemma2ModelProvider9B"}}, "gemma2", "model._target_"),
        (
            {"tokenizer": {"tokenizer_model": "meta-llama/Meta-Llama-3-8B"}},
            "llama",
            "tokenizer.tokenizer_model",
        ),
        ({"model": {"hf_model_id": "Qwen/Qwen3-Next-80B-A3B-Instruct"}}, "qwen3_next", "model.hf_model_id"),
        ({"model": {"hf_path": "/models/Qwen/Qwen3-VL-8B-Instruct"}}, "qwen3_vl", "model.hf_path"),
        (
            {"model": {"_target_": "m.GPTModelProvider"}, "tokenizer": {"tokenizer_model": "Qwen/Qwen3-8B"}},
            "qwen3",
            "tokenizer.tokenizer_model",
        ),
    ],
)
def test_family_inference(config: dict, family: str, source: str) -> None:
    f = facts(config)
    assert f.family is not None and f.family.id == family
    assert f.family_source == source


def test_generic_providers_name_no_family() -> None:
    for target in ("megatron.bridge.models.gpt_provider.GPTModelProvider", "m.MLAModelProvider"):
        assert facts({"model": {"_target_": target}}).family is None


def test_unknown_recipe_family_is_no_family() -> None:
    assert facts({"recipe": {"family": "nope"}}).family is None


def test_packing_modes() -> None:
    assert facts({}).packing_mode == "none"
    f = facts(
        {
            "dataset": {
                "_target_": "megatron.bridge.data.builders.energon.EnergonDatasetConfig",
                "enable_offline_packing": True,
                "enable_in_batch_packing": True,
                "packing_buffer_size": 8,
            }
        }
    )
    assert f.packing_modes == ("offline", "in_batch", "energon_native")
    # rules.md rev 3: packing_buffer_size on a non-Energon provider (Bridge's diffusion datasets) is no mode
    diffusion = {"_target_": "m.wan.wan_energon_datamodule.WanDatasetConfig", "packing_buffer_size": 200}
    assert facts({"dataset": diffusion}).packing_modes == ()
    assert facts({"dataset": {"packing_buffer_size": 8, "task_encoder": {}}}).packing_mode == "energon_native"
    assert (
        facts({"dataset": {"packed_sequence_specs": {"packed_sequence_size": 8}}}).packing_mode == "offline"
    )
    assert facts({"dataset": {"pack_sequences_in_batch": True}}).packing_mode == "in_batch"
    assert facts({"dataset": {"enable_offline_packing": "yes"}}).packing_mode == "none"  # SC002, not a mode


def test_seq_length_prefers_dataset() -> None:
    assert facts({"model": {"seq_length": 8}, "dataset": {"seq_length": 16}}).seq_length == 16
    assert facts({"model": {"seq_length": 8}}).seq_length == 8
    assert facts({"model": {"seq_length": 8}, "dataset": {"seq_length": "x"}}).seq_length is None


def test_pad_to_max_length_either_place() -> None:
    assert facts({"dataset": {"pad_to_max_length": True}}).pad_to_max_length
    assert facts({"dataset": {"dataset_kwargs": {"pad_to_max_length": True}}}).pad_to_max_length
    assert not facts({"dataset": {"dataset_kwargs": {"pad_to_max_length": "true"}}}).pad_to_max_length


def test_world_and_dp_from_launch() -> None:
    f = facts({"launch": {"nodes": 2, "gpus_per_node": 8}, "model": {"tensor_model_parallel_size": 4}})
    assert (f.world, f.dp) == (16, 4)
    assert facts({"model": {}}).world is None
    assert (
        facts({"launch": {"nodes": 1, "gpus_per_node": 6}, "model": {"tensor_model_parallel_size": 4}}).dp
        is None
    )


def test_eval_sizes_from_validation_or_train() -> None:
    assert facts({"validation": {"eval_micro_batch_size": 2}}).eval_mbs == 2
    assert facts({"train": {"eval_micro_batch_size": 3}}).eval_mbs == 3


@pytest.mark.parametrize(
    ("model", "full", "training", "attention"),
    [
        ({}, False, False, False),
        ({"cuda_graph_impl": "full_iteration"}, True, True, True),
        ({"cuda_graph_impl": "local", "cuda_graph_scope": ["full_iteration"]}, True, True, True),
        ({"cuda_graph_impl": "local", "cuda_graph_scope": ["attn"]}, False, False, False),
        ({"cuda_graph_impl": "transformer_engine"}, False, True, True),  # empty list: whole layer
        ({"cuda_graph_impl": "transformer_engine", "cuda_graph_scope": "full"}, False, True, True),
        ({"cuda_graph_impl": "transformer_engine", "cuda_graph_scope": "attn,mlp"}, False, True, True),
        (
            {"cuda_graph_impl": "transformer_engine", "cuda_graph_modules": ["mlp", "moe_router"]},
            False,
            True,
            False,
        ),
        (
            {"cuda_graph_impl": "transformer_engine", "cuda_graph_scope": [3]},
            False,
            True,
            False,
        ),  # unknown list
    ],
)
def test_cuda_graph_definitions(model: dict, full: bool, training: bool, attention: bool) -> None:
    f = facts({"model": model})
    assert (f.full_iteration_graph, f.training_graphs, f.attention_graphs) == (full, training, attention)


def test_mode_and_finetuning_inference() -> None:
    sft = {"dataset": {"_target_": "megatron.bridge.training.config.FinetuningDatasetConfig"}}
    assert (facts(sft).mode, facts(sft).is_finetuning) == ("sft", True)
    pre = {"dataset": {"_target_": "megatron.bridge.training.config.GPTDatasetConfig"}}
    assert (facts(pre).mode, facts(pre).is_finetuning) == ("pretrain", False)
    assert facts({"peft": {"_target_": "x.LoRA"}}).mode == "peft"
    assert facts({"recipe": {"mode": "dpo"}}).is_finetuning
    energon = facts({"dataset": {"_target_": "m.EnergonProvider"}})
    assert (energon.dataset_kind, energon.energon_dataset, energon.mode) == ("energon", True, "vlm_sft")
    assert facts({"dataset": {"_target_": "m.DirectHFSFTDatasetConfig"}}).dataset_kind == "hf_sft"
    assert facts({"dataset": {"_target_": "m.MockVLMSFTDatasetConfig"}}).dataset_kind == "mock_vlm"


def test_fsdp_v2_and_p_tuning() -> None:
    assert facts({"ddp": {"use_megatron_fsdp": True, "megatron_fsdp_version": 2}}).megatron_fsdp_v2
    assert not facts({"ddp": {"use_megatron_fsdp": True}}).megatron_fsdp_v2
    assert facts({"peft": {"_target_": "megatron.bridge.peft.p_tuning.PTuning"}}).p_tuning
    assert facts({"dataset": {"dataset_kwargs": {"virtual_tokens": 10}}}).p_tuning
    assert not facts({"dataset": {"dataset_kwargs": {"virtual_tokens": 0}}}).p_tuning


def test_bridge_defaults_for_absent_fields() -> None:
    f = facts({})
    assert (f.tp, f.pp, f.cp, f.sp, f.transformer_impl) == (1, 1, 1, False, "transformer_engine")
    assert (f.calculate_per_token_loss, f.average_in_collective, f.cross_entropy_loss_fusion) == (
        False,
        False,
        True,
    )
    rope_family = facts({"model": {"_target_": "m.Llama3ModelProvider8B"}})
    assert (rope_family.rope, rope_family.apply_rope_fusion) == (True, True)
    generic = facts({"model": {"_target_": "m.GPTModelProvider", "position_embedding_type": "rope"}})
    assert (generic.rope, generic.apply_rope_fusion) == (True, False)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=4),
    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=4), c, max_size=3),
    max_leaves=8,
)
sections = ["model", "train", "dataset", "validation", "ddp", "launch", "recipe", "dist", "peft", "tokenizer"]
keys = [
    "context_parallel_size", "tensor_model_parallel_size", "sequence_parallel", "seq_length", "micro_batch_size",
    "enable_offline_packing", "offline_packing_specs", "cuda_graph_impl", "cuda_graph_scope", "_target_", "family",
    "nodes", "gpus_per_node", "dataset_kwargs", "eval_context_parallel_size", "packing_buffer_size", "mode",
]  # fmt: skip


# no deadline: a loaded CI machine must not turn a slow example into a failure
@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(
    st.dictionaries(
        st.sampled_from(sections), st.dictionaries(st.sampled_from(keys), json_values, max_size=6)
    )
)
def test_derive_is_total(config: dict) -> None:
    derive(normalize(config).config, "current")
    derive(normalize(config).config, "legacy")
