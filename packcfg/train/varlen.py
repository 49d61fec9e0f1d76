"""Which kernel computes packed (THD) attention, and the fused variable-length calls themselves.

One THD pack holds many samples; attention must be causal within each sample and blind across them.
The methods, fastest first where each can run:

- ``flash_attn``: flash-attn's ``flash_attn_varlen_func`` (when the package is installed): one call per
  layer, grouped-query attention native, dropout supported.
- ``torch_varlen``: ``torch.nn.attention.varlen.varlen_attn`` (torch >= 2.9, CUDA, fp16/bf16): one call
  per layer. Its keyword arguments moved between releases (2.9-2.10: ``is_causal``; 2.11: ``window_size``,
  ``scale``; 2.13: also ``enable_gqa``), so they are chosen by feature test; where ``enable_gqa`` is missing,
  grouped keys/values go to the same aten flash kernels through ``GroupedFlashVarlen`` (no copy per query
  head; repeated per head only where those kernels are absent). No dropout.
- ``sdpa_loop``: one ``scaled_dot_product_attention(is_causal=True)`` per group of equal-length samples
  (``attention.PackedCoreAttention``). The only exact method with a CPU kernel, and the fastest one there
  (environment.md; ``bench/train.py``), so CPU always uses it.

``cu_seqlens`` stay on the model's device and ``max_seqlen`` comes from the batch's host-side list, so a
fused call needs no device-to-host sync per layer. Transformer Engine's fused THD attention is not here:
with TE the model uses TE's layer spec instead of packcfg's attention (``model.use_transformer_engine``).

The choice follows ``model.attention_backend``, Megatron Bridge's own field (megatron-core ``AttnBackend``):
``auto``/unset picks the fastest method that can run; ``flash`` asks for a fused varlen kernel (refused
where none can run); ``unfused``/``local`` keep the per-sample SDPA loop; ``fused`` is TE's and is refused
by the packcfg executor when TE is not in use.
"""

from __future__ import annotations

import functools
import importlib.util
import inspect
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import Tensor

Method = Literal["flash_attn", "torch_varlen", "sdpa_loop"]
FUSED_METHODS: tuple[Method, ...] = ("flash_attn", "torch_varlen")
HALF = (torch.float16, torch.bfloat16)
DESCRIPTIONS: dict[str, str] = {
    "flash_attn": "flash-attn varlen (one fused call per layer)",
    "torch_varlen": "torch varlen_attn (one fused call per layer)",
    "sdpa_loop": "per-sample SDPA",
}


@functools.cache
def _flash_attn_varlen() -> Callable[..., Tensor] | None:
    if importlib.util.find_spec("flash_attn") is None:
        return None
    try:
        from flash_attn import flash_attn_varlen_func
    except Exception:  # noqa: BLE001 - a broken build (ABI mismatch) means "not available", never a crash
        return None
    return flash_attn_varlen_func


@functools.cache
def _torch_varlen() -> tuple[Callable[..., Tensor], frozenset[str]] | None:
    try:
        from torch.nn.attention.varlen import varlen_attn
    except ImportError:
        return None
    return varlen_attn, frozenset(inspect.signature(varlen_attn).parameters)


def available(method: Method) -> bool:
    """Whether `method` can run in this process (a CUDA device, and the kernel's package)."""
    if method == "sdpa_loop":
        return True
    if not torch.cuda.is_available():
        return False
    return (_flash_attn_varlen() if method == "flash_attn" else _torch_varlen()) is not None


def choose(backend: str, *, cuda: bool, half: bool, dropout: float) -> tuple[Method, str]:
    """(method, why) for a model on CUDA or not, computing in fp16/bf16 or not, with attention dropout.
    Raises ValueError naming `model.attention_backend` when an explicit request cannot be met."""
    if backend in ("unfused", "local"):
        return "sdpa_loop", f"model.attention_backend {backend}"
    if backend == "fused":
        raise ValueError(
            "model.attention_backend: fused is Transformer Engine's fused attention, and the packcfg executor "
            "is not using TE here (TE not installed, or model.transformer_impl is not transformer_engine); "
            "use auto, flash or unfused"
        )
    candidates: list[Method] = [m for m in FUSED_METHODS if cuda and available(m)]
    if dropout > 0:  # torch's varlen_attn has no dropout
        candidates = [m for m in candidates if m == "flash_attn"]
    if backend == "flash":
        if not cuda:
            raise ValueError(
                "model.attention_backend: flash needs a CUDA device (CPU runs the per-sample loop)"
            )
        if not half:
            raise ValueError(
                "model.attention_backend: flash needs bf16 or fp16 compute (set model.bf16: true)"
            )
        if not candidates:
            raise ValueError(
                "model.attention_backend: flash needs flash-attn, or torch >= 2.9's varlen_attn without attention "
                "dropout; neither can run here"
            )
        return candidates[0], "model.attention_backend flash"
    if not cuda:
        return "sdpa_loop", "CPU: the fastest exact method there"
    if not half:
        return "sdpa_loop", "fp32 compute: the fused varlen kernels need bf16 or fp16"
    if not candidates:
        return "sdpa_loop", "no fused varlen kernel here (flash-attn absent, torch varlen_attn unavailable)"
    return candidates[0], "auto"


@dataclass(frozen=True)
class VarlenView:
    """The real samples of a THD pack as a fused kernel takes them: `cu_seqlens` on the device (the pack's
    trailing padding segment left out), their longest length (a host int), and the real token count."""

    cu_seqlens: Tensor
    max_seqlen: int
    tokens: int


def varlen_view(cu_seqlens: Tensor, cu_list: list[int], padding_segment: bool) -> VarlenView:
    if padding_segment:  # the padding segment is the last one: its outputs reach no loss
        cu_seqlens, cu_list = cu_seqlens[:-1], cu_list[:-1]
    lengths = [b - a for a, b in zip(cu_list[:-1], cu_list[1:], strict=True)]
    return VarlenView(cu_seqlens.to(torch.int32), max(lengths, default=0), cu_list[-1])


def fused_attention(
    method: Method, q: Tensor, k: Tensor, v: Tensor, view: VarlenView, scale: float, dropout: float = 0.0
) -> Tensor:
    """Causal attention within each sample of `view`: q `[T, h, d]`, k/v `[T, g, d]` (g key/value groups,
    megatron's group-major head order); returns `[T, h, d]` for the first `view.tokens` tokens."""
    if method == "flash_attn":
        fn = _flash_attn_varlen()
        assert fn is not None
        cu, n = view.cu_seqlens, view.max_seqlen
        return fn(q, k, v, cu, cu, n, n, dropout_p=dropout, softmax_scale=scale, causal=True)
    found = _torch_varlen()
    assert found is not None and dropout == 0.0
    fn, params = found
    kwargs: dict[str, Any] = {}
    if "window_size" in params:  # torch 2.13: (-1, 0) is causal
        kwargs["window_size"] = (-1, 0)
    else:  # torch 2.9-2.11
        kwargs["is_causal"] = True
    if "scale" in params:
        kwargs["scale"] = scale
    elif not math.isclose(scale, 1.0 / math.sqrt(q.shape[-1])):
        q = q * (scale * math.sqrt(q.shape[-1]))  # the kernel's fixed 1/sqrt(d), rescaled
    heads, groups = q.shape[1], k.shape[1]
    cu, n = view.cu_seqlens, view.max_seqlen
    if groups != heads:
        if "enable_gqa" in params:
            kwargs["enable_gqa"] = True
        elif q.is_cuda and _aten_flash_varlen():
            # torch 2.9-2.11: varlen_attn refuses key/value groups, but the flash kernel under it takes them
            # as they are (torch 2.13's enable_gqa passes them straight to it): no copies per query head
            return GroupedFlashVarlen.apply(q, k, v, cu, n, kwargs.get("scale"))
        else:
            k, v = (t.repeat_interleave(heads // groups, dim=1) for t in (k, v))
    return fn(q, k, v, cu, cu, n, n, **kwargs)


@functools.cache
def _aten_flash_varlen() -> bool:
    return hasattr(torch.ops.aten, "_flash_attention_forward") and hasattr(
        torch.ops.aten, "_flash_attention_backward"
    )


class GroupedFlashVarlen(torch.autograd.Function):
    """Causal varlen attention with key/value groups as they are, through the aten flash kernels that
    ``varlen_attn`` itself calls (as torch 2.13's ``varlen_attn(..., enable_gqa=True)`` does); no dropout.
    On one H100 (torch 2.11, bf16, 16,384 tokens, 32/8 heads x 64, fwd+bwd): 3.44 ms against 3.65 ms with
    the groups repeated per query head, the same outputs and key/value gradients bit for bit."""

    @staticmethod
    def forward(ctx: Any, q: Tensor, k: Tensor, v: Tensor, cu: Tensor, n: int, scale: float | None) -> Tensor:
        out, lse, seed, offset, _ = torch.ops.aten._flash_attention_forward(
            q, k, v, cu, cu, n, n, 0.0, True, False, scale=scale
        )
        ctx.save_for_backward(q, k, v, out, lse, cu, seed, offset)
        ctx.n, ctx.scale = n, scale
        return out

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
        q, k, v, out, lse, cu, seed, offset = ctx.saved_tensors
        n = ctx.n
        dq, dk, dv = torch.ops.aten._flash_attention_backward(
            grad.contiguous(), q, k, v, out, lse, cu, cu, n, n, 0.0, True, seed, offset, scale=ctx.scale
        )
        return dq, dk, dv, None, None, None
