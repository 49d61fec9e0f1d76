"""An outside oracle for packcfg's attention: megatron-core's own stock local-spec `DotProductAttention`
on a padded `[s, b, h, d]` batch (RoPE from megatron-core's `RotaryEmbedding` + `apply_rotary_pos_emb`)
against packcfg's `PackedCoreAttention` on the THD equivalent (RoPE inside it).

megatron-core's CPU caveats (spec environment.md) and what this test does about them, nothing more:
- `DotProductAttention` takes its score buffer from `get_global_memory_buffer()`, allocated on
  `torch.cuda.current_device()`: without CUDA that device query is patched to answer "cpu" for the test.
  With CUDA both sides run on the GPU (inputs made there) and are compared on the CPU.
- its default causal mask is built on "cuda": the test passes the causal mask itself (megatron's own
  convention, True = masked), which padding on the right cannot reach from a real token.
- it forks the CUDA RNG tracker around dropout: on CPU the executor's tracker is megatron's no-op
  inference tracker (`seed_model_parallel_rng`), and dropout is 0.
Each control (a wrong softmax scale, no sample boundaries, a wrong RoPE theta or scaling) must fail.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from packcfg.train.attention import PackedCoreAttention, RopeSpec
from packcfg.train.batches import Sample, pack_thd
from packcfg.train.forward import to_device

from .cases import one_attention_layer_config
from .devices import DEVICE, ON_CUDA

HEADS, GROUPS, HEAD_DIM = 4, 2, 16
LENGTHS = (5, 181, 1, 33, 240)  # runtime lengths; long ones so that low RoPE frequencies matter
# fp32 on both sides; GPU kernels (SDPA's memory-efficient kernel vs megatron's baddbmm + softmax) sum in
# another order than the CPU's, hence a looser bound there, still 50x under the smallest control's margin.
TOL = 2e-5 if ON_CUDA else 2e-6


@pytest.fixture(scope="module")
def world():
    from packcfg.train.mcore_compat import seed_model_parallel_rng
    from packcfg.train.parallel import distributed

    with distributed() as layout:
        seed_model_parallel_rng(0)
        yield layout


@pytest.fixture()
def cpu_device_queries(monkeypatch):
    """megatron-core's memory buffer asks `torch.cuda.current_device()`; without CUDA it gets "cpu"."""
    if not ON_CUDA:
        monkeypatch.setattr(torch.cuda, "current_device", lambda: "cpu")


def _config():
    return one_attention_layer_config(HEADS, GROUPS, HEAD_DIM)


def _inputs(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    total = sum(LENGTHS)
    q = torch.randn(total, HEADS, HEAD_DIM, generator=g)
    k = torch.randn(total, GROUPS, HEAD_DIM, generator=g)
    v = torch.randn(total, GROUPS, HEAD_DIM, generator=g)
    samples = [Sample(np.arange(n + 1) % 7 + 1, np.ones(n + 1, np.int8)) for n in LENGTHS]
    return q.to(DEVICE), k.to(DEVICE), v.to(DEVICE), to_device(pack_thd(samples), DEVICE)


def _to_padded(x: torch.Tensor) -> torch.Tensor:
    """THD `[T, h, d]` -> right-padded `[s, b, h, d]`, one sample per batch row."""
    s = max(LENGTHS)
    out = x.new_zeros(s, len(LENGTHS), *x.shape[1:])
    start = 0
    for b, n in enumerate(LENGTHS):
        out[:n, b] = x[start : start + n]
        start += n
    return out


def _from_padded(y: torch.Tensor) -> torch.Tensor:
    return torch.cat([y[:n, b] for b, n in enumerate(LENGTHS)])


def megatron_reference(q, k, v, rope: dict | None = None) -> torch.Tensor:
    """Stock megatron-core: RotaryEmbedding + apply_rotary_pos_emb on BSHD, then DotProductAttention."""
    from megatron.core.models.common.embeddings.rope_utils import apply_rotary_pos_emb
    from megatron.core.models.common.embeddings.rotary_pos_embedding import RotaryEmbedding
    from megatron.core.transformer.dot_product_attention import DotProductAttention
    from megatron.core.transformer.enums import AttnMaskType

    config = _config()
    qp, kp, vp = _to_padded(q), _to_padded(k), _to_padded(v)
    s = qp.shape[0]
    if rope is not None:
        rotary = RotaryEmbedding(
            kv_channels=HEAD_DIM, rotary_percent=1.0, use_cpu_initialization=True, **rope
        )
        emb = rotary(s)  # [s, 1, 1, d]
        qp, kp = apply_rotary_pos_emb(qp, emb, config=config), apply_rotary_pos_emb(kp, emb, config=config)
    attention = DotProductAttention(
        config, layer_number=1, attn_mask_type=AttnMaskType.causal, attention_type="self"
    )
    causal = torch.triu(torch.ones(s, s, dtype=torch.bool, device=DEVICE), diagonal=1)[None, None]
    out = attention(qp, kp, vp, attention_mask=causal)  # [s, b, h*d]
    return _from_padded(out.view(s, len(LENGTHS), HEADS * HEAD_DIM))


def packcfg_thd(
    q, k, v, thd, rope: RopeSpec | None = None, softmax_scale: float | None = None
) -> torch.Tensor:
    from megatron.core.transformer.enums import AttnMaskType

    attention = PackedCoreAttention(
        _config(), layer_number=1, attn_mask_type=AttnMaskType.causal, attention_type="self",
        softmax_scale=softmax_scale, rope=rope,
    )  # fmt: skip
    return attention(q, k, v, attention_mask=None, packed_seq_params=thd)


def _diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.cpu() - b.cpu()).abs().max())


def test_packed_attention_equals_megatron_dot_product_attention(world, cpu_device_queries):
    q, k, v, mb = _inputs()
    assert _diff(packcfg_thd(q, k, v, mb.thd), megatron_reference(q, k, v)) <= TOL


def test_control_wrong_softmax_scale_fails(world, cpu_device_queries):
    q, k, v, mb = _inputs()
    wrong = packcfg_thd(q, k, v, mb.thd, softmax_scale=1.0 / HEAD_DIM)
    assert _diff(wrong, megatron_reference(q, k, v)) > 1e-3


def test_control_attention_across_samples_fails(world, cpu_device_queries):
    from dataclasses import replace

    q, k, v, mb = _inputs()
    total = sum(LENGTHS)
    one = torch.tensor([0, total], dtype=torch.int32)
    one = one.to(DEVICE)
    whole = replace(
        mb.thd, cu_seqlens_q=one, cu_seqlens_kv=one, cu_seqlens_list=[0, total], cu_seqlens_kv_list=[0, total]
    )
    assert _diff(packcfg_thd(q, k, v, whole), megatron_reference(q, k, v)) > 1e-3


LLAMA31 = dict(rotary_base=500000, rope_scaling=True, rope_scaling_factor=8.0)


@pytest.mark.parametrize(
    ("mega", "spec"),
    [
        (dict(rotary_base=10000), RopeSpec(HEAD_DIM, 10000.0)),
        (LLAMA31, RopeSpec(HEAD_DIM, 500000.0, llama3_factor=8.0)),
        (
            dict(rotary_base=10000, seq_len_interpolation_factor=4.0),
            RopeSpec(HEAD_DIM, 10000.0, interpolation_factor=4.0),
        ),
    ],
    ids=["plain", "llama3_scaling", "linear_interpolation"],
)
def test_packed_rope_attention_equals_megatron(world, cpu_device_queries, mega, spec):
    q, k, v, mb = _inputs(1)
    assert _diff(packcfg_thd(q, k, v, mb.thd, rope=spec), megatron_reference(q, k, v, rope=mega)) <= TOL


@pytest.mark.parametrize(
    "wrong",
    [
        RopeSpec(HEAD_DIM, 10000.0, llama3_factor=8.0),
        RopeSpec(HEAD_DIM, 500000.0),
        RopeSpec(HEAD_DIM, 500000.0, llama3_factor=4.0),
    ],
    ids=["wrong_theta", "scaling_dropped", "wrong_factor"],
)
def test_control_wrong_rope_fails(world, cpu_device_queries, wrong):
    q, k, v, mb = _inputs(1)
    assert _diff(packcfg_thd(q, k, v, mb.thd, rope=wrong), megatron_reference(q, k, v, rope=LLAMA31)) > 1e-4


def test_softmax_scale_is_one_over_sqrt_head_dim(world):
    """The default scale, read off the module (the oracle above is what proves it is applied)."""
    from megatron.core.transformer.enums import AttnMaskType

    attention = PackedCoreAttention(_config(), 1, AttnMaskType.causal, "self")
    assert attention.softmax_scale == pytest.approx(1.0 / math.sqrt(HEAD_DIM))
