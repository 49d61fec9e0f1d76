"""Compiled (numba) kernel of bfd's pack-eliminating post-pass (`planning.eliminate`): on a finished plan, take
the loosest pack's items out and put each back into the other packs, moving slack between packs by swaps
where no pack has room (an ejection chain in the spirit of Fleszar and Charalambous, and of Buljubasic and
Vasquez's consistent neighbourhood search); where every item finds a place, one pack is saved, else the
pack is restored as it was.

An item x is placed by, in order:

- insertion into the pack with the least slack >= x (best fit);
- a swap through two packs: pack A (slack s_A < x) gives an item a to pack B (slack s_B) and takes a smaller
  item b from B, with x - s_A <= a - b <= s_B, and then holds x (the pair with the least slack left in B);
- gathering: 1-1 swaps into one pack A, each moving a few tokens of slack from another pack into A (A gives a,
  takes b = a - d from a pack with slack >= d), until A has room for x.

The packs to empty are taken in order of their largest item, smallest first (a pack of small items is the one
whose items can find room in slack of a few tokens), the loosest first among equals.

State: each pack's items in a doubly linked list; packs bucketed by slack class (min(slack, CLASSES - 1));
for every (length, slack class) the items of that length in packs of that class, in a doubly linked list,
and per length a 64-bit mask of the classes that hold one, so that "a pack with slack >= d holding an item
of length v" is a shift and a count of trailing zeros. Work is counted in operations, not seconds, so the
same input gives the same plan on every machine. Plain Python runs the same code (without numba it is not
used: too slow to be worth it).
"""

from __future__ import annotations

import numpy as np

# numba is optional: without it the post-pass is skipped (as the refinement stage is)
from packcfg.packing._bfd_kernel import HAVE_NUMBA as HAVE_NUMBA
from packcfg.packing._bfd_kernel import compiled, ctz

# slack classes: 0 .. CLASSES - 2 exact, CLASSES - 1 for every slack from there up (a bit each in a uint64)
CLASSES = 64
# packs A a swap looks at, per SWAP_LIMIT (planning/eliminate.py)
SCAN = 64
# item fields (rows of `it`) and pack fields (rows of `pk`)
I_PACK, I_NEXT, I_PREV, I_CNEXT, I_CPREV = 0, 1, 2, 3, 4
P_HEAD, P_TAIL, P_COUNT, P_FILL, P_BNEXT, P_BPREV, P_CLASS = 0, 1, 2, 3, 4, 5, 6


@compiled
def _class_unlink(it, chead, gmask, gid, a, i, c):  # type: ignore[no-untyped-def]
    g = gid[a[i]]
    nx = it[I_CNEXT, i]
    pv = it[I_CPREV, i]
    if pv >= 0:
        it[I_CNEXT, pv] = nx
    else:
        chead[g * CLASSES + c] = nx
        if nx < 0:
            gmask[g] &= ~(np.uint64(1) << np.uint64(c))
    if nx >= 0:
        it[I_CPREV, nx] = pv


@compiled
def _class_link(it, chead, gmask, gid, a, i, c):  # type: ignore[no-untyped-def]
    g = gid[a[i]]
    h = chead[g * CLASSES + c]
    it[I_CNEXT, i] = h
    it[I_CPREV, i] = -1
    if h >= 0:
        it[I_CPREV, h] = i
    chead[g * CLASSES + c] = i
    gmask[g] |= np.uint64(1) << np.uint64(c)


@compiled
def _bucket_unlink(pk, bhead, p):  # type: ignore[no-untyped-def]
    c = pk[P_CLASS, p]
    nx = pk[P_BNEXT, p]
    pv = pk[P_BPREV, p]
    if pv >= 0:
        pk[P_BNEXT, pv] = nx
    else:
        bhead[c] = nx
    if nx >= 0:
        pk[P_BPREV, nx] = pv
    pk[P_CLASS, p] = -1


@compiled
def _bucket_link(pk, bhead, p, c):  # type: ignore[no-untyped-def]
    h = bhead[c]
    pk[P_BNEXT, p] = h
    pk[P_BPREV, p] = -1
    if h >= 0:
        pk[P_BPREV, h] = p
    bhead[c] = p
    pk[P_CLASS, p] = c


@compiled
def _slack_class(capacity, fill):  # type: ignore[no-untyped-def]
    s = capacity - fill
    if s < 0:
        return 0
    return s if s < CLASSES - 1 else CLASSES - 1


@compiled
def _refresh(it, pk, chead, gmask, bhead, gid, a, capacity, p):  # type: ignore[no-untyped-def]
    """Pack p's fill changed: move it, and its items, to its new slack class. Returns the operations spent."""
    c_old = pk[P_CLASS, p]
    c_new = _slack_class(capacity, pk[P_FILL, p])
    if c_new == c_old:
        return 1
    _bucket_unlink(pk, bhead, p)
    _bucket_link(pk, bhead, p, c_new)
    ops = 1
    i = pk[P_HEAD, p]
    while i >= 0:
        _class_unlink(it, chead, gmask, gid, a, i, c_old)
        _class_link(it, chead, gmask, gid, a, i, c_new)
        i = it[I_NEXT, i]
        ops += 1
    return ops


@compiled
def _remove(it, pk, chead, gmask, gid, a, i):  # type: ignore[no-untyped-def]
    """Take item i out of its pack (the pack's class is refreshed by the caller)."""
    p = it[I_PACK, i]
    _class_unlink(it, chead, gmask, gid, a, i, pk[P_CLASS, p])
    nx = it[I_NEXT, i]
    pv = it[I_PREV, i]
    if pv >= 0:
        it[I_NEXT, pv] = nx
    else:
        pk[P_HEAD, p] = nx
    if nx >= 0:
        it[I_PREV, nx] = pv
    else:
        pk[P_TAIL, p] = pv
    pk[P_COUNT, p] -= 1
    pk[P_FILL, p] -= a[i]
    it[I_PACK, i] = -1


@compiled
def _add(it, pk, chead, gmask, gid, a, i, p):  # type: ignore[no-untyped-def]
    """Put item i at the end of pack p (the pack's class is refreshed by the caller)."""
    t = pk[P_TAIL, p]
    it[I_PREV, i] = t
    it[I_NEXT, i] = -1
    if t >= 0:
        it[I_NEXT, t] = i
    else:
        pk[P_HEAD, p] = i
    pk[P_TAIL, p] = i
    pk[P_COUNT, p] += 1
    pk[P_FILL, p] += a[i]
    it[I_PACK, i] = p
    _class_link(it, chead, gmask, gid, a, i, pk[P_CLASS, p])


@compiled
def _move(it, pk, chead, gmask, bhead, gid, a, capacity, i, p, log_item, log_from, n_log):  # type: ignore[no-untyped-def]
    """Item i (in a pack or in transit) to pack p, the move logged for a restore. Returns (moves logged, ops)."""
    q = it[I_PACK, i]
    log_item[n_log] = i
    log_from[n_log] = q
    ops = 0
    if q >= 0:
        _remove(it, pk, chead, gmask, gid, a, i)
        ops += _refresh(it, pk, chead, gmask, bhead, gid, a, capacity, q)
    _add(it, pk, chead, gmask, gid, a, i, p)
    ops += _refresh(it, pk, chead, gmask, bhead, gid, a, capacity, p)
    return n_log + 1, ops


@compiled
def _swap(it, pk, chead, gmask, bhead, gid, a, capacity, i, j, log_item, log_from, n_log):  # type: ignore[no-untyped-def]
    """Items i and j trade packs (j's first), both moves logged. Returns (moves logged, ops)."""
    p = it[I_PACK, i]
    q = it[I_PACK, j]
    n_log, ops = _move(it, pk, chead, gmask, bhead, gid, a, capacity, j, p, log_item, log_from, n_log)
    n_log, spent = _move(it, pk, chead, gmask, bhead, gid, a, capacity, i, q, log_item, log_from, n_log)
    return n_log, ops + spent


@compiled
def _insert_target(pk, bhead, capacity, k_max, x):  # type: ignore[no-untyped-def]
    """The pack with the least slack >= x and room for one more item (-1 if none), and the operations spent."""
    ops = 0
    c = x if x < CLASSES - 1 else CLASSES - 1
    while c < CLASSES:
        best = -1
        best_slack = capacity + 1
        p = bhead[c]
        while p >= 0:
            ops += 1
            s = capacity - pk[P_FILL, p]
            if s >= x and s < best_slack and pk[P_COUNT, p] < k_max:
                best = p
                best_slack = s
                if c < CLASSES - 1:
                    break  # an exact class: every pack in it has this slack
            p = pk[P_BNEXT, p]
        if best >= 0:
            return best, ops
        c += 1
    return -1, ops


@compiled
def _swap_target(it, pk, chead, gmask, bhead, gid, a, capacity, k_max, x, limit):  # type: ignore[no-untyped-def]
    """A swap that makes room for x: (pack A, item a of A, item b of pack B, operations), a = -1 if none.
    A has slack s_A in [1, x - 1] (looser packs first) and room for one more item; a - b in [x - s_A, s_B];
    the pair that leaves B the least slack, looking at no more than `limit` packs A once one is found."""
    ops = 0
    best_a = -1
    best_b = -1
    best_p = -1
    best_left = capacity + 1
    seen = 0
    looked = 0
    c = x - 1 if x - 1 < CLASSES - 1 else CLASSES - 1
    while c >= 1:
        p = bhead[c]
        while p >= 0:
            s_a = capacity - pk[P_FILL, p]
            ops += 1
            looked += 1
            if looked > SCAN * limit:
                return best_p, best_a, best_b, ops
            if s_a < x and pk[P_COUNT, p] < k_max and x - s_a < CLASSES:
                i = pk[P_HEAD, p]
                while i >= 0:
                    av = a[i]
                    d_hi = av - 1 if av - 1 < CLASSES - 1 else CLASSES - 1
                    d = x - s_a
                    while d <= d_hi:
                        ops += 1
                        gb = gid[av - d]
                        if gb >= 0:
                            m = gmask[gb] >> np.uint64(d)
                            while m:
                                cb = d + ctz(m)
                                left = cb - d if cb < CLASSES - 1 else capacity  # class CLASSES - 1: unknown
                                if left >= best_left:
                                    break
                                j = chead[gb * CLASSES + cb]
                                while j >= 0 and it[I_PACK, j] == p:
                                    j = it[I_CNEXT, j]
                                    ops += 1
                                if j >= 0:
                                    best_a = i
                                    best_b = j
                                    best_p = p
                                    best_left = left
                                    break
                                m &= ~(np.uint64(1) << np.uint64(cb - d))
                        if best_left == 0:
                            return best_p, best_a, best_b, ops
                        d += 1
                    i = it[I_NEXT, i]
                if best_p >= 0:
                    seen += 1
                    if seen >= limit:
                        return best_p, best_a, best_b, ops
            p = pk[P_BNEXT, p]
        c -= 1
    return best_p, best_a, best_b, ops


@compiled
def _gather(it, pk, chead, gmask, bhead, gid, a, capacity, k_max, x, log_item, log_from, n_log, tries):  # type: ignore[no-untyped-def]
    """Make room for x in a pack A with slack < x (and room for one more item) by 1-1 swaps that each move
    slack into A: A gives an item a and takes b = a - d from a pack B with slack >= d (the largest d first,
    at most what A still lacks). A: the loosest packs of two items or more, up to `tries` of them. Returns
    (A, or -1 where none reaches x; moves logged, operations)."""
    ops = 0
    c = x - 1 if x - 1 < CLASSES - 1 else CLASSES - 1
    n_tries = 0
    while c >= 1 and n_tries < tries:
        p = bhead[c]
        while p >= 0 and n_tries < tries:
            ops += 1
            nxt = pk[P_BNEXT, p]
            if capacity - pk[P_FILL, p] < x and pk[P_COUNT, p] < k_max and pk[P_COUNT, p] >= 2:
                n_tries += 1
                n_log, spent, ok = _gather_into(
                    it, pk, chead, gmask, bhead, gid, a, capacity, x, p, log_item, log_from, n_log
                )
                ops += spent
                if ok:
                    return p, n_log, ops
            p = nxt
        c -= 1
    return -1, n_log, ops


@compiled
def _gather_into(it, pk, chead, gmask, bhead, gid, a, capacity, x, p, log_item, log_from, n_log):  # type: ignore[no-untyped-def]
    """_gather's swaps into pack p: (moves logged, operations, whether p now has slack >= x)."""
    ops = 0
    while capacity - pk[P_FILL, p] < x:
        need = x - (capacity - pk[P_FILL, p])
        found = False
        d = need if need < CLASSES - 1 else CLASSES - 1
        while d >= 1 and not found:
            i = pk[P_HEAD, p]
            while i >= 0:
                ops += 1
                av = a[i]
                if av > d:
                    gb = gid[av - d]
                    if gb >= 0:
                        m = gmask[gb] >> np.uint64(d)
                        while m:
                            cb = d + ctz(m)
                            j = chead[gb * CLASSES + cb]
                            while j >= 0 and it[I_PACK, j] == p:
                                j = it[I_CNEXT, j]
                                ops += 1
                            if j >= 0:  # i (in p) gives a, takes b = a - d: d tokens of slack into p
                                n_log, spent = _swap(
                                    it,
                                    pk,
                                    chead,
                                    gmask,
                                    bhead,
                                    gid,
                                    a,
                                    capacity,
                                    i,
                                    j,
                                    log_item,
                                    log_from,
                                    n_log,
                                )
                                ops += spent
                                found = True
                                break
                            m &= ~(np.uint64(1) << np.uint64(cb - d))
                        if found:
                            break
                i = it[I_NEXT, i]
            d -= 1
        if not found:
            return n_log, ops, False
    return n_log, ops, True


@compiled
def _eliminate(a, offsets, capacity, k_max, budget, goal, limit, new_order, new_offsets, new_fills):  # type: ignore[no-untyped-def]
    """The post-pass on the plan whose pack p holds items offsets[p] .. offsets[p + 1] - 1 (lengths a). Stops at `goal` packs, when the
    budget (operations) is spent, or when every pack was tried. Where packs were saved, the new plan is in
    new_order, new_offsets, new_fills (the packs in their old order, less the emptied ones). Returns (packs
    saved, operations spent)."""
    n = a.shape[0]
    n_packs = offsets.shape[0] - 1
    top = 0
    for i in range(n):
        if a[i] > top:
            top = a[i]
    gid = np.full(top + 1, -1, dtype=np.int32)
    n_groups = 0
    for i in range(n):
        if gid[a[i]] < 0:
            gid[a[i]] = n_groups
            n_groups += 1
    it = np.empty((5, n), dtype=np.int32)
    pk = np.empty((7, n_packs), dtype=np.int32)
    chead = np.full(n_groups * CLASSES, -1, dtype=np.int32)
    gmask = np.zeros(n_groups, dtype=np.uint64)
    bhead = np.full(CLASSES, -1, dtype=np.int32)
    # the moves of the attempt under way (np.empty: pages are touched only as far as they are written)
    room = 3 * limit * CLASSES + 3  # a transit item's moves: a swap, or the gathers' swaps, and its own
    log_item = np.empty(n + room, dtype=np.int32)
    log_from = np.empty(n + room, dtype=np.int32)
    transit = np.empty(n, dtype=np.int32)
    largest = np.zeros(n_packs, dtype=np.int32)
    ops = n + n_packs
    for p in range(n_packs):
        fill = 0
        prev = -1
        pk[P_HEAD, p] = -1
        for i in range(offsets[p], offsets[p + 1]):
            fill += a[i]
            if a[i] > largest[p]:
                largest[p] = a[i]
            it[I_PACK, i] = p
            it[I_PREV, i] = prev
            it[I_NEXT, i] = -1
            if prev >= 0:
                it[I_NEXT, prev] = i
            else:
                pk[P_HEAD, p] = i
            prev = i
        pk[P_TAIL, p] = prev
        pk[P_COUNT, p] = offsets[p + 1] - offsets[p]
        pk[P_FILL, p] = fill
        c = _slack_class(capacity, fill)
        _bucket_link(pk, bhead, p, c)
        i = pk[P_HEAD, p]
        while i >= 0:
            _class_link(it, chead, gmask, gid, a, i, c)
            i = it[I_NEXT, i]
    # packs to empty, in this order: those whose largest item is smallest first (small items find room by
    # swaps that move a few tokens of slack each), the loosest first among equals, then by index (two
    # stable counting sorts: by fill, then by largest item)
    by_fill = np.empty(n_packs, dtype=np.int32)
    ranked = np.empty(n_packs, dtype=np.int32)
    start = np.zeros(capacity + 2, dtype=np.int64)
    for p in range(n_packs):
        start[pk[P_FILL, p] + 1] += 1
    for v in range(capacity + 1):
        start[v + 1] += start[v]
    for p in range(n_packs):
        f = pk[P_FILL, p]
        by_fill[start[f]] = p
        start[f] += 1
    start[:] = 0
    for p in range(n_packs):
        start[largest[p] + 1] += 1
    for v in range(capacity + 1):
        start[v + 1] += start[v]
    for k in range(n_packs):
        p = by_fill[k]
        ranked[start[largest[p]]] = p
        start[largest[p]] += 1
    ops += 2 * (n_packs + capacity)
    packs = n_packs
    saved = 0
    next_rank = 0
    stop = False
    while packs > goal and ops < budget and not stop:
        e = -1
        while next_rank < n_packs and e < 0:
            q = ranked[next_rank]
            next_rank += 1
            ops += 1
            if pk[P_COUNT, q] > 0:
                e = q
        if e < 0:
            break
        # its items to transit, largest first (insertion sort: a pack holds few items)
        n_transit = 0
        n_log = 0
        i = pk[P_HEAD, e]
        while i >= 0:
            nx = it[I_NEXT, i]
            _remove(it, pk, chead, gmask, gid, a, i)
            j = n_transit
            while j > 0 and a[transit[j - 1]] < a[i]:
                transit[j] = transit[j - 1]
                j -= 1
            transit[j] = i
            n_transit += 1
            ops += 1 + n_transit - j
            i = nx
        _bucket_unlink(pk, bhead, e)
        done = True
        for t in range(n_transit):
            if ops >= budget or n_log + room > log_item.shape[0]:
                done = False
                break
            x_item = transit[t]
            x = a[x_item]
            p, spent = _insert_target(pk, bhead, capacity, k_max, x)
            ops += spent
            if p < 0:
                p, ia, ib, spent = _swap_target(
                    it, pk, chead, gmask, bhead, gid, a, capacity, k_max, x, limit
                )
                ops += spent
                if p >= 0:  # A (p) gives ia to B and takes the smaller ib: then x fits in A
                    n_log, spent = _swap(
                        it, pk, chead, gmask, bhead, gid, a, capacity, ia, ib, log_item, log_from, n_log
                    )
                    ops += spent
            if p < 0:
                p, n_log, spent = _gather(
                    it, pk, chead, gmask, bhead, gid, a, capacity, k_max, x, log_item, log_from, n_log, limit
                )
                ops += spent
            if p < 0:
                done = False
                break
            n_log, spent = _move(
                it, pk, chead, gmask, bhead, gid, a, capacity, x_item, p, log_item, log_from, n_log
            )
            ops += spent
        if done:
            packs -= 1
            saved += 1
        else:
            stop = True  # the packs come easiest first: the first that cannot be emptied ends the pass
            # restore: the moves undone last first, then E's items back in their order
            for k in range(n_log - 1, -1, -1):
                i = log_item[k]
                q = it[I_PACK, i]
                _remove(it, pk, chead, gmask, gid, a, i)
                ops += _refresh(it, pk, chead, gmask, bhead, gid, a, capacity, q)
                if log_from[k] >= 0:
                    _add(it, pk, chead, gmask, gid, a, i, log_from[k])
                    ops += _refresh(it, pk, chead, gmask, bhead, gid, a, capacity, log_from[k])
            _bucket_link(pk, bhead, e, _slack_class(capacity, 0))
            # transit is sorted by length; E's own order is not kept (any order of a pack's items is a plan)
            for k in range(n_transit):
                _add(it, pk, chead, gmask, gid, a, transit[k], e)
            ops += n_transit + _refresh(it, pk, chead, gmask, bhead, gid, a, capacity, e)
    if saved:
        pos = 0
        m = 0
        new_offsets[0] = 0
        for p in range(n_packs):
            if pk[P_COUNT, p] == 0:
                continue
            i = pk[P_HEAD, p]
            while i >= 0:
                new_order[pos] = i
                pos += 1
                i = it[I_NEXT, i]
            new_fills[m] = pk[P_FILL, p]
            m += 1
            new_offsets[m] = pos
    return saved, ops


def eliminate(
    a: np.ndarray,
    order: np.ndarray,
    offsets: np.ndarray,
    capacity: int,
    k_max: int,
    budget: int,
    goal: int,
    limit: int,
) -> tuple[tuple[np.ndarray, np.ndarray, np.ndarray] | None, int]:
    """Run the post-pass on the plan (order, offsets): ((order, offsets, fills) of the new plan, or None where
    no pack was saved; operations spent)."""
    n_packs = len(offsets) - 1
    new_order = np.empty(len(a), dtype=np.int64)
    new_offsets = np.empty(n_packs + 1, dtype=np.int64)
    new_fills = np.empty(n_packs, dtype=np.int64)
    # items numbered by their place in the plan, so that the kernel reads and links them in memory order (at
    # 1M samples, item ids in plan order cost ~100 ms of cache misses)
    saved, ops = _eliminate(
        np.ascontiguousarray(a[order], dtype=np.int64),
        np.ascontiguousarray(offsets, dtype=np.int64),
        int(capacity),
        int(min(k_max, 1 << 62)),
        int(budget),
        int(goal),
        int(limit),
        new_order,
        new_offsets,
        new_fills,
    )
    if not saved:
        return None, int(ops)
    kept = n_packs - int(saved)
    return (order[new_order], new_offsets[: kept + 1], new_fills[:kept]), int(ops)
