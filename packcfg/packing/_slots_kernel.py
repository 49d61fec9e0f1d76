"""Compiled (numba) kernel of bfd's slot-balanced plan (`planning.slots`): packs built one at a time on the
length histogram where `max_per_pack` binds.

A pack starts with the largest item left. Its other items are chosen so that the pack holds about as many
items as the items left need per pack (items left / the packs their volume fills, plus `lean`, floored;
planning/slots.py takes -1: the pack's first item counts), and with `fit_aim` no more than the shortest items
left could put in its room (`_shortest_fit`: where fewer fit, the pack takes as many, longer ones that fill
the room, and leaves the short items to packs that can use them to fill their slots): while more than two of
those are to go, the smallest item that still lets the ones after it fill the room (room - x <= (items after
it) x the largest item that fits); with two to go, a pair that fills the room exactly where one is found among
the first `exact_tries` lengths x (y looked up by its length), else the pair that fills it best among the
first PAIR_TRIES; with one, the largest item that fits. With `triples`, where exactly three are to go, an
exact triple is looked for first: x among the `triples` lengths from the smallest that still lets the others
fill the room up, each with an exact pair. Best fit decreasing instead fills packs with the large items first
and leaves the small items, many to a pack, for packs of their own that run out of slots long before they run
out of room (docs/packing.md, "Packs with max_per_pack").

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
def _find(parent, g):  # type: ignore[no-untyped-def]
    """The root of g in a union-find array (parent[g] == g for a root), compressing the path."""
    root = g
    while parent[root] != root:
        root = parent[root]
    while parent[g] != root:
        up = parent[g]
        parent[g] = root
        g = up
    return root


@compiled
def _next(nxt, g):  # type: ignore[no-untyped-def]
    """The first non-empty group at or after g (len(nxt) - 1 where none)."""
    return _find(nxt, g)


@compiled
def _prev(prv, g):  # type: ignore[no-untyped-def]
    """The last non-empty group at or before g (-1 where none): prv is shifted by one."""
    return _find(prv, g + 1) - 1


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
def _exact_pair(values, counts, prv, by_len, room, start, tries):  # type: ignore[no-untyped-def]
    """Two items that fill `room` exactly: x ascending from group `start`, y looked up by its length (a lookup
    a length x, at most `tries`). Returns (x, y) or (-1, -1)."""
    x = start
    n_try = 0
    while x >= 0 and 2 * values[x] <= room and n_try < tries:
        n_try += 1
        if counts[x] > 0:  # (a group _exact_triple holds its x from may be empty for the moment)
            y = by_len[room - values[x]]
            if y >= 0 and counts[y] > (1 if y == x else 0):
                return x, y
        x = _prev(prv, x - 1) if x > 0 else -1
    return -1, -1


@compiled
def _best_pair(values, counts, nxt, prv, room, start, least):  # type: ignore[no-untyped-def]
    """The two items that fill `room` best, more than `least`, among the first PAIR_TRIES lengths x ascending
    from group `start`, y the largest length <= room - x (x itself only where two are left). Returns (x, y)
    or (-1, -1)."""
    n = values.shape[0]
    best = least
    bx = -1
    by = -1
    x = start
    n_try = 0
    while x >= 0 and 2 * values[x] <= room and n_try < PAIR_TRIES:
        n_try += 1
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
    return bx, by


@compiled
def _exact_triple(values, counts, prv, by_len, room, first, last, triples, tries):  # type: ignore[no-untyped-def]
    """Three items that fill `room` exactly: x from group `first` up in length (not past group `last`, the
    longest that fits), at most `triples` of them, each with an exact pair for the rest (_exact_pair from the
    shortest length, at most `tries` lookups). Returns (x, y, z) or (-1, -1, -1)."""
    n = values.shape[0]
    x = first
    n_try = 0
    while x >= last and n_try < triples:
        n_try += 1
        counts[x] -= 1  # x is taken while its pair is looked for
        y, z = _exact_pair(values, counts, prv, by_len, room - values[x], _prev(prv, n - 1), tries)
        counts[x] += 1
        if y >= 0:
            return x, y, z
        x = _prev(prv, x - 1) if x > 0 else -1
    return -1, -1, -1


@compiled
def _shortest_fit(values, counts, prv, room, most):  # type: ignore[no-untyped-def]
    """How many of the shortest items left fit in `room` together, at most `most` (values descending, so the
    shortest group is the last non-empty one)."""
    n = values.shape[0]
    fit = 0
    total = 0
    g = _prev(prv, n - 1)
    while g >= 0 and fit < most:
        take = min(counts[g], most - fit)
        if total + take * values[g] > room:
            return fit + (room - total) // values[g]  # values[g] > 0: else every take fits
        fit += take
        total += take * values[g]
        g = _prev(prv, g - 1) if g > 0 else -1
    return fit


@compiled
def _plan(values, counts, capacity, k_max, item_g, offsets, lean, exact_tries, triples, fit_aim):  # type: ignore[no-untyped-def]
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
    chosen = np.empty(3, dtype=np.int64)  # the items the next step takes
    pos = 0
    packs = 0
    offsets[0] = 0
    while n_left > 0:
        room = capacity
        slots = k_max
        aim = 0
        first = True
        while slots > 0 and n_left > 0:
            g_max = _next(nxt, _first_le(values, room))
            if g_max == n:
                break
            largest = values[g_max]
            chosen[0] = g_max
            n_chosen = 1
            if first:
                pass  # a pack starts with the largest item left
            elif aim <= 1 or slots == 1:
                pass  # the largest item that fits
            elif aim > 2 and slots > 2:
                # the smallest length >= lo, so that the aim - 1 items after it can still fill the room
                lo = room - (aim - 1) * largest
                if lo < 1:
                    lo = 1
                g_lo = _first_le(values, lo - 1) - 1  # the last group with a length >= lo
                if g_lo >= 0:
                    g_small = _prev(prv, g_lo)
                    if g_small >= g_max:
                        chosen[0] = g_small
                if triples > 0 and exact_tries > 0 and aim == 3 and chosen[0] != g_max:
                    x, y, z = _exact_triple(
                        values, counts, prv, by_len, room, chosen[0], g_max, triples, exact_tries
                    )
                    if x >= 0:
                        chosen[0] = x
                        chosen[1] = y
                        chosen[2] = z
                        n_chosen = 3
            else:
                # two to go: every x <= room - largest pairs with the largest item, so of those only the
                # longest counts: the search starts there (dense lengths with room to spare cost a scan of
                # every length else)
                g_a = _first_le(values, room - largest)
                start = _next(nxt, g_a) if g_a < n else n
                if start == n:
                    start = _prev(prv, n - 1)
                x, y = _exact_pair(values, counts, prv, by_len, room, start, exact_tries)
                if x < 0:
                    x, y = _best_pair(values, counts, nxt, prv, room, start, largest)
                if x >= 0:
                    chosen[0] = x
                    chosen[1] = y
                    n_chosen = 2
            for j in range(n_chosen):
                g = chosen[j]
                _take(counts, nxt, prv, g)
                item_g[pos] = g
                pos += 1
                n_left -= 1
                v_left -= values[g]
                room -= values[g]
            slots -= n_chosen
            aim -= n_chosen
            if first:
                first = False
                # the items this pack aims at besides its first: the items left per pack their volume fills,
                # + lean (planning/slots.py: -1, so that the pack holds that many with its first)
                if n_left > 0:
                    aim = int(n_left / max(1.0, v_left / capacity) + lean)
                    if aim < 1:
                        aim = 1
                    if aim > slots:
                        aim = slots
                    if fit_aim:
                        fit = _shortest_fit(values, counts, prv, room, aim)
                        if fit < aim:
                            aim = fit if fit > 0 else 1
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
    fit_aim: bool = True,
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
        values,
        left,
        int(capacity),
        int(k_max),
        item_g,
        offsets,
        float(lean),
        int(exact_tries),
        int(triples),
        bool(fit_aim),
    )
    return offsets[: packs + 1].copy(), item_g


def assign(item_g: np.ndarray, group_start: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """The item order of the plan: ids from idx (items in decreasing-length order)."""
    order = np.empty(len(item_g), dtype=np.int64)
    _assign(item_g, np.ascontiguousarray(group_start, dtype=np.int64), np.ascontiguousarray(idx), order)
    return order
