"""`sequential`: order-preserving next fit."""

from __future__ import annotations

import numpy as np

from packcfg.packing.planning.common import Packing


def next_fit(a: np.ndarray, capacity: int, max_per_pack: int | None) -> Packing:
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
    return Packing(np.asarray(bounds, dtype=np.int64), order=np.arange(n, dtype=np.int64))
