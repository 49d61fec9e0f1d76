"""torch AdamW and megatron's learning-rate schedule (linear warmup, then cosine/linear decay to min_lr)."""

from __future__ import annotations

import math
from typing import Any

import torch

from packcfg.train.settings import OptimSettings


def build_optimizer(
    model: torch.nn.Module,
    settings: OptimSettings,
    params: list[torch.nn.Parameter] | None = None,
    fused: bool | None = None,
) -> torch.optim.AdamW:
    """AdamW over `params` (default: the model's; bf16 passes its fp32 master copies); like megatron,
    no weight decay on biases and norm weights (1-D parameters).

    `fused` (default: parameters on CUDA) takes torch's fused AdamW kernel, one pass over each tensor's
    parameter, gradient and moments, as megatron takes TE's or Apex's FusedAdam on a GPU; the per-op
    implementation reads and writes them several times (on one H100 with a 1B model: 41 ms of GPU time
    a step, 3% of a step of 16,384 packed tokens). Elsewhere it is the single-tensor implementation, the same
    arithmetic on every TP size and the one the CPU equivalence tests were written against."""
    decay: list[torch.nn.Parameter] = []
    no_decay: list[torch.nn.Parameter] = []
    for p in params if params is not None else [p for p in model.parameters() if p.requires_grad]:
        (decay if p.ndim >= 2 else no_decay).append(p)
    groups = [
        {"params": decay, "weight_decay": settings.weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    if fused is None:
        fused = bool(decay or no_decay) and all(p.is_cuda for p in decay + no_decay)
    return torch.optim.AdamW(
        groups,
        lr=settings.lr,
        betas=(settings.beta1, settings.beta2),
        eps=settings.eps,
        foreach=False,
        fused=fused,
    )


def adam_step(optimizer: torch.optim.Optimizer, param: torch.nn.Parameter, value: float) -> torch.Tensor:
    """AdamW's `step` state for `param` as this optimizer keeps it: on the parameter's device for the
    fused kernel (which reads it there), a CPU scalar otherwise."""
    fused = bool(optimizer.param_groups[0].get("fused"))
    return torch.tensor(float(value), dtype=torch.float32, device=param.device if fused else "cpu")


class LrSchedule:
    """Learning rate of iteration `n` (1-based): warmup to `lr` over `warmup_iters`, then decay to
    `min_lr` by `decay_iters` (cosine, linear or constant), constant afterwards."""

    def __init__(self, optimizer: torch.optim.Optimizer, settings: OptimSettings) -> None:
        self.optimizer = optimizer
        self.settings = settings
        self.iteration = 0

    def lr_at(self, n: int) -> float:
        s = self.settings
        if s.warmup_iters > 0 and n <= s.warmup_iters:
            return s.lr * n / s.warmup_iters
        if s.decay_style == "constant" or n > s.decay_iters:
            return s.min_lr if n > s.decay_iters and s.decay_style != "constant" else s.lr
        span = max(1, s.decay_iters - s.warmup_iters)
        frac = (n - s.warmup_iters) / span
        if s.decay_style == "linear":
            coeff = 1.0 - frac
        else:
            coeff = 0.5 * (math.cos(math.pi * frac) + 1.0)
        return s.min_lr + coeff * (s.lr - s.min_lr)

    def advance(self) -> float:
        """Set the learning rate for the next iteration and return it."""
        self.iteration += 1
        lr = self.lr_at(self.iteration)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        return lr

    def state_dict(self) -> dict[str, Any]:
        return {"iteration": self.iteration}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.iteration = int(state["iteration"])


def into_main_grad(p: torch.nn.Parameter) -> None:
    """megatron DDP's grad hook, run by autograd once `p`'s gradient of this backward is complete: add it
    into the fp32 `main_grad` and drop the bf16 one at once, so a backward never holds every parameter's
    bf16 gradient at the same time (at the 1B shape that is 2.8 GiB of peak memory)."""
    if p.grad is not None:  # None: an earlier hook on the same parameter took it
        p.main_grad.add_(p.grad)  # type: ignore[attr-defined]
        p.grad = None


class MasterWeights:
    """bf16 training as megatron does it: the model holds bf16 parameters (forward and backward in
    bf16), AdamW updates fp32 master copies, which are copied back after each step. (Autocast would
    not do on CPU: megatron's linear layers only pin their backward's dtype under CUDA autocast.)

    `grad_reduce_in_fp32` (Bridge recipes set `ddp.grad_reduce_in_fp32`): each model parameter gets an
    fp32 `main_grad`, as megatron's DDP gives it a view into an fp32 grad buffer, and `into_main_grad`
    adds every micro-batch's bf16 gradient into it as backward produces it; the step reduces it in fp32.
    Without it the gradient is accumulated over micro-batches and reduced in bf16 (megatron's buffer in
    the parameters' dtype)."""

    def __init__(self, params: list[torch.nn.Parameter], grad_reduce_in_fp32: bool = False) -> None:
        self.model_params = params
        self.grad_reduce_in_fp32 = grad_reduce_in_fp32
        self.master_params = [torch.nn.Parameter(p.detach().float().clone()) for p in params]
        for master, p in zip(self.master_params, params, strict=True):
            # Carry megatron's TP (and tied-copy) attributes so grad-norm clipping treats the copy alike.
            for attr in (
                "tensor_model_parallel",
                "partition_dim",
                "partition_stride",
                "sequence_parallel",
                "shared",
            ):
                if hasattr(p, attr):
                    setattr(master, attr, getattr(p, attr))
            if grad_reduce_in_fp32:
                p.main_grad = torch.zeros_like(p, dtype=torch.float32)  # type: ignore[attr-defined]
                if not getattr(p, "_into_main_grad", False):  # once per parameter, however many wrappers
                    p.register_post_accumulate_grad_hook(into_main_grad)
                    p._into_main_grad = True  # type: ignore[attr-defined]

    def grads_to_master(self) -> None:
        for master, p in zip(self.master_params, self.model_params, strict=True):
            main = getattr(p, "main_grad", None)
            grad = main if main is not None else p.grad
            master.grad = None if grad is None else grad.float()

    def master_to_model(self) -> None:
        with torch.no_grad():
            for master, p in zip(self.master_params, self.model_params, strict=True):
                p.copy_(master)

    def state_dict(self) -> dict[str, Any]:
        return {"master_params": [m.detach().clone() for m in self.master_params]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        with torch.no_grad():
            for master, saved in zip(self.master_params, state["master_params"], strict=True):
                master.copy_(saved)
        self.master_to_model()
