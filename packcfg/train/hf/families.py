"""One weight-mapping table per family: megatron-core GPTModel parameter -> Hugging Face tensor(s).

Each table follows Megatron Bridge's own bridge for the family (commit 067f987 of
NVIDIA-NeMo/Megatron-Bridge): `src/megatron/bridge/models/llama/llama_bridge.py` (`LlamaBridge.mapping_registry`),
`models/qwen/qwen2_bridge.py` and `models/qwen/qwen3_bridge.py`. Entries are `Rename` (Bridge's
`AutoMapping`: the same tensor), `QKV` (Bridge's `QKVMapping`: q/k/v interleaved per query group, see
`weights.merge_qkv`) and `GatedMLP` (Bridge's `GatedMLPMapping`: fc1 = concat(gate, up)). `*` is the layer
index. Both spellings of the norms are listed, as Bridge lists them: megatron's local spec
(`input_layernorm`, `pre_mlp_layernorm`) and Transformer Engine's fused ones (`layer_norm_weight`); a model
has one or the other.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Rename:
    hf: str


@dataclass(frozen=True)
class QKV:
    q: str
    k: str
    v: str


@dataclass(frozen=True)
class GatedMLP:
    gate: str
    up: str


Mapping = Rename | QKV | GatedMLP

_L = "model.layers.*"
_COMMON: dict[str, Mapping] = {
    "embedding.word_embeddings.weight": Rename("model.embed_tokens.weight"),
    "output_layer.weight": Rename("lm_head.weight"),  # absent when embeddings are tied
    "decoder.final_layernorm.weight": Rename("model.norm.weight"),
    "decoder.layers.*.input_layernorm.weight": Rename(f"{_L}.input_layernorm.weight"),  # local spec
    "decoder.layers.*.self_attention.linear_qkv.layer_norm_weight": Rename(
        f"{_L}.input_layernorm.weight"
    ),  # TE
    "decoder.layers.*.pre_mlp_layernorm.weight": Rename(
        f"{_L}.post_attention_layernorm.weight"
    ),  # local spec
    "decoder.layers.*.mlp.linear_fc1.layer_norm_weight": Rename(
        f"{_L}.post_attention_layernorm.weight"
    ),  # TE
    "decoder.layers.*.self_attention.linear_proj.weight": Rename(f"{_L}.self_attn.o_proj.weight"),
    "decoder.layers.*.mlp.linear_fc2.weight": Rename(f"{_L}.mlp.down_proj.weight"),
    "decoder.layers.*.self_attention.linear_qkv.weight": QKV(
        f"{_L}.self_attn.q_proj.weight", f"{_L}.self_attn.k_proj.weight", f"{_L}.self_attn.v_proj.weight"
    ),
    "decoder.layers.*.mlp.linear_fc1.weight": GatedMLP(
        f"{_L}.mlp.gate_proj.weight", f"{_L}.mlp.up_proj.weight"
    ),
}

# Llama 3, 3.1, 3.2 (LlamaBridge): the common table. RoPE scaling is config, not weights.
LLAMA: dict[str, Mapping] = dict(_COMMON)

# Qwen2 / Qwen2.5 (Qwen2Bridge): plus the QKV bias, interleaved like the weight.
QWEN2: dict[str, Mapping] = {
    **_COMMON,
    "decoder.layers.*.self_attention.linear_qkv.bias": QKV(
        f"{_L}.self_attn.q_proj.bias", f"{_L}.self_attn.k_proj.bias", f"{_L}.self_attn.v_proj.bias"
    ),
}

# Qwen3 (Qwen3Bridge): plus per-head RMSNorm of queries and keys, no QKV bias.
QWEN3: dict[str, Mapping] = {
    **_COMMON,
    "decoder.layers.*.self_attention.q_layernorm.weight": Rename(f"{_L}.self_attn.q_norm.weight"),
    "decoder.layers.*.self_attention.k_layernorm.weight": Rename(f"{_L}.self_attn.k_norm.weight"),
}

TABLES: dict[str, dict[str, Mapping]] = {"llama": LLAMA, "qwen2": QWEN2, "qwen3": QWEN3}

# HF tensors that carry no weights the GPTModel needs (older Llama checkpoints persist RoPE buffers).
IGNORED_HF_SUFFIXES = (".rotary_emb.inv_freq",)


def lookup(table: dict[str, Mapping], megatron_name: str) -> Mapping | None:
    """The mapping of one megatron parameter name, with its layer index filled into the HF names."""
    parts = megatron_name.split(".")
    layer = None
    if len(parts) > 2 and parts[0] == "decoder" and parts[1] == "layers" and parts[2].isdigit():
        layer = parts[2]
        parts[2] = "*"
    entry = table.get(".".join(parts))
    if entry is None or layer is None:
        return entry
    if isinstance(entry, Rename):
        return Rename(entry.hf.replace("*", layer))
    if isinstance(entry, QKV):
        return QKV(*(name.replace("*", layer) for name in (entry.q, entry.k, entry.v)))
    return GatedMLP(entry.gate.replace("*", layer), entry.up.replace("*", layer))


def hf_names(entry: Mapping) -> tuple[str, ...]:
    if isinstance(entry, Rename):
        return (entry.hf,)
    if isinstance(entry, QKV):
        return (entry.q, entry.k, entry.v)
    return (entry.gate, entry.up)
