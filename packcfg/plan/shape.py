"""The model's shape from an experiment config, and its parameter counts by formula (no torch).

The counts follow megatron-core 0.16.1's GPTModel as packcfg's executor builds it (`packcfg.train.model`):
per layer an input norm, `linear_qkv` (Q, K and V of GQA fused, column parallel), optional q/k norms over
the head dimension, `linear_proj` (row parallel), a pre-MLP norm, `linear_fc1` (gate and up fused when
`gated_linear_unit`, column parallel) and `linear_fc2` (row parallel); then a final norm, the word
embedding on the first pipeline stage and the output layer on the last (a second copy of the embedding
there when tied and PP > 1, as megatron keeps it). Column-parallel weights and biases are split over TP,
row-parallel weights too but not their biases; norms are replicated. Megatron-LM's
`megatron/training/theoretical_memory_usage.py` counts the same terms (`compute_weight_and_optimizer_memory`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


class PlanError(ValueError):
    """A config or request `packcfg plan` cannot plan for: one line naming the key (exit 2)."""


def _int(model: Mapping[str, Any], key: str, default: int | None = None) -> int:
    value = model.get(key)
    if value is None:
        if default is None:
            raise PlanError(f"model.{key}: not set (the plan needs the model's shape)")
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise PlanError(f"model.{key}: expected a positive integer, got {value!r}")
    return value


def flag(value: Any, default: bool = False) -> bool:
    """A config switch: a bool, or its string spelling (true/1/yes); unset is `default`."""
    if value is None:
        return default
    if isinstance(value, bool):
        return value
    return str(value).lower() in {"true", "1", "yes"}


@dataclass(frozen=True)
class ModelShape:
    num_layers: int
    hidden_size: int
    ffn_hidden_size: int
    num_attention_heads: int
    num_query_groups: int
    kv_channels: int
    vocab_size: int
    tied_embeddings: bool = False
    gated_linear_unit: bool = True
    rms_norm: bool = True
    add_bias_linear: bool = False
    add_qkv_bias: bool = False
    qk_layernorm: bool = False
    pad_vocab_to: int = 1  # make_vocab_size_divisible_by when the vocabulary is padded, else 1
    # an activation that keeps only fc1's output for backward: Transformer Engine's fused SwiGLU (as Bridge
    # runs it) or packcfg's executor's own (packcfg.train.activation). False (`transformer_impl: local`):
    # megatron's unfused GLU (megatron-core 0.16.1 mlp.py `glu`), which also keeps silu(x1) and x2 + offset,
    # 2 x ffn more elements per token and layer when gated
    fused_activation: bool = True

    # ------------------------------------------------------------------ sizes
    @property
    def q_size(self) -> int:
        return self.num_attention_heads * self.kv_channels

    @property
    def kv_size(self) -> int:
        return self.num_query_groups * self.kv_channels

    @property
    def norm_params(self) -> int:
        """Parameters of one norm over the hidden size (RMSNorm: weight; LayerNorm: weight and bias)."""
        return self.hidden_size * (1 if self.rms_norm else 2)

    def padded_vocab(self, tp: int) -> int:
        """The vocabulary megatron builds at this TP: padded to a multiple of make_vocab_size_divisible_by x TP
        when padding is on (Megatron-LM `_vocab_size_with_padding`, Bridge `should_pad_vocab`), else as given."""
        if self.pad_vocab_to <= 1:
            return self.vocab_size
        multiple = self.pad_vocab_to * tp
        return math.ceil(self.vocab_size / multiple) * multiple

    # ------------------------------------------------------------------ parameter counts
    def layer_params(self, tp: int = 1) -> int:
        """Parameters of one transformer layer on one TP rank."""
        h, q, kv, f = self.hidden_size, self.q_size, self.kv_size, self.ffn_hidden_size
        qkv_out = q + 2 * kv
        fc1_out = f * (2 if self.gated_linear_unit else 1)
        bias = self.add_bias_linear
        sharded = h * qkv_out + q * h + h * fc1_out + f * h
        sharded += qkv_out if (bias or self.add_qkv_bias) else 0
        sharded += fc1_out if bias else 0
        replicated = 2 * self.norm_params
        replicated += 2 * h if bias else 0  # linear_proj and linear_fc2 biases (row parallel: whole)
        if self.qk_layernorm:
            replicated += 2 * self.kv_channels * (1 if self.rms_norm else 2)
        return sharded // tp + replicated

    def embedding_params(self, tp: int = 1) -> int:
        return self.padded_vocab(tp) // tp * self.hidden_size

    def output_params(self, tp: int = 1) -> int:
        return self.padded_vocab(tp) // tp * self.hidden_size

    def stage_params(self, tp: int = 1, pp: int = 1, stage: int = 0) -> int:
        """Parameters held by one rank of pipeline stage `stage` (layers split evenly over PP)."""
        n = self.num_layers // pp * self.layer_params(tp)
        first, last = stage == 0, stage == pp - 1
        if first:
            n += self.embedding_params(tp)
        if last:
            n += self.norm_params
            if not self.tied_embeddings or not first:  # tied and PP > 1: the last stage keeps a copy
                n += self.output_params(tp)
        return n

    def total_params(self) -> int:
        """Parameters of the whole model, counted once (a tied embedding once)."""
        return self.stage_params(1, 1, 0)

    def max_rank_params(self, tp: int = 1, pp: int = 1) -> int:
        return max(self.stage_params(tp, pp, s) for s in range(pp))

    def matmul_params_per_token(self) -> int:
        """Weights every token multiplies by in the forward pass (the dense FLOPs are 2x this per token):
        all layers' projections and the output layer, not the norms or the embedding lookup."""
        h, q, kv, f = self.hidden_size, self.q_size, self.kv_size, self.ffn_hidden_size
        layer = h * (q + 2 * kv) + q * h + h * f * (2 if self.gated_linear_unit else 1) + f * h
        return self.num_layers * layer + self.padded_vocab(1) * h

    def tp_problems(self, tp: int) -> list[str]:
        """Why megatron cannot split this model over `tp` ranks (empty when it can)."""
        out = []
        if self.num_attention_heads % tp:
            out.append(f"model.num_attention_heads {self.num_attention_heads} not divisible by TP {tp}")
        if self.num_query_groups % tp:
            out.append(f"model.num_query_groups {self.num_query_groups} not divisible by TP {tp}")
        if self.ffn_hidden_size % tp:
            out.append(f"model.ffn_hidden_size {self.ffn_hidden_size} not divisible by TP {tp}")
        if self.padded_vocab(tp) % tp:
            out.append(f"model.vocab_size {self.vocab_size} not divisible by TP {tp} (not padded)")
        return out


def model_section(config: Mapping[str, Any]) -> Mapping[str, Any]:
    """The config's model section, its shape filled from `model.hf_path` (a local Hugging Face folder) when
    the config starts from one, as the executor reads it."""
    from packcfg.train.hf.config import HFConfigError
    from packcfg.train.hf.config import model_section as from_hf  # standard library only

    try:
        return from_hf(dict(config))
    except (HFConfigError, ValueError) as exc:
        raise PlanError(str(exc)) from None


def _bridge_recipe(config: Mapping[str, Any]) -> str | None:
    launch = config.get("launch")
    bridge = launch.get("bridge") if isinstance(launch, Mapping) else None
    recipe = bridge.get("recipe") if isinstance(bridge, Mapping) else None
    return recipe if isinstance(recipe, str) else None


def shape_from_config(config: Mapping[str, Any]) -> ModelShape:
    """The model's shape (Bridge's GPTModelProvider names and defaults); PlanError names a missing key."""
    model = model_section(config)
    if not isinstance(model, Mapping):
        raise PlanError("model: expected a mapping")
    if model.get("num_moe_experts"):
        raise PlanError(
            f"model.num_moe_experts: {model['num_moe_experts']}: packcfg plan models dense models only"
        )
    if model.get("multi_latent_attention") is True:
        raise PlanError("model.multi_latent_attention: packcfg plan models GQA/MHA attention only")
    recipe = _bridge_recipe(config)
    if recipe and model.get("hidden_size") is None:
        raise PlanError(
            f"model.hidden_size: not set; the shape is in Bridge's recipe {recipe} "
            f"(launch.bridge.recipe): add --recipe {recipe}"
        )
    hidden = _int(model, "hidden_size")
    heads = _int(model, "num_attention_heads")
    if "vocab_size" not in model or model.get("vocab_size") is None:
        raise PlanError(
            "model.vocab_size: not set (give it, e.g. model.vocab_size=128256 for Llama 3, or model.hf_path)"
        )
    engine = (config.get("launch") or {}).get("engine") if isinstance(config.get("launch"), Mapping) else None
    # The packcfg executor builds the vocabulary as given; Bridge pads it when should_pad_vocab is on.
    pad = (
        _int(model, "make_vocab_size_divisible_by", 128)
        if engine == "bridge" and flag(model.get("should_pad_vocab"))
        else 1
    )
    return ModelShape(
        num_layers=_int(model, "num_layers"),
        hidden_size=hidden,
        ffn_hidden_size=_int(model, "ffn_hidden_size", 4 * hidden),
        num_attention_heads=heads,
        num_query_groups=_int(model, "num_query_groups", heads),
        kv_channels=_int(model, "kv_channels", hidden // heads),
        vocab_size=_int(model, "vocab_size"),
        tied_embeddings=flag(model.get("share_embeddings_and_output_weights")),
        gated_linear_unit=flag(model.get("gated_linear_unit"), True),
        rms_norm=str(model.get("normalization") or "RMSNorm") == "RMSNorm",
        add_bias_linear=flag(model.get("add_bias_linear")),
        add_qkv_bias=flag(model.get("add_qkv_bias")),
        qk_layernorm=flag(model.get("qk_layernorm")),
        pad_vocab_to=pad,
        fused_activation=str(model.get("transformer_impl") or "transformer_engine") != "local",
    )
