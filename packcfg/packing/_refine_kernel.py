"""Compiled (numba) kernel of bfd's refinement stage (`planning.refine`): minimum bin slack on the length
histogram, each pattern applied with multiplicity.

A pack starts with the largest item left; the rest of it is filled by a bounded subset sum over the items
left (exact when the histogram allows), and that pattern (how many items of each length) is applied to as
many packs as the counts allow. The stage stops at the first pattern that would spend more than the waste
budget, that would hold more than `k_max` items, or once the work budget (DP cells) is spent; what is left
goes to best fit. Plain Python runs the same code (without numba it is not used: too slow to be worth it).
"""

from __future__ import annotations

from typing import Any

import numpy as np

try:  # numba is optional: without it the refinement stage is skipped
    import numba as _nb

    HAVE_NUMBA = True
except Exception:  # pragma: no cover - exercised where numba is absent
    _nb = None
    HAVE_NUMBA = False


def compiled(fn: Any) -> Any:
    if HAVE_NUMBA:
        return _nb.njit(cache=True, nogil=True)(fn)
    return fn


@compiled
def _patterns(values, counts, capacity, k_max, waste_budget, work_budget, pat_k, pat_end, ent_g, ent_n):  # type: ignore[no-untyped-def]
    """Minimum bin slack over the histogram (values descending, counts). Fills pat_k (packs per pattern),
    pat_end (end of each pattern's entries), ent_g / ent_n (group and items per pack); `counts` ends as
    what is left. Returns (patterns, entries, packs, waste)."""
    n_groups = values.shape[0]
    room_max = capacity
    reach = np.zeros(room_max + 1, dtype=np.int64)  # stamp of the DP that reached a sum
    used = np.zeros(room_max + 1, dtype=np.int64)  # copies of par[s] on the way to s
    par = np.zeros(room_max + 1, dtype=np.int64)  # group of the last item on the way to s
    need = np.zeros(n_groups, dtype=np.int64)  # items per pack of each group in the pattern (0 between)
    touched = np.empty(capacity + 2, dtype=np.int64)  # the pattern's groups, ascending
    n_pat = 0
    n_ent = 0
    packs = 0
    waste = 0
    work = 0
    stamp = 0
    top = 0
    while True:
        while top < n_groups and counts[top] == 0:
            top += 1
        if top == n_groups or work >= work_budget or n_pat == pat_k.shape[0]:
            break
        counts[top] -= 1
        room = capacity - values[top]
        stamp += 1
        reach[0] = stamp
        best = 0
        # the first group that fits the room (values descend): a bisection, not a scan
        lo = top
        hi = n_groups
        while lo < hi:
            mid = (lo + hi) >> 1
            if values[mid] > room:
                lo = mid + 1
            else:
                hi = mid
        work += 64
        for g in range(lo, n_groups):
            c = counts[g]
            v = values[g]
            work += 1
            if c == 0 or v == 0:
                continue
            # sums above best + c * v cannot be reached with this group's c copies
            hi = best + c * v
            if hi > room:
                hi = room
            work += hi - v + 1
            for s in range(v, hi + 1):
                if reach[s] != stamp and reach[s - v] == stamp:
                    u = 1
                    if s > v and par[s - v] == g:
                        u = used[s - v] + 1
                    if u <= c:
                        reach[s] = stamp
                        used[s] = u
                        par[s] = g
                        if s > best:
                            best = s
            if best == room:
                break
        counts[top] += 1
        slack = room - best
        if waste + slack > waste_budget:
            break
        # the pattern: the top item, then the DP's path back from `best`; its groups kept ascending
        n_touch = 1
        touched[0] = top
        need[top] = 1
        items = 1
        s = best
        while s > 0:
            g = par[s]
            if need[g] == 0:
                j = n_touch
                while j > 0 and touched[j - 1] > g:
                    touched[j] = touched[j - 1]
                    j -= 1
                touched[j] = g
                n_touch += 1
            need[g] += 1
            items += 1
            s -= values[g]
        work += items
        k = counts[top]
        for j in range(n_touch):
            g = touched[j]
            kk = counts[g] // need[g]
            if kk < k:
                k = kk
        if slack > 0:
            k = min(k, (waste_budget - waste) // slack)
        if items > k_max or n_ent + n_touch > ent_g.shape[0]:
            for j in range(n_touch):
                need[touched[j]] = 0
            break
        for j in range(n_touch):
            g = touched[j]
            counts[g] -= k * need[g]
            ent_g[n_ent + j] = g
            ent_n[n_ent + j] = need[g]
            need[g] = 0
        n_ent += n_touch
        pat_k[n_pat] = k
        pat_end[n_pat] = n_ent
        n_pat += 1
        packs += k
        waste += k * slack
    return n_pat, n_ent, packs, waste, work


@compiled
def _assign(pat_k, pat_end, ent_g, ent_n, group_start, idx, order, per_pack, fills, values, taken):  # type: ignore[no-untyped-def]
    """Write the patterns' packs: item ids (from idx, items in decreasing-length order, each group's first
    items first) into order, pack sizes and fills; taken[g] counts what each group gave."""
    pos = 0
    p = 0
    e0 = 0
    for j in range(pat_k.shape[0]):
        e1 = pat_end[j]
        for _ in range(pat_k[j]):
            size = 0
            fill = 0
            for e in range(e0, e1):
                g = ent_g[e]
                for _ in range(ent_n[e]):
                    order[pos] = idx[group_start[g] + taken[g]]
                    taken[g] += 1
                    pos += 1
                    size += 1
                    fill += values[g]
            per_pack[p] = size
            fills[p] = fill
            p += 1
        e0 = e1
    return pos


def patterns(
    values: np.ndarray, counts: np.ndarray, capacity: int, k_max: int, waste_budget: int, work_budget: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, int, int, int]:
    """Run minimum bin slack on the histogram. Returns (pat_k, pat_end, ent_g, ent_n, left, packs, waste,
    work): the patterns, their multiplicities, what is left of each group, and the DP cells spent."""
    values = np.ascontiguousarray(values, dtype=np.int64)
    left = np.array(counts, dtype=np.int64)
    n = len(values)
    # a pattern exhausts at least one group or ends the stage; each holds at most one entry per group
    pat_k = np.empty(n + 1, dtype=np.int64)
    pat_end = np.empty(n + 1, dtype=np.int64)
    ent_g = np.empty(min(n * (n + 1), 64 * (n + 1)) + 1, dtype=np.int64)  # the stage stops when full
    ent_n = np.empty_like(ent_g)
    n_pat, n_ent, packs, waste, work = _patterns(
        values,
        left,
        int(capacity),
        int(k_max),
        int(waste_budget),
        int(work_budget),
        pat_k,
        pat_end,
        ent_g,
        ent_n,
    )
    return (
        pat_k[:n_pat],
        pat_end[:n_pat],
        ent_g[:n_ent],
        ent_n[:n_ent],
        left,
        int(packs),
        int(waste),
        int(work),
    )


def assign(
    pat_k: np.ndarray,
    pat_end: np.ndarray,
    ent_g: np.ndarray,
    ent_n: np.ndarray,
    group_start: np.ndarray,
    idx: np.ndarray,
    values: np.ndarray,
    packs: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(order, per_pack, fills, taken) of the patterns' packs."""
    items = int(
        sum(int(k) * int(ent_n[(pat_end[j - 1] if j else 0) : pat_end[j]].sum()) for j, k in enumerate(pat_k))
    )
    order = np.empty(items, dtype=np.int64)
    per_pack = np.empty(packs, dtype=np.int64)
    fills = np.empty(packs, dtype=np.int64)
    taken = np.zeros(len(values), dtype=np.int64)
    _assign(
        pat_k,
        pat_end,
        ent_g,
        ent_n,
        group_start,
        np.ascontiguousarray(idx, dtype=np.int64),
        order,
        per_pack,
        fills,
        np.ascontiguousarray(values, dtype=np.int64),
        taken,
    )
    return order, per_pack, fills, taken
