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

import functools
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np

from packcfg.packing.planning.best_fit import grouped_best_fit
from packcfg.packing.planning.common import Packing, PlanError, sorted_desc
from packcfg.packing.planning.first_fit import first_fit
from packcfg.packing.planning.greedy_buffer import GreedyBufferPacker, greedy_buffer
from packcfg.packing.planning.items import align_lengths, apply_oversize, as_lengths, itemize, positive_int
from packcfg.packing.planning.next_fit import next_fit
from packcfg.packing.planning.pairs import plan_pairs
from packcfg.packing.planning.stats import compute_stats, lower_bound, packed_global_batch_size

ALGORITHMS = ("bfd", "ffd", "first_fit_shuffle", "histogram", "sequential", "greedy_buffer")
OVERSIZE_POLICIES = ("error", "truncate", "split", "drop")


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


# --------------------------------------------------------------------------------------------- entry

_F = TypeVar("_F", bound=Callable[..., Any])


def _without_huge_pages(fn: _F) -> _F:
    """Run `fn` with NumPy's transparent-huge-page hint off (PACKCFG_PLANNER_HUGEPAGES=on keeps it).

    NumPy asks the kernel for huge pages on every array of 4 MiB or more. Where THP's `defrag` is `madvise`
    (the usual default, and this project's machines) the first touch of such an array may wait for the
    kernel to compact memory: a plan of 1M samples in a fresh process took 1.3-2x its warm time with the
    hint off, and with it 1-1.3x in most processes but 2.5-8x in others (77-177 ms against 20-77 warm;
    docs/planner-history.md, "NumPy's huge pages"). The planner's arrays live for one call, so the hint buys
    it little."""
    core = getattr(np, "_core", None) or getattr(np, "core", None)  # NumPy 2 / NumPy 1
    setter = getattr(getattr(core, "multiarray", None), "_set_madvise_hugepage", None)
    # the hint is the process's: plans running at once in several threads share one switch, and the last
    # to finish puts back what the first found
    lock = threading.Lock()
    state = {"running": 0, "caller": True}

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        if setter is None or os.environ.get("PACKCFG_PLANNER_HUGEPAGES", "").lower() == "on":
            return fn(*args, **kwargs)
        with lock:
            if state["running"] == 0:
                state["caller"] = setter(False)
            state["running"] += 1
        try:
            return fn(*args, **kwargs)
        finally:
            with lock:
                state["running"] -= 1
                if state["running"] == 0:
                    setter(state["caller"])

    return run  # type: ignore[return-value]


@_without_huge_pages
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
    capacity = positive_int(capacity, "capacity")
    align = positive_int(align, "align")
    if max_per_pack is not None:
        max_per_pack = positive_int(max_per_pack, "max_per_pack")
    if oversize is None:
        oversize = "split" if algorithm == "greedy_buffer" else "error"
    if oversize not in OVERSIZE_POLICIES:
        raise PlanError(f"unknown oversize policy {oversize!r}; choose one of {', '.join(OVERSIZE_POLICIES)}")
    if (secondary is None) != (secondary_capacity is None):
        raise PlanError("secondary and secondary_capacity go together")
    if secondary is not None and algorithm != "greedy_buffer":
        raise PlanError(f"a secondary budget is supported by greedy_buffer only, not {algorithm!r}")

    raw = as_lengths(lengths)
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
        secondary_capacity = positive_int(secondary_capacity, "secondary_capacity")
        if (sec < 0).any():
            raise PlanError(f"secondary value {int(sec.min())} < 0 at sample {int(np.argmin(sec))}")

    items, over = apply_oversize(raw, align, capacity, usable, oversize, pairs is not None)
    item_sample, item_start, item_length = items
    item_aligned = align_lengths(item_length, align)

    pair_of = None
    if pairs is not None:
        packing, pair_of = plan_pairs(
            pairs,
            n,
            item_sample,
            item_aligned,
            capacity,
            algorithm,
            max_per_pack,
            seed,
            oversize,
            over,
            _dispatch,
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
    result.stats = compute_stats(result, raw, over, unpacked_global_batch_size, max_per_pack)
    return result


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
) -> Packing:
    if len(a) == 0:  # everything dropped
        return Packing(np.zeros(1, dtype=np.int64), order=np.zeros(0, dtype=np.int64))
    if algorithm in ("bfd", "histogram"):
        return grouped_best_fit(a, capacity, max_per_pack)
    if algorithm == "ffd":
        idx = sorted_desc(a)
        return first_fit(a, idx, capacity, max_per_pack)
    if algorithm == "first_fit_shuffle":
        idx = np.random.default_rng(seed).permutation(len(a))
        return first_fit(a, idx, capacity, max_per_pack)
    if algorithm == "sequential":
        return next_fit(a, capacity, max_per_pack)
    if algorithm == "greedy_buffer":
        return greedy_buffer(a, capacity, max_per_pack, sec, sec_capacity, buffer_size)
    raise PlanError(f"unknown packing algorithm {algorithm!r}")  # unreachable: checked in plan()


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
