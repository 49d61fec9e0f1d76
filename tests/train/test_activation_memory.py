"""`packcfg plan`'s activation count against what megatron-core's autograd really keeps.

The plan estimates memory by formula (packcfg.plan.estimate); here the executor's own model runs one pack
under `torch.autograd.graph.saved_tensors_hooks` and the tensors the MLP saves for its backward pass are
counted (each storage once, parameters left out). On an H100 the formula without megatron's unfused GLU's two
extra tensors was 19% under the measured peak at the 1B shape (docs/train.md, 2026-11-27); the executor now
builds packcfg's SwiGLU there (packcfg.train.activation), which keeps what TE's fused SwiGLU keeps.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F

from packcfg.plan.estimate import Layout, Precision, mlp_saved_elements
from packcfg.plan.shape import ModelShape
from packcfg.train import mcore_compat
from packcfg.train.activation import swiglu
from packcfg.train.batches import pack_thd
from packcfg.train.forward import model_device, per_token_losses, to_device
from packcfg.train.model import build_model, use_transformer_engine

from .cases import synthetic_samples


def _shape(settings, fused: bool) -> ModelShape:
    m = settings.model
    return ModelShape(
        m.num_layers, m.hidden_size, m.ffn_hidden_size, m.num_attention_heads, m.num_query_groups,
        m.kv_channels, m.vocab_size, gated_linear_unit=True, fused_activation=fused,  # the executor: SwiGLU
    )  # fmt: skip


def _saved_bytes_per_token_in_mlps(model, mb) -> float:
    """Bytes of the distinct non-parameter storages autograd saves while any layer's MLP runs, per token."""
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    inside = [0]
    saved: dict[int, int] = {}

    def enter(*_):
        inside[0] += 1

    def leave(*_):
        inside[0] -= 1

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        if inside[0] and storage.data_ptr() not in params:
            saved[storage.data_ptr()] = storage.nbytes()
        return t

    mlps = [layer.mlp for layer in model.decoder.layers]
    handles = [
        h for mlp in mlps for h in (mlp.register_forward_pre_hook(enter), mlp.register_forward_hook(leave))
    ]
    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            per_token_losses(model, mb)
    finally:
        for h in handles:
            h.remove()
    return sum(saved.values()) / mb.tokens.numel() / len(mlps)


def _model_and_pack(settings, unfused: bool, monkeypatch):
    if unfused:  # megatron's own local MLP: its unfused GLU
        monkeypatch.setattr(mcore_compat, "spec_activation_supported", lambda: False)
    model = build_model(settings.model, settings.seed)
    monkeypatch.undo()
    return model, to_device(pack_thd(synthetic_samples(6, seed=3)), model_device(model))


def test_the_mlp_term_is_what_the_mlp_saves(tiny_world, monkeypatch):
    """packcfg's SwiGLU keeps fc1's output only (3f with fc2's input); megatron's unfused GLU 5f."""
    _, settings = tiny_world
    if use_transformer_engine(settings.model):
        pytest.skip("Transformer Engine is installed: the executor builds TE's layer spec, not the local MLP")
    assert mcore_compat.spec_activation_supported()
    a = Precision(bf16=True).activation_bytes
    # fc1 saves its input (the pre-MLP norm's output, which the plan counts among the norms' outputs)
    fc1_input = a * settings.model.hidden_size
    lean, unfused = (
        _saved_bytes_per_token_in_mlps(model.bfloat16(), mb)
        for model, mb in (_model_and_pack(settings, u, monkeypatch) for u in (False, True))
    )
    assert lean == a * mlp_saved_elements(_shape(settings, fused=True)) + fc1_input
    assert unfused == a * mlp_saved_elements(_shape(settings, fused=False)) + fc1_input
    assert lean < unfused  # the two forms differ, so each equality above can fail


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_swiglu_is_bit_for_bit_megatrons_unfused_glu(tiny_world, monkeypatch, dtype):
    """The whole model, loss and every gradient, with packcfg's SwiGLU and with megatron's GLU."""
    _, settings = tiny_world
    if use_transformer_engine(settings.model):
        pytest.skip("Transformer Engine is installed: the executor builds TE's layer spec, not the local MLP")
    results = []
    for unfused in (False, True):
        model, mb = _model_and_pack(settings, unfused, monkeypatch)
        model.to(dtype)
        loss = per_token_losses(model, mb).float().sum()
        loss.backward()
        results.append((loss.detach(), [p.grad.clone() for p in model.parameters()]))
    (lean_loss, lean_grads), (loss, grads) = results
    assert torch.equal(lean_loss, loss)
    assert all(torch.equal(x, y) for x, y in zip(lean_grads, grads, strict=True))


def test_swiglu_gates_the_first_half():
    """Against the expression megatron's GLU evaluates; control: the halves swapped must differ."""
    torch.manual_seed(0)
    y = (torch.randn(9, 1, 64) * 3).requires_grad_()
    out = swiglu(y)
    gate, up = torch.chunk(y, 2, dim=-1)
    assert torch.equal(out, F.silu(gate) * (up + 0.0))
    assert not torch.allclose(out, F.silu(up) * gate)
    g = torch.randn_like(out)
    (grad,) = torch.autograd.grad(out, y, g)
    (expected,) = torch.autograd.grad(F.silu(gate) * (up + 0.0), y, g)
    assert torch.equal(grad, expected)


def test_logits_in_bf16_count_the_fp32_copy_and_the_logits_themselves():
    from packcfg.plan.estimate import memory

    shape = ModelShape(2, 64, 192, 4, 2, 16, 1000)
    layout = Layout(1, 1, 1, 1, 128, 1, 1)
    bf16, _ = memory(shape, layout, Precision(bf16=True))
    fp32, _ = memory(shape, layout, Precision(bf16=False))
    assert fp32["logits"] == 128 * 4 * (64 + 1000)  # fp32: `.float()` is the same tensor, worked on in place
    assert bf16["logits"] == 128 * (4 * (64 + 1000) + 2 * 1000)
    assert (
        memory(replace(shape, fused_activation=False), layout, Precision())[0]["activations"]
        > bf16["activations"]
    )
