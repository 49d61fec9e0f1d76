"""One micro-batch through the model, as the PP 1 step (`step`) and the pipeline schedule (`pipeline`)
both run it: onto the model's device, padded for sequence parallel, scored per token, its loss scaled by
the step's global supervised-token count, its fp32 main grads accumulated.

Both step paths import this module and neither imports the other's internals, so the two lay batches
out alike by construction.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields, replace

import torch
from torch import Tensor

from packcfg.train.attention import ThdParams
from packcfg.train.batches import MicroBatch, pad_for_sequence_parallel
from packcfg.train.mcore_compat import parallel_state, quiet_megatron_import
from packcfg.train.parallel import all_reduce_sum, data_context_group

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


def to_device(mb: MicroBatch, device: torch.device) -> MicroBatch:
    """The micro-batch on `device` (the model's): every tensor moved, the per-batch layer cache fresh."""
    if device.type == "cpu":
        return mb
    thd = mb.thd
    if thd is not None:
        moved = {
            f.name: getattr(thd, f.name).to(device)
            for f in fields(thd)
            if isinstance(getattr(thd, f.name), Tensor)
        }
        thd = replace(thd, **moved, layer_cache={})  # the per-batch layer cache holds device tensors
    images = {
        name: value.to(device)
        for name in ("pixel_values", "image_token_index")
        if (value := getattr(mb, name)) is not None
    }
    return replace(
        mb,
        **images,
        tokens=mb.tokens.to(device),
        labels=mb.labels.to(device),
        loss_mask=mb.loss_mask.to(device),
        position_ids=mb.position_ids.to(device),
        thd=thd,
    )


def bridge_packed_metadata(thd: ThdParams) -> dict[str, Tensor]:
    """The packed-sequence keys Megatron Bridge's packed SFT collate (`data/datasets/sft.py`,
    `GPTSFTPackedDataset.collate_fn`, v0.3.1) produces for this pack: `cu_seqlens` = physical (padded)
    bounds, pack padding included, `-1`-filled; `max_seqlen` = the longest padded segment; and, only
    when segments carry alignment padding (Bridge: `pad_seq_to_mult > 1`, i.e. CP), `cu_seqlens_unpadded`
    = running sum of real lengths, the pack's padding segment counting 0."""
    padded = thd.cu_seqlens_kv_list or thd.cu_seqlens_list
    assert padded is not None
    lengths = [b - a for a, b in zip(padded[:-1], padded[1:], strict=True)]
    out = {
        "cu_seqlens": torch.tensor([[*padded, -1]], dtype=torch.int32),
        "cu_seqlens_argmin": torch.tensor([[len(padded)]]),
        "max_seqlen": torch.tensor([[max(lengths)]], dtype=torch.int32),
    }
    real = thd.cu_seqlens_unpadded_list
    if real is not None and real != padded:
        out["cu_seqlens_unpadded"] = torch.tensor([[*real, -1]], dtype=torch.int32)
        out["cu_seqlens_unpadded_argmin"] = torch.tensor([[len(real)]])
    return out


def bridge_packed_seq_params(batch: dict[str, Tensor]) -> PackedSeqParams:
    """`PackedSeqParams` from a packed batch's metadata exactly as Megatron Bridge's
    `training/utils/packed_seq_utils.get_packed_seq_params` builds them for packed SFT batches (the
    `cu_seqlens` branch, identical in v0.3.1 and main 067f987): trim each `-1`-filled list at its argmin
    (the precomputed one when given), then with `cu_seqlens_unpadded` q/kv = unpadded and q/kv_padded =
    padded, else q/kv = padded and no padded fields; `max_seqlen` for q and kv (an int, as on main;
    v0.3.1 passes the 0-d tensor)."""
    padded = batch["cu_seqlens"].squeeze()
    unpadded = batch.get("cu_seqlens_unpadded")
    if unpadded is not None:
        unpadded = unpadded.squeeze()
    argmin = batch.get("cu_seqlens_argmin")
    padded = padded[: int(argmin.item()) if argmin is not None else int(torch.argmin(padded))]
    if unpadded is not None:
        u_argmin = batch.get("cu_seqlens_unpadded_argmin")
        unpadded = unpadded[: int(u_argmin.item()) if u_argmin is not None else int(torch.argmin(unpadded))]
    max_seqlen = int(batch["max_seqlen"].squeeze().item()) if "max_seqlen" in batch else None
    if unpadded is not None:
        return PackedSeqParams(
            qkv_format="thd",
            cu_seqlens_q=unpadded,
            cu_seqlens_kv=unpadded,
            cu_seqlens_q_padded=padded,
            cu_seqlens_kv_padded=padded,
            max_seqlen_q=max_seqlen,
            max_seqlen_kv=max_seqlen,
        )
    return PackedSeqParams(
        qkv_format="thd",
        cu_seqlens_q=padded,
        cu_seqlens_kv=padded,
        max_seqlen_q=max_seqlen,
        max_seqlen_kv=max_seqlen,
    )


def _te_params(thd: ThdParams, device: torch.device) -> PackedSeqParams:
    """TE's view of a THD batch, as Bridge hands it to TE: global cu_seqlens (TE splits for CP and
    applies RoPE itself), on the model's device."""
    params = bridge_packed_seq_params(bridge_packed_metadata(thd))
    moved = {
        f.name: getattr(params, f.name).to(device)
        for f in fields(params)
        if isinstance(getattr(params, f.name), Tensor)
    }
    return replace(params, **moved)


def per_token_losses(model: torch.nn.Module, mb: MicroBatch, use_te: bool = False) -> Tensor:
    """The model's per-token cross entropy `[b, s]` for one micro-batch."""
    params = mb.thd
    if params is not None and use_te:
        params = _te_params(params, mb.tokens.device)  # type: ignore[assignment]
    images = {}  # a VLM pack's tiles and where their embeddings go (packcfg.train.vlm.VisionLanguageModel)
    if mb.pixel_values is not None:
        images = {"pixel_values": mb.pixel_values, "image_token_index": mb.image_token_index}
    return model(
        input_ids=mb.tokens,
        position_ids=mb.position_ids,
        attention_mask=None,
        labels=mb.labels,
        packed_seq_params=params,
        **images,
    )


def model_device(model: torch.nn.Module) -> torch.device:
    return next(model.parameters()).device


def sequence_parallel_ready(model: torch.nn.Module, mb: MicroBatch) -> MicroBatch:
    """Under SP the token count must divide by TP: pad it (CP-split batches must come padded, since
    padding after the split would break the key order; `pad_for_sequence_parallel` before the split)."""
    if not getattr(getattr(model, "config", None), "sequence_parallel", False):
        return mb
    tp = parallel_state.get_tensor_model_parallel_world_size()
    if mb.thd is not None and mb.thd.kv_gather_index is not None:
        if mb.tokens.shape[1] % tp:
            raise ValueError(
                f"sequence parallel: this CP rank holds {mb.tokens.shape[1]} tokens, not a multiple of "
                f"TP {tp}; call pad_for_sequence_parallel before split_for_context_parallel"
            )
        return mb
    return pad_for_sequence_parallel(mb, tp)


def zero_main_grads(model: torch.nn.Module) -> None:
    """Start a step's fp32 main grads at zero (bf16 with `ddp.grad_reduce_in_fp32`: `optim.into_main_grad`
    adds each micro-batch's gradient into them during backward)."""
    for p in model.parameters():
        if p.requires_grad and getattr(p, "main_grad", None) is not None:
            p.main_grad.zero_()


def scaled_loss(loss_sum: Tensor, mb: MicroBatch, tokens: StepTokens) -> Tensor:
    """A micro-batch's share of the step's per-token loss: its summed token losses over the supervised
    tokens of the whole global batch (`tokens`), so the loss does not depend on how tokens are split."""
    return loss_sum / max(tokens.loss_tokens, 1)
