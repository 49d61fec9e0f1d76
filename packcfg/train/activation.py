"""SwiGLU that keeps only its input for the backward pass (the local spec's MLP activation).

megatron-core's local MLP (0.16.1 `mlp.py`, `glu`) computes `silu(x1) * (x2 + offset)` with plain torch ops,
so autograd keeps fc1's output, silu(x1) and x2 + offset: 5 x ffn elements per token and layer with fc2's
input. Transformer Engine's and megatron's fused SwiGLU keep fc1's output only and recompute the rest, 3 x
ffn. `SwiGLU` does the same with torch ops (no compiler, so it runs on CPU too). Its forward is the same
expression and its backward the same aten ops autograd would run (`silu_backward` on g * x2, and g * silu(x1)),
so outputs and gradients are bit for bit those of megatron's unfused path (tests/train/test_activation_memory.py);
at the 1B shape it keeps 0.5 MiB less per token (4 GiB at packs of 8,192).

megatron's MLP applies a spec-given activation module to the whole fc1 output when
`use_te_activation_func` is set (0.16.1 `mlp.py`, lines 136-166); the flag's name is TE's, the path is not.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor


class _SwiGLUFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, y: Tensor) -> Tensor:
        ctx.save_for_backward(y)
        gate, up = torch.chunk(y, 2, dim=-1)
        return F.silu(gate) * up

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> Tensor:
        (y,) = ctx.saved_tensors
        gate, up = torch.chunk(y, 2, dim=-1)
        dy = torch.empty_like(y)  # each half's gradient written in place: no concatenation copy
        d_gate, d_up = torch.chunk(dy, 2, dim=-1)
        torch.mul(grad, F.silu(gate), out=d_up)
        torch.ops.aten.silu_backward.grad_input(grad * up, gate, grad_input=d_gate)
        return dy


def swiglu(y: Tensor) -> Tensor:
    """silu(y1) * y2 over the two halves of the last dimension (megatron's gate-then-up order)."""
    return _SwiGLUFunction.apply(y)


class SwiGLU(torch.nn.Module):
    """The activation module megatron's MLP builds from `MLPSubmodules.activation_func` (no parameters)."""

    def __init__(self, config: Any = None, **_: Any) -> None:
        super().__init__()

    def forward(self, y: Tensor) -> Tensor:
        return swiglu(y)

    def sharded_state_dict(self, prefix: str = "", sharded_offsets: tuple = (), metadata: Any = None) -> dict:
        """Nothing to checkpoint (megatron's MLP asks each child for its sharded state)."""
        return {}
