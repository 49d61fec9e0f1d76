"""Hugging Face `config.json` contents for the models whose Bridge recipes packcfg snapshots.

The models' published hyper-parameters (the `config.json` on each model's Hub page), no weights: recipe
functions only read the config (AutoBridge.from_hf_pretrained -> provider), so an offline cache with these
files lets them run here. Fields that do not affect the Megatron provider (e.g. `transformers_version`,
`torch_dtype` where the bridge ignores it) are kept where the bridge reads them and dropped otherwise.
"""

from __future__ import annotations

from typing import Any


def _llama(hidden, inter, layers, heads, kv, max_pos, rope_scaling=None, tie=False, vocab=128256):
    cfg: dict[str, Any] = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": 128000,
        "eos_token_id": 128001,
        "hidden_act": "silu",
        "hidden_size": hidden,
        "initializer_range": 0.02,
        "intermediate_size": inter,
        "max_position_embeddings": max_pos,
        "mlp_bias": False,
        "num_attention_heads": heads,
        "num_hidden_layers": layers,
        "num_key_value_heads": kv,
        "pretraining_tp": 1,
        "rms_norm_eps": 1e-05,
        "rope_scaling": rope_scaling,
        "rope_theta": 500000.0,
        "tie_word_embeddings": tie,
        "torch_dtype": "bfloat16",
        "use_cache": True,
        "vocab_size": vocab,
    }
    if hidden // heads != 128:
        cfg["head_dim"] = hidden // heads
    return cfg


def _llama3_scaling(factor: float) -> dict[str, Any]:
    return {
        "factor": factor,
        "high_freq_factor": 4.0,
        "low_freq_factor": 1.0,
        "original_max_position_embeddings": 8192,
        "rope_type": "llama3",
    }


def _qwen2(hidden, inter, layers, heads, kv, max_pos, tie, vocab, sliding=None):
    return {
        "architectures": ["Qwen2ForCausalLM"],
        "model_type": "qwen2",
        "attention_dropout": 0.0,
        "bos_token_id": 151643,
        "eos_token_id": 151643,
        "hidden_act": "silu",
        "hidden_size": hidden,
        "initializer_range": 0.02,
        "intermediate_size": inter,
        "max_position_embeddings": max_pos,
        "max_window_layers": layers,
        "num_attention_heads": heads,
        "num_hidden_layers": layers,
        "num_key_value_heads": kv,
        "rms_norm_eps": 1e-06,
        "rope_theta": 1000000.0,
        "sliding_window": sliding or max_pos,
        "tie_word_embeddings": tie,
        "torch_dtype": "bfloat16",
        "use_cache": True,
        "use_sliding_window": False,
        "vocab_size": vocab,
    }


def _qwen3(hidden, inter, layers, heads, kv, tie):
    return {
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": 151643,
        "eos_token_id": 151645,
        "head_dim": 128,
        "hidden_act": "silu",
        "hidden_size": hidden,
        "initializer_range": 0.02,
        "intermediate_size": inter,
        "max_position_embeddings": 40960,
        "max_window_layers": layers,
        "num_attention_heads": heads,
        "num_hidden_layers": layers,
        "num_key_value_heads": kv,
        "rms_norm_eps": 1e-06,
        "rope_scaling": None,
        "rope_theta": 1000000,
        "sliding_window": None,
        "tie_word_embeddings": tie,
        "torch_dtype": "bfloat16",
        "use_cache": True,
        "use_sliding_window": False,
        "vocab_size": 151936,
    }


def _qwen3_moe(hidden, moe_inter, layers, heads, kv, experts, topk):
    cfg = _qwen3(hidden, moe_inter * 8, layers, heads, kv, tie=False)
    cfg.update(
        {
            "architectures": ["Qwen3MoeForCausalLM"],
            "model_type": "qwen3_moe",
            "decoder_sparse_step": 1,
            "intermediate_size": {2048: 6144, 4096: 12288}[hidden],
            "max_position_embeddings": 40960,
            "mlp_only_layers": [],
            "moe_intermediate_size": moe_inter,
            "norm_topk_prob": True,
            "num_experts": experts,
            "num_experts_per_tok": topk,
            "output_router_logits": False,
            "router_aux_loss_coef": 0.001,
        }
    )
    return cfg


HF_CONFIGS: dict[str, dict[str, Any]] = {
    # Llama 3 / 3.1 / 3.2 (meta-llama/*, config.json on the Hub)
    "meta-llama/Llama-3.2-1B": _llama(2048, 8192, 16, 32, 8, 131072, _llama3_scaling(32.0), tie=True),
    "meta-llama/Llama-3.2-3B": _llama(3072, 8192, 28, 24, 8, 131072, _llama3_scaling(32.0), tie=True),
    "meta-llama/Meta-Llama-3-8B": _llama(4096, 14336, 32, 32, 8, 8192),
    "meta-llama/Meta-Llama-3-70B": _llama(8192, 28672, 80, 64, 8, 8192),
    "meta-llama/Meta-Llama-3.1-8B": _llama(4096, 14336, 32, 32, 8, 131072, _llama3_scaling(8.0)),
    "meta-llama/Meta-Llama-3.1-70B": _llama(8192, 28672, 80, 64, 8, 131072, _llama3_scaling(8.0)),
    "meta-llama/Meta-Llama-3.1-405B": _llama(16384, 53248, 126, 128, 8, 131072, _llama3_scaling(8.0)),
    # Qwen 2.5 (Qwen/Qwen2.5-*)
    "Qwen/Qwen2.5-0.5B": _qwen2(896, 4864, 24, 14, 2, 32768, True, 151936),
    "Qwen/Qwen2.5-1.5B": _qwen2(1536, 8960, 28, 12, 2, 131072, True, 151936),
    "Qwen/Qwen2.5-7B": _qwen2(3584, 18944, 28, 28, 4, 131072, False, 152064),
    "Qwen/Qwen2.5-14B": _qwen2(5120, 13824, 48, 40, 8, 131072, False, 152064),
    "Qwen/Qwen2.5-32B": _qwen2(5120, 27648, 64, 40, 8, 131072, False, 152064),
    "Qwen/Qwen2.5-72B": _qwen2(8192, 29568, 80, 64, 8, 131072, False, 152064),
    # Qwen 3 dense and MoE (Qwen/Qwen3-*)
    "Qwen/Qwen3-0.6B": _qwen3(1024, 3072, 28, 16, 8, tie=True),
    "Qwen/Qwen3-1.7B": _qwen3(2048, 6144, 28, 16, 8, tie=True),
    "Qwen/Qwen3-4B": _qwen3(2560, 9728, 36, 32, 8, tie=True),
    "Qwen/Qwen3-8B": _qwen3(4096, 12288, 36, 32, 8, tie=False),
    "Qwen/Qwen3-14B": _qwen3(5120, 17408, 40, 40, 8, tie=False),
    "Qwen/Qwen3-32B": _qwen3(5120, 25600, 64, 64, 8, tie=False),
    "Qwen/Qwen3-30B-A3B": _qwen3_moe(2048, 768, 48, 32, 4, 128, 8),
    "Qwen/Qwen3-235B-A22B": _qwen3_moe(4096, 1536, 94, 64, 4, 128, 8),
}


def _qwen25_vl(hidden, inter, layers, heads, kv, tie, vocab):
    cfg = _qwen2(hidden, inter, layers, heads, kv, 128000, tie, vocab, sliding=32768)
    cfg.update(
        {
            "architectures": ["Qwen2_5_VLForConditionalGeneration"],
            "model_type": "qwen2_5_vl",
            "eos_token_id": 151645,
            "vision_start_token_id": 151652,
            "vision_end_token_id": 151653,
            "vision_token_id": 151654,
            "image_token_id": 151655,
            "video_token_id": 151656,
            "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]},
            "vision_config": {
                "depth": 32,
                "hidden_act": "silu",
                "hidden_size": 1280,
                "intermediate_size": 3420,
                "num_heads": 16,
                "in_chans": 3,
                "out_hidden_size": hidden,
                "patch_size": 14,
                "spatial_merge_size": 2,
                "spatial_patch_size": 14,
                "window_size": 112,
                "fullatt_block_indexes": [7, 15, 23, 31],
                "tokens_per_second": 2,
                "temporal_patch_size": 2,
            },
        }
    )
    return cfg


def _qwen3_vl(hidden, inter, layers, heads, kv, moe=None):
    text: dict[str, Any] = {
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": 151643,
        "dtype": "bfloat16",
        "eos_token_id": 151645,
        "head_dim": 128,
        "hidden_act": "silu",
        "hidden_size": hidden,
        "initializer_range": 0.02,
        "intermediate_size": inter,
        "max_position_embeddings": 262144,
        "model_type": "qwen3_vl_text",
        "num_attention_heads": heads,
        "num_hidden_layers": layers,
        "num_key_value_heads": kv,
        "rms_norm_eps": 1e-06,
        "rope_scaling": {"mrope_interleaved": True, "mrope_section": [24, 20, 20], "rope_type": "default"},
        "rope_theta": 5000000,
        "use_cache": True,
        "vocab_size": 151936,
    }
    arch, model_type = "Qwen3VLForConditionalGeneration", "qwen3_vl"
    if moe is not None:
        moe_inter, experts, topk = moe
        arch, model_type = "Qwen3VLMoeForConditionalGeneration", "qwen3_vl_moe"
        text.update(
            {
                "model_type": "qwen3_vl_moe_text",
                "decoder_sparse_step": 1,
                "mlp_only_layers": [],
                "moe_intermediate_size": moe_inter,
                "norm_topk_prob": True,
                "num_experts": experts,
                "num_experts_per_tok": topk,
            }
        )
    return {
        "architectures": [arch],
        "model_type": model_type,
        "image_token_id": 151655,
        "video_token_id": 151656,
        "vision_start_token_id": 151652,
        "vision_end_token_id": 151653,
        "tie_word_embeddings": False,
        "text_config": text,
        "vision_config": {
            "deepstack_visual_indexes": [8, 16, 24],
            "depth": 27,
            "hidden_act": "gelu_pytorch_tanh",
            "hidden_size": 1152,
            "in_channels": 3,
            "initializer_range": 0.02,
            "intermediate_size": 4304,
            "model_type": model_type,
            "num_heads": 16,
            "num_position_embeddings": 2304,
            "out_hidden_size": hidden,
            "patch_size": 16,
            "spatial_merge_size": 2,
            "temporal_patch_size": 2,
        },
    }


def _gpt_oss(layers, experts):
    # quantization_config (MXFP4 weights) is left out: it describes the weight files, not the architecture.
    return {
        "architectures": ["GptOssForCausalLM"],
        "model_type": "gpt_oss",
        "attention_bias": True,
        "attention_dropout": 0.0,
        "eos_token_id": 200002,
        "experts_per_token": 4,
        "head_dim": 64,
        "hidden_act": "silu",
        "hidden_size": 2880,
        "initial_context_length": 4096,
        "initializer_range": 0.02,
        "intermediate_size": 2880,
        "layer_types": ["sliding_attention", "full_attention"] * (layers // 2),
        "max_position_embeddings": 131072,
        "num_attention_heads": 64,
        "num_experts_per_tok": 4,
        "num_hidden_layers": layers,
        "num_key_value_heads": 8,
        "num_local_experts": experts,
        "output_router_logits": False,
        "pad_token_id": 199999,
        "rms_norm_eps": 1e-05,
        "rope_scaling": {
            "beta_fast": 32.0,
            "beta_slow": 1.0,
            "factor": 32.0,
            "original_max_position_embeddings": 4096,
            "rope_type": "yarn",
            "truncate": False,
        },
        "rope_theta": 150000,
        "router_aux_loss_coef": 0.9,
        "sliding_window": 128,
        "swiglu_limit": 7.0,
        "tie_word_embeddings": False,
        "use_cache": True,
        "vocab_size": 201088,
    }


HF_CONFIGS.update(
    {
        # Qwen2.5-VL (Qwen/Qwen2.5-VL-*-Instruct)
        "Qwen/Qwen2.5-VL-3B-Instruct": _qwen25_vl(2048, 11008, 36, 16, 2, True, 151936),
        "Qwen/Qwen2.5-VL-7B-Instruct": _qwen25_vl(3584, 18944, 28, 28, 4, False, 152064),
        "Qwen/Qwen2.5-VL-32B-Instruct": _qwen25_vl(5120, 27648, 64, 40, 8, False, 152064),
        "Qwen/Qwen2.5-VL-72B-Instruct": _qwen25_vl(8192, 29568, 80, 64, 8, False, 152064),
        # Qwen3-VL (Qwen/Qwen3-VL-*-Instruct)
        "Qwen/Qwen3-VL-8B-Instruct": _qwen3_vl(4096, 12288, 36, 32, 8),
        "Qwen/Qwen3-VL-30B-A3B-Instruct": _qwen3_vl(2048, 6144, 48, 32, 4, moe=(768, 128, 8)),
        "Qwen/Qwen3-VL-235B-A22B-Instruct": _qwen3_vl(4096, 12288, 94, 64, 4, moe=(1536, 128, 8)),
        # GPT-OSS (openai/gpt-oss-*)
        "openai/gpt-oss-20b": _gpt_oss(24, 32),
        "openai/gpt-oss-120b": _gpt_oss(36, 128),
    }
)


HF_CONFIGS["Qwen/Qwen3-Next-80B-A3B-Instruct"] = {
    "architectures": ["Qwen3NextForCausalLM"],
    "model_type": "qwen3_next",
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 151643,
    "decoder_sparse_step": 1,
    "eos_token_id": 151645,
    "full_attention_interval": 4,
    "head_dim": 256,
    "hidden_act": "silu",
    "hidden_size": 2048,
    "initializer_range": 0.02,
    "intermediate_size": 5120,
    "linear_conv_kernel_dim": 4,
    "linear_key_head_dim": 128,
    "linear_num_key_heads": 16,
    "linear_num_value_heads": 32,
    "linear_value_head_dim": 128,
    "max_position_embeddings": 262144,
    "mlp_only_layers": [],
    "moe_intermediate_size": 512,
    "norm_topk_prob": True,
    "num_attention_heads": 16,
    "num_experts": 512,
    "num_experts_per_tok": 10,
    "num_hidden_layers": 48,
    "num_key_value_heads": 2,
    "output_router_logits": False,
    "partial_rotary_factor": 0.25,
    "rms_norm_eps": 1e-06,
    "rope_scaling": None,
    "rope_theta": 10000000,
    "router_aux_loss_coef": 0.001,
    "shared_expert_intermediate_size": 512,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "use_cache": True,
    "use_sliding_window": False,
    "vocab_size": 151936,
}
