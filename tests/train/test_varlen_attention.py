"""The fused variable-length attention methods (packcfg.train.varlen) against the per-sample SDPA loop.

On CUDA, each method that can run here (flash-attn's varlen function, torch's `varlen_attn`) computes
the same outputs and gradients as the per-sample loop on a GQA pack with a padding segment, and a pack
whose sample bounds are lost (one sequence over the pack) must fail the same comparison. On any machine:
the choice of method, the adapter for torch releases whose `varlen_attn` lacks `scale`, `window_size` and
`enable_gqa` (proved with a stand-in kernel that computes attention per sample), and the refusals.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from packcfg.train import varlen
from packcfg.train.attention import PackedCoreAttention, RopeSpec
from packcfg.train.batches import Sample, pack_thd
from packcfg.train.forward import to_device

from .cases import one_attention_layer_config
from .devices import DEVICE, ON_CUDA

HEADS, GROUPS, HEAD_DIM = 8, 2, 64
LENGTHS = (1, 300, 17, 64, 511, 128, 128, 2)  # equal lengths too: the loop batches those
PACK = 1280  # > sum(LENGTHS): the pack ends with a padding segment
needs_cuda = pytest.mark.skipif(not ON_CUDA, reason="needs CUDA: the fused varlen kernels have no CPU kernel")


def _config():
    return one_attention_layer_config(HEADS, GROUPS, HEAD_DIM)


def _attention(method: varlen.Method, rope: bool = True) -> PackedCoreAttention:
    from megatron.core.transformer.enums import AttnMaskType

    spec = RopeSpec(HEAD_DIM, 500000.0, llama3_factor=8.0) if rope else None
    return PackedCoreAttention(_config(), 1, AttnMaskType.causal, "self", rope=spec, method=method)


def _pack(dtype: torch.dtype, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    samples = [Sample(np.arange(n + 1) % 11 + 1, np.ones(n + 1, np.int8)) for n in LENGTHS]
    mb = to_device(pack_thd(samples, pad_to=PACK), DEVICE)
    assert mb.thd.padding_segment
    q, k, v = (
        torch.randn(PACK, h, HEAD_DIM, generator=g).to(DEVICE, dtype).requires_grad_()
        for h in (HEADS, GROUPS, GROUPS)
    )
    return q, k, v, mb.thd


def _outputs_and_grads(method: varlen.Method, q, k, v, thd, real: int):
    """Output and q/k/v gradients of the real tokens (a fixed random cotangent), as fp32 on the CPU."""
    q, k, v = (t.detach().clone().requires_grad_() for t in (q, k, v))
    out = _attention(method)(q, k, v, None, packed_seq_params=replace(thd, layer_cache={}))
    cotangent = torch.randn(out.shape, generator=torch.Generator().manual_seed(1)).to(out)
    (out[:real] * cotangent[:real]).sum().backward()
    return [t.detach().float().cpu() for t in (out[:real], q.grad, k.grad, v.grad)]


def _relative(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max() / b.abs().max())


@needs_cuda
@pytest.mark.parametrize("method", varlen.FUSED_METHODS)
def test_fused_method_equals_the_per_sample_loop(method):
    if not varlen.available(method):
        pytest.skip(f"{method} is not installed here")
    real = sum(LENGTHS)
    q, k, v, thd = _pack(torch.bfloat16)
    fused = _outputs_and_grads(method, q, k, v, thd, real)
    loop = _outputs_and_grads("sdpa_loop", q, k, v, thd, real)
    for name, a, b in zip(("out", "dq", "dk", "dv"), fused, loop, strict=True):
        assert _relative(a, b) < 2e-2, name  # bf16 kernels, different summation order
    # the padding segment's outputs are zeros and none of its inputs gets a gradient
    out = _attention(method)(q, k, v, None, packed_seq_params=replace(thd, layer_cache={}))
    assert not out[real:].any()
    assert not any(grad[real:].any() for grad in fused[1:])


@needs_cuda
@pytest.mark.parametrize("method", varlen.FUSED_METHODS)
def test_control_fused_method_without_sample_bounds_fails(method):
    if not varlen.available(method):
        pytest.skip(f"{method} is not installed here")
    real = sum(LENGTHS)
    q, k, v, thd = _pack(torch.bfloat16)
    whole = torch.tensor([0, real, PACK], dtype=torch.int32, device=DEVICE)
    blind = replace(thd, cu_seqlens_q=whole, cu_seqlens_kv=whole, cu_seqlens_list=[0, real, PACK])
    wrong = _outputs_and_grads(method, q, k, v, blind, real)
    loop = _outputs_and_grads("sdpa_loop", q, k, v, thd, real)
    assert _relative(wrong[0], loop[0]) > 0.1


@needs_cuda
def test_fp32_call_takes_the_loop_even_when_a_fused_method_was_chosen():
    """Outside autocast an fp32 call reaches the attention: no fused kernel takes fp32, so the loop does."""
    q, k, v, thd = _pack(torch.float32)
    fused = _attention("torch_varlen")(q, k, v, None, packed_seq_params=replace(thd, layer_cache={}))
    loop = _attention("sdpa_loop")(q, k, v, None, packed_seq_params=replace(thd, layer_cache={}))
    assert torch.equal(fused, loop)


@needs_cuda
def test_key_value_groups_as_they_are_equal_repeated_groups(monkeypatch):
    """torch releases whose varlen_attn lacks enable_gqa: grouped keys/values go to the aten flash kernels
    as they are (GroupedFlashVarlen), with the outputs and gradients of the groups repeated per head."""
    if varlen._torch_varlen() is None or not varlen._aten_flash_varlen():
        pytest.skip("torch varlen_attn or the aten flash kernels are absent here")
    fn, params = varlen._torch_varlen()
    q, k, v, thd = _pack(torch.bfloat16)
    real = thd.cu_seqlens_list[-2]
    grouped_calls: list[int] = []
    apply = varlen.GroupedFlashVarlen.apply
    monkeypatch.setattr(varlen.GroupedFlashVarlen, "apply", lambda *a: grouped_calls.append(1) or apply(*a))
    monkeypatch.setattr(varlen, "_torch_varlen", lambda: (fn, params - {"enable_gqa"}))
    grouped = _outputs_and_grads("torch_varlen", q, k, v, thd, real)
    assert grouped_calls, "grouped keys/values did not reach GroupedFlashVarlen"
    monkeypatch.setattr(varlen, "_aten_flash_varlen", lambda: False)  # the repeat-per-head fallback
    repeated = _outputs_and_grads("torch_varlen", q, k, v, thd, real)
    for a, b in zip(grouped, repeated, strict=True):
        assert _relative(a, b) < 1e-2


# ---- any machine: the adapter, the choice, the refusals


def _per_sample_reference(q, k, v, cu, scale):
    heads = q.shape[1]
    k, v = (t.repeat_interleave(heads // t.shape[1], dim=1) for t in (k, v))
    parts = []
    for a, b in zip(cu[:-1].tolist(), cu[1:].tolist(), strict=True):
        qs, ks, vs = (t[a:b].transpose(0, 1) for t in (q, k, v))
        parts.append(F.scaled_dot_product_attention(qs, ks, vs, is_causal=True, scale=scale).transpose(0, 1))
    return torch.cat(parts)


def _old_torch_varlen(calls: list[dict]):
    """A stand-in with torch 2.9-2.11's signature (is_causal; no scale, window_size or enable_gqa)."""

    def varlen_attn(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, is_causal=False, return_aux=None):
        calls.append({"is_causal": is_causal, "kv_heads": key.shape[1], "max_q": max_q})
        assert is_causal and query.shape[1] == key.shape[1], "this signature takes no GQA"
        return _per_sample_reference(query, key, value, cu_seq_q, 1.0 / math.sqrt(query.shape[-1]))

    return varlen_attn


@pytest.mark.parametrize("scale", [None, 0.05], ids=["default_scale", "custom_scale"])
def test_adapter_for_torch_varlen_without_gqa_scale_or_window(monkeypatch, scale):
    calls: list[dict] = []
    fake = _old_torch_varlen(calls)
    monkeypatch.setattr(varlen, "_torch_varlen", lambda: (fake, frozenset(("is_causal", "return_aux"))))
    g = torch.Generator().manual_seed(3)
    q = torch.randn(40, 4, 8, generator=g)
    k, v = (torch.randn(40, 2, 8, generator=g) for _ in range(2))
    cu = torch.tensor([0, 5, 17, 18, 40], dtype=torch.int32)
    view = varlen.varlen_view(cu, cu.tolist(), padding_segment=False)
    want = scale if scale is not None else 1.0 / math.sqrt(8)
    out = varlen.fused_attention("torch_varlen", q, k, v, view, want)
    torch.testing.assert_close(out, _per_sample_reference(q, k, v, cu, want), rtol=0, atol=1e-5)
    assert calls == [{"is_causal": True, "kv_heads": 4, "max_q": 22}]


def test_varlen_view_leaves_the_padding_segment_out():
    cu = torch.tensor([0, 3, 10, 16], dtype=torch.int32)
    view = varlen.varlen_view(cu, [0, 3, 10, 16], padding_segment=True)
    assert view.cu_seqlens.tolist() == [0, 3, 10] and view.max_seqlen == 7 and view.tokens == 10


def test_choice(monkeypatch):
    monkeypatch.setattr(varlen, "available", lambda m: m in ("torch_varlen", "sdpa_loop"))
    assert varlen.choose("auto", cuda=False, half=True, dropout=0)[0] == "sdpa_loop"
    assert varlen.choose("auto", cuda=True, half=False, dropout=0)[0] == "sdpa_loop"
    assert varlen.choose("auto", cuda=True, half=True, dropout=0)[0] == "torch_varlen"
    assert varlen.choose("auto", cuda=True, half=True, dropout=0.1)[0] == "sdpa_loop"  # no dropout there
    assert varlen.choose("unfused", cuda=True, half=True, dropout=0)[0] == "sdpa_loop"
    assert varlen.choose("flash", cuda=True, half=True, dropout=0)[0] == "torch_varlen"
    monkeypatch.setattr(varlen, "available", lambda m: True)
    assert varlen.choose("auto", cuda=True, half=True, dropout=0.1)[0] == "flash_attn"
    for backend, cuda, half, words in (
        ("flash", False, True, "needs a CUDA device"),
        ("flash", True, False, "needs bf16"),
        ("fused", True, True, "Transformer Engine"),
    ):
        with pytest.raises(ValueError, match=words):
            varlen.choose(backend, cuda=cuda, half=half, dropout=0)


def test_attention_backend_reads_bridge_spellings():
    from packcfg.train.settings import ModelSettings

    base = {"num_layers": 1, "hidden_size": 8, "num_attention_heads": 2, "vocab_size": 16}
    for value, want in (
        (None, "auto"),
        ("flash", "flash"),
        ("AttnBackend.unfused", "unfused"),
        (
            {"_target_": "megatron.core.transformer.enums.AttnBackend", "_args_": [5], "_name_": "auto"},
            "auto",
        ),
    ):
        model = ModelSettings.from_config({"model": {**base, "attention_backend": value}})
        assert model.attention_backend == want
    with pytest.raises(ValueError, match="model.attention_backend: 'sdpa' is not one of"):
        ModelSettings.from_config({"model": {**base, "attention_backend": "sdpa"}})


def test_train_refuses_a_backend_it_cannot_run_in_one_line(tmp_path):
    from packcfg.train.preflight import preflight
    from packcfg.train.settings import ModelSettings

    base = {"num_layers": 1, "hidden_size": 8, "num_attention_heads": 2, "vocab_size": 16}
    config = {"model": {**base, "attention_backend": "fused", "transformer_impl": "local"}}
    assert any("fused is Transformer Engine's" in p for p in preflight(config))
    config = {"model": {**base, "attention_backend": "flash", "transformer_impl": "local"}}
    assert any("flash needs bf16" in p for p in preflight(config))
    assert ModelSettings.from_config(config).attention_backend == "flash"


def _padded_rows(dtype: torch.dtype, seed: int = 0):
    """`[s, b, h, d]` query and key/value groups for the padded path."""
    g = torch.Generator().manual_seed(seed)
    return tuple(
        torch.randn(96, 3, h, HEAD_DIM, generator=g).to(DEVICE, dtype).requires_grad_()
        for h in (HEADS, GROUPS, GROUPS)
    )


def _grads(attention, q, k, v, **kwargs):
    q, k, v = (t.detach().clone().requires_grad_() for t in (q, k, v))
    out = attention(q, k, v, None, **kwargs)
    cotangent = torch.randn(out.shape, generator=torch.Generator().manual_seed(1)).to(out)
    (out * cotangent).sum().backward()
    return [t.detach().float().cpu() for t in (out, q.grad, k.grad, v.grad)]


@pytest.mark.parametrize("layout", ["thd", "padded"])
def test_sdpa_repeating_key_value_groups_equals_materialised_groups(monkeypatch, layout):
    """Where SDPA takes GQA itself (`enable_gqa`), keys/values are not copied per query head: the per-sample
    loop and the padded path give the materialised result; a control that repeats the groups in the wrong
    order (head-major instead of megatron's group-major) differs."""
    from packcfg.train import attention as attention_module

    if not attention_module._SDPA_HAS_GQA:
        pytest.skip("this torch's scaled_dot_product_attention has no enable_gqa")
    dtype = torch.bfloat16 if ON_CUDA else torch.float32  # CUDA: flash takes GQA in half precision only
    tolerance = 2e-2 if ON_CUDA else 1e-5
    if layout == "thd":
        q, k, v, thd = _pack(dtype)

        def run():
            kwargs = {"packed_seq_params": replace(thd, layer_cache={})}
            return _grads(_attention("sdpa_loop"), q, k, v, **kwargs)
    else:
        q, k, v = _padded_rows(dtype)

        def run():
            return _grads(_attention("sdpa_loop"), q, k, v)

    calls = []
    real_sdpa = F.scaled_dot_product_attention

    def spy(*args, **kwargs):
        calls.append(kwargs.get("enable_gqa", False))
        return real_sdpa(*args, **kwargs)

    monkeypatch.setattr(attention_module.F, "scaled_dot_product_attention", spy)
    native = run()
    assert calls and all(calls), "SDPA was not asked to repeat the key/value groups"
    monkeypatch.setattr(attention_module, "_SDPA_HAS_GQA", False)
    calls.clear()
    materialised = run()
    assert calls and not any(calls)
    for a, b in zip(native, materialised, strict=True):
        torch.testing.assert_close(a, b, rtol=tolerance, atol=tolerance)

    def head_major(x, heads, axis):
        return (
            x
            if x.shape[axis] == heads
            else x.repeat(*[heads // x.shape[axis] if i == axis else 1 for i in range(x.dim())])
        )

    monkeypatch.setattr(attention_module, "expand_groups", head_major)
    wrong = run()
    assert _relative(wrong[0], materialised[0]) > 1e-2
