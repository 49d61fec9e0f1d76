"""Tiny random Hugging Face models made from local `transformers` code (no downloads), for tests,
`scripts/make_tiny_hf_model.py` and `recipes/tiny_hf_sft.yaml`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

TINY_SHAPE: dict[str, Any] = dict(
    hidden_size=64,
    intermediate_size=160,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    rms_norm_eps=1e-6,
    max_position_embeddings=1024,
)


def tiny_hf_config(family: str, vocab_size: int, **overrides: Any) -> Any:
    """A transformers config of `family` (llama, qwen2, qwen3) with the tiny shape plus `overrides`."""
    import transformers

    classes = {"llama": "LlamaConfig", "qwen2": "Qwen2Config", "qwen3": "Qwen3Config"}
    if family not in classes:
        raise ValueError(f"family {family!r}: expected one of {', '.join(classes)}")
    kwargs = {**TINY_SHAPE, "vocab_size": vocab_size, "tie_word_embeddings": False, **overrides}
    if family == "qwen3":
        kwargs.setdefault("attention_bias", False)
    return getattr(transformers, classes[family])(**kwargs)


def make_tiny_hf_model(family: str, folder: Path, vocab_size: int, seed: int = 0, **overrides: Any) -> Any:
    """Write a randomly initialised tiny model (config.json + model.safetensors) to `folder`; return it
    (fp32, eval mode). Norm weights are randomised too, so a swapped norm cannot pass unnoticed."""
    import torch
    import transformers

    config = tiny_hf_config(family, vocab_size, **overrides)
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.2 * torch.randn_like(p))
            elif name.endswith("bias"):
                p.copy_(0.1 * torch.randn_like(p))
    model.eval()
    model.save_pretrained(str(folder), safe_serialization=True)
    return model
