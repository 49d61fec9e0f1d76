"""packcfg's core attention for megatron-core's local layer spec: THD packs, padded batches, CPU CP.

Megatron's `Attention` hands this module q/k/v after the QKV projection; with
`PackedSeqParams(qkv_format="thd")` they are `[tokens, heads, dim]`, otherwise `[seq, batch, heads, dim]`.
Here RoPE is applied to all tokens at once from per-token position ids (a gather, no per-sample
Python work), then attention is causal within each sample and blind across samples.

Attention method: on CUDA in bf16/fp16, one fused variable-length kernel call per layer (flash-attn's,
else torch's `varlen_attn`; `packcfg.train.varlen` chooses, following `model.attention_backend`). On CPU
one `scaled_dot_product_attention(is_causal=True)` per group of equal-length samples: measured in
`bench/train.py`, on CPU it beats one SDPA over the pack with a block-diagonal mask (O(T^2) work and
memory) and unpack-to-padded.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import Tensor

from packcfg.train import varlen
from packcfg.train.mcore_compat import quiet_megatron_import

with quiet_megatron_import():
    from megatron.core.packed_seq_params import PackedSeqParams
    from megatron.core.transformer.module import MegatronModule
    from megatron.core.transformer.transformer_config import TransformerConfig


@dataclass
class ThdParams(PackedSeqParams):
    """`PackedSeqParams` plus what packcfg's attention needs beyond cu_seqlens.

    `cu_seqlens_q` bounds this rank's query tokens per sample; `cu_seqlens_kv` bounds each sample's
    keys in the (CP-gathered) key order. Without CP both are the same tensor.
    """

    position_ids: Tensor | None = None  # [T] RoPE position of each local token within its sample
    index_in_sample: Tensor | None = None  # CP: [T] each local query's slot in its padded sample
    cu_seqlens_list: list[int] | None = None  # cu_seqlens_q as Python ints (one .tolist() per batch)
    cu_seqlens_kv_list: list[int] | None = None
    kv_gather_index: Tensor | None = None  # CP: gathered [cp*T] keys -> samples' global key order
    padding_segment: bool = False  # the last segment is pack padding: no attention computed for it
    cu_seqlens_unpadded_list: list[int] | None = None  # CP: running sum of real lengths (TE's cu_seqlens_q)
    # Per-batch values every layer shares, computed by the first layer: RoPE tables, the fused-kernel view.
    layer_cache: dict[Any, Any] = field(default_factory=dict, repr=False, compare=False)


@dataclass(frozen=True)
class RopeSpec:
    """Rotary settings from the model config: head dim rotated, base, and the two scalings megatron-core's
    `RotaryEmbedding` knows: Llama 3.x `rope_scaling` (factor; low/high frequency factors 1 and 4 and an
    original context of 8192, fixed as megatron-core fixes them) and linear position interpolation."""

    dim: int
    base: float = 10000.0
    llama3_factor: float | None = None  # model.rope_scaling_factor when model.rope_scaling
    interpolation_factor: float | None = None  # model.seq_len_interpolation_factor


def llama3_inv_freq(
    inv_freq: Tensor, factor: float, low: float = 1.0, high: float = 4.0, context: int = 8192
) -> Tensor:
    """Llama 3.x frequency scaling: long wavelengths divided by `factor`, short ones kept, the band
    between interpolated smoothly (megatron-core `RotaryEmbedding._apply_scaling`, HF `llama3` rope)."""
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > context / low, inv_freq / factor, inv_freq)
    smooth = (context / wavelen - low) / (high - low)
    blended = (1 - smooth) * scaled / factor + smooth * scaled
    medium = (wavelen >= context / high) & (wavelen <= context / low)
    return torch.where(medium, blended, scaled)


class Rope:
    """RoPE as megatron computes it (fp32 angles, non-interleaved halves), from per-token positions."""

    def __init__(self, spec: RopeSpec) -> None:
        self.dim = spec.dim
        self.inv_freq = 1.0 / (spec.base ** (torch.arange(0, spec.dim, 2, dtype=torch.float32) / spec.dim))
        if spec.llama3_factor is not None:
            self.inv_freq = llama3_inv_freq(self.inv_freq, spec.llama3_factor)
        if spec.interpolation_factor is not None:  # positions / factor, as one scaling of every frequency
            self.inv_freq = self.inv_freq / spec.interpolation_factor

    def cos_sin(self, positions: Tensor) -> tuple[Tensor, Tensor]:
        """cos/sin tables `[T, 1, dim]` for any positions: one outer product, no per-sample work."""
        freqs = torch.outer(positions.to(torch.float32), self.inv_freq.to(positions.device))
        emb = torch.cat((freqs, freqs), dim=-1).unsqueeze(1)
        return emb.cos(), emb.sin()

    def apply(self, x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
        """Rotate the first `dim` channels of `x` (`[T, heads, head_dim]` or `[s, b, heads, head_dim]`)."""
        rot, rest = x[..., : self.dim], x[..., self.dim :]
        x1, x2 = rot.chunk(2, dim=-1)
        rotated = torch.cat((-x2, x1), dim=-1)
        out = rot * cos.to(x.dtype) + rotated * sin.to(x.dtype)
        return torch.cat((out, rest), dim=-1) if rest.numel() else out


def thd_positions(cu_seqlens: Tensor, total: int) -> Tensor:
    """Position of every token within its sample, from cu_seqlens by searchsorted + gather."""
    idx = torch.arange(total, device=cu_seqlens.device)
    sample = torch.searchsorted(cu_seqlens[1:].to(torch.int64), idx, right=True)
    return idx - cu_seqlens.to(torch.int64)[sample]


class _GatherFromContextParallel(torch.autograd.Function):
    """All-gather along a new leading dim over the CP group; backward sums every rank's gradient
    for this rank's slice (all-reduce, then take our slice), so keys/values get exact gradients."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, group: dist.ProcessGroup) -> Tensor:  # type: ignore[override]
        ctx.group = group
        parts = [torch.empty_like(x) for _ in range(dist.get_world_size(group))]
        dist.all_gather(parts, x.contiguous(), group=group)
        return torch.stack(parts)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None]:  # type: ignore[override]
        grad = grad.contiguous()
        dist.all_reduce(grad, group=ctx.group)
        return grad[dist.get_rank(ctx.group)], None


def gather_context_parallel(x: Tensor, group: dist.ProcessGroup) -> Tensor:
    return _GatherFromContextParallel.apply(x, group)


def expand_groups(x: Tensor, heads: int, head_dim_axis: int) -> Tensor:
    """GQA: repeat each key/value group for its query heads (megatron orders heads group-major)."""
    groups = x.shape[head_dim_axis]
    return x if groups == heads else x.repeat_interleave(heads // groups, dim=head_dim_axis)


# torch >= 2.5: SDPA repeats key/value groups itself (`enable_gqa`, the same group-major order as
# `expand_groups`), so keys and values are never materialised per query head. Used on CPU (measured there:
# 5-9% faster fwd+bwd than materialising, torch 2.13, 8/2 heads x 64) and for CUDA half precision, where
# flash attention takes GQA; CUDA fp32's memory-efficient kernel does not, so those calls keep the copies.
_SDPA_HAS_GQA = "enable_gqa" in (F.scaled_dot_product_attention.__doc__ or "")


def _native_gqa(query: Tensor, key: Tensor, head_axis: int) -> bool:
    """Whether SDPA should repeat this call's key/value groups itself."""
    if key.shape[head_axis] == query.shape[head_axis]:
        return False
    return _SDPA_HAS_GQA and (not query.is_cuda or query.dtype in varlen.HALF)


class PackedCoreAttention(MegatronModule):
    """Drop-in for megatron's `DotProductAttention` (same constructor and forward signature)."""

    def __init__(
        self,
        config: TransformerConfig,
        layer_number: int,
        attn_mask_type: Any,
        attention_type: str,
        attention_dropout: float | None = None,
        softmax_scale: float | None = None,
        cp_comm_type: str | None = None,
        pg_collection: Any = None,
        rope: RopeSpec | None = None,
        method: varlen.Method = "sdpa_loop",
        **_unused: Any,  # keyword arguments added by newer megatron-core releases
    ) -> None:
        super().__init__(config=config)
        self.head_dim = config.kv_channels
        self.softmax_scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(self.head_dim)
        self.dropout = config.attention_dropout if attention_dropout is None else attention_dropout
        self.rope = Rope(rope) if rope is not None else None
        self.rope_spec = rope
        self.method: varlen.Method = method  # for THD packs: varlen.choose() decides, model.py passes it

    def forward(
        self,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        attention_mask: Tensor | None,
        attn_mask_type: Any = None,
        attention_bias: Tensor | None = None,
        packed_seq_params: PackedSeqParams | None = None,
    ) -> Tensor:
        if attention_bias is not None:
            raise ValueError("packcfg attention: attention_bias is not supported")
        if packed_seq_params is not None and packed_seq_params.qkv_format == "thd":
            assert isinstance(packed_seq_params, ThdParams), "THD batches must carry packcfg ThdParams"
            return self._thd(query, key, value, packed_seq_params)
        return self._padded(query, key, value)

    def _dropout_p(self) -> float:
        return self.dropout if self.training else 0.0

    def _padded(self, query: Tensor, key: Tensor, value: Tensor) -> Tensor:
        """`[s, b, h, d]` rows, right-padded: causal attention never lets a real token see padding."""
        s, b, heads, _ = query.shape
        if self.rope is not None:
            cos, sin = self.rope.cos_sin(torch.arange(s, device=query.device))
            cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)  # [s, 1, 1, d]
            query, key = self.rope.apply(query, cos, sin), self.rope.apply(key, cos, sin)
        gqa = _native_gqa(query, key, 2)
        if not gqa:
            key, value = expand_groups(key, heads, 2), expand_groups(value, heads, 2)
        q, k, v = (t.permute(1, 2, 0, 3) for t in (query, key, value))
        out = F.scaled_dot_product_attention(
            q, k, v, is_causal=True, dropout_p=self._dropout_p(), scale=self.softmax_scale, **_gqa_kwargs(gqa)
        )
        return out.permute(2, 0, 1, 3).reshape(s, b, heads * self.head_dim)

    def _thd(self, query: Tensor, key: Tensor, value: Tensor, params: ThdParams) -> Tensor:
        """`[T, h, d]`: RoPE for all tokens at once, then causal attention within each sample."""
        total, heads, _ = query.shape
        if self.rope is not None:
            assert params.position_ids is not None
            cos, sin = self._rope_tables(params)
            query, key = self.rope.apply(query, cos, sin), self.rope.apply(key, cos, sin)
        if params.kv_gather_index is None and self._fused(query):
            return self._thd_fused(query, key, value, params)
        gqa = params.kv_gather_index is None and _native_gqa(query, key, 1)
        if not gqa:
            key, value = expand_groups(key, heads, 1), expand_groups(value, heads, 1)
        if params.kv_gather_index is not None:
            return self._thd_context_parallel(query, key, value, params)
        assert params.cu_seqlens_list is not None
        lengths = _lengths(params.cu_seqlens_list)
        if params.padding_segment:
            # Its outputs reach no loss and no real token: zeros instead of an L^2 attention over padding.
            lengths[-1] = -lengths[-1]
        # torch.split, not slicing: its backward is one concatenation, where per-slice backward would
        # materialise a full-size zero gradient per sample.
        qs, ks, vs = (torch.split(t, [abs(n) for n in lengths]) for t in (query, key, value))
        outs: list[Tensor] = [query.new_zeros(max(0, -n), heads, self.head_dim) for n in lengths]
        # Samples of equal length share one batched kernel call (as padding would batch them).
        for members in _same_length_groups(lengths):
            q, k, v = (_batch([parts[i] for i in members]) for parts in (qs, ks, vs))
            for i, out in zip(members, self._sdpa(q, k, v, causal=True, gqa=gqa), strict=True):
                outs[i] = out
        return torch.cat(outs).reshape(total, heads * self.head_dim)

    def _rope_tables(self, params: ThdParams) -> tuple[Tensor, Tensor]:
        """cos/sin for the batch's positions, computed by the first layer and shared by the rest."""
        key = ("rope", self.rope_spec)
        if key not in params.layer_cache:
            assert self.rope is not None and params.position_ids is not None
            params.layer_cache[key] = self.rope.cos_sin(params.position_ids)
        return params.layer_cache[key]

    def _fused(self, query: Tensor) -> bool:
        """A fused varlen kernel was chosen and can take this call (CUDA, fp16/bf16: not an fp32 call made
        outside autocast, which the per-sample loop computes instead)."""
        return self.method != "sdpa_loop" and query.is_cuda and query.dtype in varlen.HALF

    def _thd_fused(self, query: Tensor, key: Tensor, value: Tensor, params: ThdParams) -> Tensor:
        """One fused variable-length kernel call for the whole pack; the padding segment is left out."""
        total, heads, _ = query.shape
        if "varlen" not in params.layer_cache:
            assert params.cu_seqlens_q is not None and params.cu_seqlens_list is not None
            params.layer_cache["varlen"] = varlen.varlen_view(
                params.cu_seqlens_q, params.cu_seqlens_list, params.padding_segment
            )
        view: varlen.VarlenView = params.layer_cache["varlen"]
        n = view.tokens
        out = varlen.fused_attention(
            self.method, query[:n], key[:n], value[:n], view, self.softmax_scale, self._dropout_p()
        )
        if n < total:
            out = torch.cat((out, out.new_zeros(total - n, *out.shape[1:])))
        return out.reshape(total, heads * self.head_dim)

    def _sdpa(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        causal: bool = False,
        mask: Tensor | None = None,
        gqa: bool = False,
    ) -> Tensor:
        """Attention on `[g, L, h, d]` (g samples of length L); returns the same layout. With `gqa`, k/v
        hold the key/value groups and SDPA repeats them."""
        out = F.scaled_dot_product_attention(
            q.transpose(1, 2),
            k.transpose(1, 2),
            v.transpose(1, 2),
            attn_mask=mask,
            is_causal=causal,
            dropout_p=self._dropout_p(),
            scale=self.softmax_scale,
            **_gqa_kwargs(gqa),
        )
        return out.transpose(1, 2)

    def _thd_context_parallel(self, query: Tensor, key: Tensor, value: Tensor, params: ThdParams) -> Tensor:
        """CP on CPU: gather every rank's keys/values, restore each sample's global order, and let each
        local query see the keys at or before its global position within its own sample."""
        total, heads, _ = query.shape
        assert params.cp_group is not None and params.kv_gather_index is not None
        assert params.index_in_sample is not None and params.cu_seqlens_kv_list is not None
        cu_q, cu_kv = params.cu_seqlens_list, params.cu_seqlens_kv_list
        assert cu_q is not None
        k_all = gather_context_parallel(key, params.cp_group).flatten(0, 1)[params.kv_gather_index]
        v_all = gather_context_parallel(value, params.cp_group).flatten(0, 1)[params.kv_gather_index]
        q_parts = torch.split(query, _lengths(cu_q))
        index_parts = torch.split(params.index_in_sample, _lengths(cu_q))
        k_parts, v_parts = (torch.split(t, _lengths(cu_kv)) for t in (k_all, v_all))
        outs = []
        for q, slot, k, v in zip(q_parts, index_parts, k_parts, v_parts, strict=True):
            if q.shape[0]:
                allowed = torch.arange(k.shape[0], device=q.device).unsqueeze(0) <= slot.unsqueeze(1)
                outs.append(self._sdpa(q[None], k[None], v[None], mask=allowed)[0])
        return torch.cat(outs).reshape(total, heads * self.head_dim)


def _gqa_kwargs(gqa: bool) -> dict[str, bool]:
    return {"enable_gqa": True} if gqa else {}


def _lengths(cu_seqlens: list[int]) -> list[int]:
    return [b - a for a, b in zip(cu_seqlens[:-1], cu_seqlens[1:], strict=True)]


def _same_length_groups(lengths: list[int]) -> list[list[int]]:
    """Sample indices grouped by length (empty and skipped, i.e. negative-length, samples left out)."""
    groups: dict[int, list[int]] = {}
    for i, n in enumerate(lengths):
        if n > 0:
            groups.setdefault(n, []).append(i)
    return list(groups.values())


def _batch(parts: list[Tensor]) -> Tensor:
    """`[g, L, h, d]` from g equal-length samples; a lone sample is a view, not a copy."""
    return parts[0].unsqueeze(0) if len(parts) == 1 else torch.stack(parts)
