"""One optimizer step's forward/backward: per-token loss over the global batch.

The loss is the sum of per-token cross entropy over supervised tokens, divided by the number of
supervised tokens in the whole global batch (all micro-batches, all DP and CP ranks), so it does not
depend on how tokens are split into packs, micro-batches or ranks. Gradients are then summed over
DP x CP; TP ranks see the same tokens and are not counted twice.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields, replace

import torch
from torch import Tensor

from packcfg.train.attention import ThdParams
from packcfg.train.batches import NO_FAULTS, Faults, MicroBatch
from packcfg.train.mcore_compat import quiet_megatron_import
from packcfg.train.parallel import all_reduce_gradients, all_reduce_sum, data_context_group

with quiet_megatron_import():
    from megatron.core.packed_seq_params import PackedSeqParams


@dataclass(frozen=True)
class StepTokens:
    """Global token counts of one step (summed over DP x CP)."""

    loss_tokens: int
    real_tokens: int
    padded_tokens: int
    micro_batches: int


def count_tokens(micro_batches: Sequence[MicroBatch]) -> StepTokens:
    loss, real, padded, n = all_reduce_sum(
        [
            sum(mb.loss_tokens for mb in micro_batches),
            sum(mb.real_tokens for mb in micro_batches),
            sum(mb.padded_tokens for mb in micro_batches),
            len(micro_batches),
        ],
        data_context_group(),
    )
    return StepTokens(int(loss), int(real), int(padded), int(n))


def _to_device(mb: MicroBatch, device: torch.device) -> MicroBatch:
    if device.type == "cpu":
        return mb
    thd = mb.thd
    if thd is not None:
        moved = {
            f.name: getattr(thd, f.name).to(device)
            for f in fields(thd)
            if isinstance(getattr(thd, f.name), Tensor)
        }
        thd = replace(thd, **moved)
    return replace(
        mb,
        tokens=mb.tokens.to(device),
        labels=mb.labels.to(device),
        loss_mask=mb.loss_mask.to(device),
        position_ids=mb.position_ids.to(device),
        thd=thd,
    )


def _te_params(thd: ThdParams) -> PackedSeqParams:
    """TE's view of a THD batch: global (padded) cu_seqlens; TE splits for CP and applies RoPE itself."""
    cu = thd.cu_seqlens_kv_padded if thd.cu_seqlens_kv_padded is not None else thd.cu_seqlens_kv
    max_len = thd.max_seqlen_kv
    return PackedSeqParams(
        qkv_format="thd",
        cu_seqlens_q=cu,
        cu_seqlens_kv=cu,
        cu_seqlens_q_padded=cu,
        cu_seqlens_kv_padded=cu,
        max_seqlen_q=max_len,
        max_seqlen_kv=max_len,
    )


def per_token_losses(model: torch.nn.Module, mb: MicroBatch, use_te: bool = False) -> Tensor:
    """The model's per-token cross entropy `[b, s]` for one micro-batch."""
    params = mb.thd
    if params is not None and use_te:
        params = _te_params(params)  # type: ignore[assignment]
    return model(
        input_ids=mb.tokens,
        position_ids=mb.position_ids,
        attention_mask=None,
        labels=mb.labels,
        packed_seq_params=params,
    )


def forward_backward(
    model: torch.nn.Module,
    micro_batches: Sequence[MicroBatch],
    *,
    faults: Faults = NO_FAULTS,
    use_te: bool = False,
    device: torch.device | None = None,
) -> tuple[float, StepTokens]:
    """Accumulate gradients of the global per-token loss over this rank's micro-batches, sum them
    over DP x CP, and return the global loss and token counts."""
    tokens = count_tokens(micro_batches)
    device = device or torch.device("cpu")
    denominator = max(tokens.loss_tokens, 1)
    local_loss = 0.0
    for mb in micro_batches:
        mb = _to_device(mb, device)
        losses = per_token_losses(model, mb, use_te=use_te)
        loss_sum = (losses.float() * mb.loss_mask).sum()
        if faults.per_microbatch_loss_mean:
            # The bug this control reproduces: each micro-batch averaged on its own, then averaged.
            scaled = loss_sum / max(mb.loss_tokens, 1) / tokens.micro_batches
        else:
            scaled = loss_sum / denominator
        scaled.backward()
        local_loss += float(scaled.detach())
    params = [p for p in model.parameters() if p.requires_grad]
    all_reduce_gradients(params, data_context_group())
    (loss,) = all_reduce_sum([local_loss], data_context_group())
    return loss, tokens
