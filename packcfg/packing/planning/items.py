"""From sample lengths to items: validation, alignment (pad_seq_to_mult) and the oversize policy."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from packcfg.packing.planning.common import PlanError, concat_ranges


def positive_int(value: Any, name: str) -> int:
    try:
        as_int = int(value)
    except (TypeError, ValueError):
        raise PlanError(f"{name} must be an integer, got {value!r}") from None
    if as_int != value or as_int <= 0:
        raise PlanError(f"{name} must be a positive integer, got {value!r}")
    return as_int


def as_lengths(lengths: Sequence[int] | np.ndarray) -> np.ndarray:
    arr = np.asarray(lengths)
    if arr.ndim != 1:
        raise PlanError(f"lengths must be one-dimensional, got shape {arr.shape}")
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        if not np.issubdtype(arr.dtype, np.floating) or not np.all(np.mod(arr, 1) == 0):
            raise PlanError(f"lengths must be integers, got dtype {arr.dtype}")
    arr = arr.astype(np.int64, copy=False)
    if arr.size and arr.min() < 0:
        i = int(np.argmin(arr))
        raise PlanError(f"sample {i} has negative length {int(arr[i])}")
    return arr


def align_lengths(lengths: np.ndarray, align: int) -> np.ndarray:
    if align == 1:
        return lengths
    return -(-lengths // align) * align


# --------------------------------------------------------------------------------------------- oversize


def apply_oversize(
    raw: np.ndarray, align: int, capacity: int, usable: int, policy: str, paired: bool
) -> tuple[tuple[np.ndarray, np.ndarray, np.ndarray], dict[str, Any]]:
    """Turn samples into items under the oversize policy; returns the items and the oversize counts."""
    n = len(raw)
    aligned = align_lengths(raw, align)
    too_long = aligned > capacity
    count = int(too_long.sum())
    over: dict[str, Any] = {
        "policy": policy,
        "count": count,
        "truncated_tokens": 0,
        "split_pieces": 0,
        "dropped": 0,
        "dropped_tokens": 0,
    }
    ids = np.arange(n, dtype=np.int64)
    zeros = np.zeros(n, dtype=np.int64)
    if count == 0:
        return (ids, zeros, raw), over
    first = int(np.argmax(too_long))
    if policy == "error" or (paired and policy in ("truncate", "split")):
        why = "" if policy == "error" else f" (oversize={policy} is not supported for DPO pairs)"
        raise PlanError(
            f"sample {first} has length {int(raw[first])} (aligned {int(aligned[first])}) > capacity "
            f"{capacity}; {count} sample(s) are too long{why}; use oversize=truncate|split|drop"
        )
    if policy == "truncate":
        over["truncated_tokens"] = int((raw[too_long] - usable).sum())
        return (ids, zeros, np.where(too_long, usable, raw)), over
    if policy == "drop":
        over["dropped"] = count
        over["dropped_tokens"] = int(raw[too_long].sum())
        keep = ~too_long
        return (ids[keep], zeros[keep], raw[keep]), over
    # split: pieces of `usable` runtime tokens (so each aligned piece fits), the last one shorter.
    pieces = np.where(too_long, -(-raw // usable), 1)
    over["split_pieces"] = int(pieces[too_long].sum())
    item_sample = np.repeat(ids, pieces)
    piece_no = concat_ranges(zeros, pieces)  # 0, 1, ... within each sample
    item_start = piece_no * usable
    item_length = np.where(
        np.repeat(too_long, pieces), np.minimum(usable, raw[item_sample] - item_start), raw[item_sample]
    )
    return (item_sample, np.where(np.repeat(too_long, pieces), item_start, 0), item_length), over


def itemize(
    lengths: Sequence[int] | np.ndarray, capacity: int, align: int = 1, oversize: str = "error"
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The items `plan` would pack: (item_sample, item_start, item_length) under the oversize policy."""
    raw = as_lengths(lengths)
    capacity = positive_int(capacity, "capacity")
    align = positive_int(align, "align")
    usable = (capacity // align) * align
    if usable == 0:
        raise PlanError(f"capacity {capacity} is smaller than align {align}: nothing fits a pack")
    items, _ = apply_oversize(raw, align, capacity, usable, oversize, False)
    return items
