"""bfd's pack-eliminating post-pass: where the refinement stage's plan (planning/refine.py) is still above its
goal (LB + max(5, 0.01% LB); from 2**18 items LB), empty packs one at a time by moving their items into the
other packs' slack (packing/_eliminate_kernel.py, numba; docs/packing.md, "bfd's refinement stage").

The plan only changes where a pack is saved; a pack that cannot be emptied is restored. The work is counted in
operations (list steps, bit tests, items moved), not seconds, so the same input gives the same plan on every
machine.
"""

from __future__ import annotations

import numpy as np

from packcfg.packing.planning.common import Packing, switched_off

# operations per item (at least OPS_MIN): a few ms at 64k samples, ~50 ms at 1M (docs/planner-history.md)
OPS_PER_ITEM = 16
OPS_MIN = 1_000_000
# packs A that a swap or a gather looks at once one is found (a swap) or before giving up (a gather)
SWAP_LIMIT = 8


def enabled() -> bool:
    """Whether the post-pass may run (PACKCFG_PLANNER_ELIMINATE=off switches it off; the refinement stage,
    which it follows, already needs numba)."""
    return not switched_off("PACKCFG_PLANNER_ELIMINATE")


def eliminate(
    a: np.ndarray, capacity: int, k_max: int, packing: Packing, goal: int, budget: int | None = None
) -> Packing:
    """`packing`, or a plan of the same items with fewer packs (at most down to `goal`)."""
    from packcfg.packing import _eliminate_kernel

    if budget is None:
        budget = max(OPS_MIN, OPS_PER_ITEM * len(a))
    if packing.order is None:
        packing.order = packing.build()  # type: ignore[misc]  # kept: the planner would build it again
    order = packing.order
    result, _ = _eliminate_kernel.eliminate(
        a, order, packing.offsets, capacity, k_max, budget, goal, SWAP_LIMIT
    )
    if result is None:
        return packing
    new_order, offsets, fills = result
    return Packing(offsets, fills=fills, build=lambda: new_order)  # lazy as the plans before it (histogram)
