"""`ffd` and `first_fit_shuffle`: first fit in a given item order over a max segment tree of open packs."""

from __future__ import annotations

import numpy as np

from packcfg.packing.planning.common import Packing, from_groups


def first_fit(a: np.ndarray, idx: np.ndarray, capacity: int, max_per_pack: int | None) -> Packing:
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
    return from_groups([np.asarray(m, dtype=np.int64) for m in members])


def _max_tree(remaining: list[int], counts: list[int], k_max: int, size: int) -> list[int]:
    tree = [-1] * (2 * size)
    for p, (r, c) in enumerate(zip(remaining, counts, strict=True)):
        tree[size + p] = r if c < k_max else -1
    for i in range(size - 1, 0, -1):
        tree[i] = max(tree[2 * i], tree[2 * i + 1])
    return tree
