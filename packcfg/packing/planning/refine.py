"""bfd's refinement stage: where best fit lands more than LB + max(5, 0.01% LB) packs, re-plan part or all
of it by minimum bin slack on the length histogram (packing/_refine_kernel.py), as far as that beats best
fit, and best fit for the rest, and keep that plan if it has fewer packs (docs/packing.md, "Quality").

Where that plan is still above its goal, the pack-eliminating post-pass (planning/eliminate.py) tries to empty
packs of it by moving their items into the other packs' slack. Before the tries comes the exact try (exact
packs most constrained length first, packing/_exact_kernel.py; PACKCFG_PLANNER_EXACT=off skips it: every
exact pair first, and where that plan misses the target, near-exact packs of four on its rest first
(PACKCFG_PLANNER_NEAR=off skips them) and the packs again with a token of slack allowed, EXACT_WAYS), and where
its plan is within the target the tries do not run. Where the plan is still over the target after all that, near
pairs (a long sample and one other within a few tokens of full, least slack first) and the stage on their rest
(PACKCFG_PLANNER_NEAR_PAIRS=off skips them); on near-continuous lengths (DENSE_FRACTION), at 2k-4k, the near
pairs alone (at 8k-16k where best fit is far over LB, DENSE_FAR_MARGINS); where the exact try gives no plan
(it cannot afford its kernel, or gives up), the exact packs once more and the near pairs before the tries
(NEAR_PAIRS_FIRST). Last, where the plan is still over the target,
exact packs with up to two or three tokens of slack (EXACT_WAYS_LAST), then the stage once more on the items of
the packs that are not exactly full (NOT_FULL_AGAIN).

LB is the largest of ceil(sum / capacity), Martello and Toth's L2 and Fekete and Schepers' bound (dff_bound).
Near-continuous lengths (DENSE_FRACTION) get the near pairs alone, or from DENSE_STAGE_MIN_ITEMS samples the
whole stage where best fit is far over LB; lengths that take most values (NEAR_PAIRS_LEAD_FRACTION), the near
pairs before the exact try. The whole stage, nested stages included, spends at most one budget
(`Effort`, EFFORT_PER_ITEM units a sample), charged by every part of it. The stage is deterministic: its budgets
count work (DP cells, best fits, the exact kernel's pairs of lengths), not seconds, so the same input gives the
same plan on any machine. It needs numba (pure Python would cost seconds) and is
skipped without it, or with PACKCFG_PLANNER_REFINE=off.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from packcfg.packing.planning import eliminate
from packcfg.packing.planning.common import (
    Packing,
    PlanError,
    switched_off,
    write_sorted_order,
)

if TYPE_CHECKING:
    from packcfg.packing._refine_kernel import Workspace

# DP work the stage may spend (a cell of a plain subset-sum DP; a bitset word op counts 3): about 0.1-0.3 ns
# each compiled, so WORK_PER_ITEM per item costs well under an argsort of the lengths, and the stage's NumPy
# around it, and the cut search (_cut), about as much again (64k samples: 4-19 ms where it runs, argsort
# 3-8 ms on the shared box); WORK_MIN lets small inputs finish. The budget once shrank with the square of
# the items below 64k (999 distinct at 2k with 30k samples took 16.5 ms with 256 cells per item); since the
# stage's cost cuts it takes 3.3-3.8 ms there either way, and the full budget brings 30k samples of 999
# distinct at 4k from +13 to +3 over LB and 600 distinct at 8k from +7 to +4 (4-7 ms, under the 10 ms floor).
WORK_PER_ITEM = 256
# ... times LARGE_WORK_FACTOR from LARGE_WORK_ITEMS items to STOP_AT_LB_ITEMS (below): 999 distinct with 100k
# samples at 8k / 32k +6 / +6 -> +0 / +2 over LB, with 130k at 32k +8 -> +2, each as fast or faster (a try
# stops at its first plan within the goal, and these find one sooner). Below 2**16 it stays at 256: a try
# that runs longer before its cut is searched took 64k samples of 999 distinct at 32k from 2.1x to 3.6x an
# argsort, one pack worse (+4 -> +5); and from STOP_AT_LB_ITEMS, where the tries go on to LB while the budget
# lasts, it took 1M samples at 128k from 1.15x to 2.1x warm and 2.95x cold (600 distinct, +6 -> +2, within
# the target either way). 512 cells brought 8k within the target but not 32k (bench/packing.py --ratio-only,
# 2026-11-27; docs/planner-history.md, "A larger budget from 2**16 samples").
LARGE_WORK_FACTOR = 4
LARGE_WORK_ITEMS = 1 << 16
WORK_MIN = 3_000_000
# below NEST_MIN_ITEMS, the try that spends the budget goes on with greedy-led patterns for this share of
# what it had (_refine_kernel.LED_ROOM): at long context the budget covers the first 72-120 patterns of
# ~10k packs (64k samples at 32k, 600 / 999 distinct: +7 / +8 -> +3 / +4 over LB). From NEST_MIN_ITEMS the
# tries and the nested stage share the budget, and a try going on led left the others none (1M samples, 600
# distinct at 128k: +6 -> +13).
LED_SHARE = 1.0
# try 1 keeps the big-item packs with at most capacity >> TIGHT_SHIFT tokens of slack (4 at 2k; was 8: 64k
# samples, 999 distinct at 2k / 4k / 8k +12 / +7 / +6 -> +9 / +4 / +4, 600 at 2k +7 -> +6, 999 at 32k
# +7 -> +8, no row slower: it runs where the kept packs' slack is what the stage cannot recover); from
# NEST_MIN_ITEMS items once per shift of TIGHT_SHIFTS_LARGE (4 and 2 at 2k), the nested stage (below) too
# (1M samples, 600 distinct at 2k: 210k of the plan's 250k tokens of slack sat in kept packs with 1-8 tokens
# each with shift 8; +122 with shift 8, +89 with 9, +78 with 10; 999 distinct +185 / +125 / +342: one shift
# is good on one input and bad on another, and the second costs one more try where the first misses, which
# at 64k samples would take 999 distinct at 2k past 3x an argsort)
TIGHT_SHIFT = 9
TIGHT_SHIFTS_LARGE = (9, 10)
# the subset-sum DP keeps capacity / 64 words per step: above this capacity (tokens) the stage is skipped
MAX_CAPACITY = 1 << 20
# From SPARSE_MIN_ITEMS items, lengths that occur under SPARSE_MULTIPLICITY times each on average skip the stage
# too: a pattern goes to as many packs as the counts allow, so there each covers about one pack and the DP
# budget buys next to nothing. Uniform lengths at 128k (1.3-1.7 samples a length with 64k-150k samples) are
# such inputs: the stage saved no pack there (L2 is what falls short; the LP shows best fit optimal on the
# uniform rows it solved) and took 70k / 100k samples to 3.6x / 3.1x an argsort (150k samples with the larger
# budget above: 32 ms against best fit's 12 ms). Below SPARSE_MIN_ITEMS it costs under the 10 ms floor (30k
# samples at 128k: 3.7 ms in all) and runs as before.
SPARSE_MULTIPLICITY = 2
SPARSE_MIN_ITEMS = 1 << 15
# Lengths that take more than this fraction of the values 1..longest (near-continuous, e.g. uniform) skip the
# stage: there every remainder has an exact filler, best fit's gap is its tail, and the stage saved no pack on
# any such input measured (uniform lengths, 64k and 1M samples, 2k-128k) while costing up to 3x an argsort
# (docs/packing.md, "Quality").
DENSE_FRACTION = 0.75


# What the whole stage may spend on an input of n samples, nested stages included: EFFORT_PER_ITEM units a
# sample, at least EFFORT_MIN. A unit is about a nanosecond of planning on the machine the costs below were
# measured on (AMD EPYC Zen 5, 2026-11-27); 3x an argsort is ~60 ns a sample there. The units are charged from
# counts of the work done (DP cells and patterns, lengths and samples a best fit goes over, pairs of lengths
# the exact kernel goes over), never from a clock: the same input gets the same plan on every machine. Before
# the budget, inputs with 1,500-4,095 distinct lengths drawn as the ratio table's few-distinct ones ran the
# exact kernel (its cost grows with the square of the lengths: 25-35 ms at 4,095), every try, every nested
# stage and the cut search to the end, and took 20-95x an argsort at 30k-150k samples
# (docs/planner-history.md, "A budget for the whole stage"). The budget is a bound on those, set so that no
# plan of the inputs the stage handled within ~50 ms changes: EFFORT_MIN 15M cut the plans with max_per_pack
# of 64k samples of 600 distinct at 2k (4 / 8 a pack: the near-exact packs and the cut search need 26M; +233 /
# +15 -> +245 / +33).
EFFORT_PER_ITEM = 60
EFFORT_MIN = 30_000_000
# PACKCFG_PLANNER_EFFORT=F multiplies both (a positive number: 4 lets the stage spend 4x as much where an input
# needs it, for fewer packs; 0.5 half)
EFFORT_VARIABLE = "PACKCFG_PLANNER_EFFORT"
# the exact kernel: units per nanosecond of its cost model (_exact_kernel.kernel_ns: the pair sums as the kernel
# counts them, its completion searches and its pass over the lengths; within 0.37-2.3x of the time measured on 250
# runs). Until stop 55 a way was charged 1 a pair of distinct lengths, fitted at stop 53 (0.3-0.7 ns a pair at
# 2k-32k); the faster kernel of stop 54 costs 0.05-0.35 ns a pair with 8,191 lengths at 4k-128k, so the charge was
# 4-20x its cost, and past the whole budget (30M) from 5,478 lengths: the exact try never ran on 8,191 distinct at
# 8k-128k below 1M samples. The model on the stress rows (2,000 / 4,095 / 8,191 distinct, 30k-150k samples, seed 7,
# 45 rows): within both 21 -> 24, packs over LB 1,093 -> 1,012 (8,191 distinct at 32k with 64k / 150k samples +10 /
# +24 -> +0 / +1 in 40 / 45 -> 11 / 13 ms, at 128k with 150k +18 -> +4); with 1M samples (30 rows) 19 -> 21, 4,306
# -> 3,966 (8,191 distinct at 32k +143 -> +7); on the 240 seed inputs the same plans, rows over the time bar 24 ->
# 27 (rows over the packs target either way: the budget the kernel no longer overspends goes to other steps)
EXACT_UNITS_PER_NS = 1
# the near-exact packs: units per cube of the rest's distinct lengths (a completion search over pairs of
# lengths for each of about as many patterns; 212 lengths at 4k took 5.7 ms)
NEAR_UNITS_PER_CUBE = 0.6
# the DP: cells per unit (0.05-0.14 ns a cell at 8k-128k), and units per pattern on top (a pattern's own
# setup and way back: 2k-capacity DPs cost 0.3-0.45 ns a cell, as many cells making 1,000-1,800 patterns)
CELLS_PER_UNIT = 12
PATTERN_UNITS = 1500
# a best fit or a count of its packs on a histogram: units per distinct length and samples per unit (150-250
# ns a length, plus ~0.15 ns a sample: 0.07-1.3 ms from 300 lengths at 64k to 4,095 at 1M samples)
FIT_UNITS_PER_LENGTH = 200
FIT_ITEMS_PER_UNIT = 4


def effort_units(n_items: int) -> int:
    """The top-level stage's budget for an input of n_items samples: EFFORT_PER_ITEM a sample, at least
    EFFORT_MIN, times PACKCFG_PLANNER_EFFORT where it is set (PlanError naming it where it is not a positive
    number)."""
    raw = os.environ.get(EFFORT_VARIABLE, "").strip()
    factor = 1.0
    if raw:
        try:
            factor = float(raw)
        except ValueError:
            factor = -1.0
        if not (0 < factor < float("inf")):
            raise PlanError(
                f"{EFFORT_VARIABLE}={raw!r}: not a positive number (a multiplier of the stage's budget)"
            )
    return int(max(EFFORT_MIN, EFFORT_PER_ITEM * n_items) * factor)


class Effort:
    """What the refinement stage may still spend (EFFORT_PER_ITEM): the top-level call makes one, and every
    part of the stage, nested stages included, charges it. The exact try's ways and the near-exact packs run
    only where their cost is left; tries, nested stages, cut points and the post-pass only while any is left;
    a try's DP gets at most what is left."""

    def __init__(self, units: int) -> None:
        self.left = int(units)
        # the DP's rows, shared by every pattern search of the plan (_refine_kernel.Workspace; made by the
        # first search, which loads the kernel module)
        self.workspace: Workspace | None = None

    def charge(self, units: float) -> None:
        self.left -= int(units)

    def allows(self, units: float) -> bool:
        return self.left >= units

    def spent(self) -> bool:
        return self.left <= 0

    @staticmethod
    def fit_units(lengths: int, items: int) -> int:
        """What a best fit (or a count of its packs) on a histogram of `lengths` lengths and `items` samples
        costs."""
        return FIT_UNITS_PER_LENGTH * lengths + items // FIT_ITEMS_PER_UNIT

    def fitting(
        self, best_fit: Callable[[np.ndarray, np.ndarray, np.ndarray], Packing]
    ) -> Callable[[np.ndarray, np.ndarray, np.ndarray], Packing]:
        """`best_fit(lengths, present, counts)`, charged."""

        def fit(a: np.ndarray, present: np.ndarray, counts: np.ndarray) -> Packing:
            self.charge(self.fit_units(len(present), len(a)))
            return best_fit(a, present, counts)

        return fit

    def counting(
        self, count: Callable[[np.ndarray, np.ndarray], int] | None
    ) -> Callable[[np.ndarray, np.ndarray], int] | None:
        """`count(values, counts)`, charged (None stays None)."""
        if count is None:
            return None
        counter = count

        def counted(values: np.ndarray, counts: np.ndarray) -> int:
            self.charge(self.fit_units(len(values), int(counts.sum())))
            return counter(values, counts)

        return counted


def work_per_item(n_items: int, nested: bool = False) -> int:
    """The DP cells the stage may spend per item of an input of n_items (WORK_PER_ITEM; LARGE_WORK_FACTOR x
    that at the top level only: a nested stage's rest keeps the budget it had)."""
    large = not nested and LARGE_WORK_ITEMS <= n_items < STOP_AT_LB_ITEMS
    return WORK_PER_ITEM * (LARGE_WORK_FACTOR if large else 1)


def enabled() -> bool:
    """Whether the stage may run: numba importable and not switched off (PACKCFG_PLANNER_REFINE=off)."""
    if switched_off("PACKCFG_PLANNER_REFINE"):
        return False
    from packcfg.packing import _refine_kernel

    return _refine_kernel.HAVE_NUMBA


def l2_bound(values: np.ndarray, counts: np.ndarray, capacity: int) -> int:
    """Martello and Toth's L2 lower bound on the packs (>= ceil(sum / capacity)) from the histogram
    (values ascending): for every threshold k <= capacity / 2, items over capacity - k each need a pack,
    items over capacity / 2 too, and items in [k, capacity / 2] need whatever space the second group leaves."""
    total = int(np.dot(values, counts))
    best = -(-total // capacity)
    cnt = np.concatenate([[0], np.cumsum(counts)])
    vol = np.concatenate([[0], np.cumsum(values * counts)])
    ks = np.concatenate([[0], values[values <= capacity // 2]])
    hi = np.searchsorted(values, capacity / 2, side="right")
    j1 = np.searchsorted(values, capacity - ks, side="right")
    lo = np.searchsorted(values, ks, side="left")
    n12 = cnt[-1] - cnt[hi]
    n2 = cnt[j1] - cnt[hi]
    free = n2 * capacity - (vol[j1] - vol[hi])
    need = (vol[hi] - vol[lo]) - free
    bound = n12 + np.maximum(0, -(-need // capacity))
    return max(best, int(bound.max()))


# Fekete and Schepers' dual feasible functions (Math. Programming 91, 2001), the bound's k: u^(k)(x) = x where
# (k + 1) x / capacity is whole, else floor((k + 1) x / capacity) / k (in packs). k = 2 is what proves the
# uniform rows optimal (64k and 1M samples, 2k-128k: L2 + 8 and + 64..66, best fit's packs), k = 6 what gives
# 150k samples at 2k L2 + 16; k over 8 raised no bound measured (uniform, the few-distinct lengths at 2k).
DFF_KS = tuple(range(1, 9))
# the thresholds e it tries: 1 and the lengths present up to capacity / 2, at most this many of them (evenly
# spread where there are more: any e gives a bound), so that it costs O(this x DFF_KS**2) whatever the input:
# 0.55-1.0 ms. With 4,096 it took 1.2-3.3 ms from 4k up (4,095 distinct at 32k with 150k samples: 3.3 ms cold,
# where the argsort takes 13-17) for a bound at most 9 packs higher on the uniform rows (1M samples at 8k: L2 +
# 65 against + 57, a margin of 50) and the same on the others measured
DFF_MAX_THRESHOLDS = 1024


def dff_bound(values: np.ndarray, counts: np.ndarray, capacity: int) -> int:
    """Fekete and Schepers' lower bound on the packs from the histogram (values ascending): for a threshold
    e <= capacity / 2 (1, or a length present), an item over capacity - e counts 1, one under e counts 0 and
    every other u^(k)(x / capacity) (DFF_KS); no pack's items count over 1, so ceil of the sum is a bound. It
    complements L2 where many items are just over a fraction of the capacity that they cannot fill (near-
    continuous lengths: uniform lengths at 2k with 64k samples L2 + 8, the cutting-stock LP's bound and best
    fit's packs; Zipf-weighted lengths at 2k, 250k samples, seed 1: L2 + 454, LP + 603), and equals L2 or lies
    under it on the heavy-tailed ones.

    u^(k) is floor((k + 1) x / capacity) / k but at the lengths where that is whole, so the sum over the items
    between two thresholds is read from the counts at the k + 1 steps' edges, with one correction for each
    such length present: O(thresholds x k) for each k, whatever the lengths, in one NumPy pass for all k."""
    v = values.astype(np.int64)
    c = counts.astype(np.int64)
    cnt = np.concatenate([[0], np.cumsum(c)])  # cnt[i]: the items of v[:i]
    cuts = np.concatenate([[1], v[v <= capacity // 2]])
    if len(cuts) > DFF_MAX_THRESHOLDS:
        cuts = cuts[np.linspace(0, len(cuts) - 1, DFF_MAX_THRESHOLDS).astype(np.int64)]
    lo = np.searchsorted(v, cuts, side="left")  # the items from e ...
    hi = np.searchsorted(v, capacity - cuts, side="right")  # ... to capacity - e
    # every k at once: its steps j = 1 .. k + 1, each a column
    ks = np.asarray(DFF_KS, dtype=np.int64)
    k = np.repeat(ks, ks + 1)
    j = np.concatenate([np.arange(1, kk + 2) for kk in DFF_KS])
    first = np.concatenate([[0], np.cumsum(ks + 1)[:-1]])  # each k's first column
    # floor((k + 1) x / capacity) >= j from x = ceil(j capacity / (k + 1)): the items of v[lo:hi] at or over
    # that, summed over j, are the sum of their steps
    edge = cnt[np.searchsorted(v, -(-j * capacity // (k + 1)), side="left")]
    at_least = np.clip(cnt[hi][:, None] - np.maximum(cnt[lo][:, None], edge[None, :]), 0, None)
    steps = np.add.reduceat(at_least, first, axis=1)  # thresholds x ks
    # scaled by k x capacity: step x capacity, but k x where (k + 1) x / capacity is whole ((k + 1) x as a
    # step: -x for each item of such a length)
    total = steps * capacity + (cnt[-1] - cnt[hi])[:, None] * (ks * capacity)[None, :]
    whole = (j * capacity) % (k + 1) == 0
    x, kx = j[whole] * capacity // (k + 1)[whole], np.searchsorted(ks, k[whole])
    idx = np.minimum(np.searchsorted(v, x), len(v) - 1)
    occurs = v[idx] == x
    x, kx, idx = x[occurs], kx[occurs], idx[occurs]
    inside = (lo[:, None] <= idx[None, :]) & (idx[None, :] < hi[:, None])  # thresholds x those lengths
    total -= (inside * (x * c[idx])[None, :]) @ (kx[:, None] == np.arange(len(ks))[None, :])
    return int((-(-total // (ks * capacity)[None, :])).max())


def slot_bound(values: np.ndarray, counts: np.ndarray, capacity: int, k_max: int) -> int:
    """A lower bound on the packs with at most k_max items a pack, from the histogram (values ascending). An
    item of length v shares its pack with at most m(v) others, m(v) the smaller of k_max - 1 and how many of
    the shortest items fit in capacity - v. Two weightings of the items then hold at most 1 in any pack, so
    each sums to a bound (the larger is returned):

    - the slot form: 1 / (1 + m(v)) each (a pack's items each count at most 1 / its items). It is the item
      count over k_max where every item has room for k_max - 1 short ones, and more where long items leave
      room for fewer (a realistic mix at 4k with 16 a pack: 4,166 against 4,000 from the count alone;
      lognormal at 4k with 8 a pack: 8,898 against 8,486 from the volume);
    - the big-item form: 1 - m(v) / k_max for an item over capacity / 2, 1 / k_max for every other. A pack
      holds at most one item over capacity / 2, and with it at most m(v) others of 1 / k_max each; without
      one, at most k_max items. Where long items leave room for a few short ones this is what the
      cutting-stock LP gives (the Debian changelogs at 2k with 16 a pack: 2,026, the LP's bound, against
      2,018 from the slot form)."""
    cnt = np.cumsum(counts)
    vol = np.cumsum(values * counts)
    room = capacity - values
    g = np.searchsorted(vol, room, side="right")  # groups 0 .. g - 1 fit whole in the room
    before_cnt = np.where(g > 0, cnt[np.maximum(g - 1, 0)], 0)
    before_vol = np.where(g > 0, vol[np.maximum(g - 1, 0)], 0)
    g_part = np.minimum(g, len(values) - 1)
    # (a group of zero-length items is never the partial one: its volume 0 always fits; max() keeps the
    # branch np.where discards from dividing by it)
    part = np.where(
        g < len(values), np.minimum((room - before_vol) // np.maximum(values[g_part], 1), counts[g_part]), 0
    )
    others = np.minimum(k_max - 1, before_cnt + part)
    slots = float(np.sum(counts / (1.0 + others)))
    big = 2 * values > capacity  # no two in one pack
    big_items = float(np.sum(counts * np.where(big, 1.0 - others / k_max, 1.0 / k_max)))
    # never above the exact sum's ceiling (float error ~1e-12 here)
    return int(np.ceil(max(slots, big_items) - 1e-6))


def quick_lower_bound(present: np.ndarray, counts: np.ndarray, capacity: int, k_max: int) -> int:
    """The larger of L2 (present descending, as grouped_best_fit has it) and, with max_per_pack, the slot
    bound (at least the items over k_max): LB without Fekete and Schepers' bound, for the checks the stage
    makes many times (_cannot_improve), where that bound's cost (0.5-1 ms a call) would add up."""
    ascending, ascending_counts = present[::-1], counts[::-1]
    lb = l2_bound(ascending, ascending_counts, capacity)
    if k_max >= int(counts.sum()):
        return lb  # no pack could reach the item limit
    return max(lb, -(-int(counts.sum()) // k_max), slot_bound(ascending, ascending_counts, capacity, k_max))


def lower_bound(
    present: np.ndarray, counts: np.ndarray, capacity: int, k_max: int, packs: int | None = None
) -> int:
    """LB: the larger of quick_lower_bound and Fekete and Schepers' bound (dff_bound). With `packs` (a plan's),
    the latter is left out where the former already holds that plan within LB + margin(LB): it can only raise
    LB, and it is what costs most here."""
    lb = quick_lower_bound(present, counts, capacity, k_max)
    if packs is not None and packs <= lb + margin(lb):
        return lb
    return max(lb, dff_bound(present[::-1], counts[::-1], capacity))


def margin(lb: int) -> int:
    """The packs over LB that bfd may land: max(5, 0.01% LB). Tests force the stage on with `-lb` (a target
    of 0 packs), which also defeats the volume check that `refine` makes before computing LB."""
    return max(5, lb // 10_000)


def target(
    present: np.ndarray, counts: np.ndarray, capacity: int, k_max: int, packs: int | None = None
) -> int:
    """LB + margin(LB): the packs bfd is held to (`packs`: as lower_bound)."""
    lb = lower_bound(present, counts, capacity, k_max, packs)
    return lb + margin(lb)


def refine(
    a: np.ndarray,
    capacity: int,
    k_max: int,
    present: np.ndarray,
    counts: np.ndarray,
    packing: Packing,
    best_fit: Callable[[np.ndarray, np.ndarray, np.ndarray], Packing],
    prepare: Callable[[], object] | None = None,
    count: Callable[[np.ndarray, np.ndarray], int] | None = None,
    goal: int | None = None,
    shifts: tuple[int, ...] | None = None,
    depth: int = 0,
    effort: Effort | None = None,
    aim: tuple[int, int] | None = None,
) -> Packing:
    """bfd's plan, or a plan with fewer packs. Up to three tries (four from TWO_SHIFTS_ITEMS items), sharing
    one work budget, until one lands within LB + max(5, 0.01% LB) (from STOP_AT_LB_ITEMS items: until one
    reaches LB, the budget allowing):

    1. keep bfd's packs that hold an item over capacity / 2 and have at most capacity >> TIGHT_SHIFT tokens
       of slack (they need a pack each anyway, and little can improve them) and re-plan the other items;
    2. the same keeping every pack with an item over capacity / 2 (where best fit leaves slack: homogeneous
       packs of a frequent length);
    3. re-plan every item.

    Re-planning is minimum bin slack on the histogram (a pack starts with the largest item left and is filled
    by a bounded subset sum, the pattern applied to as many packs as the counts allow) until a pattern would
    waste too much or the budget is spent; only its first patterns are kept (_cut), then best fit
    (`best_fit(lengths, their histogram)`, no refinement) on the rest.
    The plan with the fewest packs wins; bfd's on a tie. `prepare` is called once the stage is going to
    run (bfd loads its compiled best fit there: numba is being loaded for the stage anyway); `count(values,
    counts)` gives best fit's packs on a histogram (values descending), to choose where the patterns stop.

    From CLOSED_MIN_CAPACITY, closed packs come first (_closed_plan, CLOSED_FIRST; within the target they are
    the plan) and plan every rest that best fit leaves over its goal too, where they have fewer packs
    (CLOSED_REST).

    From TWO_SHIFTS_ITEMS items, try 1 runs once for each slack limit capacity >> TIGHT_SHIFTS_LARGE; from
    NEST_MIN_ITEMS items, what the kept patterns leave is planned by best fit and then this stage, nested
    (try 1 only, or try 3 where
    no item left is over capacity / 2 so that try 1 has nothing to keep; with the same limits) rather than
    by best fit alone. `goal` given marks a nested call, which aims at the packs the outer plan leaves to
    it, not at a target of its own; `shifts`: the slack limits; `depth`: the nesting level (NEST_DEPTH);
    `effort`: what the stage may still spend (Effort; a nested call shares its caller's); `aim`: (goal, stop)
    for a call that plans as the top level does but aims at the packs its caller leaves it (NOT_FULL_AGAIN)
    rather than at a target of its own."""
    if capacity > MAX_CAPACITY:
        return packing  # past the DP's reach
    # near-continuous lengths (DENSE_FRACTION): the rest of the stage saved nothing there; at the top level, up
    # to DENSE_NEAR_PAIR_MAX_CAPACITY and under STOP_AT_LB_ITEMS samples, the near pairs alone; from
    # DENSE_STAGE_MIN_ITEMS, the whole stage where best fit is far over LB
    dense = len(present) > DENSE_FRACTION * int(present[0])
    whole = dense and goal is None and aim is None and depth == 0 and len(a) >= DENSE_STAGE_MIN_ITEMS
    near_only = (
        dense
        and not whole
        and goal is None
        and depth == 0
        and len(a) < STOP_AT_LB_ITEMS
        and _near_pairs_apply(capacity, k_max, a)
        and (capacity <= DENSE_NEAR_PAIR_MAX_CAPACITY or aim is None)
    )
    if dense and not whole and not near_only:
        return packing
    # past DENSE_NEAR_PAIR_MAX_CAPACITY, the near pairs only where best fit is far over LB (DENSE_FAR_MARGINS)
    far_only = near_only and capacity > DENSE_NEAR_PAIR_MAX_CAPACITY
    if len(a) >= SPARSE_MIN_ITEMS and len(a) < SPARSE_MULTIPLICITY * len(present):
        return packing  # about one sample a length (SPARSE_MULTIPLICITY)
    packs = len(packing.offsets) - 1
    nested = goal is not None
    stop = goal  # the tries and the cut search stop at a plan with at most this many packs
    if aim is not None and not nested:
        goal, stop = aim
    elif not nested:
        volume = -(-int(np.dot(present, counts)) // capacity)  # LB >= this, so the target is at least as high
        if packs <= volume + margin(volume):
            return packing  # within the target whatever L2 says (most inputs: no L2 to compute)
        lb = lower_bound(present, counts, capacity, k_max, packs)
        goal = lb + margin(lb)
        stop = lb if len(a) >= STOP_AT_LB_ITEMS else goal
        if whole:  # near-continuous lengths from DENSE_STAGE_MIN_ITEMS: the whole stage, unless near LB
            if packs <= lb + DENSE_STAGE_MARGINS * margin(lb):
                return packing
            dense = False
        if far_only and packs <= lb + DENSE_FAR_MARGINS * margin(lb):
            return packing
    assert goal is not None and stop is not None
    if packs <= goal or not enabled():
        return packing
    if prepare is not None:
        prepare()
    if effort is None:  # the top level: one budget for everything the stage does, nested stages included
        effort = Effort(effort_units(len(a)))
        best_fit, count = effort.fitting(best_fit), effort.counting(count)
    best, best_packs = packing, packs
    if (
        CLOSED_FIRST
        and depth == 0
        and not nested
        and aim is None
        and _closed_applies(capacity, k_max, len(a))
        and CLOSED_FIRST_SPAN * len(present) <= capacity
        and not effort.spent()
    ):
        closed = _closed_plan(a, capacity, present, counts, effort, best_fit)
        if len(closed.offsets) - 1 < best_packs:
            best, best_packs = closed, len(closed.offsets) - 1
            if best_packs <= goal:
                return best

    def near_pairs() -> Packing | None:
        """The near pairs and the stage on their rest (_near_pairs_plan), where they could beat the best plan
        so far."""
        return _near_pairs_plan(
            a,
            capacity,
            k_max,
            present,
            counts,
            _near_slack(capacity, present),
            best_fit,
            count,
            effort,
            goal,
            best_packs,
        )

    if dense:
        near = near_pairs()
        return near if near is not None and len(near.offsets) < len(packing.offsets) else packing
    work = max(WORK_MIN, work_per_item(len(a), nested) * len(a))
    nest = depth < NEST_DEPTH and (depth > 0 or len(a) >= NEST_MIN_ITEMS)
    led = not nest and depth == 0  # greedy-led patterns once the budget is spent (LED_SHARE)
    if shifts is None:
        shifts = TIGHT_SHIFTS_LARGE if len(a) >= TWO_SHIFTS_ITEMS else (TIGHT_SHIFT,)

    def rest_fit(
        rest: np.ndarray, rest_goal: int, hist: tuple[np.ndarray, np.ndarray], always_nest: bool = False
    ) -> Packing:
        """Best fit on what the kept patterns leave (`rest`, its histogram `hist`), or closed packs where best fit
        has more than `rest_goal` packs and they have fewer (CLOSED_REST); from NEST_MIN_ITEMS items (or
        `always_nest`), then this stage on that (nested; below the top level only on rests under
        NEST_DEEP_MAX_ITEMS items) where the plan has more than `rest_goal` packs."""
        rest_present, rest_counts = hist
        plan = best_fit(rest, rest_present, rest_counts)
        if (
            CLOSED_REST
            and _closed_applies(capacity, k_max, len(rest))
            and len(plan.offsets) - 1 > rest_goal
            and not effort.spent()
        ):
            closed = _closed_plan(rest, capacity, rest_present, rest_counts, effort, best_fit)
            if len(closed.offsets) < len(plan.offsets):
                plan = closed
        if (
            not (nest or always_nest)
            or len(plan.offsets) - 1 <= rest_goal
            or (depth > 0 and len(rest) >= NEST_DEEP_MAX_ITEMS)
            or effort.spent()
        ):
            return plan
        return refine(
            rest,
            capacity,
            k_max,
            rest_present,
            rest_counts,
            plan,
            best_fit,
            None,
            count,
            max(0, rest_goal),
            shifts,
            depth + 1,
            effort,
        )

    # the exact try, before the tries
    exact_ok = (
        not nested
        and k_max >= 3
        and len(present) <= EXACT_MAX_DISTINCT
        and not switched_off("PACKCFG_PLANNER_EXACT")
    )

    def exact_try(ways: tuple[tuple[bool, int, bool], ...], beat: int | None = None) -> Packing | None:
        return _exact_try(
            a,
            capacity,
            present,
            counts,
            lambda r, g, h: rest_fit(r, g, h, True),
            stop,
            goal,
            effort,
            k_max >= 4,
            k_max >= len(a),
            ways,
            beat,
            best_fit,
            count,
        )

    def not_full_again() -> Packing | None:
        """The stage once more on the best plan's packs that are not exactly full (_not_full_again)."""
        return _not_full_again(a, capacity, k_max, present, counts, best, best_fit, count, effort, goal, stop)

    near_first = False  # the exact try gave no plan: the near pairs ran before the tries
    near_done = False  # the near pairs ran first (NEAR_PAIRS_LEAD_FRACTION)
    if (
        depth == 0
        and not nested
        and len(present) > NEAR_PAIRS_LEAD_FRACTION * int(present[0])
        and _near_pairs_apply(capacity, k_max, a)
    ):
        near_done = True
        near = near_pairs()
        if near is not None and len(near.offsets) - 1 < best_packs:
            best, best_packs = near, len(near.offsets) - 1
            if best_packs <= goal:
                return best
    if exact_ok:
        # where its first way's kernel is over the budget, the exact try gives up at once
        affordable = effort.allows(_exact_way_cost(len(present), capacity, len(a), *EXACT_WAYS[0][1:]))
        exact = exact_try(EXACT_WAYS) if affordable else None
        if exact is not None and len(exact.offsets) - 1 < best_packs:
            best, best_packs = exact, len(exact.offsets) - 1
            if best_packs <= goal:
                return best
        # no plan from it: the near pairs, then (where it ran) the exact packs once more, before the tries
        # (NEAR_PAIRS_FIRST)
        near_first = (
            NEAR_PAIRS_FIRST and exact is None and depth == 0 and _near_pairs_apply(capacity, k_max, a)
        )
        for step in ("near", "again") if near_first else ():
            if effort.spent() or (step == "again" and not affordable) or (step == "near" and near_done):
                continue
            plan = exact_try(EXACT_WAYS_AGAIN, best_packs - 1) if step == "again" else near_pairs()
            if plan is not None and len(plan.offsets) - 1 < best_packs:
                best, best_packs = plan, len(plan.offsets) - 1
                if best_packs <= goal:
                    return best
                if step == "near" and NOT_FULL_AFTER_NEAR and NOT_FULL_AGAIN and not effort.spent():
                    again = not_full_again()
                    if again is not None:
                        best, best_packs = again, len(again.offsets) - 1
                        if best_packs <= goal:
                            return best
    assign, largest, fills = _by_pack(packing, a, present, counts)
    big = largest > capacity // 2
    keeps = [big & (fills >= capacity - max(1, capacity >> shift)) for shift in shifts]
    for i_try, keep in enumerate(keeps if nested else (*keeps, big)):  # nested: try 1 only
        if not keep.any() or keep.all() or work <= 0 or best_packs <= stop or effort.spent():
            continue
        if any(np.array_equal(keep, k) for k in keeps[:i_try]):
            continue  # the same packs kept as by an earlier try (e.g. every big-item pack was tight)
        kept, sub_present, sub_counts = _not_kept(keep, assign, present, counts)
        sub = np.repeat(sub_present, sub_counts)
        # more waste than this could not save a pack
        waste = int((~keep).sum()) * capacity - int(np.dot(sub_present, sub_counts)) - capacity
        n_kept = int(keep.sum())
        if len(a) < STOP_AT_LB_ITEMS and _cannot_improve(
            n_kept, sub_present, sub_counts, capacity, k_max, best_packs
        ):
            continue  # no plan of the kept packs and the rest can have fewer packs than the best so far
        plan, spent = _replan(
            sub,
            capacity,
            k_max,
            sub_present,
            sub_counts,
            waste,
            work,
            rest_fit,
            effort,
            count,
            stop - n_kept,
            len(a),
            led=led,
        )
        work -= spent
        if plan is not None and n_kept + len(plan.offsets) - 1 < best_packs:
            best = _join(a, present, counts, packing.offsets, assign, keep, fills, kept, plan)
            best_packs = len(best.offsets) - 1
    # nested: where try 1 kept nothing
    if work > 0 and best_packs > stop and (not nested or not big.any()) and not effort.spent():
        waste = packs * capacity - int(np.dot(present, counts)) - capacity
        plan, _ = _replan(
            a, capacity, k_max, present, counts, waste, work, rest_fit, effort, count, stop, len(a), led=led
        )
        if plan is not None and len(plan.offsets) - 1 < best_packs:
            best = plan
            best_packs = len(best.offsets) - 1
    # still over the target: exact packs whose completions are counted by the samples they share none of,
    # planned wherever they could beat the best plan so far (EXACT_WAYS_AGAIN)
    if exact_ok and not near_first and best_packs > goal and not effort.spent():
        exact = exact_try(EXACT_WAYS_AGAIN, best_packs - 1)
        if exact is not None and len(exact.offsets) - 1 < best_packs:
            best, best_packs = exact, len(exact.offsets) - 1
    # still over the target: pairs of a long sample and one other within a few tokens of full first, then the
    # stage on what they leave (NEAR_PAIR_SLACK_SHIFT)
    if (
        not nested
        and depth == 0
        and not near_first
        and not near_done
        and best_packs > goal
        and _near_pairs_apply(capacity, k_max, a)
        and not effort.spent()
    ):
        near = near_pairs()
        if near is not None and len(near.offsets) - 1 < best_packs:
            best, best_packs = near, len(near.offsets) - 1
    # still over the target after every other step: exact packs with completions that may leave up to two or
    # three tokens of slack (EXACT_WAYS_LAST), wherever they could beat the best plan so far
    if exact_ok and EXACT_WAYS_LAST and best_packs > goal and not effort.spent():
        exact = exact_try(EXACT_WAYS_LAST, best_packs - 1)
        if exact is not None and len(exact.offsets) - 1 < best_packs:
            best, best_packs = exact, len(exact.offsets) - 1
    # still over the target: the stage once more on the packs that are not exactly full (NOT_FULL_AGAIN)
    # (where the exact try may run: the stage on the rest is the top level's, that try included)
    if NOT_FULL_AGAIN and exact_ok and depth == 0 and best_packs > goal and not effort.spent():
        again = not_full_again()
        if again is not None:
            best, best_packs = again, len(again.offsets) - 1
    # the pack-eliminating post-pass (planning/eliminate.py) where the plan is still above the goal, and at
    # most ELIMINATE_MAX_OVER over the target; below STOP_AT_LB_ITEMS items only where one pack is missing:
    # there its budget (about 1M operations) saved at most one pack on any row measured (64k samples: 600
    # distinct at 2k +6 -> +5; 999 distinct at 2k and 600 / 999 distinct at 32k, +7 to +9, none saved, for
    # 2-4 ms on rows that sit near 3x an argsort)
    if (
        not nested
        and stop < best_packs <= goal + ELIMINATE_MAX_OVER
        and eliminate.enabled()
        and (len(a) >= STOP_AT_LB_ITEMS or best_packs - stop <= 1)
        and not effort.spent()
    ):
        best = eliminate.eliminate(a, capacity, k_max, best, stop)
    return best


def _not_kept(
    keep: np.ndarray, assign: np.ndarray, present: np.ndarray, counts: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """What a plan's packs that `keep` marks leave (assign: `_by_pack`'s, by item in decreasing-length order):
    (kept, by item in that order; the histogram of the other items, present descending, and their counts)."""
    kept = keep[assign]
    group_start = np.zeros(len(counts), dtype=np.int64)  # where each length's items start in that order
    np.cumsum(counts[:-1], out=group_start[1:])
    left = counts - np.add.reduceat(kept, group_start, dtype=np.int64)
    some = left > 0
    return kept, present[some], left[some]


def _not_full_again(
    a: np.ndarray,
    capacity: int,
    k_max: int,
    present: np.ndarray,
    counts: np.ndarray,
    best: Packing,
    best_fit: Callable[[np.ndarray, np.ndarray, np.ndarray], Packing],
    count: Callable[[np.ndarray, np.ndarray], int] | None,
    effort: Effort,
    goal: int,
    stop: int,
) -> Packing | None:
    """The best plan's exactly full packs, then best fit and the stage on the items of its other packs, planned as
    the top level plans (the exact try included; `aim`: the goal and stop less the packs kept; sharing `effort`):
    that plan where it has fewer packs than `best`, else None. Not where every pack or none is full, or where
    the full packs and LB of the rest cannot beat `best`."""
    assign, _, fills = _by_pack(best, a, present, counts)
    keep = fills >= capacity
    if not keep.any() or keep.all():
        return None
    kept, sub_present, sub_counts = _not_kept(keep, assign, present, counts)
    n_kept, best_packs = int(keep.sum()), len(best.offsets) - 1
    if _cannot_improve(n_kept, sub_present, sub_counts, capacity, k_max, best_packs):
        return None
    sub = np.repeat(sub_present, sub_counts)
    aim = (max(0, goal - n_kept), max(0, stop - n_kept))
    first = best_fit(sub, sub_present, sub_counts)
    plan = refine(
        sub,
        capacity,
        k_max,
        sub_present,
        sub_counts,
        first,
        best_fit,
        count=count,
        depth=1,
        effort=effort,
        aim=aim,
    )
    if n_kept + len(plan.offsets) - 1 >= best_packs:
        return None
    return _join(a, present, counts, best.offsets, assign, keep, fills, kept, plan)


def _near_pairs_apply(capacity: int, k_max: int, a: np.ndarray) -> bool:
    """Whether the near pairs may run: up to NEAR_PAIR_MAX_CAPACITY, where no max_per_pack could bind, and not
    switched off (PACKCFG_PLANNER_NEAR_PAIRS=off)."""
    return (
        capacity <= NEAR_PAIR_MAX_CAPACITY
        and k_max >= len(a)
        and not switched_off("PACKCFG_PLANNER_NEAR_PAIRS")
    )


def _near_slack(capacity: int, present: np.ndarray) -> int:
    """The near pairs' slack in tokens: capacity >> NEAR_PAIR_SLACK_SHIFT, at most NEAR_PAIR_MAX_SLACK, and at
    most NEAR_PAIR_SPARSE_SLACK at NEAR_PAIR_SPARSE_CAPACITIES where the lengths with samples (present,
    descending) are under NEAR_PAIR_SPARSE_FRACTION of the values up to the longest."""
    slack = min(capacity >> NEAR_PAIR_SLACK_SHIFT, NEAR_PAIR_MAX_SLACK)
    sparse = len(present) < NEAR_PAIR_SPARSE_FRACTION * int(present[0])
    if sparse and NEAR_PAIR_SPARSE_CAPACITIES[0] <= capacity <= NEAR_PAIR_SPARSE_CAPACITIES[1]:
        return min(slack, NEAR_PAIR_SPARSE_SLACK)
    return slack


def _near_pairs(
    present: np.ndarray, counts: np.ndarray, capacity: int, slack: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Pairs of a sample over half the capacity and one other that leave at most `slack` tokens of the pack,
    least slack first (every such pair at s tokens before any at s + 1), each as many times as the counts
    allow: (times, the long length's index in `present`, the other's, the samples left of each length).
    At one slack no two long lengths want the same other (it is capacity - slack - the long one), so a slack's
    pairs are taken together."""
    group = np.full(capacity + 1, -1, dtype=np.int64)
    group[present] = np.arange(len(present))
    left = counts.astype(np.int64).copy()
    big = np.flatnonzero(2 * present > capacity)
    out_k, out_x, out_y = [], [], []
    for s in range(slack + 1):
        other = capacity - present[big] - s
        fits = other >= 1
        gx = big[fits]
        gy = group[other[fits]]
        gx, gy = gx[gy >= 0], gy[gy >= 0]
        times = np.minimum(left[gx], left[gy])
        some = times > 0
        gx, gy, times = gx[some], gy[some], times[some]
        left[gx] -= times
        left[gy] -= times
        out_k.append(times)
        out_x.append(gx)
        out_y.append(gy)
    return np.concatenate(out_k), np.concatenate(out_x), np.concatenate(out_y), left


def _near_pairs_plan(
    a: np.ndarray,
    capacity: int,
    k_max: int,
    present: np.ndarray,
    counts: np.ndarray,
    slack: int,
    best_fit: Callable[[np.ndarray, np.ndarray, np.ndarray], Packing],
    count: Callable[[np.ndarray, np.ndarray], int] | None,
    effort: Effort,
    goal: int,
    beat: int,
) -> Packing | None:
    """The near pairs (_near_pairs) of the items of `a` (histogram present descending, counts), then best fit
    and this stage on what they leave, as a top-level stage would plan it (its own target, the exact try
    included; sharing `effort`; no near pairs again). None where there is no near pair, or where the pairs and
    L2 of their rest have at least `beat` packs. Called only where no max_per_pack could bind (k_max at least
    the items)."""
    times, gx, gy, left = _near_pairs(present, counts, capacity, slack)
    if not len(times):
        return None
    packs = int(times.sum())
    rest = left > 0
    if rest.any() and packs + l2_bound(present[rest][::-1], left[rest][::-1], capacity) >= beat:
        return None  # no plan of the rest could beat the best so far
    ent_g = np.empty(2 * len(times), dtype=np.int64)
    ent_g[0::2] = gx
    ent_g[1::2] = gy
    ent_n = np.ones(2 * len(times), dtype=np.int64)
    pat_end = 2 * np.arange(1, len(times) + 1, dtype=np.int64)

    def rest_plan(r: np.ndarray, _goal: int, hist: tuple[np.ndarray, np.ndarray]) -> Packing:
        plan = best_fit(r, *hist)
        return refine(
            r, capacity, k_max, hist[0], hist[1], plan, best_fit, None, count, None, None, 1, effort
        )

    return _plan_of_patterns(a, present, counts, times, pat_end, ent_g, ent_n, left, packs, rest_plan, goal)


def _exact_try(
    a: np.ndarray,
    capacity: int,
    present: np.ndarray,
    counts: np.ndarray,
    rest_fit: Callable[[np.ndarray, int, tuple[np.ndarray, np.ndarray]], Packing],
    goal: int,
    reach: int,
    effort: Effort,
    near: bool = True,
    tolerant: bool = True,
    ways: tuple[tuple[bool, int, bool], ...] | None = None,
    beat: int | None = None,
    fit: Callable[[np.ndarray, np.ndarray, np.ndarray], Packing] | None = None,
    count: Callable[[np.ndarray, np.ndarray], int] | None = None,
) -> Packing | None:
    """Exact packs most constrained length first (packing/_exact_kernel.py), then `rest_fit` on what they
    leave, aiming at `goal` packs in all: the plan of the items of `a`, or None where no exact pack was found,
    where they hold under EXACT_MIN_COVER (_LARGE) of the volume, or where they and LB of what they leave
    already pass `reach` packs (with `beat`, the best plan so far less one: `beat` packs); in these the rest is
    not planned. Under the cover, where `fit(lengths, present, counts)` (best fit alone) and `count(present,
    counts)` (its packs, counted on the histogram) are given, the exact packs and best fit on their rest are
    the plan where they come within `reach` (BARE_REST_UNDER_COVER). The kernel does not run where a bound on
    the exact packs is under the cover: every exact pack of at most three holds a sample of at least a third of
    the capacity, so there are at most that many such packs, and at most as many with a longest sample u as
    capacity - u has completions that share no sample (_exact_kernel.packs_bound).

    The exact packs are made once for each of `ways` ((pairs_first, tolerance, disjoint) each; EXACT_WAYS
    where None: every exact pair first, then so again with completions that may leave a token of slack), until
    a plan has at most `reach` packs or, without `beat`, one gives up; the plan with the fewest is returned
    (_exact_plan). A tolerant way runs only where `tolerant` (no max_per_pack that could bind: with one, its
    rest's nested stage spent the budget that the per-pack plans need: 64k samples of 600 distinct at 2k, 8 a
    pack, +15 -> +37). A way runs only where `effort` has what its kernel costs left (EXACT_UNITS_PER_NS a
    nanosecond of _exact_kernel.kernel_ns: the pair sums, by FFT or by pairs of lengths or rooms as the kernel
    counts them, and a completion search over the bitsets for each length and room)."""
    from packcfg.packing import _exact_kernel

    cover = EXACT_MIN_COVER if len(a) < STOP_AT_LB_ITEMS else EXACT_MIN_COVER_LARGE
    volume = int(np.dot(present, counts))
    if int(counts[3 * present >= capacity].sum()) * capacity < cover * volume:
        return None  # (150k samples of 300 distinct at 128k: 0.33 at most, 0.12 found)
    enough = -(-int(cover * volume) // capacity)  # exact packs the cover needs
    if _exact_kernel.packs_bound(present, counts, capacity, enough) < enough:
        return None  # (150k samples of 600 distinct at 128k: 0.15 at most, 0.12 found)
    best = None
    long = present[2 * present >= capacity]
    # without an exact pair, the exact ways with and without the pairs first make the same packs
    pairs = bool(np.isin(capacity - long, present).any())
    for pairs_first, tolerance, disjoint in EXACT_WAYS if ways is None else ways:
        if not (pairs or pairs_first or tolerance) or (tolerance and not tolerant):
            continue
        cost = _exact_way_cost(len(present), capacity, len(a), tolerance, disjoint)
        if not effort.allows(cost):
            break
        effort.charge(cost)
        plan = _exact_plan(
            a,
            capacity,
            present,
            counts,
            rest_fit,
            goal,
            reach,
            near,
            pairs_first,
            cover * volume,
            effort,
            tolerance,
            disjoint,
            reach if beat is None else max(reach, beat),
            fit,
            count,
        )
        if plan is None:
            if beat is None:  # given up (the cover, or L2 of the rest): the ways after it are not tried
                break
            continue
        if best is None or len(plan.offsets) < len(best.offsets):
            best = plan
        if len(best.offsets) - 1 <= reach:
            break
    return best


def _closed_applies(capacity: int, k_max: int, n_items: int) -> bool:
    """Whether closed packs may plan n items: from CLOSED_MIN_CAPACITY, where no max_per_pack could bind (a
    closed pack holds as many samples as fit), and not switched off (PACKCFG_PLANNER_CLOSED=off)."""
    return capacity >= CLOSED_MIN_CAPACITY and k_max >= n_items and not switched_off("PACKCFG_PLANNER_CLOSED")


def _closed_plan(
    a: np.ndarray,
    capacity: int,
    present: np.ndarray,
    counts: np.ndarray,
    effort: Effort,
    best_fit: Callable[[np.ndarray, np.ndarray, np.ndarray], Packing],
) -> Packing:
    """The plan of the items of `a` (histogram present descending, counts) in closed packs
    (_exact_kernel.closed_patterns): each starts with the longest sample left and is closed by one sample of
    its room or the most balanced pair that fills it, or else led on by the longest that fit. Charged
    CLOSED_UNITS_PER_WORD a word its kernel reads; where `effort` runs out first, best fit packs the rest."""
    from packcfg.packing import _exact_kernel

    pat_k, pat_end, ent_g, ent_n, left, packs, work = _exact_kernel.closed_patterns(
        present, counts, capacity, max(0, effort.left) // CLOSED_UNITS_PER_WORD
    )
    effort.charge(CLOSED_UNITS_PER_WORD * work)
    return _plan_of_patterns(
        a, present, counts, pat_k, pat_end, ent_g, ent_n, left, packs, lambda r, g, h: best_fit(r, *h), 0
    )


def _exact_way_cost(lengths: int, capacity: int, samples: int, tolerance: int, disjoint: bool) -> float:
    """What an exact way's kernel is charged: EXACT_UNITS_PER_NS a nanosecond of its cost model
    (_exact_kernel.kernel_ns)."""
    from packcfg.packing import _exact_kernel

    return EXACT_UNITS_PER_NS * _exact_kernel.kernel_ns(capacity, lengths, samples, tolerance, disjoint)


def _exact_plan(
    a: np.ndarray,
    capacity: int,
    present: np.ndarray,
    counts: np.ndarray,
    rest_fit: Callable[[np.ndarray, int, tuple[np.ndarray, np.ndarray]], Packing],
    goal: int,
    reach: int,
    near: bool,
    pairs_first: bool,
    covered: float,
    effort: Effort,
    tolerance: int = 0,
    disjoint: bool = False,
    bound: int | None = None,
    fit: Callable[[np.ndarray, np.ndarray, np.ndarray], Packing] | None = None,
    count: Callable[[np.ndarray, np.ndarray], int] | None = None,
) -> Packing | None:
    """_exact_try's plan with the exact pairs first or not, completions within `tolerance` tokens of slack,
    and `disjoint`: a length's completions counted as those that share no sample. None where the exact packs
    and L2 of their rest pass `bound` (`reach` where None): no plan of that rest could do better. Where the
    plan of the exact packs and their rest has more than `reach` packs and `near` (packs of four samples
    allowed), the rest is planned again, near-exact packs of up to four samples first
    (_exact_kernel.near_patterns, within capacity >> NEAR_SLACK_SHIFT of full), and the plan with fewer packs
    is returned. `covered`: the volume the exact packs must hold (EXACT_MIN_COVER of all; under it, the exact
    packs and `fit` on their rest where `count` puts them within `reach`, else None). The near-exact packs
    run only where `effort` has their cost left (NEAR_UNITS_PER_CUBE times the cube of the rest's distinct
    lengths)."""
    from packcfg.packing import _exact_kernel

    pat_k, pat_end, ent_g, ent_n, left, packs = _exact_kernel.exact_patterns(
        present,
        counts,
        capacity,
        EXACT_SHARE,
        EXACT_PATTERNS_PER_LENGTH * (len(present) + 16),
        pairs_first,
        tolerance,
        disjoint,
    )
    if packs == 0:
        return None
    rest = left > 0
    if packs * capacity < covered:  # the plan would be mostly the rest's (EXACT_MIN_COVER, _LARGE)
        if not BARE_REST_UNDER_COVER or fit is None or count is None or not rest.any():
            return None
        if packs + count(present[rest], left[rest]) > reach:
            return None  # best fit on the rest does not bring them within reach: not planned
        return _plan_of_patterns(
            a, present, counts, pat_k, pat_end, ent_g, ent_n, left, packs, lambda r, g, h: fit(r, *h), goal
        )
    if rest.any() and packs + l2_bound(present[rest][::-1], left[rest][::-1], capacity) > (
        reach if bound is None else bound
    ):
        return None  # no plan of what the exact packs leave brings the plan within the bound
    plan = _plan_of_patterns(a, present, counts, pat_k, pat_end, ent_g, ent_n, left, packs, rest_fit, goal)
    lengths_left = int(rest.sum())
    if not near or len(plan.offsets) - 1 <= reach:
        return plan
    if lengths_left > NEAR_MAX_LENGTHS or lengths_left * capacity > NEAR_MAX_WORK:
        return plan
    if int(left.sum()) >= _exact_kernel.NEAR_MAX_ITEMS or switched_off("PACKCFG_PLANNER_NEAR"):
        return plan
    if not effort.allows(NEAR_UNITS_PER_CUBE * lengths_left**3):
        return plan
    effort.charge(NEAR_UNITS_PER_CUBE * lengths_left**3)
    # the rest's plan missed: near-exact packs of up to four samples on it first, then `rest_fit`
    near_k, near_end, near_g, near_n, near_left, near_packs = _exact_kernel.near_patterns(
        present,
        left,
        capacity,
        capacity >> NEAR_SLACK_SHIFT,
        EXACT_PATTERNS_PER_LENGTH * (lengths_left + 16),
    )
    if near_packs == 0:
        return plan
    with_near = _plan_of_patterns(
        a,
        present,
        counts,
        np.concatenate([pat_k, near_k]),
        np.concatenate([pat_end, near_end + (pat_end[-1] if len(pat_end) else 0)]),
        np.concatenate([ent_g, near_g]),
        np.concatenate([ent_n, near_n]),
        near_left,
        packs + near_packs,
        rest_fit,
        goal,
    )
    return with_near if len(with_near.offsets) < len(plan.offsets) else plan


def _cannot_improve(
    n_kept: int, present: np.ndarray, counts: np.ndarray, capacity: int, k_max: int, best_packs: int
) -> bool:
    """Whether a try that keeps n_kept packs and re-plans the items of this histogram cannot beat
    best_packs: every plan of those items has at least quick_lower_bound of them (SKIP_BY_BOUND; False where
    it is off)."""
    return SKIP_BY_BOUND and n_kept + quick_lower_bound(present, counts, capacity, k_max) >= best_packs


def _by_pack(
    packing: Packing, a: np.ndarray, present: np.ndarray, counts: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(assign, largest, fills) of a plan of the items `a` (histogram present descending, counts): the pack
    of each item in decreasing-length order (ties by id), each pack's longest item and its fill. Best fit
    gives them from its placements (`Packing.placement`); from the item order otherwise (the slot plan). At
    1M samples at 128k the item order and the gathers through it cost 25 ms a plan where the stage's own
    work took 3 (63 distinct)."""
    if packing.placement is not None and packing.fills is not None:
        assign, largest = packing.placement()
        return assign, largest, packing.fills
    from packcfg.packing import _bfd_kernel

    order = packing.order if packing.order is not None else packing.build()  # type: ignore[misc]
    starts = packing.offsets[:-1]
    pack_of = np.empty(len(a), dtype=np.int64)
    pack_of[order] = np.repeat(np.arange(len(starts)), np.diff(packing.offsets))
    assign = pack_of[_bfd_kernel.descending_order(a, present, counts)]
    fills = packing.fills if packing.fills is not None else np.add.reduceat(a[order], starts)
    return assign, np.maximum.reduceat(a[order], starts), fills


def _join(
    a: np.ndarray,
    present: np.ndarray,
    counts: np.ndarray,
    pack_offsets: np.ndarray,
    assign: np.ndarray,
    keep: np.ndarray,
    fills: np.ndarray,
    kept: np.ndarray,
    plan: Packing,
) -> Packing:
    """The packs of a plan (`pack_offsets`, `assign`: `_by_pack`'s) that `keep` marks, then `plan`'s of the
    other items (plan's ids index those items in decreasing-length order, ties by id: where `kept`, by item
    in that order, is False)."""
    sub_fills = plan.fills
    per_pack = np.concatenate([np.diff(pack_offsets)[keep], np.diff(plan.offsets)])
    assert sub_fills is not None
    offsets = np.zeros(len(per_pack) + 1, dtype=np.int64)
    np.cumsum(per_pack, out=offsets[1:])
    n_kept = int(keep.sum())

    def write_into(ids: np.ndarray, out: np.ndarray, start: int) -> None:
        from packcfg.packing import _bfd_kernel

        # the kept packs' items, each pack's in decreasing-length order (as best fit put them there)
        rank = np.cumsum(keep) - 1  # a kept pack's place among the kept ones
        _bfd_kernel.scatter_into(ids[kept], rank[assign[kept]], offsets[: n_kept + 1], out, start)
        write_sorted_order(plan, ids[~kept], out, start + int(offsets[n_kept]))

    return Packing(
        offsets,
        fills=np.concatenate([fills[keep], sub_fills]),
        build=_builder(a, present, counts, write_into),
        write_into=write_into,
    )


def _builder(
    a: np.ndarray,
    present: np.ndarray,
    counts: np.ndarray,
    write_into: Callable[[np.ndarray, np.ndarray, int], None],
) -> Callable[[], np.ndarray]:
    """build() of a plan of the items `a` (histogram present, counts) that writes its order in place: the
    items' counting order, once, then `write_into` through it."""

    def build() -> np.ndarray:
        from packcfg.packing import _bfd_kernel

        out = np.empty(len(a), dtype=np.int64)
        write_into(_bfd_kernel.descending_order(a, present, counts), out, 0)
        return out

    return build


def _replan(
    a: np.ndarray,
    capacity: int,
    k_max: int,
    present: np.ndarray,
    counts: np.ndarray,
    waste_budget: int,
    work: int,
    rest_fit: Callable[[np.ndarray, int, tuple[np.ndarray, np.ndarray]], Packing],
    effort: Effort,
    count: Callable[[np.ndarray, np.ndarray], int] | None = None,
    goal: int = 0,
    n_all: int = 0,
    led: bool = False,
) -> tuple[Packing | None, int]:
    """Minimum bin slack patterns, then `rest_fit(lengths, packs to aim at)` (best fit; from NEST_MIN_ITEMS
    items best fit and the nested stage) on what they leave: (the plan of the items of `a`, or None
    where no pattern was applied; the DP cells spent). With `count`, the patterns kept are the first c, c
    chosen for the fewest packs in all, or the first found with at most `goal` (_cut; `n_all`, the items
    of the whole input, sets how many cut points); from CHECK_MIN_WORK cells the budget is spent in steps
    (CHECK_SHARES), and the patterns stop after the first step whose patterns and best fit on what they leave
    are within `goal`.
    `led`: once `work` is spent, the patterns go on greedy-led for LED_SHARE of it again
    (_refine_kernel.LED_ROOM). `work` is at most what `effort` has left (CELLS_PER_UNIT), and the DP is
    charged to it (and PATTERN_UNITS a pattern); the cut search stops where `effort` is spent."""
    from packcfg.packing import _refine_kernel

    # the DP's cells, greedy-led ones included, within what the effort has left
    cells_left = max(0, effort.left) * CELLS_PER_UNIT
    work = min(work, cells_left)
    led_work = min(int(LED_SHARE * work), cells_left - work) if led else 0
    if effort.workspace is None:
        effort.workspace = _refine_kernel.Workspace()
    run = _refine_kernel.Patterns(present, counts, capacity, k_max, waste_budget, effort.workspace)
    seen: dict[int, int] = {}  # packs with the first c patterns and best fit's on the rest, by c
    for share in CHECK_SHARES if count is not None and work >= CHECK_MIN_WORK else ():
        if not run.run(int(share * work)):
            break
        if run.packs:
            seen[len(run.pat_k)] = _packs_in_all(run.packs, run.left, present, count)
            if seen[len(run.pat_k)] <= goal:
                break
    else:
        run.run(work, led_work)
    pat_k, pat_end, ent_g, ent_n, left = run.pat_k, run.pat_end, run.ent_g, run.ent_n, run.left
    mbs_packs, spent = run.packs, run.work
    effort.charge(spent // CELLS_PER_UNIT + PATTERN_UNITS * len(pat_k))
    if count is not None and len(pat_k):
        points = CUT_POINTS_LARGE if n_all >= CUT_LARGE_ITEMS else CUT_POINTS
        # where the patterns went on past max_per_pack by the item-limited DP, the cut where they stopped
        # before it is a candidate too
        extra = (run.first_limited,) if run.first_limited > 0 else ()
        c, left = _cut(
            pat_k,
            pat_end,
            ent_g,
            ent_n,
            counts,
            present,
            left,
            count,
            goal,
            points,
            extra,
            seen,
            effort.spent,
        )
        pat_k, pat_end = pat_k[:c], pat_end[:c]
        ent_g, ent_n = ent_g[: pat_end[-1] if c else 0], ent_n[: pat_end[-1] if c else 0]
        mbs_packs = int(pat_k.sum())
    if mbs_packs == 0:
        return None, spent
    return _plan_of_patterns(
        a, present, counts, pat_k, pat_end, ent_g, ent_n, left, mbs_packs, rest_fit, goal
    ), spent


def _plan_of_patterns(
    a: np.ndarray,
    present: np.ndarray,
    counts: np.ndarray,
    pat_k: np.ndarray,
    pat_end: np.ndarray,
    ent_g: np.ndarray,
    ent_n: np.ndarray,
    left: np.ndarray,
    pattern_packs: int,
    rest_fit: Callable[[np.ndarray, int, tuple[np.ndarray, np.ndarray]], Packing],
    goal: int,
) -> Packing:
    """The plan of the items of `a`: the patterns' packs (ent_g indexes `present`; `left`: what they leave of
    each group), then `rest_fit(lengths, packs to aim at)` on what they leave."""
    from packcfg.packing import _refine_kernel

    # the items left, as best fit sees them: each group's last items, in decreasing-length order
    group_start = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=group_start[1:])
    # aiming at the packs the goal leaves once the patterns' are counted
    some = left > 0
    rest_hist = (present[some], left[some])
    rest = rest_fit(np.repeat(*rest_hist), goal - pattern_packs, rest_hist) if some.any() else None

    def write_into(ids: np.ndarray, out: np.ndarray, start: int) -> None:
        # the patterns' packs take each group's first items; the rest (decreasing length, ties by id: the
        # order its own plan numbers them in) is what they leave of each group
        rest_ids = np.empty(int(left.sum()), np.int64)
        end = _refine_kernel.write_patterns(
            pat_k,
            pat_end,
            ent_g,
            ent_n,
            group_start,
            np.ascontiguousarray(ids, dtype=np.int64),
            out,
            start,
            rest_ids,
        )
        if rest is not None:
            write_sorted_order(rest, rest_ids, out, end)

    starts = np.concatenate([[0], pat_end[:-1]])
    per_pack = np.repeat(np.add.reduceat(ent_n, starts), pat_k)
    fills = np.repeat(np.add.reduceat(ent_n * present[ent_g], starts), pat_k)
    if rest is not None:
        rest_fills = rest.fills
        if rest_fills is None:
            rest_a = np.repeat(present, left)
            rest_order = rest.order if rest.order is not None else rest.build()  # type: ignore[misc]
            rest_fills = np.add.reduceat(rest_a[rest_order], rest.offsets[:-1])
        per_pack = np.concatenate([per_pack, np.diff(rest.offsets)])
        fills = np.concatenate([fills, rest_fills])
    offsets = np.zeros(len(per_pack) + 1, dtype=np.int64)
    np.cumsum(per_pack, out=offsets[1:])
    return Packing(
        offsets, fills=fills, build=_builder(a, present, counts, write_into), write_into=write_into
    )


# the post-pass runs only on plans at most this many packs over the target: it saved at most 8 packs on any
# row measured (docs/planner-history.md), so further over it cannot reach the target, and there it cost 45 ms
# for one pack (1M samples, 999 distinct at 2k: 179 -> 134 ms for +124 -> +125 over LB, target +34). Was 16:
# with the exact pairs first that row came to +50, 16 over, where the post-pass spent 22 ms (105 -> 127 ms)
# saving none
ELIMINATE_MAX_OVER = 8
# from NEST_MIN_ITEMS items, what the kept patterns leave is planned by the stage again (nested, try 1 only,
# or try 3 where nothing left is over capacity / 2) rather than by best fit alone, and from TWO_SHIFTS_ITEMS
# try 1 runs with TIGHT_SHIFTS_LARGE: 1M samples, 999 distinct at 4k +127 -> +51 (+115 with both limits and
# no nesting, +75
# nesting with one limit), at 2k +185 -> +125, at 32k +21 -> +9, 600 distinct at 128k +17 -> +13; there the
# stage costs 1-2x an argsort. The nested stage's other tries (every big-item pack kept, every item
# re-planned) on every rest took 999 distinct at 2k from 200 to 340 ms and saved a pack only at 128k (600
# distinct +13 -> +11); try 3 only where try 1 has no pack to keep gives that (+8 with STOP_AT_LB_ITEMS) at
# next to no cost elsewhere. Below NEST_MIN_ITEMS the stage already costs close to 3x an argsort at 2k (64k
# samples: nesting took 999 distinct at 2k from 13 to 25 ms, +12 -> +10), and nesting saved no pack on any
# input measured at 30k-50k samples, so smaller inputs keep best fit on the rest. Nesting ran from 2**18 items
# until issue 23 measured the sizes between: from 2**17, with one limit below 2**18 (600 / 999 distinct, x an
# argsort warm: 140k samples at 4k +11 / +11 -> +4 / +5, 999 at 32k +9 -> +4, up to 2.3x; 250k at 32k
# +17 -> +5, at 128k +9 / +6 -> +4 / +4; two limits took 999 distinct at 2k with 140k samples to 3.4-3.7x
# for +17; at 70k samples nesting saved no pack, and cost up to 2.9x)
NEST_MIN_ITEMS = 1 << 17
TWO_SHIFTS_ITEMS = 1 << 18
# levels of nesting: the nested stage nests once more, on rests under NEST_DEEP_MAX_ITEMS (1M samples, 999
# distinct at 4k +51 -> +43, 0-15 ms; no other row changed, and a third level changed none). On larger rests
# (450k-530k items at 2k) it took 999 distinct at 2k from 1.45x to 1.93x an argsort and saved no pack.
NEST_DEPTH = 2
NEST_DEEP_MAX_ITEMS = 1 << 18
# below STOP_AT_LB_ITEMS items a try whose kept packs plus LB of the rest reach the best plan so far is
# skipped: no plan of it could have fewer packs (64k samples at 2k, 600 and 999 distinct: try 2, 1.9-2.0 ms,
# which had landed 10 and 19 packs over the best; its DP work goes to try 3, whose budget did not bind there).
# From STOP_AT_LB_ITEMS the tries run as before (there the skipped work would change the later tries' budget
# on rows already within the time bar). Tests switch it off for a control.
SKIP_BY_BOUND = True
# from this many items the tries (and the cut search) do not stop at the first plan within the target but
# go on while the budget lasts, until one reaches LB: there try 1 with two slack limits often lands within the
# target with more packs than a later try makes (1M samples: 300 distinct at 2k-8k +11..13 -> +0, 600
# distinct at 8k / 32k +17 / +14 -> +5 / +3, 63 distinct at 2k / 4k +8 / +2 -> +0; with the nested stage's
# try 3 where nothing left is big, 600 distinct at 128k +13 -> +8, +11 with that alone), at 0.5-1.7x an
# argsort where the stage was 0.4-1.6x; below it the stage is already near 3x an argsort at 2k.
STOP_AT_LB_ITEMS = 1 << 18
# a try spends its DP budget in steps, and after each of these shares of it counts the packs of its patterns so
# far and best fit's on what they leave (the cut search's count at its last pattern): where that is within the
# goal the try stops there rather than spend the rest. At 128k the goal was met after 20-50% of the patterns.
# In one process, interleaved, median of 7 (2026-11-27): 150k samples of 600 distinct at 128k 12.9 -> 11.6 ms;
# 250k samples of 600 / 999 distinct at 128k 17.0 / 20.3 -> 15.4 / 18.0, of 999 distinct at 32k 18.0 -> 16.0;
# the plans within the target (+2 -> +5 on the first, +1 -> +4 on the third). Where no step meets the goal the
# counts are spent for nothing: 150k samples of 999 distinct at 32k 12.1 -> 12.8 ms (two counts, 0.5 ms with
# the faults of the counter's tables). From STOP_AT_LB_ITEMS the goal is LB, so the steps end a try early only
# where it reaches LB. Budgets under CHECK_MIN_WORK cells (about 3 ms of DP) run in one step: with steps there,
# 64k samples of 999 / 600 distinct at 32k and of 999 distinct at 8k took 8.2 / 4.9 / 6.1 -> 9.2 / 5.3 / 6.5 ms.
CHECK_SHARES = (0.25, 0.5, 0.75)
CHECK_MIN_WORK = 1 << 26

# The exact try (PACKCFG_PLANNER_EXACT=off switches it off) runs before the tries where best fit misses the
# target: exact packs built most constrained length first, a pack repeated for EXACT_SHARE of the rarest of
# its lengths, then best fit and the nested stage on what they set aside (packing/_exact_kernel.py;
# docs/planner-history.md, "The exact try"); where its plan is within the target the tries do not run.
# EXACT_SHARE 1 (each pack for as many samples as its rarest length has) makes 0.1k-0.9k patterns where 0.1
# made 20k-32k (1M samples, 600 / 999 distinct: kernel 1.6 / 4 ms, was 55 / 141 ms) and plans as good: 1M
# samples, 600 / 999 distinct at 2k-32k within LB + 0-5 with 1.0, LB + 0-5 with 0.1 (bench 2026-11-27, Zen 5;
# 999 distinct at 2k +124 either way). Its rest is nested at every size (the exact packs leave the stage's own
# problem, which best fit alone packs 5-20 over LB): 64k-200k samples of 600 distinct at 2k +5 / +9 / +13 /
# +18 -> +0, at 4k 999 distinct +8 / +11 / +7 -> +0 / +1 / +2, each as fast or faster.
# Where the exact packs and L2 of what they leave pass the target, its rest is not planned (999 distinct at 2k:
# the short samples run out and every such rest needs 7-980 packs more than LB). Below STOP_AT_LB_ITEMS items
# it gives up where its packs hold under EXACT_MIN_COVER of the volume: there the plan is mostly the rest's and
# its nested stage costs as much as the tries (at 32k, 0.23-0.32 covered: 64k samples of 600 / 999 distinct
# took 4.2 / 5.9 ms -> 8.8 / 15.4 ms, for +3 / +4 -> +3 / +3); from STOP_AT_LB_ITEMS, where the tries go on to
# LB, it pays at 32k too (1M samples, 999 distinct at 32k: +9 -> +1, 149 -> 55 ms, 0.32 covered), and gives up
# only under EXACT_MIN_COVER_LARGE (1M samples of 300 distinct at 128k, 0.013 covered: 82 -> 55 ms, +0 either
# way; 0.2 would take 600 distinct at 128k, 0.12 covered, from 64 to 143 ms). (These were measured while the
# kernel recomputed its order after every pack; stop 53 computes it once: docs/planner-history.md, "The most
# constrained order computed once".)
EXACT_SHARE = 1.0
# The exact try's ways, (pairs_first, tolerance, disjoint) each, in order until one lands within the target.
# First every exact pair (x + capacity - x), then the most constrained order: some best plan holds all those pairs
# (_exact_kernel's docstring), and on 999 distinct at 2k the exact packs and L2 of their rest come to LB + 0 at
# 64k (LB + 9 without), the plan with near-exact packs to +2 (the target is +5). Where that misses, the same
# with completions that may leave a token of slack (the least slack a length has a completion at, exact where
# there is one: _exact_kernel's `tolerance`), where no max_per_pack could bind (_exact_try's `tolerant`). The
# cutting-stock LP's plans of the inputs where the exact packs miss hold few exact packs of a long sample and one
# other: 2,000 distinct at 2k with 30k samples (LP bound LB + 4, its plan LB + 5) has 5,845 such pairs at 0.4-2.4
# tokens of slack on average, where bfd has 7,327 at 1.8-6.1 and 791 long samples alone at 109. On the 120
# inputs of docs/planner-history.md's "What one seed hides" (seeds 1-3, 400-1,500 distinct, 64k / 150k
# samples, 2k-128k) this way took the rows over the packs target from 29 to 18: 999 distinct at 2k seed 1 +27
# / +74 -> +2 / +4, seed 3 +10 / +12 -> +1 / +3, at 8k seed 1 +8 / +21 -> +2 / +4, 800 distinct at 4k seed 2
# +13 / +31 -> +2 / +5, 1,500 distinct at 8k seed 3 +6 / +6 -> +1 / +2 (64k / 150k samples), faster there (the
# tries then do not run: 20.7 -> 12.2 ms on the first). It replaced the second way of stop 42, the exact packs
# without the pairs first (800 distinct at 4k seed 1 with 64k samples: +9 with the pairs first, +5 without, +4
# with a token): after the tolerant way that one changed no plan of the 120 inputs, the ratio table (190
# rows), the 100 rows at 131,071 / 262,143 samples or the per-pack table, and cost 2.5-5.6 ms where it ran
# (999 distinct at 4k seed 2 with 64k samples 11.9 -> 8.9 ms). 2 tokens: 19 over the packs target, but a
# costlier kernel (1 + tolerance rooms a length) and 56 rows over the time bar against 47-53
EXACT_WAYS = ((True, 0, False), (True, 1, False))  # (pairs_first, tolerance, disjoint) each
# Where the plan is still over the target after the tries, exact packs once more, planned wherever they could
# beat the best plan so far (not only where they could reach the target): a token of slack allowed, and a
# length's completions counted as those that share no sample (min(cnt[x], cnt[y]) a pair x + y) rather than as
# products of counts, which overstate what a length with thousands of samples can get
# (docs/planner-history.md, "Exact packs once more, where the target is out of reach").
EXACT_WAYS_AGAIN = ((True, 1, True),)
# Where the plan is still over the target after every other step (the near pairs included), exact packs once
# more with completions that may leave up to 2, then 3 tokens of slack, each planned wherever it could beat the
# best plan so far. On 64k samples of 800 distinct at 2k, seed 1 (the LP's plan LB + 1), the exact packs with
# 0 / 1 / 2 / 3 tokens and L2 of their rest come to LB + 12 / +6 / +3 / +3, and the stage's plan was the 1-token
# way's (disjoint), +11; the 2-token way's is +5, within the target (13.7 -> 16.2 ms). Last, so that it spends
# only what the steps before it left: as a second way of EXACT_WAYS_AGAIN (3 tokens, at most a quarter of what
# was left) it took 400 distinct at 4k with 64k samples, seed 2, from +13 to +16, the near pairs after it short
# of budget (docs/planner-history.md, "Two last steps where the plan is still over the target")
EXACT_WAYS_LAST = ((True, 2, False), (True, 3, False))
# Where the plan is still over the target after every other step, the stage once more on the items of the packs
# that are not exactly full (best fit, then the stage as the top level runs it, the exact try included, aiming
# at the target less the full packs, with what the budget has left): the full packs hold no slack to recover,
# and their rest is a smaller input whose exact packs and tries differ from the whole's. On the 120 seed inputs
# 774 -> 765 packs over LB (999 distinct at 128k with 150k samples, seed 1: +6 -> +5, within the target), on
# the 120 ratio rows of 30k-1M samples 3,272 -> 3,271; with max_per_pack, 64k samples of 600 distinct at 2k
# with 4 / 8 a pack +233 / +15 -> +208 / +12; no plan more (docs/planner-history.md, "Two last steps where the
# plan is still over the target"). With a budget of its own (a second top-level plan of those packs) it
# brought seven rows within the target, but took 4-58 ms more each
NOT_FULL_AGAIN = True
# ... and, where the exact try gave no plan, right after the near pairs that run in its place (NEAR_PAIRS_FIRST)
# where their plan is still over the target, rather than only after the tries and every other step: 4,095
# distinct at 8k with 64k samples lands +5 either way, in 32.3 -> 13.6 ms (the tries, the exact packs once more
# and those with 2-3 tokens of slack no longer run first), with 150k +12 -> +9. On the 240 seed inputs the same
# verdicts (1,621 -> 1,620 packs over LB; two rows over the packs target either way pass the time bar: 800
# distinct at 2k with 64k samples, seed 3, 15.0 -> 19.2 ms), on the ratio workloads at 30k-150k and at 1M (30
# rows) the same plans (docs/planner-history.md, stop 55)
NOT_FULL_AFTER_NEAR = True
# Where the plan is still over the target after every try, pairs of a sample over half the capacity and one
# other within `slack` tokens of full first (least slack first, as many as the counts allow), then best fit and
# this stage (the exact try included) on what they leave (_near_pairs_plan). The cutting-stock LP's plan of
# 30k samples of 2,000 distinct at 2k (LP bound LB + 4) pairs 5,722 long samples with one other at 0.93
# tokens of slack on average and leaves 17 alone; the exact packs' plan (LB + 54) pairs 4,561 (5.9 tokens) and
# leaves 539 alone, with 116 tokens each: the short samples that would have paired them went into packs of
# three for longer gaps. The slack: capacity >> NEAR_PAIR_SLACK_SHIFT tokens, at most NEAR_PAIR_MAX_SLACK (8 at
# 2k, 16 from 4k; docs/planner-history.md, "Near pairs first, where the target is still missed"). Above
# NEAR_PAIR_MAX_CAPACITY it saved no pack on any row measured (seed inputs and ratio rows at 32k and 128k) and
# took up to 22 ms. Not where max_per_pack could bind (there the limit, not the pairs, is what the plan misses):
# on the per-pack table's rows it saved no pack and took 600 distinct at 2k with 4 a pack from 36 to 78 ms
NEAR_PAIR_SLACK_SHIFT = 8
NEAR_PAIR_MAX_SLACK = 16
NEAR_PAIR_MAX_CAPACITY = 1 << 14
# At 4k-8k, where the lengths with samples are under this fraction of the values up to the longest, the near
# pairs' slack is at most NEAR_PAIR_SPARSE_SLACK tokens (stop 59). There a long sample without an exact partner
# is better closed by two others than paired at 5-16 tokens short: the cutting-stock LP's plan of 4,095 distinct
# lengths at 8k with 150k samples (half the values) has 17.6k packs of a long sample and one other and 23.5k of a
# long one and two, ours had 27.6k and 13.5k. With slack 4 there, 4,095 distinct at 8k with 64k / 150k / 1M
# samples +5 / +9 / +59 -> +2 / +4 / +31 over LB (within the target; 22 / 101 / 192 -> 16 / 21 / 43 ms); on the
# 240 seed inputs seven rows at 4k of 400-1,500 distinct lengths (a tenth to 0.37 of the values) gain 2-18 packs
# and no row loses (1,542 -> 1,502 packs over LB; 800 distinct at 4k with 150k samples, seed 1, +11 either way
# in 43 -> 56 ms). Denser lengths lose with slack 4 (8,191 distinct at 8k, 0.75 of the values, +15 -> +28;
# 4,095 distinct at 4k, 0.75, +12 -> +36 with 64k samples), hence the fraction (any value between 0.5 and 0.75
# gives the same plans on these inputs). So do the 2k rows, where the slack is 8 (800 distinct, 0.39 of the
# values: three seeds gain and two lose; 1,500 distinct lose), and 16k (400 distinct with 150k samples, seed 4,
# +3 -> +4; 6,000 distinct with 30k, 0.36, with the exact try unaffordable, +2 -> +10), hence the capacities.
# Slack 2 at 4k (a capacity >> 11 rule) was mixed against 4 (docs/planner-history.md, "The near pairs' slack on
# sparse lengths")
NEAR_PAIR_SPARSE_FRACTION = 0.6
NEAR_PAIR_SPARSE_SLACK = 4
NEAR_PAIR_SPARSE_CAPACITIES = (1 << 12, 1 << 13)
# Where the exact try gives no plan, because it cannot afford its first way's kernel (its cost model,
# EXACT_UNITS_PER_NS, over what the budget has left) or because it gave up (its exact packs and L2 of their rest
# past the target), what came after the tries comes before them: the near pairs, whose rest has fewer lengths
# and gets an exact try of its own, then the exact packs once more (EXACT_WAYS_AGAIN, where the exact try could
# run); the tries only where the plan is still over the target. Until stop 55 the exact packs once more came
# first: with the kernel charged what it costs they now run where they used to be unaffordable, and on 4,095
# distinct at 8k with 30k samples they took 3.6 ms and saved nothing before the near pairs reached the target
# (+3, 7.5 -> 11.3 ms; the near pairs first: 7.5 ms); on the 240 seed inputs the order changes no plan, on the 45
# stress rows it brings that one row back within both. On the 120 seed inputs
# and the 90 ratio rows (docs/planner-history.md, "The near pairs before the tries where the exact try gives
# no plan") no plan has more packs and eight have fewer, each in less time: 4,095 distinct at 8k with 64k /
# 150k samples +11 / +70 -> +9 / +12 over LB in 32.6 / 40.1 -> 25.6 / 26.9 ms (with 30k, +5 in 14.1 -> 8.8
# ms); 2,000 distinct at 2k with 64k / 150k +97 / +227 -> +76 / +150; 1,500 distinct at 2k, 150k, seed 2, +54
# -> +32. The near pairs alone first (without the exact packs once more) took 800 distinct at 2k, 150k, seed
# 1, from +13 to +33: they spent the budget that the exact packs once more, that row's winner, needed
NEAR_PAIRS_FIRST = True
# On near-continuous lengths (DENSE_FRACTION), which skip the rest of the stage, the near pairs alone, up to this
# capacity and under STOP_AT_LB_ITEMS samples: 4,095 distinct at 2k with 30k / 64k / 150k samples +41 / +84 /
# +208 -> +8 / +20 / +52 over LB (5.7 / 13.9 / 18 ms against 0.5-2.6), uniform at 2k with 150k +29 -> +24 (the
# LP's optimum). At 8k-16k they saved no pack on a uniform row and took 150k samples past 10 ms; at 1M samples
# they took 7-37 ms more (4,095 distinct at 2k: +1,432 -> +399, uniform the same plans)
DENSE_NEAR_PAIR_MAX_CAPACITY = 1 << 12
# ... and past it, up to NEAR_PAIR_MAX_CAPACITY, only where best fit lands over LB + this many margins: uniform
# lengths, where they save nothing, land within it (150k samples at 8k / 16k, four seeds: +0..+8, a margin of
# 7), Zipf-weighted near-continuous ones far past it. 8,191 distinct at 8k (seeds 7, 1, 2; 30k / 64k / 150k
# samples, 9 rows) 529 -> 184 packs over LB (30k, seed 2: +28 -> +9; 64k: +41 / +46 / +62 -> +22 / +9 / +20;
# 150k: +102 / +102 / +137 -> +48 / +17 / +48), all still over the target; the 7 rows that change
# 1.9-3.5 -> 13-33 ms, within the time bar at 150k, past it at 64k but seed 1 (docs/planner-history.md, "The
# near pairs on near-continuous lengths at 8k-16k")
DENSE_FAR_MARGINS = 4
# ... but from this many samples, the whole stage where best fit lands over LB + DENSE_STAGE_MARGINS x margin(LB)
# (LB with Fekete and Schepers' bound, dff_bound): 4,095 distinct at 2k (1,773 lengths, Zipf-weighted) with
# 270k / 500k / 1M samples, 30 / 28 / 35 margins over LB, +386 / +710 / +1,432 -> +106 / +357 / +233 over L2
# (the LP's optimum: +100 at 1M) in 32 / 53 / 113 ms, against an argsort's 32 / 58 / 181 ms. Uniform lengths,
# where it saves nothing (the LP: best fit is optimal), land 0.1-2.1 margins over LB from 150k samples, and
# would pay 2.5-3.6x an argsort for it at 270k
DENSE_STAGE_MIN_ITEMS = 1 << 18
DENSE_STAGE_MARGINS = 4
# Lengths that take more than this fraction of the values up to the longest (but not DENSE_FRACTION): the near
# pairs first, before the exact try, then the rest of the stage where the plan is still over the target. After
# the exact try (and its ways once more, where it gave no plan) the near pairs had too little of the budget left
# for the stage on their rest: 1,500 / 2,000 distinct at 2k (0.69 / 0.73-0.75 of the lengths, seeds 1, 2, 3, 7;
# 30k-150k samples) 1,305 -> 794 packs over LB in all, no row worse (2,000 distinct, seed 7, with 30k / 64k /
# 150k: +29 / +76 / +150 -> +15 / +36 / +87; the LP's bounds +4 / +9 / +20), 4,095 distinct at 4k +13..+407 ->
# +10..+357, all rows still over the target; 20-50% more time there. From 0.4 it took 2,000 distinct at 4k,
# seed 1 (0.49) from +35 / +74 / +157 to +10 / +15 / +36, but six rows within the target past the time bar
# (2,000 distinct at 4k with 30k samples, 8 -> 11-14 ms): there the exact try reaches the target at once
NEAR_PAIRS_LEAD_FRACTION = 0.6
# Where the exact packs' plan misses the target, their rest is planned again with near-exact packs of up to
# four samples first, each within capacity >> NEAR_SLACK_SHIFT tokens of full (8 at 2k), most constrained
# length first (_exact_kernel._near; docs/planner-history.md, "Every exact pair first; near-exact packs of
# four on the rest"): what the rest of 999 distinct at 2k needs (the cutting-stock LP packs it at L2 + 1, in
# packs of 3-6 samples with 0-4 tokens of slack). 64k / 150k / 1M samples +6 / +16 / +50 -> +2 / +2 / +22,
# 11.5 / 13.9 / 104 -> 5.7 / 7.6 / 23 ms (the tries no longer run there). Exact fills only (a shift past the
# capacity's bits) land +6 / +11 / +50 there, 4 tokens +6 / +1 / +32, 16 tokens +2 / +1 / +22 (41 ms at 1M).
# Its counts of completions by three samples cost O(capacity) a pattern: it runs only where the rest's
# distinct lengths times the capacity are at most NEAR_MAX_WORK (999 distinct at 2k: 120 x 2048)
NEAR_SLACK_SHIFT = 8
NEAR_MAX_WORK = 1 << 20
# ... and its search for a completion is O(lengths**2) a pattern, with O(lengths) patterns: on rests of random
# lengths at 2k, 120 / 160 / 250 / 500 distinct lengths took 2 / 4 / 16 / 119 ms. The rests it helped on had
# 94-213 (999 distinct at 2k: 113-119); past this many it does not run
NEAR_MAX_LENGTHS = 256
EXACT_MIN_COVER = 0.35
EXACT_MIN_COVER_LARGE = 0.1
# Under the cover, the kernel has run already (its cost is paid): the exact packs are still the plan where best
# fit alone on their rest, counted on the histogram (about 0.1 ms), brings them within the target; the nested
# stage on the rest, which is what cost too much there, does not run. 2,000 distinct at 128k with 150k samples
# (0.29 of the volume): +6 in 45 ms (the tries, after the kernel gave up) -> +4 in 14 ms
BARE_REST_UNDER_COVER = True
# its setup counts the pair sums over every two distinct lengths (or by FFT) and each pattern searches them:
# past this many it is skipped (30k distinct lengths would be 9e8 products there; the budget stops it well
# before that, EXACT_UNITS_PER_NS). 8192 against 4096 (stop 53) on 5,000 / 8,000 distinct
# requested at 8k-128k with 30k / 150k / 1M samples (18 rows): within both 3 -> 6, packs over LB 1,127 -> 910
# (5,000 distinct at 32k with 150k samples +29 -> +2, with 1M +168 -> +11)
EXACT_MAX_DISTINCT = 8192
# Closed packs (_exact_kernel.closed_patterns; PACKCFG_PLANNER_CLOSED=off): a pack starts with the longest
# sample left and is closed by one sample of its room or by the most balanced pair that fills it exactly, else
# led on by the longest samples that fit. At long context a pack holds several samples and the lengths are
# sparse against the capacity, so a pair that fills what the longest leave is nearly always there, and the most
# balanced one takes two middling samples and leaves the short ones for the rooms only they fill. The stage
# makes them first, before every other step (CLOSED_FIRST): 0.3-2.5 ms at 30k-1M samples. Measured against the
# stage without them (docs/planner-history.md, "Closed packs"): 150k samples of 4,095 distinct at 128k +6 in 40
# ms -> +1 in 7 ms; 1M samples of 2,000 / 4,095 distinct at 128k +19 / +36 -> +4 / +5; 64k samples of 8,191
# distinct at 128k +2 in 23 -> 6 ms (the same packs, without the exact kernel). At 32k they win on 300-2,000
# distinct lengths and lose on 4,095-8,191 (+3..+59 where the exact packs land +0..+5); at 2k-8k they lose on
# nearly every input (packs of two or three samples, where a pair fills the room only exactly): from here only
CLOSED_FIRST = True
CLOSED_MIN_CAPACITY = 1 << 15
# ... first only where the lengths with samples are at most 1 / CLOSED_FIRST_SPAN of the values up to the
# capacity: past it (8,191 distinct at 32k) they lost on every row, and with 64k samples, which sits at its time
# bar, they cost 1.5-2.5 ms for nothing; 4,095 distinct at 32k, just within it, land within the target sooner
# (30k samples +1 in 8.3 ms -> +3 in 2.5 ms). The same packs on the stress rows and
# the 240 seed inputs with or without it (docs/planner-history.md, "Closed packs")
CLOSED_FIRST_SPAN = 8
# ... and on what a step leaves to best fit (the exact packs' rest, the tries' and the nested stage's), where
# best fit lands over that rest's goal: the better of the two plans. The exact packs and closed packs on their
# rest: 1M samples of 8,191 distinct at 128k LB + 0 (closed packs alone +23, the stage without them +28), at 32k
# +7 -> +0; 1M samples of 600 distinct at 128k +5 -> +1
CLOSED_REST = True
# what a word the closed packs' kernel reads is charged to the stage's budget (about 2.2-5.4 ns a word measured;
# the budget counts about one unit a nanosecond); where the budget runs out first, best fit packs the rest
CLOSED_UNITS_PER_WORD = 3
# the kernel's room for patterns, per distinct length (it stops when they are full; 1M samples used about one
# a length with EXACT_SHARE 1, 0.4k-0.9k patterns for 600-999 lengths, and 29-34 a length with 0.1)
EXACT_PATTERNS_PER_LENGTH = 64

# where the patterns stop (_cut): best fit's packs on what is left, at this many evenly spaced cut points,
# then as many again around the best of them
CUT_POINTS = 6
# ... and from this many items, CUT_POINTS_LARGE: a point costs the same (best fit on a histogram), an
# argsort of the lengths ten times more (1M samples: 600 distinct at 4k +106 with 6 points, +24 with 8)
CUT_LARGE_ITEMS = 1 << 18
CUT_POINTS_LARGE = 8


def _packs_in_all(
    pattern_packs: int, left: np.ndarray, present: np.ndarray, count: Callable[[np.ndarray, np.ndarray], int]
) -> int:
    """The packs of a try's first patterns (`pattern_packs`) and best fit's (`count`) on what they leave
    (`left`: samples of each length of `present`)."""
    some = left > 0
    return pattern_packs + (count(present[some], left[some]) if some.any() else 0)


def _cut(
    pat_k: np.ndarray,
    pat_end: np.ndarray,
    ent_g: np.ndarray,
    ent_n: np.ndarray,
    counts: np.ndarray,
    present: np.ndarray,
    left: np.ndarray,
    count: Callable[[np.ndarray, np.ndarray], int],
    goal: int,
    points: int,
    extra: tuple[int, ...] = (),
    seen: dict[int, int] | None = None,
    spent: Callable[[], bool] = lambda: False,
) -> tuple[int, np.ndarray]:
    """How many of the patterns to keep, and what they leave of each group. Minimum bin slack fills its
    first packs exactly but uses up the small items doing so, and its last patterns then waste more than
    best fit would on what they take: the packs of the first c patterns plus best fit's on the rest, over
    c, dip and rise again (600 distinct lengths at 2k, 64k samples: 122 packs over LB at c = 0, 297 with
    every pattern, 7 at the best c). The sum is evaluated at `points` evenly spaced c and around the best
    of them (best fit on a histogram costs 0.2-0.4 ms at 64k samples), every pattern among them, and then
    likewise over 1..e for each e in `extra` (where the patterns stopped before they went on past
    max_per_pack: the search that ran there, so that going on never loses a cut it would have found); the
    search stops at the first c with at most `goal` packs, and evaluates no new c once `spent()` (the
    stage's effort: a c not evaluated counts as worse than any)."""
    n_pat = len(pat_k)
    per_entry = np.repeat(pat_k, np.diff(np.concatenate([[0], pat_end]))) * ent_n
    packs_before = np.concatenate([[0], np.cumsum(pat_k)])
    seen = {} if seen is None else seen

    def rest_at(c: int) -> np.ndarray:
        e = int(pat_end[c - 1]) if c else 0
        used = np.bincount(ent_g[:e], weights=per_entry[:e], minlength=len(counts))
        return counts - used.astype(np.int64)

    def total(c: int) -> int:
        if c not in seen:
            if spent():
                return 1 << 62
            seen[c] = _packs_in_all(int(packs_before[c]), rest_at(c), present, count)
        return seen[c]

    best = n_pat

    def search(n: int) -> bool:
        """c in 1..n: n, `points` evenly spaced, then finer around the best of them; True at a c within
        goal."""
        nonlocal best
        step = max(1, -(-n // points))
        fine = max(1, step // (points // 2))
        here = n
        for c in (n, *range(step, n, step)):
            if total(c) < total(here):
                here = c
            if total(here) < total(best):
                best = here
            if total(best) <= goal:
                return True
        for c in range(max(1, here - step + fine), min(n, here + step), fine):  # around the best coarse c
            if total(c) < total(best):
                best = c
            if total(best) <= goal:
                return True
        return False

    for n in (n_pat, *extra):
        if search(n):
            break
    return best, (left if best == n_pat else rest_at(best))
