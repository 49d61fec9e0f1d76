"""DPO: each (chosen, rejected) pair is planned as one unit and expanded back to two adjacent items."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from packcfg.packing.planning.common import Packing, PlanError


def plan_pairs(
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
    dispatch: Callable[..., Packing],
) -> tuple[Packing, np.ndarray]:
    """Plan each (chosen, rejected) pair as one unit with `dispatch` (the planner's algorithm switch), then
    expand it back to two adjacent items."""
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
    units = dispatch(algorithm, unit_len, capacity, unit_max, seed, None, None, 64)
    order_u = units.order if units.order is not None else units.build()  # type: ignore[misc]
    order = np.empty(2 * len(order_u), dtype=np.int64)
    order[0::2] = first[order_u]
    order[1::2] = second[order_u]
    pair_of = np.full(len(item_sample), -1, dtype=np.int64)
    pair_of[first] = second
    pair_of[second] = first
    return Packing(units.offsets * 2, order=order, fills=units.fills), pair_of
