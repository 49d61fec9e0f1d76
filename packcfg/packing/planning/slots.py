"""bfd's slot-balanced plan, where `max_per_pack` binds: packs built one at a time, each using about as many
of its slots as the items left need per pack (packing/_slots_kernel.py, numba; docs/packing.md, "Packs with
max_per_pack").

Best fit decreasing places the large items first and leaves the small ones, many to a pack, for packs that run
out of slots long before they run out of room: with 8 samples a pack on realistic length mixes it lands 16-34%
more packs than LB, and the cutting-stock LP with the item limit (bench/lp_bound.py) reaches LB there, so the
gap is the plan's. This plan replaces bfd's where it has fewer packs; without numba (or with
PACKCFG_PLANNER_SLOTS=off) it is skipped.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from packcfg.packing.planning.common import Packing, switched_off


def enabled() -> bool:
    """Whether the slot-balanced plan may run: numba importable and not switched off."""
    if switched_off("PACKCFG_PLANNER_SLOTS"):
        return False
    from packcfg.packing import _slots_kernel

    return _slots_kernel.HAVE_NUMBA


# the kernel's variants, tried in this order until one is within the goal, the plan with the fewest packs
# kept: (lean, exact_tries, triples, fit_aim). lean -1: a pack aims at the samples left per pack in all, its
# first included (the kernel's aim counts the samples besides the first, computed once the first is taken);
# the kernel's first variants (2026-11-26) took 0.5 and 0.85, a sample or two more than that in every pack,
# which spends the short samples early and leaves the last packs with long ones that cannot fill their slots.
# 64k samples (bench/packing.py --per-pack-only's 13 rows and six more), packs over LB of the slot plan
# alone, lean -1.5 / -1 / -0.5 / 0 / 0.5 (the best of the three lookups): realistic mix at 2k with 8 per pack
# +38 / +1 / +7 / +53 / +70; 999 distinct at 2k with 6 +56 / +19 / +216 / +615 / +4,075; 600 distinct at 2k
# with 4 +711 / +74 / +163 / +330 / +330; lognormal at 8k with 16 +7 / +1 / +15 / +5 / +42 (all 19 rows:
# -1.1 / -1 / -0.9 sum to +549 / +481 / +1,008 with the lookup). fit_aim: a pack aims at no more samples than
# the shortest left fit in its room, and fills it with as many longer ones (the realistic mix at 2k with 4 a
# pack +38 -> +32, the LP's bound +28). The lookups: the exact pair lookup first (1,024 lengths x); without it
# 999 distinct at 2k with 6 a pack +78 -> +19; with an exact triple where three samples are to go (16 lengths x,
# each with up to 1,024 lookups) 63 distinct at 2k with 4 a pack +100 -> +0 (LB itself), last because it costs
# most (lognormal at 8k with 16 a pack 39 ms against 4 ms without). Each costs 1-4 ms at 64k samples. Last,
# the first variant before (lean 0.5 with the lookup, no fit_aim): on none of those rows does it win, but on
# small inputs with `align` it does (300 random lognormal inputs of 100-5,000 samples, 2-9 a pack, 300-4k: the
# packs of all 300 sum 217,975 with the variants before, 217,730 with the first three alone, 217,687 with it).
# The whole pipeline against the variants before (docs/planner-history.md, "The slot-balanced plan aims at
# the samples left per pack"): packs over LB on those 19 rows 448 -> 179 at 64k samples, 1,247 -> 385 at
# 150k, 6,527 -> 2,658 at 1M.
VARIANTS = ((-1.0, 1024, 0, True), (-1.0, 0, 0, True), (-1.0, 1024, 16, True), (0.5, 1024, 0, False))


# from this many items, the last TAIL_FRACTION of the best variant's packs (where its greedy choice is left
# with what does not combine) are planned again by bfd's whole pipeline (`replan`), kept where that has fewer
# packs: 1M samples, realistic mix at 2k with 8 a pack +634 -> +272 over LB (re-planning the last 20% / 5%:
# +292 / +421); at 64k samples it saved no pack on any row measured
TAIL_MIN_ITEMS = 1 << 18
TAIL_FRACTION = 0.1


def improve(
    a: np.ndarray,
    capacity: int,
    k_max: int,
    present: np.ndarray,
    counts: np.ndarray,
    packing: Packing,
    goal: int,
    replan: Callable[[np.ndarray], Packing] | None = None,
) -> Packing:
    """`packing`, or the slot-balanced plan of the same items with the fewest packs where `packing` has more
    than `goal` packs and that plan has fewer; `replan(lengths)` plans the tail again (TAIL_MIN_ITEMS)."""
    packs = len(packing.offsets) - 1
    if packs <= goal or not enabled():
        return packing
    from packcfg.packing import _bfd_kernel, _slots_kernel

    best: tuple[np.ndarray, np.ndarray] | None = None
    for lean, exact_tries, triples, fit_aim in VARIANTS:
        offsets, item_g = _slots_kernel.plan(
            present, counts, capacity, k_max, lean, exact_tries, triples, fit_aim
        )
        if len(offsets) - 1 < packs:
            best, packs = (offsets, item_g), len(offsets) - 1
        if packs <= goal:
            break
    if best is None:
        return packing
    offsets, item_g = best
    fills = np.add.reduceat(present[item_g], offsets[:-1])
    group_start = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=group_start[1:])

    def ids() -> np.ndarray:
        return _slots_kernel.assign(
            item_g, group_start[:-1], _bfd_kernel.descending_order(a, present, counts)
        )

    if packs > goal and replan is not None and len(a) >= TAIL_MIN_ITEMS:
        cut = int(packs * (1 - TAIL_FRACTION))
        tail = present[item_g[offsets[cut] :]]
        rest = replan(tail)
        if cut + len(rest.offsets) - 1 < packs:
            rest_order = rest.order if rest.order is not None else rest.build()  # type: ignore[misc]
            rest_fills = (
                rest.fills if rest.fills is not None else np.add.reduceat(tail[rest_order], rest.offsets[:-1])
            )
            head = int(offsets[cut])

            def joined() -> np.ndarray:
                order = ids()
                return np.concatenate([order[:head], order[head:][rest_order]])

            return Packing(
                np.concatenate([offsets[: cut + 1], head + rest.offsets[1:]]),
                fills=np.concatenate([fills[:cut], rest_fills]),
                build=joined,
            )
    return Packing(offsets, fills=fills, build=ids)
