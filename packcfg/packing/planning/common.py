"""What every planning algorithm shares: its result (`Packing`, in CSR form), the planner's error, the
decreasing-length item order, the length histogram, runs of ids, and the switches of bfd's later stages."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np


def switched_off(variable: str) -> bool:
    """Whether an environment switch (PACKCFG_PLANNER_REFINE, _ELIMINATE, _EXACT) says off."""
    return os.environ.get(variable, "").lower() in ("0", "off", "no", "false")


class PlanError(ValueError):
    """Inputs the planner cannot honour; the message is one line that names the offending value."""


@dataclass
class Packing:
    """What an algorithm hands back: pack boundaries, and the item order (or how to build it). Best fit also
    gives `placement()`: (the pack of each item in decreasing-length order, ties by id; each pack's longest
    item), from which bfd's refinement stage splits the plan by pack without building the item order."""

    offsets: np.ndarray
    order: np.ndarray | None = None
    build: Callable[[], np.ndarray] | None = None
    fills: np.ndarray | None = None
    placement: Callable[[], tuple[np.ndarray, np.ndarray]] | None = None
    # write_into(ids, out, start): the item order written into out[start:], item i (in decreasing-length
    # order, ties by id) as ids[i]. A plan made of other plans (bfd's refinement stage) writes theirs in
    # place, with no order of their own, gather or concatenation between
    write_into: Callable[[np.ndarray, np.ndarray, int], None] | None = None


def write_sorted_order(packing: Packing, ids: np.ndarray, out: np.ndarray, start: int) -> None:
    """The order of `packing`, a plan of items already in decreasing-length order (an item's id is its place
    in that order: bfd's refinement stage plans such histograms' items, np.repeat(values, counts)), written
    into out[start:] with item i as ids[i]."""
    if packing.write_into is not None:
        packing.write_into(ids, out, start)
        return
    order = packing.order if packing.order is not None else packing.build()  # type: ignore[misc]
    np.take(ids, order, out=out[start : start + len(order)])


def from_groups(groups: list[np.ndarray]) -> Packing:
    offsets = np.zeros(len(groups) + 1, dtype=np.int64)
    np.cumsum([len(g) for g in groups], out=offsets[1:])
    order = np.concatenate(groups) if groups else np.zeros(0, dtype=np.int64)
    return Packing(offsets, order=order.astype(np.int64, copy=False))


def sorted_desc(a: np.ndarray) -> np.ndarray:
    """Item ids by decreasing length, ties by increasing id: a stable sort, radix on 16-bit keys. Lengths of
    2**16 or more are keyed by their rank among the distinct lengths where those are fewer than 2**16 and a
    histogram is cheap: at 128k with 1M samples that takes 8 ms where the stable sort of 64-bit keys (timsort)
    takes 47."""
    top = int(a.max()) if len(a) else 0
    if top < 2**16:
        return np.argsort((top - a).astype(np.uint16), kind="stable")
    if top <= 16 * len(a):
        present = np.flatnonzero(np.bincount(a))
        if len(present) <= 2**16:
            rank = np.empty(top + 1, dtype=np.uint16)
            rank[present] = np.arange(len(present) - 1, -1, -1)  # the longest first
            return np.argsort(rank[a], kind="stable")
    return np.argsort(top - a.astype(np.int64), kind="stable")


def length_histogram(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Distinct lengths, descending (the order sorted_desc gives), and how many items have each."""
    if int(a.max()) <= 16 * len(a):
        hist = np.bincount(a)
        present = np.flatnonzero(hist)[::-1]
        return present, hist[present]
    # lengths far above the item count: a histogram would be large and nearly empty, and a sort of the few
    # items costs less (5,000 samples up to 128k long: 0.7 ms for the histogram's bincount and scan, 0.35 ms)
    present, counts = np.unique(a, return_counts=True)
    return present[::-1], counts[::-1]


def concat_ranges(start: np.ndarray, count: np.ndarray) -> np.ndarray:
    """start[0], ..., start[0] + count[0] - 1, start[1], ...: the ranges arange(start[i], start[i] + count[i])
    end to end (a count may be 0)."""
    before = np.zeros(len(count), dtype=np.int64)
    np.cumsum(count[:-1], out=before[1:])
    total = int(before[-1] + count[-1]) if len(count) else 0
    return np.repeat(start - before, count) + np.arange(total, dtype=np.int64)
