"""`bfd` and `histogram`: best-fit decreasing on the length histogram, compiled (packing/_bfd_kernel.py)
or in pure Python, whichever costs less (see `grouped_best_fit`)."""

from __future__ import annotations

import bisect
import importlib.util
import os
import sys
import time
from collections.abc import Callable
from types import ModuleType

import numpy as np

from packcfg.packing.planning import refine, slots
from packcfg.packing.planning.common import Packing, concat_ranges, length_histogram, sorted_desc

# Which path plans bfd/histogram follows measured cost (docs/packing.md, "The bfd kernel"):
# - below _KERNEL_MIN_DISTINCT distinct lengths the Python path runs: it costs well under a millisecond
#   per thousand samples there, about what the kernel's fixed overhead costs even when loaded;
# - once the kernel is loaded in this process (warm: 1-3 ms where Python takes 3-30 ms on a few hundred to
#   a few thousand distinct lengths), it plans everything else;
# - cold, loading it costs about _KERNEL_LOAD_S of CPU (importing numba, then reading its cache): the
#   Python path runs first with that much CPU time as its budget and hands over to the kernel if it runs
#   out (so a cold plan costs at most about twice the cheaper path), except from max(_KERNEL_SURE_DISTINCT,
#   items / _KERNEL_SURE_ITEMS_PER_DISTINCT) distinct lengths, where the kernel runs at once: there the
#   Python path would cost more than 3x one argsort of the lengths (the bar the planner is held to, with
#   the one-off load counted apart). It costs 3.5-10 us per distinct length plus about two argsorts
#   (bench/packing.py --ratio-only: 64k samples with 1,000 distinct 5-9 ms, with 1,900 10-12 ms, argsort
#   3 ms; 1M samples with 11k distinct 76-140 ms, 30k 164-250 ms, argsort 80-90 ms).
#   A process that keeps planning on the Python path also spends the load budget across calls (ski rental,
#   _python_spent): once Python has cost what the load costs, the kernel loads, so a long-lived process
#   pays at most twice what the cheaper choice would have.
# - where the refinement stage runs (planning/refine.py), it loads numba for its own kernel anyway; bfd's
#   kernel then loads too (20-30 ms more), so the stage's best fit on leftovers and later plans take it.
# Both paths give the same plan byte for byte, so the choice never changes a plan.
_KERNEL_MIN_DISTINCT = 64
_KERNEL_SURE_DISTINCT = 1000
_KERNEL_SURE_ITEMS_PER_DISTINCT = 100
# measured on the shared 2-CPU box (numba 0.68.1, cache present): import numba 0.25 s, first call 0.40 s
_NUMBA_IMPORT_S = 0.25
_KERNEL_LOAD_S = 0.40
# CPU seconds the Python path spent in this process on plans the kernel could have made
_python_spent = 0.0
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


def load_kernel() -> bool:
    """Load the compiled kernel now (numba import, then its cache or a compile); False without numba.
    Benchmarks call it to time warm plans; a long-lived process may call it to skip the cold budget."""
    budget = _kernel_budget()
    if budget is None:
        return False
    if budget == 0.0:
        return True  # loaded already (the refinement stage calls this on every plan it runs on: 0.15 ms)
    from packcfg.packing import _bfd_kernel

    if not _bfd_kernel.available():
        return False
    _, _, build, _, _ = _bfd_kernel.grouped_best_fit(
        np.array([3, 2, 1]), np.ones(3, dtype=np.int64), 8, 1 << 62
    )
    build(np.array([1, 2, 3]))  # the item-order scatter is compiled on first use too
    return _bfd_kernel.loaded()


def grouped_best_fit(a: np.ndarray, capacity: int, max_per_pack: int | None, tail: bool = True) -> Packing:
    """Best-fit decreasing on the length histogram, then, where that lands more than LB + max(5, 0.01% LB)
    packs: with max_per_pack, the slot-balanced plan (planning/slots.py), then the refinement stage
    (planning/refine.py) where that is still over; each plan is kept only if it has fewer packs. `tail`:
    whether the slot-balanced plan may plan its tail again by this function (not in that call itself).
    The stage loads numba for its own kernel (about 0.5 s of CPU from the cache); it loads bfd's compiled
    kernel too, which then costs only 20-30 ms more, so the stage's best fit on leftovers and every later
    plan take the kernel (1-2 ms where the Python path costs 10-20 ms on a few hundred distinct lengths)."""
    k_max = max_per_pack if max_per_pack is not None else 1 << 62
    present, counts = length_histogram(a)
    packing = _grouped_best_fit(a, capacity, max_per_pack, present, counts)
    if max_per_pack is not None:  # the slot-balanced plan first: where it lands within the goal, no stage
        goal = refine.target(present, counts, capacity, k_max, len(packing.offsets) - 1)
        packing = slots.improve(
            a,
            capacity,
            k_max,
            present,
            counts,
            packing,
            goal,
            (lambda rest: grouped_best_fit(rest, capacity, max_per_pack, tail=False)) if tail else None,
        )
    return refine.refine(
        a,
        capacity,
        k_max,
        present,
        counts,
        packing,
        lambda rest, rest_present, rest_counts: _rest_best_fit(
            rest, capacity, max_per_pack, rest_present, rest_counts
        ),
        load_kernel,
        _pack_counter(capacity, k_max, len(a)),
    )


def _rest_best_fit(
    rest: np.ndarray, capacity: int, max_per_pack: int | None, present: np.ndarray, counts: np.ndarray
) -> Packing:
    """Best fit on what the refinement stage's patterns leave (`rest`, its histogram present descending and
    counts): the kernel wherever it is loaded (the stage loads it), under _KERNEL_MIN_DISTINCT distinct
    lengths too, where a plan outside the stage keeps the Python path so as not to import numba (64k
    samples, 999 distinct at 2k: the rest's 20-60 lengths took 0.6 ms in Python, 0.05 ms on the kernel);
    the same plan either way."""
    kernel = sys.modules.get("packcfg.packing._bfd_kernel")
    if (
        len(present) < _KERNEL_MIN_DISTINCT
        and kernel is not None
        and kernel.loaded()
        and capacity <= _KERNEL_MAX_CAPACITY
    ):
        k_max = max_per_pack if max_per_pack is not None else 1 << 62
        return _kernel_plan(kernel, rest, capacity, k_max, present, counts)
    return _grouped_best_fit(rest, capacity, max_per_pack, present, counts)


def _kernel_plan(
    kernel: ModuleType, a: np.ndarray, capacity: int, k_max: int, present: np.ndarray, counts: np.ndarray
) -> Packing:
    """Best fit on the compiled kernel (`kernel`: packing/_bfd_kernel.py, loaded): the item order built on
    demand, and the placement bfd's refinement stage splits plans by."""
    offsets, fills, kbuild, assign, largest = kernel.grouped_best_fit(present, counts, capacity, k_max)
    return Packing(
        offsets,
        fills=fills,
        build=lambda: kbuild(a),
        placement=lambda: (assign, largest),
        write_into=lambda ids, out, start: kernel.scatter_into(ids, assign, offsets, out, start),
    )


def _pack_counter(capacity: int, k_max: int, n_max: int) -> Callable[[np.ndarray, np.ndarray], int]:
    """count(values, counts): best fit's packs on a histogram (values descending) of at most n_max items.
    The kernel where it is loaded at the first call (the refinement stage loads it before it counts), with
    its work arrays allocated once for every call (`_bfd_kernel.pack_counter`); the Python path otherwise."""
    counter: list[Callable[[np.ndarray, np.ndarray], int]] = []

    def count(values: np.ndarray, counts: np.ndarray) -> int:
        if not counter:
            kernel = sys.modules.get("packcfg.packing._bfd_kernel")
            if kernel is not None and kernel.loaded() and capacity <= _KERNEL_MAX_CAPACITY:
                counter.append(kernel.pack_counter(capacity, k_max, n_max))
            else:
                counter.append(lambda values, counts: _count_packs_python(values, counts, capacity, k_max))
        return counter[0](values, counts)

    return count


def _count_packs_python(values: np.ndarray, counts: np.ndarray, capacity: int, k_max: int) -> int:
    """Best fit's packs on a histogram (values descending) on the Python path."""
    a = np.repeat(values, counts)
    offsets = grouped_best_fit_python(a, capacity, k_max, counts, values).offsets  # type: ignore[union-attr]
    return len(offsets) - 1


def _grouped_best_fit(
    a: np.ndarray, capacity: int, max_per_pack: int | None, present: np.ndarray, counts: np.ndarray
) -> Packing:
    """Best-fit decreasing on the length histogram.

    Items of equal length are interchangeable, so a whole group is placed at once: open packs are kept
    only as counts per (remaining capacity, item count) level, and a level of m packs with remaining r
    takes q = min(r // l, max_per_pack - k) items of length l each. That is exactly what best fit does
    item by item (each such pack stays the tightest fit until it holds q), but costs one step per
    (length, level) instead of one per item. Pack identities are kept as id ranges, so the planning loop
    touches no per-item data; items are assigned to packs at the end with a few vectorised numpy passes.
    """
    k_max = max_per_pack if max_per_pack is not None else 1 << 62
    # which path: see _KERNEL_MIN_DISTINCT above; past _KERNEL_MAX_CAPACITY the kernel's
    # per-remaining-capacity index would not fit in memory
    global _python_spent
    budget = None
    if len(present) >= _KERNEL_MIN_DISTINCT and capacity <= _KERNEL_MAX_CAPACITY:
        budget = _kernel_budget()
        if budget is not None:
            budget = max(0.0, budget - _python_spent)
            if len(present) >= max(_KERNEL_SURE_DISTINCT, len(a) // _KERNEL_SURE_ITEMS_PER_DISTINCT):
                budget = 0.0
    if budget != 0.0:
        t0 = time.thread_time()
        packing = grouped_best_fit_python(a, capacity, k_max, counts, present, budget)
        if budget is not None:
            _python_spent += time.thread_time() - t0
        if packing is not None:
            return packing
    from packcfg.packing import _bfd_kernel  # lazy: numba's import is not free

    if not _bfd_kernel.available():  # numba found but failed to import
        return grouped_best_fit_python(a, capacity, k_max, counts, present)  # type: ignore[return-value]
    return _kernel_plan(_bfd_kernel, a, capacity, k_max, present, counts)


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
    A level (remaining r, items k) is keyed by the one integer r * _K_SPAN + k: the same order as the
    tuple (r, k), but bisecting and hashing an int is cheaper than a tuple.
    """
    # thread CPU time: planning is single-threaded, and process_time is a slower system call (8 us here)
    deadline = None if budget is None else time.thread_time() + budget
    steps = 0
    values = present.tolist()
    counts = counts_of.tolist()
    smallest = values[-1]
    span = _K_SPAN
    k_cap = min(k_max, span - 1)  # a pack's item count stays far below span (it is at most the items)

    # level key -> list of [start, stop) pack-id ranges; `keys` kept sorted.
    levels: dict[int, list[tuple[int, int]]] = {}
    sizes: dict[int, int] = {}
    keys: list[int] = []
    # placements, one record per pack range: group, items per pack, range start and end
    ev_g: list[int] = []
    ev_q: list[int] = []
    ev_s: list[int] = []
    ev_e: list[int] = []
    next_id = 0
    # the packs opened, in id order: runs of (length that opened them, how many), each pack's longest item
    open_len: list[int] = []
    open_n: list[int] = []

    def put(r: int, k: int, ranges: list[tuple[int, int]], m: int) -> None:
        # a pack that no remaining item can enter is closed for good: keep it out of the index
        if r < smallest or k >= k_max:
            return
        key = r * span + k
        if key in levels:
            levels[key].extend(ranges)
            sizes[key] += m
        else:
            levels[key] = ranges
            sizes[key] = m
            bisect.insort(keys, key)

    def take(key: int, m: int) -> list[tuple[int, int]]:
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

    def event(g: int, q: int, ranges: list[tuple[int, int]]) -> None:
        for s, e in ranges:
            ev_g.append(g)
            ev_q.append(q)
            ev_s.append(s)
            ev_e.append(e)

    for g, (length, n) in enumerate(zip(values, counts, strict=True)):
        while n > 0:
            steps += 1
            if deadline is not None and not steps & 255 and time.thread_time() > deadline:
                return None
            i = bisect.bisect_left(keys, length * span)
            if i == len(keys):
                q = min(capacity // length, k_cap) if length else k_cap
                q = min(q, n)
                full, rest = divmod(n, q)
                if full:
                    rng = [(next_id, next_id + full)]
                    event(g, q, rng)
                    put(capacity - q * length, q, rng, full)
                    next_id += full
                if rest:
                    rng = [(next_id, next_id + 1)]
                    event(g, rest, rng)
                    put(capacity - rest * length, rest, rng, 1)
                    next_id += 1
                open_len.append(length)
                open_n.append(full + (1 if rest else 0))
                break
            key = keys[i]
            r, k = divmod(key, span)
            m = sizes[key]
            q = min(r // length if length else k_cap, k_max - k)
            if m * q <= n:
                rng = levels.pop(key)
                del sizes[key]
                keys.pop(i)
                event(g, q, rng)
                put(r - q * length, k + q, rng, m)
                n -= m * q
                continue
            full, rest = divmod(n, q)
            if full:
                rng = take(key, full)
                sizes[key] -= full
                event(g, q, rng)
                put(r - q * length, k + q, rng, full)
            if rest:
                rng = take(key, 1)
                sizes[key] -= 1
                event(g, rest, rng)
                put(r - rest * length, k + rest, rng, 1)
            if sizes[key] == 0:
                del levels[key], sizes[key]
                keys.pop(bisect.bisect_left(keys, key))
            n = 0

    # Pack sizes and fills follow from the placement records alone; the item order is built when asked for.
    rec_q = np.asarray(ev_q, dtype=np.int64)
    rec_s = np.asarray(ev_s, dtype=np.int64)
    rec_m = np.asarray(ev_e, dtype=np.int64) - rec_s
    packs = concat_ranges(rec_s, rec_m)  # every pack of every record, record after record
    q_of = np.repeat(rec_q, rec_m)
    len_of = np.repeat(present[np.asarray(ev_g, dtype=np.int64)], rec_m)
    per_pack = np.zeros(next_id, dtype=np.int64)
    fills = np.zeros(next_id, dtype=np.int64)
    np.add.at(per_pack, packs, q_of)
    np.add.at(fills, packs, q_of * len_of)
    offsets = np.zeros(next_id + 1, dtype=np.int64)
    np.cumsum(per_pack, out=offsets[1:])

    def placement() -> tuple[np.ndarray, np.ndarray]:
        return _assign(packs, q_of, offsets), np.repeat(np.asarray(open_len, dtype=np.int64), open_n)

    return Packing(
        offsets, fills=fills, build=lambda: _materialise(a, packs, q_of, offsets), placement=placement
    )


# a level key r * _K_SPAN + k sorts as (r, k) while k < _K_SPAN (item counts stay far below it)
_K_SPAN = 1 << 40


def _materialise(a: np.ndarray, packs: np.ndarray, q_of: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """The CSR order from the placements: `packs` lists, placement after placement, each pack that received
    q_of items. Placements follow the groups in decreasing length and take each group's items in order, so
    repeating each pack q times gives the pack of every item in decreasing-length order (`sorted_desc`);
    a stable sort by pack then lists each pack's items in the order best fit put them there."""
    return sorted_desc(a)[np.argsort(_assign(packs, q_of, offsets), kind="stable")]


def _assign(packs: np.ndarray, q_of: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """The pack of every item in decreasing-length order (ties by id), from the placements (as in
    `_materialise`)."""
    assign = np.repeat(packs, q_of)
    return assign.astype(np.int32) if len(offsets) <= 2**31 else assign
