"""One optimizer step's forward/backward: per-token loss over the global batch.

The loss is the sum of per-token cross entropy over supervised tokens, divided by the number of
supervised tokens in the whole global batch (all micro-batches, all DP and CP ranks), so it does not
depend on how tokens are split into packs, micro-batches or ranks. Gradients are then summed over
DP x CP; TP ranks see the same tokens and are not counted twice. With bf16 and
`ddp.grad_reduce_in_fp32`, each micro-batch's gradient is added into fp32 main grads (megatron's DDP
grad buffer in fp32) by a hook as backward produces it (`optim.into_main_grad`), and those are reduced.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from packcfg.train.batches import MicroBatch
from packcfg.train.forward import (
    StepTokens,
    count_tokens,
    model_device,
    per_token_losses,
    scaled_loss,
    sequence_parallel_ready,
    to_device,
    zero_main_grads,
)
from packcfg.train.mcore_compat import cpu_current_device, parallel_state
from packcfg.train.parallel import all_reduce_sum, data_context_group, finalize_model_grads
from packcfg.train.pipeline import pipelined_forward_backward


def forward_backward(
    model: torch.nn.Module,
    micro_batches: Sequence[MicroBatch],
    *,
    use_te: bool = False,
    device: torch.device | None = None,
) -> tuple[float, StepTokens]:
    """Accumulate gradients of the global per-token loss over this rank's micro-batches (into fp32
    `main_grad`s where the parameters have them), reduce them as megatron's `finalize_model_grads`
    does, and return the global loss and token counts. Batches go to the model's device. Under pipeline
    parallelism, the 1F1B schedule of `pipeline.pipelined_forward_backward`."""
    device = device or model_device(model)
    if parallel_state.get_pipeline_model_parallel_world_size() > 1:
        return pipelined_forward_backward(model, micro_batches, use_te=use_te, device=device)
    micro_batches = [sequence_parallel_ready(model, mb) for mb in micro_batches]
    tokens = count_tokens(micro_batches)
    zero_main_grads(model)
    # summed on the device: a float() per micro-batch would make the host wait for the GPU each time
    local_loss = torch.zeros((), dtype=torch.float64, device=device)
    sequence_parallel = bool(getattr(getattr(model, "config", None), "sequence_parallel", False))
    for mb in micro_batches:
        mb = to_device(mb, device)
        with cpu_current_device(active=sequence_parallel):  # SP collectives on CPU (mcore_compat)
            losses = per_token_losses(model, mb, use_te=use_te)
            scaled = scaled_loss((losses.float() * mb.loss_mask).sum(), mb, tokens)
            scaled.backward()
        local_loss += scaled.detach()
    finalize_model_grads(model)
    (loss,) = all_reduce_sum([float(local_loss)], data_context_group())
    return loss, tokens
