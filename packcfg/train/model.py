"""The megatron-core GPTModel the executor trains: Llama-style (RMSNorm, SwiGLU, RoPE, GQA).

Transformer Engine's layer spec when CUDA and TE are present (its fused THD attention and RoPE take
`cu_seqlens`); otherwise megatron's local spec with `PackedCoreAttention`, which also owns RoPE.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from packcfg.train import mcore_compat, varlen
from packcfg.train.attention import PackedCoreAttention, RopeSpec
from packcfg.train.mcore_compat import ModuleSpec, quiet_megatron_import
from packcfg.train.settings import ModelSettings

with quiet_megatron_import():
    from megatron.core.models.gpt import GPTModel
    from megatron.core.transformer.transformer_config import TransformerConfig


def use_transformer_engine(settings: ModelSettings) -> bool:
    """TE only when asked for (`transformer_impl: transformer_engine`) and actually usable."""
    return settings.transformer_impl == "transformer_engine" and mcore_compat.has_transformer_engine()


def mlp_keeps_fc1_output_only(settings: ModelSettings) -> bool:
    """Whether the MLP saves only fc1's output for backward: TE's fused SwiGLU, or packcfg's SwiGLU in the
    local spec (`packcfg.train.activation`); else megatron's unfused GLU (`packcfg plan`'s `fused_activation`)."""
    return use_transformer_engine(settings) or mcore_compat.spec_activation_supported()


def attention_method(settings: ModelSettings) -> tuple[varlen.Method, str]:
    """The THD attention kernel of packcfg's local spec on this machine, and why (varlen.choose);
    ValueError names `model.attention_backend` when an explicit request cannot run here."""
    return varlen.choose(
        settings.attention_backend,
        cuda=torch.cuda.is_available(),
        half=settings.bf16,
        dropout=settings.attention_dropout,
    )


def attention_summary(settings: ModelSettings) -> str:
    """One line for the start-up banner: which attention computes THD packs, and why."""
    if use_transformer_engine(settings):
        return "Transformer Engine (fused THD)"
    method, why = attention_method(settings)
    return f"packcfg THD, {varlen.DESCRIPTIONS[method]} ({why})"


def transformer_config(settings: ModelSettings, use_te: bool, pp: int | None = None) -> TransformerConfig:
    """megatron's config for the model; `pp` overrides the pipeline size (1: the whole model)."""
    wanted = dict(
        num_layers=settings.num_layers,
        hidden_size=settings.hidden_size,
        ffn_hidden_size=settings.ffn_hidden_size,
        num_attention_heads=settings.num_attention_heads,
        num_query_groups=settings.num_query_groups,
        kv_channels=settings.kv_channels,
        normalization="RMSNorm",
        layernorm_epsilon=settings.layernorm_epsilon,
        gated_linear_unit=True,
        activation_func=F.silu,
        add_bias_linear=False,
        add_qkv_bias=settings.add_qkv_bias,  # Qwen2/2.5
        qk_layernorm=settings.qk_layernorm,  # Qwen3: RMSNorm over each head's q and k
        init_method_std=settings.init_method_std,
        attention_dropout=settings.attention_dropout,
        hidden_dropout=settings.hidden_dropout,
        tensor_model_parallel_size=settings.tp,
        context_parallel_size=settings.cp,
        pipeline_model_parallel_size=settings.pp if pp is None else pp,
        pipeline_dtype=torch.bfloat16 if settings.bf16 else torch.float32,  # activations between stages
        sequence_parallel=settings.sequence_parallel and settings.tp > 1,  # off at TP 1, as Bridge (PL603)
        # Full master weights from one seed on CPU, then sliced, on every device: TP=2 starts from
        # TP=1's weights exactly (GPU initialisation draws each shard from a per-rank CUDA RNG).
        use_cpu_initialization=True,
        params_dtype=torch.float32,  # fp32 master weights; bf16 runs under autocast
        calculate_per_token_loss=True,
        # Fused kernels are CUDA-only; the local path turns every fusion off.
        bias_activation_fusion=use_te,
        # the local spec's SwiGLU module (packcfg.train.activation) instead of megatron's unfused GLU
        use_te_activation_func=not use_te and mcore_compat.spec_activation_supported(),
        masked_softmax_fusion=False,
        bias_dropout_fusion=use_te,
        apply_rope_fusion=use_te and settings.apply_rope_fusion,
        gradient_accumulation_fusion=False,
        persist_layer_norm=False,
    )
    with quiet_megatron_import():  # also hides 0.16's "full scope is deprecated" default-value notice
        return TransformerConfig(**mcore_compat.model_config_kwargs(TransformerConfig, wanted))


def build_model(settings: ModelSettings, seed: int) -> GPTModel:
    """A freshly initialised model (this rank's pipeline stage under PP); the same seed gives the same
    full weights at any TP and PP size."""
    use_te = use_transformer_engine(settings)
    mcore_compat.check_supported(
        use_te=use_te, sequence_parallel=settings.sequence_parallel, pipeline_parallel=settings.pp
    )
    mcore_compat.seed_model_parallel_rng(seed)
    if settings.pp == 1:
        model = _gpt_model(settings, use_te, transformer_config(settings, use_te))
    else:
        from packcfg.train.pipeline import build_stage_model  # (pipeline imports this module)

        config = transformer_config(settings, use_te)
        model = build_stage_model(
            whole=lambda: _gpt_model(settings, use_te, transformer_config(settings, use_te, pp=1)),
            stage=lambda pre, post, layers: _gpt_model(settings, use_te, config, pre, post, layers),
            config=config,
        )
    if torch.cuda.is_available():
        model = model.cuda()
    return model


def _gpt_model(
    settings: ModelSettings,
    use_te: bool,
    config: TransformerConfig,
    pre_process: bool = True,
    post_process: bool = True,
    num_layers: int | None = None,
) -> GPTModel:
    """The GPTModel (or one pipeline stage of it: `num_layers` layers, embedding on the first stage,
    final norm and output layer on the last, as megatron builds a stage)."""
    rope = settings.position_embedding_type == "rope"
    layers = settings.num_layers if num_layers is None else num_layers
    if use_te:
        spec = mcore_compat.te_layer_spec(qk_layernorm=settings.qk_layernorm)
        position_embedding = "rope" if rope else "none"
    else:
        rope_spec = RopeSpec(
            dim=int(settings.kv_channels * settings.rotary_percent),
            base=settings.rotary_base,
            llama3_factor=settings.rope_scaling_factor if settings.rope_scaling else None,
            interpolation_factor=settings.seq_len_interpolation_factor,
        )
        method, _ = attention_method(settings)
        attention = ModuleSpec(
            module=PackedCoreAttention, params={"rope": rope_spec if rope else None, "method": method}
        )
        spec = mcore_compat.local_block_spec(  # local block spec: its norms accept sequence parallel
            attention, layers, qk_layernorm=settings.qk_layernorm
        )
        # packcfg's attention applies RoPE itself (vectorised over THD); megatron's would loop per sample.
        position_embedding = "none"
    return GPTModel(
        config=config,
        transformer_layer_spec=spec,
        vocab_size=settings.vocab_size,
        max_sequence_length=settings.seq_length,
        pre_process=pre_process,
        post_process=post_process,
        share_embeddings_and_output_weights=settings.share_embeddings,
        position_embedding_type=position_embedding,
        rotary_percent=settings.rotary_percent,
        rotary_base=int(settings.rotary_base),
        rope_scaling=settings.rope_scaling,  # TE path only; the local path's RoPE is packcfg's (above)
        rope_scaling_factor=settings.rope_scaling_factor,
        seq_len_interpolation_factor=settings.seq_len_interpolation_factor,
        parallel_output=True,
    )
