"""Compiled (numba) kernel of bfd's slot-balanced plan (`planning.slots`): packs built one at a time on the
length histogram where `max_per_pack` binds.

A pack starts with the largest item left. Its other items are chosen so that the pack holds about as many
items as the items left need per pack (items left / the packs their volume fills, plus `lean`, floored;
planning/slots.py runs a few values): while more than two of those are to go, the smallest item that still
lets the ones after it fill the room (room - x <= (items after it) x the largest item that fits); with two to
go, a pair that fills the room exactly where one is found among the first `exact_tries` lengths x (y looked up
by its length), else the pair that fills it best among the first PAIR_TRIES; with one, the largest item that
fits. With `triples`, where exactly three are to go, an exact triple is looked for first: x among the
`triples` lengths from the smallest that still lets the others fill the room up, each with an exact pair. Best fit decreasing instead fills packs with the large items first and leaves the small items, many to a
pack, for packs of their own that run out of slots long before they run out of room (docs/packing.md, "Packs
with max_per_pack").

Groups are the histogram's distinct lengths, descending; emptied groups are skipped through two union-find
arrays (the next non-empty group at or after g, the previous at or before g).
"""

from __future__ import annotations

import numpy as np

# without numba the slot-balanced plan is skipped
from packcfg.packing._bfd_kernel import HAVE_NUMBA, compiled

__all__ = ["HAVE_NUMBA", "assign", "plan"]


# lengths x the best-pair search tries a pack (each with a bisection for the largest y <= room - x): 64k
# samples, realistic mix at 2k with 8 per pack, 7.4 ms with no limit, 4.5 ms with 64 (same packs), 2.5 ms
# with 16 (+10 packs of 14,717)
PAIR_TRIES = 32
# the exact-pair lookup keeps a word per length up to the capacity: above this capacity it is not made
LOOKUP_MAX_CAPACITY = 1 << 22


@compiled
def _next(nxt, g):  # type: ignore[no-untyped-def]
    """The first non-empty group at or after g (len(nxt) - 1 where none), compressing the path."""
    root = g
    while nxt[root] != root:
        root = nxt[root]
    while nxt[g] != root:
        up = nxt[g]
        nxt[g] = root
        g = up
    return root


@compiled
def _prev(prv, g):  # type: ignore[no-untyped-def]
    """The last non-empty group at or before g, as index + 1 (0 where none): prv is shifted by one."""
    g += 1
    root = g
    while prv[root] != root:
        root = prv[root]
    while prv[g] != root:
        up = prv[g]
        prv[g] = root
        g = up
    return root - 1


@compiled
def _first_le(values, r):  # type: ignore[no-untyped-def]
    """The first group whose length is <= r (values descending; len(values) where none)."""
    lo = 0
    hi = values.shape[0]
    while lo < hi:
        mid = (lo + hi) >> 1
        if values[mid] > r:
            lo = mid + 1
        else:
            hi = mid
    return lo


@compiled
def _take(counts, nxt, prv, g):  # type: ignore[no-untyped-def]
    counts[g] -= 1
    if counts[g] == 0:
        nxt[g] = g + 1
        prv[g + 1] = g


@compiled
def _plan(values, counts, capacity, k_max, item_g, offsets, lean, exact_tries, triples):  # type: ignore[no-untyped-def]
    """Fill item_g (each item's group, pack after pack) and offsets; return the packs."""
    n = values.shape[0]
    if exact_tries > 0:  # each length's group, -1 where none, for the exact-pair lookup
        by_len = np.full(capacity + 1, -1, dtype=np.int64)
        for g in range(n):
            by_len[values[g]] = g
    else:
        by_len = np.full(1, -1, dtype=np.int64)
    nxt = np.arange(n + 1)
    prv = np.arange(n + 1)  # prv[g + 1]: group g; prv[0]: none
    for g in range(n):
        if counts[g] == 0:
            nxt[g] = g + 1
            prv[g + 1] = g
    n_left = 0
    v_left = 0
    for g in range(n):
        n_left += counts[g]
        v_left += counts[g] * values[g]
    pos = 0
    packs = 0
    offsets[0] = 0
    while n_left > 0:
        top = _next(nxt, 0)
        _take(counts, nxt, prv, top)
        item_g[pos] = top
        pos += 1
        n_left -= 1
        v_left -= values[top]
        room = capacity - values[top]
        slots = k_max - 1
        # the items this pack aims at besides its first: the items left per pack their volume fills, + lean
        aim = 0
        if n_left > 0:
            per = n_left / max(1.0, v_left / capacity)
            aim = int(per + lean)
            if aim < 1:
                aim = 1
            if aim > slots:
                aim = slots
        while slots > 0 and n_left > 0:
            g_max = _next(nxt, _first_le(values, room))
            if g_max == n:
                break
            largest = values[g_max]
            g = g_max
            if aim <= 1 or slots == 1:
                pass  # the largest item that fits
            elif aim > 2 and slots > 2:
                lo = room - (aim - 1) * largest
                if lo < 1:
                    lo = 1
                # the smallest length >= lo: the last group with a length >= lo, then the previous non-empty
                g_lo = _first_le(values, lo - 1) - 1
                if g_lo >= 0:
                    g_small = _prev(prv, g_lo)
                    if g_small >= g_max:
                        g = g_small
                if triples > 0 and exact_tries > 0 and aim == 3 and g != g_max:
                    # three to go: an exact triple x <= y <= z, x from the smallest length >= lo up
                    x = g
                    found = False
                    tx = 0
                    while x >= g_max and tx < triples and not found:
                        tx += 1
                        r2 = room - values[x]
                        counts[x] -= 1
                        y = _prev(prv, n - 1)
                        ty = 0
                        while y >= 0 and 2 * values[y] <= r2 and ty < exact_tries:
                            ty += 1
                            if counts[y] > 0:
                                gz = by_len[r2 - values[y]]
                                if gz >= 0 and counts[gz] > (1 if gz == y else 0):
                                    counts[x] += 1
                                    for gg in (x, y, gz):
                                        _take(counts, nxt, prv, gg)
                                        item_g[pos] = gg
                                        pos += 1
                                        n_left -= 1
                                        v_left -= values[gg]
                                        room -= values[gg]
                                    slots -= 3
                                    aim -= 3
                                    found = True
                                    break
                            y = _prev(prv, y - 1) if y > 0 else -1
                        if not found:
                            counts[x] += 1
                            x = _prev(prv, x - 1) if x > 0 else -1
                    if found:
                        continue
            else:
                # two to go: x ascending, y the largest length <= room - x (x itself only where two are left)
                best = largest
                bx = -1
                by = -1
                # every x <= room - largest pairs with the largest item, so of those only the longest counts:
                # the scan starts there (dense lengths with room to spare cost a scan of every length else)
                g_a = _first_le(values, room - largest)
                start = _next(nxt, g_a) if g_a < n else n
                if start == n:
                    start = _prev(prv, n - 1)
                # an exact pair first, y looked up by its length (a lookup a length x)
                x = start
                tries = 0
                while x >= 0 and 2 * values[x] <= room and tries < exact_tries:
                    tries += 1
                    gy = by_len[room - values[x]]
                    if gy >= 0 and counts[gy] > (1 if gy == x else 0):
                        best = room
                        bx = x
                        by = gy
                        break
                    x = _prev(prv, x - 1) if x > 0 else -1
                # else the pair that fills the room best among the first PAIR_TRIES lengths x
                x = start if bx < 0 else -1
                tries = 0
                while x >= 0 and 2 * values[x] <= room and tries < PAIR_TRIES:
                    tries += 1
                    y = _next(nxt, _first_le(values, room - values[x]))
                    if y == x and counts[x] < 2:
                        y = _next(nxt, x + 1)
                    if y < n and values[y] >= values[x] and (y != x or counts[x] >= 2):
                        total = values[x] + values[y]
                        if total > best:
                            best = total
                            bx = x
                            by = y
                            if total == room:
                                break
                    x = _prev(prv, x - 1) if x > 0 else -1
                if bx >= 0:
                    _take(counts, nxt, prv, bx)
                    _take(counts, nxt, prv, by)
                    item_g[pos] = bx
                    item_g[pos + 1] = by
                    pos += 2
                    n_left -= 2
                    v_left -= values[bx] + values[by]
                    room -= values[bx] + values[by]
                    slots -= 2
                    aim -= 2
                    continue
            _take(counts, nxt, prv, g)
            item_g[pos] = g
            pos += 1
            n_left -= 1
            v_left -= values[g]
            room -= values[g]
            slots -= 1
            aim -= 1
        packs += 1
        offsets[packs] = pos
    return packs


@compiled
def _assign(item_g, group_start, idx, order):  # type: ignore[no-untyped-def]
    """Item ids for item_g: each group's items in decreasing-length order (idx), first ones first."""
    taken = np.zeros(group_start.shape[0], dtype=np.int64)
    for i in range(item_g.shape[0]):
        g = item_g[i]
        order[i] = idx[group_start[g] + taken[g]]
        taken[g] += 1


def plan(
    values: np.ndarray,
    counts: np.ndarray,
    capacity: int,
    k_max: int,
    lean: float,
    exact_tries: int,
    triples: int = 0,
) -> tuple[np.ndarray, np.ndarray]:
    """(offsets, item_g): the slot-balanced packs of the histogram (values descending), each item as its
    group."""
    values = np.ascontiguousarray(values, dtype=np.int64)
    left = np.array(counts, dtype=np.int64)
    n_items = int(left.sum())
    item_g = np.empty(n_items, dtype=np.int64)
    offsets = np.empty(n_items + 1, dtype=np.int64)
    if capacity > LOOKUP_MAX_CAPACITY:
        exact_tries = 0  # the lookup table would hold a word per token of capacity
    packs = _plan(
        values, left, int(capacity), int(k_max), item_g, offsets, float(lean), int(exact_tries), int(triples)
    )
    return offsets[: packs + 1].copy(), item_g


def assign(item_g: np.ndarray, group_start: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """The item order of the plan: ids from idx (items in decreasing-length order)."""
    order = np.empty(len(item_g), dtype=np.int64)
    _assign(item_g, np.ascontiguousarray(group_start, dtype=np.int64), np.ascontiguousarray(idx), order)
    return order
