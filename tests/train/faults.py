"""Deliberate, named bugs for the equivalence tests' controls, injected from here into the executor.

Each reproduces a known silent failure of packed training, so a test can show that its comparison catches
it: the control runs with one fault on and must then report a mismatch. The executor knows nothing of
them: `injected(faults)` wraps the executor's own functions for the duration of a `with` block (in every
`packcfg` module, and every test module, that holds them), and real training never runs a wrapper.

    with injected(Faults(mask_across_samples=True)):
        broken = loss_and_grads(model, [pack_thd(p) for p in packs])

Torchrun workers take fault names on their command line (`Faults.from_names`) and do the same.
"""

from __future__ import annotations

import contextlib
import functools
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

TESTS = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Faults:
    mask_across_samples: bool = False  # attention sees the whole pack as one sequence
    no_position_reset: bool = False  # positions count across the pack instead of per sample
    cp_local_positions: bool = False  # CP: RoPE positions from the rank-local cu_seqlens, not global
    per_microbatch_loss_mean: bool = False  # loss averaged per micro-batch, not per token of the step
    cp_wrong_chunks: bool = False  # CP rank r gets chunks 2r, 2r+1 while positions assume r, 2CP-1-r
    resume_data_from_start: bool = False  # resume restores the model but replays data from the start
    sp_grads_not_reduced: bool = False  # SP norm weights keep their TP-partial grads (no TP all-reduce)
    grad_norm_not_summed_over_tp: bool = (
        False  # clipping norm from this rank's TP shards only (the test's own)
    )
    resume_without_optimizer: bool = False  # torch_dist resume leaves the AdamW moments unrestored
    pp_stage_drops_thd: bool = False  # PP: stages after the first get no THD metadata (pack = one sequence)
    pp_embedding_grads_not_reduced: bool = False  # PP: tied embedding grad not summed over first/last stage
    dpo_ref_wrong_segment: bool = False  # DPO: each sample's reference log-prob read from the next segment
    # VLM: the cu_seqlens boundary before each sample falls after the sample's first image instead of
    # before the sample, so that image's tokens (and the prompt before it) attend to the previous sample
    image_tokens_across_samples: bool = False

    @classmethod
    def from_names(cls, names: Iterable[str]) -> Faults:
        known = {f.name for f in fields(cls)}
        chosen = {n.strip() for n in names if n.strip() and n.strip() != "none"}
        unknown = chosen - known
        if unknown:
            raise ValueError(f"unknown fault(s) {sorted(unknown)}; known: {sorted(known)}")
        return cls(**{n: True for n in chosen})

    def names(self) -> list[str]:
        return [f.name for f in fields(self) if getattr(self, f.name)]


NO_FAULTS = Faults()


def _holders() -> Iterator[dict[str, Any]]:
    """The namespaces a wrapped function must be replaced in: every loaded packcfg module and test module."""
    for name, module in list(sys.modules.items()):
        if module is None:
            continue
        file = getattr(module, "__file__", None) or ""
        if name == "packcfg" or name.startswith("packcfg.") or file.startswith(str(TESTS)):
            yield vars(module)


def _patch_everywhere(mp: Any, original: Callable, replacement: Callable) -> None:
    for namespace in _holders():
        for attr, value in list(namespace.items()):
            if value is original:
                mp.setitem(namespace, attr, replacement)


# ---- the faults, each as a wrapper around the executor function whose output it corrupts


def _one_sequence(mb: Any) -> Any:
    """mask_across_samples: the pack's THD bounds become [0, total] (positions still restart per sample)."""
    import torch

    total = int(mb.tokens.shape[1])
    cu = [0, total]
    t = torch.tensor(cu, dtype=torch.int32)
    thd = replace(
        mb.thd,
        cu_seqlens_q=t,
        cu_seqlens_kv=t,
        max_seqlen_q=total,
        max_seqlen_kv=total,
        cu_seqlens_list=cu,
        cu_seqlens_kv_list=cu,
        padding_segment=False,
    )
    return replace(mb, thd=thd)


def _running_positions(mb: Any) -> Any:
    """no_position_reset: positions 0..total-1 across the pack."""
    import torch

    positions = torch.arange(int(mb.tokens.shape[1]))
    return replace(mb, position_ids=positions.unsqueeze(0), thd=replace(mb.thd, position_ids=positions))


def _local_positions(mb: Any) -> Any:
    """cp_local_positions: RoPE positions restarted at the rank-local cu_seqlens."""
    import torch

    from packcfg.train.attention import thd_positions

    local = torch.tensor(mb.thd.cu_seqlens_list, dtype=torch.int32)
    positions = thd_positions(local, int(mb.tokens.shape[1]))
    return replace(mb, position_ids=positions.unsqueeze(0), thd=replace(mb.thd, position_ids=positions))


def _wrong_chunks(split: Callable, batch: Any, cp_size: int, cp_rank: int, cp_group: object) -> Any:
    """cp_wrong_chunks: this rank's tokens, labels and loss mask are chunks 2r and 2r+1 of every segment
    (contiguous), while positions and the key order still assume the balanced chunks r and 2CP-1-r. Built
    from every rank's correct share: chunk c lives on rank c (first half) or rank 2CP-1-c (second half).
    `real_tokens` (a metric, not in the loss) stays the balanced share's."""
    import torch

    mine = split(batch, cp_size, cp_rank, cp_group)
    if cp_size == 1:
        return mine
    shares = [split(batch, cp_size, q, cp_group) for q in range(cp_size)]
    local = mine.thd.cu_seqlens_list
    picked: dict[str, list[Any]] = {"tokens": [], "labels": [], "loss_mask": []}
    for i in range(len(local) - 1):
        size = (local[i + 1] - local[i]) // 2
        for c in (2 * cp_rank, 2 * cp_rank + 1):
            owner, half = (c, 0) if c < cp_size else (2 * cp_size - 1 - c, 1)
            start = local[i] + half * size
            for key in picked:
                picked[key].append(getattr(shares[owner], key)[0, start : start + size])
    return replace(mine, **{key: torch.cat(parts).unsqueeze(0) for key, parts in picked.items()})


def _images_across_samples(pack_vlm: Callable, thd_batch: Callable, samples: Any, vision: Any) -> Any:
    """image_tokens_across_samples: each sample's start bound moved past its first image."""
    from packcfg.train.vlm import image_spans

    mb = pack_vlm(samples, vision)
    samples = [s for s in samples if s.runtime_length]
    cu, shifted = mb.thd.cu_seqlens_list, [0]
    for s, a in zip(samples[1:], cu[1:-1], strict=True):
        spans = image_spans(s, vision)
        shifted.append(a + spans[0][1] if spans else a)
    shifted.append(cu[-1])
    wrong = thd_batch(mb.tokens[0], mb.labels[0], mb.loss_mask[0], shifted, mb.real_tokens)
    return replace(mb, thd=wrong.thd, position_ids=wrong.position_ids)


@contextlib.contextmanager
def injected(faults: Faults) -> Iterator[Faults]:
    """Run the block with `faults` wired into the executor (nothing at all with NO_FAULTS)."""
    import pytest

    with pytest.MonkeyPatch.context() as mp:
        if faults != NO_FAULTS:
            _inject(mp, faults)
        yield faults


def _inject(mp: Any, f: Faults) -> None:
    import packcfg.train.pipeline  # noqa: F401  (loaded, so that its bindings are among those patched)
    from packcfg.train import batches, checkpoint, data, dist_checkpoint, dpo, forward, parallel, vlm

    if f.mask_across_samples or f.no_position_reset:
        thd_batch = batches.thd_batch

        def faulty_thd_batch(*args: Any, **kwargs: Any) -> Any:
            mb = thd_batch(*args, **kwargs)
            if f.no_position_reset:
                mb = _running_positions(mb)
            return _one_sequence(mb) if f.mask_across_samples else mb

        _patch_everywhere(mp, thd_batch, faulty_thd_batch)

    if f.cp_local_positions or f.cp_wrong_chunks:
        split = batches.split_for_context_parallel

        def faulty_split(batch: Any, cp_size: int, cp_rank: int, cp_group: object) -> Any:
            if f.cp_wrong_chunks:
                out = _wrong_chunks(split, batch, cp_size, cp_rank, cp_group)
            else:
                out = split(batch, cp_size, cp_rank, cp_group)
            return _local_positions(out) if f.cp_local_positions and cp_size > 1 else out

        _patch_everywhere(mp, split, faulty_split)

    if f.per_microbatch_loss_mean:
        # each micro-batch averaged on its own, then averaged over the micro-batches
        _patch_everywhere(
            mp,
            forward.scaled_loss,
            lambda loss_sum, mb, tokens: loss_sum / max(mb.loss_tokens, 1) / tokens.micro_batches,
        )

    if f.sp_grads_not_reduced or f.pp_embedding_grads_not_reduced:
        overrides = {}
        if f.sp_grads_not_reduced:
            overrides["reduce_tp_partial"] = False
        if f.pp_embedding_grads_not_reduced:
            overrides["reduce_embedding"] = False
        finalize = parallel.finalize_model_grads
        _patch_everywhere(mp, finalize, functools.partial(finalize, **overrides))

    if f.pp_stage_drops_thd:
        from packcfg.train.mcore_compat import parallel_state

        per_token_losses = forward.per_token_losses

        def stage_without_thd(model: Any, mb: Any, use_te: bool = False) -> Any:
            if mb.thd is not None and not parallel_state.is_pipeline_first_stage(ignore_virtual=True):
                mb = replace(mb, thd=None)  # a later stage attends over the pack as one causal sequence
            return per_token_losses(model, mb, use_te=use_te)

        _patch_everywhere(mp, per_token_losses, stage_without_thd)

    if f.dpo_ref_wrong_segment:
        pair_losses = dpo.pair_losses
        _patch_everywhere(mp, pair_losses, lambda policy, ref, s: pair_losses(policy, ref.roll(1), s))

    if f.image_tokens_across_samples:
        _patch_everywhere(
            mp, vlm.pack_vlm, functools.partial(_images_across_samples, vlm.pack_vlm, batches.thd_batch)
        )

    if f.resume_without_optimizer:  # torch_dist only, as the bug it reproduces
        load = dist_checkpoint.load_dist_checkpoint

        def load_without_optimizer(
            directory: Any, layout: Any, model: Any, optimizer: Any, *rest: Any
        ) -> Any:
            resumed = load(directory, layout, model, optimizer, *rest)
            optimizer.state.clear()
            return resumed

        _patch_everywhere(mp, load, load_without_optimizer)

    if f.resume_data_from_start:
        # the resumed step counts, but the data position restarts at 0: subtract what the checkpoint consumed
        load_checkpoint, after = checkpoint.load_checkpoint, data.BatchPlan.micro_batches_after
        consumed = [0]

        def remember(*args: Any, **kwargs: Any) -> Any:
            resumed = load_checkpoint(*args, **kwargs)
            consumed[0] = resumed.consumed_units
            return resumed

        _patch_everywhere(mp, load_checkpoint, remember)
        mp.setattr(data.BatchPlan, "micro_batches_after", lambda self, n: after(self, n - consumed[0]))
