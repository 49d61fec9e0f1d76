"""Micro-batches in the three layouts the executor trains on, and the context-parallel THD split.

- packed (THD): samples concatenated into one row; `cu_seqlens` bounds them; positions restart per
  sample. Offline packs arrive that way (`seq_start_id`); in-batch packing concatenates MBS samples.
- padded: one row per sample, right-padded (the baseline).
- CP: each sample (and the pack's padding segment) is padded to a multiple of 2*CP and cut into 2*CP
  chunks; rank r keeps chunks r and 2*CP-1-r, with their global positions.

Samples follow Bridge's packed format: a stored sample of n+1 tokens trains on n positions (tokens
0..n-1 predict tokens 1..n), and its `loss_mask` is label-aligned (position i counts iff predicting
token i+1 is supervised; the stored last position is dropped, as Bridge's collate does). So a pack's
runtime width is the sum of (stored length - 1), which is what `packed_sequence_size` bounds.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import torch
from torch import Tensor

from packcfg.train.attention import ThdParams, thd_positions

PAD_TOKEN_ID = 0  # padding tokens carry no loss and no real token can attend to them; the id is moot


@dataclass(frozen=True)
class Sample:
    """One tokenized sample: token ids and its label-aligned loss mask (same length)."""

    input_ids: np.ndarray
    loss_mask: np.ndarray

    def __len__(self) -> int:
        return len(self.input_ids)

    @property
    def runtime_length(self) -> int:
        """Positions the model computes for this sample: every stored token but the last."""
        return max(0, len(self.input_ids) - 1)


def samples_from_pack(
    input_ids: Sequence[int], loss_mask: Sequence[int], seq_start_id: Sequence[int]
) -> list[Sample]:
    """Split one packed Parquet row back into its samples (Bridge's `seq_start_id` starts)."""
    ids = np.asarray(input_ids, dtype=np.int64)
    mask = np.asarray(loss_mask, dtype=np.int8)
    bounds = [*[int(s) for s in seq_start_id], len(ids)]
    return [Sample(ids[a:b], mask[a:b]) for a, b in zip(bounds[:-1], bounds[1:], strict=True) if b > a]


@dataclass
class MicroBatch:
    """What one forward/backward consumes, already in model layout (`[b, s]` tensors; THD has b = 1)."""

    tokens: Tensor
    labels: Tensor
    loss_mask: Tensor  # float, 1.0 where the token's label is supervised
    position_ids: Tensor
    thd: ThdParams | None  # None for padded batches
    real_tokens: int  # tokens of real samples (this rank's share under CP)
    padded_tokens: int  # every token computed, padding included
    pixel_values: Tensor | None = None  # VLM: the pack's image tiles `[tiles, 3, H, W]` (packcfg.train.vlm)
    image_token_index: Tensor | None = None  # VLM: row positions that take the tiles' embeddings, in order

    @property
    def loss_tokens(self) -> int:
        return int(self.loss_mask.sum().item())


def _sample_arrays(sample: Sample) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Model inputs, labels (the next token) and loss mask of one sample, runtime length each."""
    ids = np.asarray(sample.input_ids, dtype=np.int64)
    mask = np.asarray(sample.loss_mask[:-1], dtype=np.float32)
    return ids[:-1], ids[1:], mask


def length_grouped(
    samples: Sequence[Sample], group_size: int, seed: int, window: int = 16
) -> list[list[Sample]]:
    """Groups of `group_size` samples of similar length, as a length-grouped sampler makes them (HF
    `group_by_length`, bucketed batching): shuffle, sort each window of `window` groups' samples by
    length, cut it into groups, shuffle the groups. Padded to their longest sample, such groups waste far
    less than groups in data order (about 10% on a realistic mix): the strongest padded baseline."""
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(samples)).tolist()
    groups: list[list[Sample]] = []
    span = max(1, window * group_size)
    for start in range(0, len(order), span):
        chunk = sorted(order[start : start + span], key=lambda i: samples[i].runtime_length)
        groups += [[samples[i] for i in chunk[j : j + group_size]] for j in range(0, len(chunk), group_size)]
    return [groups[i] for i in rng.permutation(len(groups))]


def pack_thd(samples: Sequence[Sample], pad_to: int | None = None) -> MicroBatch:
    """Concatenate samples into one THD row; with `pad_to`, fill up to that width with a padding
    segment that is its own sequence (no loss, attends only to itself)."""
    parts = [_sample_arrays(s) for s in samples if s.runtime_length]
    lengths = [len(p[0]) for p in parts]
    real = sum(lengths)
    if pad_to is not None and real > pad_to:
        raise ValueError(f"pack of {real} tokens exceeds the pack size {pad_to}")
    padded = pad_to is not None and real < pad_to
    if pad_to is not None and padded:
        pad = pad_to - real
        parts.append(
            (
                np.full(pad, PAD_TOKEN_ID, np.int64),
                np.full(pad, PAD_TOKEN_ID, np.int64),
                np.zeros(pad, np.float32),
            )
        )
        lengths.append(pad)
    tokens = torch.from_numpy(np.concatenate([p[0] for p in parts]))
    labels = torch.from_numpy(np.concatenate([p[1] for p in parts]))
    mask = torch.from_numpy(np.concatenate([p[2] for p in parts]))
    cu = [0, *np.cumsum(lengths).tolist()]
    return thd_batch(tokens, labels, mask, cu, real_tokens=real, padding_segment=padded)


def thd_batch(
    tokens: Tensor,
    labels: Tensor,
    mask: Tensor,
    cu: list[int],
    real_tokens: int,
    padding_segment: bool = False,
) -> MicroBatch:
    """One THD row from its flat tensors and segment bounds `cu` (positions restart at each bound); with
    `padding_segment`, the last segment is the pack's padding."""
    total = int(tokens.numel())
    cu_t = torch.tensor(cu, dtype=torch.int32)
    positions = thd_positions(cu_t, total)
    max_len = max(b - a for a, b in zip(cu[:-1], cu[1:], strict=True))
    params = ThdParams(
        qkv_format="thd",
        cu_seqlens_q=cu_t,
        cu_seqlens_kv=cu_t,
        max_seqlen_q=max_len,
        max_seqlen_kv=max_len,
        position_ids=positions,
        cu_seqlens_list=cu,
        cu_seqlens_kv_list=cu,
        padding_segment=padding_segment,
    )
    return MicroBatch(
        tokens=tokens.unsqueeze(0),
        labels=labels.unsqueeze(0),
        loss_mask=mask.unsqueeze(0),
        position_ids=positions.unsqueeze(0),
        thd=params,
        real_tokens=real_tokens,
        padded_tokens=total,
    )


def pad_batch(samples: Sequence[Sample], pad_to: int | None = None) -> MicroBatch:
    """One right-padded row per sample, all as wide as the longest (or `pad_to`)."""
    parts = [_sample_arrays(s) for s in samples if s.runtime_length]
    width = max(len(p[0]) for p in parts)
    if pad_to is not None:
        if width > pad_to:
            raise ValueError(f"sample of {width} tokens exceeds the padded length {pad_to}")
        width = pad_to
    tokens = np.full((len(parts), width), PAD_TOKEN_ID, np.int64)
    labels = np.full((len(parts), width), PAD_TOKEN_ID, np.int64)
    mask = np.zeros((len(parts), width), np.float32)
    for row, (ids, lab, m) in enumerate(parts):
        tokens[row, : len(ids)], labels[row, : len(ids)], mask[row, : len(ids)] = ids, lab, m
    real = sum(len(p[0]) for p in parts)
    return MicroBatch(
        tokens=torch.from_numpy(tokens),
        labels=torch.from_numpy(labels),
        loss_mask=torch.from_numpy(mask),
        position_ids=torch.arange(width).expand(len(parts), width),
        thd=None,
        real_tokens=real,
        padded_tokens=len(parts) * width,
    )


def pad_for_sequence_parallel(batch: MicroBatch, tp: int, cp: int = 1) -> MicroBatch:
    """Pad a micro-batch so that every rank's token count divides by TP (sequence parallel scatters
    the sequence over the TP ranks). Padded rows get wider; a THD row gets (or extends) its padding
    segment, no loss, and, for CP, chosen so that after `split_for_context_parallel`'s 2*CP alignment
    of every segment each CP rank's share still divides by TP. Apply before the CP split."""
    if tp <= 1:
        return batch
    width = int(batch.tokens.shape[1])
    if batch.thd is None:
        pad = (-width) % tp
        if not pad:
            return batch
        rows = batch.tokens.shape[0]
        grow = lambda t, v: torch.cat([t, t.new_full((rows, pad), v)], dim=1)  # noqa: E731
        return replace(
            batch,
            tokens=grow(batch.tokens, PAD_TOKEN_ID),
            labels=grow(batch.labels, PAD_TOKEN_ID),
            loss_mask=grow(batch.loss_mask, 0),
            position_ids=torch.arange(width + pad).expand(rows, width + pad),
            padded_tokens=batch.padded_tokens + rows * pad,
        )
    assert batch.thd.cu_seqlens_list is not None
    cu = list(batch.thd.cu_seqlens_list)
    if cp > 1:
        chunks = 2 * cp
        aligned = sum(-(-(b - a) // chunks) * chunks for a, b in zip(cu[:-1], cu[1:], strict=True))
        multiple = math.lcm(chunks, cp * tp)
    else:
        aligned, multiple = width, tp
    pad = (-aligned) % multiple  # a multiple of 2*CP under CP, so the segment needs no alignment itself
    if not pad:
        return batch
    positions = batch.position_ids[0]
    if batch.thd.padding_segment:  # extend the pack's padding segment
        cu[-1] += pad
        new_positions = int(positions[-1]) + 1 + torch.arange(pad)
    else:  # a padding segment of its own: attends only to itself, and is skipped by the kernel
        cu.append(cu[-1] + pad)
        new_positions = torch.arange(pad)
    cu_t = torch.tensor(cu, dtype=torch.int32)
    all_positions = torch.cat([positions, new_positions.to(positions.dtype)])
    max_len = max(b - a for a, b in zip(cu[:-1], cu[1:], strict=True))
    thd = replace(  # type: ignore[call-arg]
        batch.thd,
        cu_seqlens_q=cu_t,
        cu_seqlens_kv=cu_t,
        max_seqlen_q=max_len,
        max_seqlen_kv=max_len,
        position_ids=all_positions,
        cu_seqlens_list=cu,
        cu_seqlens_kv_list=cu,
        padding_segment=True,
    )
    grow1 = lambda t, v: torch.cat([t, t.new_full((1, pad), v)], dim=1)  # noqa: E731
    return replace(
        batch,
        tokens=grow1(batch.tokens, PAD_TOKEN_ID),
        labels=grow1(batch.labels, PAD_TOKEN_ID),
        loss_mask=grow1(batch.loss_mask, 0),
        position_ids=all_positions.unsqueeze(0),
        thd=thd,
        padded_tokens=batch.padded_tokens + pad,
    )


def split_for_context_parallel(batch: MicroBatch, cp_size: int, cp_rank: int, cp_group: object) -> MicroBatch:
    """This rank's share of a THD micro-batch under the load-balanced split (see module docstring).

    Each segment is first padded to a multiple of 2*CP (alignment padding: no loss, placed after the
    segment's last token, so causal attention never shows it to a real token). Positions are the
    tokens' global positions within their sample.
    """
    if batch.thd is None:
        raise ValueError("context parallel needs packed (THD) batches")
    if cp_size == 1:
        return batch
    assert batch.thd.cu_seqlens_list is not None
    cu = batch.thd.cu_seqlens_list
    chunks = 2 * cp_size
    tokens, labels, mask, positions = (
        batch.tokens[0],
        batch.labels[0],
        batch.loss_mask[0],
        batch.position_ids[0],
    )

    # Alignment padding per segment; positions continue past the segment end.
    pieces: list[tuple[Tensor, Tensor, Tensor, Tensor]] = []
    padded_cu, unpadded_cu, real_flags, seen = [0], [0], [], 0
    for a, b in zip(cu[:-1], cu[1:], strict=True):
        n, pad = b - a, (a - b) % chunks
        last = int(positions[b - 1]) if n else -1
        pieces.append(
            (
                torch.cat([tokens[a:b], tokens.new_full((pad,), PAD_TOKEN_ID)]),
                torch.cat([labels[a:b], labels.new_full((pad,), PAD_TOKEN_ID)]),
                torch.cat([mask[a:b], mask.new_zeros(pad)]),
                torch.cat([positions[a:b], last + 1 + torch.arange(pad)]),
            )
        )
        # Segments are real samples up to the batch's real-token count; after that, pack padding.
        is_real = seen < batch.real_tokens
        seen += n
        real_flags.append(torch.cat([torch.full((n,), is_real), torch.zeros(pad, dtype=torch.bool)]))
        padded_cu.append(padded_cu[-1] + n + pad)
        unpadded_cu.append(unpadded_cu[-1] + (n if is_real else 0))
    all_tok, all_lab, all_mask, all_pos = (torch.cat(x) for x in zip(*pieces, strict=True))
    all_real = torch.cat(real_flags)

    def global_index(rank: int, owned: tuple[int, int]) -> Tensor:
        """Global padded indices of `rank`'s tokens: its two chunks of every segment, in order."""
        parts = []
        for a, b in zip(padded_cu[:-1], padded_cu[1:], strict=True):
            size = (b - a) // chunks
            parts += [torch.arange(a + c * size, a + (c + 1) * size) for c in owned]
        return torch.cat(parts)

    def balanced(rank: int) -> tuple[int, int]:
        return rank, chunks - 1 - rank

    mine = global_index(cp_rank, balanced(cp_rank))
    # Gathered keys arrive rank by rank in each rank's local order; this index puts them back in
    # global padded order with one gather.
    kv_gather_index = torch.empty(padded_cu[-1], dtype=torch.int64)
    kv_gather_index[torch.cat([global_index(r, balanced(r)) for r in range(cp_size)])] = torch.arange(
        padded_cu[-1]
    )
    local_cu = [c // cp_size for c in padded_cu]
    starts = torch.tensor(padded_cu[:-1]).repeat_interleave(
        torch.tensor(local_cu[1:]) - torch.tensor(local_cu[:-1])
    )
    local_cu_t = torch.tensor(local_cu, dtype=torch.int32)
    positions_mine = all_pos[mine]
    padded_cu_t = torch.tensor(padded_cu, dtype=torch.int32)
    thd = replace(  # type: ignore[call-arg]  # (megatron is untyped: its fields are unknown to mypy)
        batch.thd,
        cu_seqlens_q=local_cu_t,
        cu_seqlens_kv=padded_cu_t,
        cu_seqlens_q_padded=local_cu_t,
        cu_seqlens_kv_padded=padded_cu_t,
        max_seqlen_q=max(b - a for a, b in zip(local_cu[:-1], local_cu[1:], strict=True)),
        max_seqlen_kv=max(b - a for a, b in zip(padded_cu[:-1], padded_cu[1:], strict=True)),
        position_ids=positions_mine,
        index_in_sample=mine - starts,
        cu_seqlens_list=local_cu,
        cu_seqlens_kv_list=padded_cu,
        kv_gather_index=kv_gather_index,
        cp_group=cp_group,
        padding_segment=False,  # under CP the padding segment is split like a sample and attends
        cu_seqlens_unpadded_list=unpadded_cu,
    )
    return MicroBatch(
        tokens=all_tok[mine].unsqueeze(0),
        labels=all_lab[mine].unsqueeze(0),
        loss_mask=all_mask[mine].unsqueeze(0),
        position_ids=positions_mine.unsqueeze(0),
        thd=thd,
        real_tokens=int(all_real[mine].sum()),
        padded_tokens=int(mine.numel()),
    )
