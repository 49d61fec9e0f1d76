"""Compiled (numba) kernel for `bfd`/`histogram`: the same grouped best fit as
`planner._grouped_best_fit`, step for step, so the plans are identical byte for byte.

The pure-Python version keeps open packs as levels (remaining, items) in a sorted list and finds the
tightest level with a bisect; inserting into that list costs O(levels) and every step runs in the
interpreter. Here the levels live in per-remaining-capacity lists (sorted by item count) and the
non-empty remaining capacities in a segment tree, so finding the tightest fit is O(log C); the pack-id
ranges of a level are a linked list whose nodes move between levels exactly as the Python lists do
(same order, so the same tie-breaking). Events are recorded in flat arrays and materialised here too.

`available()` is False when numba is not installed (or `PACKCFG_PLANNER_KERNEL=python`); the planner
then runs the pure-Python path, which is also the test oracle.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

try:  # numba is optional: the planner falls back to pure Python without it
    import numba as _nb

    _HAVE_NUMBA = True
except Exception:  # pragma: no cover - exercised where numba is absent
    _nb = None
    _HAVE_NUMBA = False


def available() -> bool:
    """Whether the compiled kernel can be used (numba importable and not disabled by the env var)."""
    return _HAVE_NUMBA and os.environ.get("PACKCFG_PLANNER_KERNEL", "").lower() not in ("python", "0", "off")


def _njit(fn: Any) -> Any:
    if _HAVE_NUMBA:
        return _nb.njit(cache=True, nogil=True)(fn)
    return fn


@_njit
def _tree_set(tree, size, r, on):  # type: ignore[no-untyped-def]
    i = r + size
    tree[i] = on
    i >>= 1
    while i >= 1:
        v = 1 if (tree[2 * i] or tree[2 * i + 1]) else 0
        if tree[i] == v:
            break
        tree[i] = v
        i >>= 1


@_njit
def _tree_first(tree, size, x):  # type: ignore[no-untyped-def]
    """Smallest index >= x whose leaf is set, or -1."""
    i = x + size
    if tree[i]:
        return x
    while i > 1:
        if (i & 1) == 0 and tree[i + 1]:
            i += 1
            while i < size:
                i = 2 * i if tree[2 * i] else 2 * i + 1
            return i - size
        i >>= 1
    return -1


_K, _SIZE, _HEAD, _TAIL, _NEXT = 0, 1, 2, 3, 4


@_njit
def _take(free, top, which):  # type: ignore[no-untyped-def]
    """A node (which=0) or level slot (which=2) id: the last one freed, else a new one."""
    if top[which]:
        top[which] -= 1
        return free[top[which]]
    top[which + 1] += 1
    return top[which + 1] - 1


@_njit
def _give(free, top, which, i):  # type: ignore[no-untyped-def]
    free[top[which]] = i
    top[which] += 1


@_njit
def _fit(space, length, most):  # type: ignore[no-untyped-def]
    """How many items of `length` fit in `space`, at most `most` (all of `most` for zero lengths)."""
    q = space // length if length else most
    return most if q > most else q


@_njit
def _part(part, full, q, rest):  # type: ignore[no-untyped-def]
    """A step places `full` packs of q items (part 0), then one pack of the `rest` (part 1): (packs,
    items per pack), (0, 0) for an empty part."""
    if part == 0:
        return (full, q) if full else (0, 0)
    return (1, rest) if rest else (0, 0)


@_njit
def _put(lv, r_head, tree, size, nd_prev, nd_next, slot_free, top, r, k, ch_head, ch_tail, m):  # type: ignore[no-untyped-def]
    """Append the chain ch_head..ch_tail (m packs) to the level (remaining r, k items), creating the level
    in r's list (k ascending) when absent: Python's `put` (planner._grouped_best_fit_python)."""
    prev_sl = -1
    sl = r_head[r]
    while sl >= 0 and lv[_K, sl] < k:
        prev_sl = sl
        sl = lv[_NEXT, sl]
    if sl >= 0 and lv[_K, sl] == k:
        t = lv[_TAIL, sl]
        if t >= 0:
            nd_next[t] = ch_head
            nd_prev[ch_head] = t
        else:
            lv[_HEAD, sl] = ch_head
        lv[_TAIL, sl] = ch_tail
        lv[_SIZE, sl] += m
        return
    ns = _take(slot_free, top, 2)
    lv[_K, ns] = k
    lv[_SIZE, ns] = m
    lv[_HEAD, ns] = ch_head
    lv[_TAIL, ns] = ch_tail
    lv[_NEXT, ns] = sl
    if prev_sl >= 0:
        lv[_NEXT, prev_sl] = ns
    else:
        if r_head[r] < 0:
            _tree_set(tree, size, r, 1)
        r_head[r] = ns


@_njit
def _run(values, counts, capacity, k_max, max_events, max_ranges):  # type: ignore[no-untyped-def]
    n_groups = values.shape[0]
    n_items = 0
    for g in range(n_groups):
        n_items += counts[g]
    smallest = values[n_groups - 1]
    size = 1
    while size < capacity + 1:
        size *= 2
    tree = np.zeros(2 * size, dtype=np.uint8)
    r_head = np.full(capacity + 1, -1, dtype=np.int64)  # first level slot at remaining r (k ascending)

    # levels: rows K, SIZE, HEAD, TAIL, NEXT of one array (see _put)
    n_slots = n_items + 2
    lv = np.empty((5, n_slots), dtype=np.int64)
    lv_k, lv_size, lv_head, lv_tail, lv_next = lv[_K], lv[_SIZE], lv[_HEAD], lv[_TAIL], lv[_NEXT]
    slot_free = np.empty(n_slots, dtype=np.int64)
    # free-list counters: [free nodes, next new node, free slots, next new slot]
    top = np.zeros(4, dtype=np.int64)

    n_nodes = 2 * n_items + 4
    nd_s = np.empty(n_nodes, dtype=np.int64)
    nd_e = np.empty(n_nodes, dtype=np.int64)
    nd_prev = np.empty(n_nodes, dtype=np.int64)
    nd_next = np.empty(n_nodes, dtype=np.int64)
    node_free = np.empty(n_nodes, dtype=np.int64)

    ev_g = np.empty(max_events, dtype=np.int64)
    ev_q = np.empty(max_events, dtype=np.int64)
    ev_start = np.empty(max_events + 1, dtype=np.int64)
    rr_s = np.empty(max_ranges, dtype=np.int64)
    rr_e = np.empty(max_ranges, dtype=np.int64)
    n_ev = 0
    n_rr = 0
    next_id = 0
    # chain: a detached list of nodes (head..tail), built per step then handed to `put`
    for g in range(n_groups):
        length = values[g]
        n = counts[g]
        while n > 0:
            r = _tree_first(tree, size, length)
            if r < 0:
                q = min(_fit(capacity, length, k_max), n)
                full = n // q
                rest = n - full * q
                for part in range(2):
                    m, qq = _part(part, full, q, rest)
                    if m == 0:
                        continue
                    if n_ev >= max_events or n_rr >= max_ranges:
                        return -1, ev_g, ev_q, ev_start, rr_s, rr_e, n_ev, next_id
                    ev_g[n_ev] = g
                    ev_q[n_ev] = qq
                    ev_start[n_ev] = n_rr
                    rr_s[n_rr] = next_id
                    rr_e[n_rr] = next_id + m
                    n_rr += 1
                    n_ev += 1
                    ev_start[n_ev] = n_rr
                    # put((capacity - qq * length, qq), [(next_id, next_id + m)])
                    nr = capacity - qq * length
                    if not (nr < smallest or qq >= k_max):
                        nd = _take(node_free, top, 0)
                        nd_s[nd] = next_id
                        nd_e[nd] = next_id + m
                        nd_prev[nd] = -1
                        nd_next[nd] = -1
                        _put(lv, r_head, tree, size, nd_prev, nd_next, slot_free, top, nr, qq, nd, nd, m)
                    next_id += m
                break
            sl = r_head[r]
            k = lv_k[sl]
            m = lv_size[sl]
            q = _fit(r, length, k_max - k)
            if m <= n // q:  # m * q <= n without overflow (q is huge for zero lengths)
                whole = True
                full = m
                rest = 0
            else:
                whole = False
                full = n // q
                rest = n - full * q
            for part in range(2):
                want, qq = _part(part, full, q, rest)
                if want == 0:
                    continue
                # detach `want` packs from level sl: whole list, or from the tail (Python's take order)
                if whole:
                    ch_head = lv_head[sl]
                    ch_tail = lv_tail[sl]
                    lv_head[sl] = -1
                    lv_tail[sl] = -1
                    lv_size[sl] = 0
                else:
                    ch_head = -1
                    ch_tail = -1
                    left = want
                    while left:
                        t = lv_tail[sl]
                        cnt = nd_e[t] - nd_s[t]
                        if cnt <= left:
                            p = nd_prev[t]
                            lv_tail[sl] = p
                            if p >= 0:
                                nd_next[p] = -1
                            else:
                                lv_head[sl] = -1
                            left -= cnt
                            nd = t
                        else:
                            nd = _take(node_free, top, 0)
                            nd_s[nd] = nd_e[t] - left
                            nd_e[nd] = nd_e[t]
                            nd_e[t] = nd_e[t] - left
                            left = 0
                        nd_prev[nd] = ch_tail
                        nd_next[nd] = -1
                        if ch_tail >= 0:
                            nd_next[ch_tail] = nd
                        else:
                            ch_head = nd
                        ch_tail = nd
                    lv_size[sl] -= want
                # record the event
                if n_ev >= max_events:
                    return -1, ev_g, ev_q, ev_start, rr_s, rr_e, n_ev, next_id
                ev_g[n_ev] = g
                ev_q[n_ev] = qq
                ev_start[n_ev] = n_rr
                nd = ch_head
                while nd >= 0:
                    if n_rr >= max_ranges:
                        return -1, ev_g, ev_q, ev_start, rr_s, rr_e, n_ev, next_id
                    rr_s[n_rr] = nd_s[nd]
                    rr_e[n_rr] = nd_e[nd]
                    n_rr += 1
                    nd = nd_next[nd]
                n_ev += 1
                ev_start[n_ev] = n_rr
                # put((r - qq * length, k + qq), chain, want)
                nr = r - qq * length
                nk = k + qq
                if nr < smallest or nk >= k_max:
                    nd = ch_head
                    while nd >= 0:
                        _give(node_free, top, 0, nd)
                        nd = nd_next[nd]
                else:
                    _put(
                        lv,
                        r_head,
                        tree,
                        size,
                        nd_prev,
                        nd_next,
                        slot_free,
                        top,
                        nr,
                        nk,
                        ch_head,
                        ch_tail,
                        want,
                    )
            # drop the source level if it is empty (it is the head of r's list: smallest k)
            if lv_size[sl] == 0:
                r_head[r] = lv_next[sl]
                if r_head[r] < 0:
                    _tree_set(tree, size, r, 0)
                _give(slot_free, top, 2, sl)
            if whole:
                n -= m * q
            else:
                n = 0
    return 0, ev_g, ev_q, ev_start, rr_s, rr_e, n_ev, next_id


@_njit
def _sizes(values, ev_g, ev_q, ev_start, rr_s, rr_e, n_ev, n_packs):  # type: ignore[no-untyped-def]
    per_pack = np.zeros(n_packs, dtype=np.int64)
    fills = np.zeros(n_packs, dtype=np.int64)
    for e in range(n_ev):
        q = ev_q[e]
        w = q * values[ev_g[e]]
        for j in range(ev_start[e], ev_start[e + 1]):
            for p in range(rr_s[j], rr_e[j]):
                per_pack[p] += q
                fills[p] += w
    return per_pack, fills


@_njit
def _materialise(idx, group_start, ev_g, ev_q, ev_start, rr_s, rr_e, n_ev, offsets):  # type: ignore[no-untyped-def]
    n_packs = offsets.shape[0] - 1
    fill = offsets[:n_packs].copy()
    cursor = group_start[:-1].copy()
    order = np.empty(idx.shape[0], dtype=np.int64)
    for e in range(n_ev):
        g = ev_g[e]
        q = ev_q[e]
        c = cursor[g]
        for j in range(ev_start[e], ev_start[e + 1]):
            for p in range(rr_s[j], rr_e[j]):
                f = fill[p]
                for t in range(q):
                    order[f + t] = idx[c]
                    c += 1
                fill[p] = f + q
        cursor[g] = c
    return order


@_njit
def _counting_order(a, values, group_start):  # type: ignore[no-untyped-def]
    """Item ids by decreasing length, ties by increasing id: `planner._sorted_desc` in O(N + max)."""
    cur = np.zeros(values[0] + 1, dtype=np.int64)
    for g in range(values.shape[0]):
        cur[values[g]] = group_start[g]
    idx = np.empty(a.shape[0], dtype=np.int64)
    for i in range(a.shape[0]):
        v = a[i]
        idx[cur[v]] = i
        cur[v] += 1
    return idx


def grouped_best_fit(
    values: np.ndarray, counts: np.ndarray, capacity: int, k_max: int
) -> tuple[np.ndarray, np.ndarray, Any]:
    """Run the kernel on the length histogram (distinct lengths descending, their counts).

    Returns (offsets, fills, build) where build(a) gives the CSR order of the items `a` (the aligned
    lengths the histogram was taken of).
    """
    values = np.ascontiguousarray(values, dtype=np.int64)
    counts = np.ascontiguousarray(counts, dtype=np.int64)
    n_items = int(counts.sum())
    # every event places at least one item, and so does every pack range of an event: n_items bounds
    # both (the retry below is a safety net); the arrays are np.empty, so only what is used is touched
    max_events = n_items + 16
    max_ranges = n_items + 16
    while True:
        status, ev_g, ev_q, ev_start, rr_s, rr_e, n_ev, n_packs = _run(
            values, counts, int(capacity), int(k_max), max_events, max_ranges
        )
        if status == 0:
            break
        max_events *= 2
        max_ranges *= 2
    per_pack, fills = _sizes(values, ev_g, ev_q, ev_start, rr_s, rr_e, n_ev, n_packs)
    offsets = np.zeros(n_packs + 1, dtype=np.int64)
    np.cumsum(per_pack, out=offsets[1:])
    group_start = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=group_start[1:])

    def build(a: np.ndarray) -> np.ndarray:
        idx = _counting_order(np.ascontiguousarray(a, dtype=np.int64), values, group_start)
        return _materialise(idx, group_start, ev_g, ev_q, ev_start, rr_s, rr_e, n_ev, offsets)

    return offsets, fills, build
