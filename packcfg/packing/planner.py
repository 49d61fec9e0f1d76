"""Plan packs from sequence lengths alone: `plan(lengths, capacity, ...) -> PackPlan`.

The planner never sees tokens. It takes each sample's *runtime* length (for Bridge's packed SFT that is
`len(input_ids) - 1`: the input and the label are both one token shorter than the sample), rounds it up to
`align` (pad_seq_to_mult), applies the oversize policy and assigns every piece to a pack of at most
`capacity` aligned tokens.

Every algorithm returns its packs in CSR form (`order` holds item ids pack after pack, `offsets` the pack
boundaries): 16M samples make ~3M packs, and three million small numpy arrays would cost more time and
memory than the planning itself. `PackPlan.bins` is a lazy sequence of index arrays over that storage.
"""

from __future__ import annotations

import bisect
import importlib.util
import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

ALGORITHMS = ("bfd", "ffd", "first_fit_shuffle", "histogram", "sequential", "greedy_buffer")
OVERSIZE_POLICIES = ("error", "truncate", "split", "drop")


class PlanError(ValueError):
    """Inputs the planner cannot honour; the message is one line that names the offending value."""


# --------------------------------------------------------------------------------------------- results


class BinList(Sequence[np.ndarray]):
    """`plan.bins`: a read-only sequence of int64 index arrays (views into one CSR buffer)."""

    __slots__ = ("_order", "_offsets")

    def __init__(self, order: np.ndarray, offsets: np.ndarray) -> None:
        self._order = order
        self._offsets = offsets

    def __len__(self) -> int:
        return len(self._offsets) - 1

    def __getitem__(self, i: int) -> np.ndarray:  # type: ignore[override]
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]  # type: ignore[return-value]
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(i)
        return self._order[self._offsets[i] : self._offsets[i + 1]]

    def __iter__(self) -> Iterator[np.ndarray]:
        order, offsets = self._order, self._offsets
        for i in range(len(offsets) - 1):
            yield order[offsets[i] : offsets[i + 1]]

    def __repr__(self) -> str:
        return f"BinList({len(self)} packs, {len(self._order)} items)"


@dataclass
class PackPlan:
    """The result of `plan`.

    Items are what gets packed. Without splitting, item i is sample i. With `oversize="split"`, a sample
    longer than the capacity becomes several items; `item_sample`, `item_start` and `item_length` then say
    which sample each item comes from, where it starts (in runtime tokens) and how long it is.
    `.bins` indexes items; for a plan without split pieces that is the same as indexing `lengths`.
    """

    capacity: int
    align: int
    algorithm: str
    seed: int
    offsets: np.ndarray  # pack k holds order[offsets[k]:offsets[k+1]]
    item_sample: np.ndarray  # item -> sample index
    item_start: np.ndarray  # item -> first runtime token within its sample
    item_length: np.ndarray  # item -> runtime length (after truncation/splitting, before alignment)
    item_aligned: np.ndarray  # item -> aligned length (what the pack budget counts)
    pair_of: np.ndarray | None = None  # DPO: item -> its partner item (chosen<->rejected), else None
    pieces: bool = False  # some sample was split into several items
    stats: dict[str, Any] = field(default_factory=dict)
    # `order` (item ids, pack after pack) is either given or built on first use: the histogram planner
    # knows every pack's size and fill before it assigns a single item, and `analyze` needs no more.
    _order: np.ndarray | None = None
    _build: Callable[[], np.ndarray] | None = None
    _fills: np.ndarray | None = None

    @property
    def order(self) -> np.ndarray:
        if self._order is None:
            assert self._build is not None
            self._order = self._build()
            self._build = None
        return self._order

    @property
    def bins(self) -> BinList:
        return BinList(self.order, self.offsets)

    @property
    def num_packs(self) -> int:
        return len(self.offsets) - 1

    @property
    def has_pieces(self) -> bool:
        """True when some sample was split into several items (item ids differ from sample ids)."""
        return self.pieces

    def pack_lengths(self) -> np.ndarray:
        """Aligned tokens used by each pack."""
        if self._fills is None:
            if self.num_packs:
                self._fills = np.add.reduceat(self.item_aligned[self.order], self.offsets[:-1])
            else:
                self._fills = np.zeros(0, dtype=np.int64)
        return self._fills

    def pack_sizes(self) -> np.ndarray:
        """Items in each pack."""
        return np.diff(self.offsets)

    def bin_samples(self, k: int) -> np.ndarray:
        """Sample indices in pack k (a split sample may appear in several packs)."""
        return self.item_sample[self.bins[k]]


@dataclass
class _Packing:
    """What an algorithm hands back: pack boundaries, and the item order (or how to build it)."""

    offsets: np.ndarray
    order: np.ndarray | None = None
    build: Callable[[], np.ndarray] | None = None
    fills: np.ndarray | None = None


# --------------------------------------------------------------------------------------------- entry


def plan(
    lengths: Sequence[int] | np.ndarray,
    capacity: int,
    algorithm: str = "bfd",
    align: int = 1,
    max_per_pack: int | None = None,
    seed: int = 0,
    oversize: str | None = None,
    pairs: bool | np.ndarray | Sequence[Sequence[int]] | None = None,
    *,
    secondary: Sequence[int] | np.ndarray | None = None,
    secondary_capacity: int | None = None,
    buffer_size: int = 64,
    unpacked_global_batch_size: int | None = None,
) -> PackPlan:
    """Assign every sample (runtime length) to a pack of at most `capacity` aligned tokens.

    - `algorithm`: one of `ALGORITHMS` (see docs/packing.md for when to use which).
    - `align`: each length is rounded up to a multiple of it (pad_seq_to_mult, for CP/SP).
    - `max_per_pack`: at most this many items in one pack.
    - `oversize`: what to do with a sample whose aligned length exceeds `capacity`:
      `error` (default; `split` for greedy_buffer, as InternVL does), `truncate`, `split` or `drop`.
    - `pairs`: DPO. `True` pairs samples (0,1), (2,3), ...; or an (M, 2) array of (chosen, rejected)
      indices. A pair is placed adjacently in one pack.
    - `secondary`, `secondary_capacity`: a second per-pack budget (e.g. images), greedy_buffer only.
      A split sample's pieces each count the whole sample's value: the planner does not know where
      the images fall, so it never under-counts (VLM training splits at image boundaries itself,
      packcfg.train.vlm.split_sample, and budgets each piece's own tiles).
    - `unpacked_global_batch_size`: if given, the stats advise the packed global batch size.
    A fixed `seed` gives the identical plan on every run.
    """
    if algorithm not in ALGORITHMS:
        raise PlanError(f"unknown packing algorithm {algorithm!r}; choose one of {', '.join(ALGORITHMS)}")
    if pairs is False:
        pairs = None
    capacity = _positive_int(capacity, "capacity")
    align = _positive_int(align, "align")
    if max_per_pack is not None:
        max_per_pack = _positive_int(max_per_pack, "max_per_pack")
    if oversize is None:
        oversize = "split" if algorithm == "greedy_buffer" else "error"
    if oversize not in OVERSIZE_POLICIES:
        raise PlanError(f"unknown oversize policy {oversize!r}; choose one of {', '.join(OVERSIZE_POLICIES)}")
    if (secondary is None) != (secondary_capacity is None):
        raise PlanError("secondary and secondary_capacity go together")
    if secondary is not None and algorithm != "greedy_buffer":
        raise PlanError(f"a secondary budget is supported by greedy_buffer only, not {algorithm!r}")

    raw = _as_lengths(lengths)
    n = len(raw)
    if n == 0:
        raise PlanError("no samples to pack (empty dataset)")
    usable = (capacity // align) * align  # the largest aligned length that fits a pack
    if usable == 0:
        raise PlanError(f"capacity {capacity} is smaller than align {align}: nothing fits a pack")

    sec = None
    if secondary is not None:
        sec = np.asarray(secondary, dtype=np.int64)
        if sec.shape != raw.shape:
            raise PlanError(f"secondary has {sec.size} values for {n} samples")
        secondary_capacity = _positive_int(secondary_capacity, "secondary_capacity")
        if (sec < 0).any():
            raise PlanError(f"secondary value {int(sec.min())} < 0 at sample {int(np.argmin(sec))}")

    items, over = _apply_oversize(raw, align, capacity, usable, oversize, pairs is not None)
    item_sample, item_start, item_length = items
    item_aligned = _align(item_length, align)

    pair_of = None
    if pairs is not None:
        packing, pair_of = _plan_pairs(
            pairs, n, item_sample, item_aligned, capacity, algorithm, max_per_pack, seed, oversize, over
        )
    else:
        packing = _dispatch(
            algorithm,
            item_aligned,
            capacity,
            max_per_pack,
            seed,
            None if sec is None else sec[item_sample],
            secondary_capacity,
            buffer_size,
        )
        if algorithm != "histogram" and packing.order is None:
            packing.order = packing.build()  # type: ignore[misc]  # only histogram stays lazy

    result = PackPlan(
        capacity=capacity,
        align=align,
        algorithm=algorithm,
        seed=seed,
        offsets=packing.offsets,
        _order=packing.order,
        _build=packing.build if packing.order is None else None,
        _fills=packing.fills,
        item_sample=item_sample,
        item_start=item_start,
        item_length=item_length,
        item_aligned=item_aligned,
        pair_of=pair_of,
        pieces=over["split_pieces"] > 0,
    )
    result.stats = compute_stats(result, raw, over, unpacked_global_batch_size)
    return result


def _positive_int(value: Any, name: str) -> int:
    try:
        as_int = int(value)
    except (TypeError, ValueError):
        raise PlanError(f"{name} must be an integer, got {value!r}") from None
    if as_int != value or as_int <= 0:
        raise PlanError(f"{name} must be a positive integer, got {value!r}")
    return as_int


def _as_lengths(lengths: Sequence[int] | np.ndarray) -> np.ndarray:
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


def _align(lengths: np.ndarray, align: int) -> np.ndarray:
    if align == 1:
        return lengths
    return -(-lengths // align) * align


# --------------------------------------------------------------------------------------------- oversize


def _apply_oversize(
    raw: np.ndarray, align: int, capacity: int, usable: int, policy: str, paired: bool
) -> tuple[tuple[np.ndarray, np.ndarray, np.ndarray], dict[str, Any]]:
    """Turn samples into items under the oversize policy; returns the items and the oversize counts."""
    n = len(raw)
    aligned = _align(raw, align)
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
    first_item = np.cumsum(pieces) - pieces
    piece_no = np.arange(len(item_sample), dtype=np.int64) - np.repeat(first_item, pieces)
    item_start = piece_no * usable
    item_length = np.where(
        np.repeat(too_long, pieces), np.minimum(usable, raw[item_sample] - item_start), raw[item_sample]
    )
    return (item_sample, np.where(np.repeat(too_long, pieces), item_start, 0), item_length), over


def itemize(
    lengths: Sequence[int] | np.ndarray, capacity: int, align: int = 1, oversize: str = "error"
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The items `plan` would pack: (item_sample, item_start, item_length) under the oversize policy."""
    raw = _as_lengths(lengths)
    capacity = _positive_int(capacity, "capacity")
    align = _positive_int(align, "align")
    usable = (capacity // align) * align
    if usable == 0:
        raise PlanError(f"capacity {capacity} is smaller than align {align}: nothing fits a pack")
    items, _ = _apply_oversize(raw, align, capacity, usable, oversize, False)
    return items


# --------------------------------------------------------------------------------------------- dispatch


def _dispatch(
    algorithm: str,
    a: np.ndarray,
    capacity: int,
    max_per_pack: int | None,
    seed: int,
    sec: np.ndarray | None,
    sec_capacity: int | None,
    buffer_size: int,
) -> _Packing:
    if len(a) == 0:  # everything dropped
        return _Packing(np.zeros(1, dtype=np.int64), order=np.zeros(0, dtype=np.int64))
    if algorithm in ("bfd", "histogram"):
        return _grouped_best_fit(a, capacity, max_per_pack)
    if algorithm == "ffd":
        idx = _sorted_desc(a)
        return _first_fit(a, idx, capacity, max_per_pack)
    if algorithm == "first_fit_shuffle":
        idx = np.random.default_rng(seed).permutation(len(a))
        return _first_fit(a, idx, capacity, max_per_pack)
    if algorithm == "sequential":
        return _next_fit(a, capacity, max_per_pack)
    if algorithm == "greedy_buffer":
        return _greedy_buffer(a, capacity, max_per_pack, sec, sec_capacity, buffer_size)
    raise PlanError(f"unknown packing algorithm {algorithm!r}")  # unreachable: checked in plan()


def _sorted_desc(a: np.ndarray) -> np.ndarray:
    """Item ids by decreasing length, ties by increasing id (stable; radix sort for small lengths)."""
    top = int(a.max()) if len(a) else 0
    key = (top - a).astype(np.uint16 if top < 2**16 else np.int64)
    return np.argsort(key, kind="stable")


# --------------------------------------------------------------------------------------------- best fit


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


def _grouped_best_fit(a: np.ndarray, capacity: int, max_per_pack: int | None) -> _Packing:
    """Best-fit decreasing on the length histogram.

    Items of equal length are interchangeable, so a whole group is placed at once: open packs are kept
    only as counts per (remaining capacity, item count) level, and a level of m packs with remaining r
    takes q = min(r // l, max_per_pack - k) items of length l each. That is exactly what best fit does
    item by item (each such pack stays the tightest fit until it holds q), but costs one step per
    (length, level) instead of one per item. Pack identities are kept as id ranges, so the planning loop
    touches no per-item data; items are assigned to packs at the end with a few vectorised numpy passes.
    """
    k_max = max_per_pack if max_per_pack is not None else 1 << 62
    # distinct lengths, descending (the order _sorted_desc gives), and how many items have each
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
        packing = _grouped_best_fit_python(a, capacity, k_max, counts, present, budget)
        if packing is not None:
            return packing
    from packcfg.packing import _bfd_kernel  # lazy: numba's import is not free

    if not _bfd_kernel.available():  # numba found but failed to import
        return _grouped_best_fit_python(a, capacity, k_max, counts, present)  # type: ignore[return-value]
    offsets, fills, kbuild = _bfd_kernel.grouped_best_fit(present, counts, capacity, k_max)
    return _Packing(offsets, fills=fills, build=lambda: kbuild(a))


def _grouped_best_fit_python(
    a: np.ndarray,
    capacity: int,
    k_max: int,
    counts_of: np.ndarray,
    present: np.ndarray,
    budget: float | None = None,
) -> _Packing | None:
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
    return _Packing(offsets, fills=fills, build=lambda: _materialise(a, counts, events, offsets))


def _materialise(
    a: np.ndarray,
    counts: list[int],
    events: list[tuple[int, int, list[tuple[int, int]]]],
    offsets: np.ndarray,
) -> np.ndarray:
    """Turn (group, q, pack ranges) events into the CSR order: each pack in a range gets q items."""
    idx = _sorted_desc(a)
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


def _from_groups(groups: list[np.ndarray]) -> _Packing:
    offsets = np.zeros(len(groups) + 1, dtype=np.int64)
    np.cumsum([len(g) for g in groups], out=offsets[1:])
    order = np.concatenate(groups) if groups else np.zeros(0, dtype=np.int64)
    return _Packing(offsets, order=order.astype(np.int64, copy=False))


# --------------------------------------------------------------------------------------------- first fit


def _first_fit(a: np.ndarray, idx: np.ndarray, capacity: int, max_per_pack: int | None) -> _Packing:
    """First fit in the order `idx`: each item goes to the lowest-numbered pack with room.

    A max segment tree over the packs' remaining capacity finds that pack in O(log packs). Runs of equal
    lengths (all of them, after sorting for ffd) are placed q at a time, as in the best-fit planner.
    """
    k_max = max_per_pack if max_per_pack is not None else 1 << 62
    n = len(idx)
    # any fit opens a pack only when no open pack fits, so without a count limit two packs together
    # always overflow: packs <= 2 * LB + 1. A tree sized for that is shallower than one sized for n.
    bound = n if max_per_pack is not None else min(n, 2 * (-(-int(a.sum()) // capacity)) + 1)
    size = 1
    while size < max(bound, 1):
        size *= 2
    tree = [-1] * (2 * size)  # leaf = remaining capacity of an open pack (or -1: not open / full by count)
    remaining: list[int] = []
    counts: list[int] = []
    members: list[list[int]] = []
    seq = a[idx].tolist()
    ids = idx.tolist()

    pos = 0
    while pos < n:
        length = seq[pos]
        run_end = pos + 1
        while run_end < n and seq[run_end] == length:
            run_end += 1
        while pos < run_end:
            if tree[1] >= length:  # descend to the leftmost leaf with room (hot loop: kept minimal)
                i = 1
                while i < size:
                    i <<= 1
                    if tree[i] < length:
                        i += 1
                p = i - size
            else:
                p = len(remaining)
                if p == size:  # more packs than the bound foresaw: double the tree (never in theory)
                    size *= 2
                    tree = _max_tree(remaining, counts, k_max, size)
                remaining.append(capacity)
                counts.append(0)
                members.append([])
            room = remaining[p] // length if length else run_end - pos
            q = min(room, k_max - counts[p], run_end - pos)
            if q == 1:
                members[p].append(ids[pos])
            else:
                members[p].extend(ids[pos : pos + q])
            left = remaining[p] - q * length
            remaining[p] = left
            counts[p] += q
            pos += q
            # update the leaf and its ancestors; stop as soon as an ancestor's max is unchanged
            i = p + size
            tree[i] = left if counts[p] < k_max else -1
            i >>= 1
            while i:
                x, y = tree[2 * i], tree[2 * i + 1]
                best = x if x >= y else y
                if tree[i] == best:
                    break
                tree[i] = best
                i >>= 1
    return _from_groups([np.asarray(m, dtype=np.int64) for m in members])


def _max_tree(remaining: list[int], counts: list[int], k_max: int, size: int) -> list[int]:
    tree = [-1] * (2 * size)
    for p, (r, c) in enumerate(zip(remaining, counts, strict=True)):
        tree[size + p] = r if c < k_max else -1
    for i in range(size - 1, 0, -1):
        tree[i] = max(tree[2 * i], tree[2 * i + 1])
    return tree


# --------------------------------------------------------------------------------------------- in order


def _next_fit(a: np.ndarray, capacity: int, max_per_pack: int | None) -> _Packing:
    """Order-preserving next fit: close the pack when the next item does not fit (or it is full by count)."""
    csum = np.zeros(len(a) + 1, dtype=np.int64)
    np.cumsum(a, out=csum[1:])
    bounds = [0]
    s = 0
    n = len(a)
    while s < n:
        e = int(np.searchsorted(csum, csum[s] + capacity, side="right")) - 1
        if max_per_pack is not None:
            e = min(e, s + max_per_pack)
        e = max(e, s + 1)  # an item of exactly `capacity` (or zero-length run) always makes progress
        bounds.append(e)
        s = e
    return _Packing(np.asarray(bounds, dtype=np.int64), order=np.arange(n, dtype=np.int64))


class GreedyBufferPacker:
    """Streaming packer with a bounded buffer of open packs (InternVL-style).

    `add(item, length, secondary)` places an item into the open pack that fits it best (token budget and,
    if given, the secondary budget such as images per pack); when no open pack fits and the buffer is full,
    the fullest open pack is emitted. Memory is bounded by `buffer_size` packs, whatever the stream length.
    """

    def __init__(
        self,
        capacity: int,
        buffer_size: int = 64,
        max_per_pack: int | None = None,
        secondary_capacity: int | None = None,
    ) -> None:
        self.capacity = capacity
        self.buffer_size = max(1, buffer_size)
        self.k_max = max_per_pack if max_per_pack is not None else 1 << 62
        self.sec_cap = secondary_capacity if secondary_capacity is not None else 1 << 62
        # open packs: id -> [room, secondary used, items]; `rooms` sorted (room, id) for best fit
        self._open: dict[int, list[Any]] = {}
        self._rooms: list[tuple[int, int]] = []
        self._next = 0

    def add(self, item: int, length: int, secondary: int = 0) -> list[list[int]]:
        """Place one item; returns the packs closed by this step (usually none)."""
        if length > self.capacity or secondary > self.sec_cap:
            raise PlanError(
                f"item {item} (length {length}, secondary {secondary}) exceeds the pack budget "
                f"({self.capacity}, {self.sec_cap})"
            )
        closed: list[list[int]] = []
        rooms = self._rooms
        j = bisect.bisect_left(rooms, (length, -1))
        while j < len(rooms):  # tightest fit first; skip packs the secondary budget rules out
            pid = rooms[j][1]
            if self._open[pid][1] + secondary <= self.sec_cap:
                break
            j += 1
        if j < len(rooms):
            room, pid = rooms.pop(j)
            pack = self._open[pid]
            pack[0] = room - length
            pack[1] += secondary
            pack[2].append(item)
            if pack[0] == 0 or len(pack[2]) >= self.k_max or pack[1] >= self.sec_cap:
                closed.append(self._open.pop(pid)[2])
            else:
                bisect.insort(rooms, (pack[0], pid))
            return closed
        if len(self._open) >= self.buffer_size:
            _, pid = rooms.pop(0)  # the fullest open pack leaves the buffer
            closed.append(self._open.pop(pid)[2])
        pid = self._next
        self._next += 1
        self._open[pid] = [self.capacity - length, secondary, [item]]
        if self.capacity - length == 0 or self.k_max == 1 or secondary >= self.sec_cap:
            closed.append(self._open.pop(pid)[2])
        else:
            bisect.insort(rooms, (self.capacity - length, pid))
        return closed

    def flush(self) -> list[list[int]]:
        """Emit every open pack (end of stream), oldest first."""
        out = [self._open[pid][2] for pid in sorted(self._open)]
        self._open = {}
        self._rooms = []
        return out


def _greedy_buffer(
    a: np.ndarray,
    capacity: int,
    max_per_pack: int | None,
    sec: np.ndarray | None,
    sec_capacity: int | None,
    buffer_size: int,
) -> _Packing:
    packer = GreedyBufferPacker(capacity, buffer_size, max_per_pack, sec_capacity)
    groups: list[np.ndarray] = []
    secl = sec.tolist() if sec is not None else None
    for i, length in enumerate(a.tolist()):
        for pack in packer.add(i, length, secl[i] if secl is not None else 0):
            groups.append(np.asarray(pack, dtype=np.int64))
    groups.extend(np.asarray(p, dtype=np.int64) for p in packer.flush())
    return _from_groups(groups)


# --------------------------------------------------------------------------------------------- DPO pairs


def _plan_pairs(
    pairs: Any,
    n: int,
    item_sample: np.ndarray,
    item_aligned: np.ndarray,
    capacity: int,
    algorithm: str,
    max_per_pack: int | None,
    seed: int,
    oversize: str,
    over: dict[str, Any],
) -> tuple[_Packing, np.ndarray]:
    """Plan each (chosen, rejected) pair as one unit, then expand it back to two adjacent items."""
    if pairs is True:
        if n % 2:
            raise PlanError(f"pairs=True needs an even number of samples, got {n}")
        pair_arr = np.arange(n, dtype=np.int64).reshape(-1, 2)
    else:
        pair_arr = np.asarray(pairs, dtype=np.int64)
        if pair_arr.ndim != 2 or pair_arr.shape[1] != 2:
            raise PlanError(
                f"pairs must be True or an (M, 2) array of sample indices, got shape {pair_arr.shape}"
            )
    flat = pair_arr.ravel()
    if flat.size and (flat.min() < 0 or flat.max() >= n):
        raise PlanError(
            f"pairs refer to sample {int(flat.max() if flat.max() >= n else flat.min())}, outside 0..{n - 1}"
        )
    if len(np.unique(flat)) != flat.size or flat.size != n:
        raise PlanError("pairs must cover every sample exactly once (each sample in one pair)")
    # sample -> item (no split for pairs, so items are samples that survived the oversize policy)
    item_of = np.full(n, -1, dtype=np.int64)
    item_of[item_sample] = np.arange(len(item_sample), dtype=np.int64)
    first, second = item_of[pair_arr[:, 0]], item_of[pair_arr[:, 1]]
    if max_per_pack is not None and max_per_pack < 2:
        raise PlanError(
            f"max_per_pack {max_per_pack} cannot hold a DPO pair (chosen and rejected): use 2 or more"
        )
    if len(item_aligned):
        unit_len = item_aligned[first.clip(0)] + item_aligned[second.clip(0)]
    else:  # every sample was dropped by the oversize policy
        unit_len = np.zeros(len(first), dtype=np.int64)
    alive = (first >= 0) & (second >= 0)
    fits = unit_len <= capacity
    bad = alive & ~fits
    if bad.any():
        j = int(np.argmax(bad))
        if oversize != "drop":
            raise PlanError(
                f"pair {j} (samples {int(pair_arr[j, 0])}, {int(pair_arr[j, 1])}) needs {int(unit_len[j])} "
                f"tokens > capacity {capacity}; use oversize=drop"
            )
        over["count"] += int(bad.sum())
        over["dropped"] += 2 * int(bad.sum())
        over["dropped_tokens"] += int(unit_len[bad].sum())
    # a pair with a dropped member is dropped whole: DPO needs both halves
    orphan = ~alive & ((first >= 0) | (second >= 0))
    if orphan.any():
        over["dropped"] += int(orphan.sum())
    use = alive & fits
    first, second, unit_len = first[use], second[use], unit_len[use]
    unit_max = None if max_per_pack is None else max(1, max_per_pack // 2)
    units = _dispatch(algorithm, unit_len, capacity, unit_max, seed, None, None, 64)
    order_u = units.order if units.order is not None else units.build()  # type: ignore[misc]
    order = np.empty(2 * len(order_u), dtype=np.int64)
    order[0::2] = first[order_u]
    order[1::2] = second[order_u]
    pair_of = np.full(len(item_sample), -1, dtype=np.int64)
    pair_of[first] = second
    pair_of[second] = first
    return _Packing(units.offsets * 2, order=order, fills=units.fills), pair_of


# --------------------------------------------------------------------------------------------- stats


def lower_bound(aligned: np.ndarray, capacity: int) -> int:
    """ceil(sum(aligned lengths) / capacity): no plan can use fewer packs."""
    return -(-int(np.asarray(aligned, dtype=np.int64).sum()) // capacity)


def compute_stats(
    p: PackPlan, raw: np.ndarray, over: dict[str, Any], unpacked_gbs: int | None = None
) -> dict[str, Any]:
    """Everything `analyze` reports: packs vs lower bound, efficiency, where the padding goes, advice."""
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


__all__ = [
    "ALGORITHMS",
    "OVERSIZE_POLICIES",
    "BinList",
    "GreedyBufferPacker",
    "PackPlan",
    "PlanError",
    "compute_stats",
    "itemize",
    "lower_bound",
    "packed_global_batch_size",
    "plan",
]
