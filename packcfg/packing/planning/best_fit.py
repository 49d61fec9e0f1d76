"""`bfd` and `histogram`: best-fit decreasing on the length histogram, compiled (packing/_bfd_kernel.py)
or in pure Python, whichever costs less (see `grouped_best_fit`)."""

from __future__ import annotations

import bisect
import importlib.util
import os
import sys
import time

import numpy as np

from packcfg.packing.planning.common import Packing, sorted_desc

# Which path plans bfd/histogram follows measured cost (docs/packing.md, "The bfd kernel"):
# - below _KERNEL_MIN_DISTINCT distinct lengths the Python path runs: it costs well under a millisecond
#   per thousand samples there, about what the kernel's fixed overhead costs even when loaded;
# - once the kernel is loaded in this process (warm: 1-2 ms where Python takes 10-250 ms on a few hundred
#   distinct lengths), it plans everything else;
# - cold, loading it costs about _KERNEL_LOAD_S of CPU (importing numba, then reading its cache): the
#   Python path runs first with that much CPU time as its budget and hands over to the kernel if it runs
#   out (so a cold plan costs at most about twice the cheaper path), except from _KERNEL_SURE_DISTINCT
#   distinct lengths, where Python is known to cost more than the load and the kernel runs at once.
# Both paths give the same plan byte for byte, so the choice never changes a plan.
_KERNEL_MIN_DISTINCT = 64
_KERNEL_SURE_DISTINCT = 1000
# measured on the shared 2-CPU box (numba 0.68.1, cache present): import numba 0.25 s, first call 0.40 s
_NUMBA_IMPORT_S = 0.25
_KERNEL_LOAD_S = 0.40
# the kernel indexes open packs by remaining capacity (an int32 per capacity, touched only where used)
_KERNEL_MAX_CAPACITY = 1 << 26


def _kernel_budget() -> float | None:
    """CPU seconds the Python path may spend before the kernel is cheaper: 0.0 when the kernel is loaded
    in this process, the measured cost of loading it otherwise, None when it cannot run."""
    kernel = sys.modules.get("packcfg.packing._bfd_kernel")
    if kernel is not None:
        if not kernel.available():
            return None
        if kernel.loaded():
            return 0.0
        return _KERNEL_LOAD_S
    if "numba" in sys.modules:
        return _KERNEL_LOAD_S
    if os.environ.get("PACKCFG_PLANNER_KERNEL", "").lower() in ("python", "0", "off"):
        return None  # (same test as _bfd_kernel.available(), without importing numba to make it)
    if importlib.util.find_spec("numba") is None:
        return None
    return _NUMBA_IMPORT_S + _KERNEL_LOAD_S


def grouped_best_fit(a: np.ndarray, capacity: int, max_per_pack: int | None) -> Packing:
    """Best-fit decreasing on the length histogram.

    Items of equal length are interchangeable, so a whole group is placed at once: open packs are kept
    only as counts per (remaining capacity, item count) level, and a level of m packs with remaining r
    takes q = min(r // l, max_per_pack - k) items of length l each. That is exactly what best fit does
    item by item (each such pack stays the tightest fit until it holds q), but costs one step per
    (length, level) instead of one per item. Pack identities are kept as id ranges, so the planning loop
    touches no per-item data; items are assigned to packs at the end with a few vectorised numpy passes.
    """
    k_max = max_per_pack if max_per_pack is not None else 1 << 62
    # distinct lengths, descending (the order sorted_desc gives), and how many items have each
    if int(a.max()) <= max(8 * len(a), 1 << 22):
        hist = np.bincount(a)
        present = np.flatnonzero(hist)[::-1]
        counts = hist[present]
    else:  # lengths far above the item count: a histogram would be huge and nearly empty
        present, counts = np.unique(a, return_counts=True)
        present, counts = present[::-1], counts[::-1]
    # which path: see _KERNEL_MIN_DISTINCT above; past _KERNEL_MAX_CAPACITY the kernel's
    # per-remaining-capacity index would not fit in memory
    budget = None
    if len(present) >= _KERNEL_MIN_DISTINCT and capacity <= _KERNEL_MAX_CAPACITY:
        budget = _kernel_budget()
        if budget is not None and len(present) >= _KERNEL_SURE_DISTINCT:
            budget = 0.0
    if budget != 0.0:
        packing = grouped_best_fit_python(a, capacity, k_max, counts, present, budget)
        if packing is not None:
            return packing
    from packcfg.packing import _bfd_kernel  # lazy: numba's import is not free

    if not _bfd_kernel.available():  # numba found but failed to import
        return grouped_best_fit_python(a, capacity, k_max, counts, present)  # type: ignore[return-value]
    offsets, fills, kbuild = _bfd_kernel.grouped_best_fit(present, counts, capacity, k_max)
    return Packing(offsets, fills=fills, build=lambda: kbuild(a))


def grouped_best_fit_python(
    a: np.ndarray,
    capacity: int,
    k_max: int,
    counts_of: np.ndarray,
    present: np.ndarray,
    budget: float | None = None,
) -> Packing | None:
    """The pure-Python path: the fallback without numba, and the oracle the kernel is tested against.

    With a `budget` (CPU seconds) it gives up and returns None once planning has cost that much.
    """
    deadline = None if budget is None else time.process_time() + budget
    steps = 0
    values = present.tolist()
    counts = counts_of.tolist()
    smallest = values[-1]

    # level key (remaining, items) -> list of [start, stop) pack-id ranges; `keys` kept sorted.
    levels: dict[tuple[int, int], list[tuple[int, int]]] = {}
    sizes: dict[tuple[int, int], int] = {}
    keys: list[tuple[int, int]] = []
    events: list[tuple[int, int, list[tuple[int, int]]]] = []  # (group index, q, ranges)
    next_id = 0

    def put(key: tuple[int, int], ranges: list[tuple[int, int]], m: int) -> None:
        # a pack that no remaining item can enter is closed for good: keep it out of the index
        if key[0] < smallest or key[1] >= k_max:
            return
        if key in levels:
            levels[key].extend(ranges)
            sizes[key] += m
        else:
            levels[key] = ranges
            sizes[key] = m
            bisect.insort(keys, key)

    def take(key: tuple[int, int], m: int) -> list[tuple[int, int]]:
        ranges = levels[key]
        out: list[tuple[int, int]] = []
        while m:
            s, e = ranges[-1]
            if e - s <= m:
                out.append((s, e))
                ranges.pop()
                m -= e - s
            else:
                out.append((e - m, e))
                ranges[-1] = (s, e - m)
                m = 0
        return out

    for g, (length, n) in enumerate(zip(values, counts, strict=True)):
        while n > 0:
            steps += 1
            if deadline is not None and not steps & 63 and time.process_time() > deadline:
                return None
            i = bisect.bisect_left(keys, (length, -1))
            if i == len(keys):
                q = min(capacity // length, k_max) if length else k_max
                q = min(q, n)
                full, rest = divmod(n, q)
                if full:
                    rng = [(next_id, next_id + full)]
                    events.append((g, q, rng))
                    put((capacity - q * length, q), list(rng), full)
                    next_id += full
                if rest:
                    rng = [(next_id, next_id + 1)]
                    events.append((g, rest, rng))
                    put((capacity - rest * length, rest), list(rng), 1)
                    next_id += 1
                break
            key = keys[i]
            r, k = key
            m = sizes[key]
            q = min(r // length if length else k_max, k_max - k)
            if m * q <= n:
                rng = levels.pop(key)
                del sizes[key]
                keys.pop(i)
                events.append((g, q, rng))
                put((r - q * length, k + q), list(rng), m)
                n -= m * q
                continue
            full, rest = divmod(n, q)
            if full:
                rng = take(key, full)
                sizes[key] -= full
                events.append((g, q, rng))
                put((r - q * length, k + q), list(rng), full)
            if rest:
                rng = take(key, 1)
                sizes[key] -= 1
                events.append((g, rest, rng))
                put((r - rest * length, k + rest), list(rng), 1)
            if sizes[key] == 0:
                del levels[key], sizes[key]
                keys.pop(bisect.bisect_left(keys, key))
            n = 0

    # Pack sizes and fills come from the events alone; the item order is built when asked for.
    per_pack = np.zeros(next_id, dtype=np.int64)
    fills = np.zeros(next_id, dtype=np.int64)
    for g, q, ranges in events:
        for s, e in ranges:
            per_pack[s:e] += q
            fills[s:e] += q * values[g]
    offsets = np.zeros(next_id + 1, dtype=np.int64)
    np.cumsum(per_pack, out=offsets[1:])
    return Packing(offsets, fills=fills, build=lambda: _materialise(a, counts, events, offsets))


def _materialise(
    a: np.ndarray,
    counts: list[int],
    events: list[tuple[int, int, list[tuple[int, int]]]],
    offsets: np.ndarray,
) -> np.ndarray:
    """Turn (group, q, pack ranges) events into the CSR order: each pack in a range gets q items."""
    idx = sorted_desc(a)
    fill = offsets[:-1].copy()
    order = np.empty(len(idx), dtype=np.int64)
    group_start = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=group_start[1:])
    cursor = group_start[:-1].copy()
    for g, q, ranges in events:
        for s, e in ranges:
            m = (e - s) * q
            src = idx[cursor[g] : cursor[g] + m]
            cursor[g] += m
            if q == 1:
                order[fill[s:e]] = src
            else:
                pos = fill[s:e, None] + np.arange(q)
                order[pos.ravel()] = src
            fill[s:e] += q
    return order
