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
# kept: (lean, exact_tries, triples). 64k samples, packs over LB of each of the first three alone
# (bench/packing.py --per-pack-only): realistic mix at 2k with 8 per pack +136 / +12 / +70, at 4k with 16
# +1 / +15 / +15; lognormal at 2k with 8 +247 / +137 / +115, at 4k with 8 +5 / +369 / +369, at 8k with 16
# +42 / +53 / +50; 300 distinct at 2k with 4 +0 / +145 / +145. The fourth also looks for an exact triple
# where three samples are to go (16 lengths x, each with up to 1,024 exact-pair lookups): 63 distinct at 2k
# with 4 a pack +0 against +100 for the first (the whole pipeline: +56 -> +0), 600 distinct +393 -> +361.
# No one variant is best everywhere; each costs 1-4 ms at 64k samples.
VARIANTS = ((0.5, 1024, 0), (0.85, 0, 0), (0.5, 0, 0), (0.5, 1024, 16))


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
    for lean, exact_tries, triples in VARIANTS:
        offsets, item_g = _slots_kernel.plan(present, counts, capacity, k_max, lean, exact_tries, triples)
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
