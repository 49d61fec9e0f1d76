"""The lower bound and the statistics `analyze` reports for a plan."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from packcfg.packing.planning.common import length_histogram
from packcfg.packing.planning.refine import slot_bound

if TYPE_CHECKING:
    from packcfg.packing.planner import PackPlan


def lower_bound(aligned: np.ndarray, capacity: int) -> int:
    """ceil(sum(aligned lengths) / capacity): no plan can use fewer packs."""
    return -(-int(np.asarray(aligned, dtype=np.int64).sum()) // capacity)


def compute_stats(
    p: PackPlan,
    raw: np.ndarray,
    over: dict[str, Any],
    unpacked_gbs: int | None = None,
    max_per_pack: int | None = None,
) -> dict[str, Any]:
    """Everything `analyze` reports: packs vs lower bound, efficiency, where the padding goes, advice. The
    lower bound is ceil(aligned tokens / capacity); with `max_per_pack` (and more items than that) the stats
    add `lower_bound_max_per_pack`, the larger of it and the slot bound (refine.slot_bound: at least the items
    over max_per_pack), under which no plan with that limit can go and which the volume alone can lie far
    under."""
    packs = p.num_packs
    n_placed = int(p.offsets[-1])
    if n_placed == len(p.item_length):  # every item is placed: no gather over the order needed
        real = int(p.item_length.sum())
        aligned = int(p.item_aligned.sum())
    else:  # DPO pairs dropped whole
        real = int(p.item_length[p.order].sum())
        aligned = int(p.item_aligned[p.order].sum())
    lb = -(-aligned // p.capacity)
    slots = packs * p.capacity
    sizes = p.pack_sizes()
    fills = p.pack_lengths()
    samples_placed = int(len(raw)) - int(over["dropped"])
    avg_per_pack = (n_placed / packs) if packs else 0.0
    stats: dict[str, Any] = {
        "algorithm": p.algorithm,
        "capacity": p.capacity,
        "align": p.align,
        "seed": p.seed,
        "samples": int(len(raw)),
        "samples_packed": samples_placed,
        "items": n_placed,
        "packs": packs,
        "lower_bound": lb,
        "gap_to_lower_bound": packs - lb,
        "gap_to_lower_bound_pct": (100.0 * (packs - lb) / lb) if lb else 0.0,
        "tokens": real,
        "aligned_tokens": aligned,
        "efficiency": (real / slots) if slots else 0.0,
        "padding_tokens": slots - real,
        "bin_waste_tokens": slots - aligned,
        "alignment_waste_tokens": aligned - real,
        "packing_factor": avg_per_pack,
        "max_samples_per_pack": int(sizes.max()) if packs else 0,
        "min_pack_length": int(fills.min()) if packs else 0,
        "max_pack_length": int(fills.max()) if packs else 0,
        "max_sample_length": int(raw.max()) if len(raw) else 0,
        "mean_sample_length": float(raw.mean()) if len(raw) else 0.0,
        "oversize": dict(over),
    }
    if max_per_pack is not None and n_placed > max_per_pack:
        placed = p.item_aligned if n_placed == len(p.item_aligned) else p.item_aligned[p.order]
        present, counts = length_histogram(placed)
        per_pack_lb = max(lb, slot_bound(present[::-1], counts[::-1], p.capacity, max_per_pack))
        stats["lower_bound_max_per_pack"] = per_pack_lb
        stats["gap_to_lower_bound_max_per_pack"] = packs - per_pack_lb
    # Unpacked baseline: every sample padded to the capacity (pad_to_max_length), as Bridge does when
    # it does not pack. Packing processes `packs` rows instead of `samples` rows.
    padded_eff = real / (n_placed * p.capacity) if n_placed else 0.0
    speedup = avg_per_pack
    advice: dict[str, Any] = {
        "padded_baseline_efficiency": padded_eff,
        "rows_saved_factor": speedup,
        "worth_packing": bool(speedup >= 1.25),
        "reason": (
            f"packing processes {speedup:.2f}x fewer rows than padding every sample to {p.capacity}"
            if speedup >= 1.25
            else f"samples are long relative to the capacity ({speedup:.2f} per pack): packing saves little"
        ),
    }
    if unpacked_gbs is not None:
        advice["unpacked_global_batch_size"] = int(unpacked_gbs)
        advice["packed_global_batch_size"] = packed_global_batch_size(int(unpacked_gbs), avg_per_pack)
    stats["advice"] = advice
    return stats


def packed_global_batch_size(unpacked_gbs: int, avg_samples_per_pack: float) -> int:
    """The packed GBS that keeps the samples per optimizer step: unpacked GBS / average samples per pack."""
    if avg_samples_per_pack <= 0:
        return unpacked_gbs
    return max(1, round(unpacked_gbs / avg_samples_per_pack))
