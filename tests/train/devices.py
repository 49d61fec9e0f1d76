"""Where the executor tests run: on the GPU when CUDA is visible, else on the CPU.

Models follow `packcfg.train.model.build_model` (CUDA when available); inputs and references follow the
model's device; comparisons are made on the CPU. Shims for megatron-core's CPU gaps are applied only
without CUDA. Multi-process tests need one GPU per rank where CUDA is visible (NCCL), so on a machine with
fewer GPUs they skip and say so.
"""

from __future__ import annotations

import pytest
import torch

DEVICE = (
    torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
)
ON_CUDA = DEVICE.type == "cuda"


def model_device(model: torch.nn.Module) -> torch.device:
    return next(model.parameters()).device


def on_model_device(model: torch.nn.Module, batch):
    """A `MicroBatch` moved to the model's device (packcfg.train.step.to_device)."""
    from packcfg.train.forward import to_device

    return to_device(batch, model_device(model))


def skip_unless_one_gpu_per_rank(nproc: int) -> None:
    """Inside a test that starts `nproc` ranks: skip where CUDA is visible with fewer GPUs than ranks."""
    if torch.cuda.is_available() and torch.cuda.device_count() < nproc:
        pytest.skip(
            f"needs {nproc} GPUs (one per rank, NCCL); this machine has {torch.cuda.device_count()} "
            "(on a CPU machine these ranks run on gloo)"
        )
