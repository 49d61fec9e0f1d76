"""Compiled (numba) kernel for `bfd`/`histogram`: the same grouped best fit as
`planner._grouped_best_fit`, step for step, so the plans are identical byte for byte.

The pure-Python version keeps open packs as levels (remaining, items) in a sorted list and finds the
tightest level with a bisect; inserting into that list costs O(levels) and every step runs in the
interpreter. Here the levels live in per-remaining-capacity lists (sorted by item count) and the
non-empty remaining capacities in a 64-ary bitset tree (a word per 64 capacities, a bit per non-empty
word above it), so finding the tightest fit is O(log64 C) word reads and one count-trailing-zeros per
level: three levels for capacities up to 262,143. A level's fields share one row, and so do a node's,
so a step touches a cache line per record rather than one per field. The pack-id
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


if _HAVE_NUMBA:
    from llvmlite import ir as _ir
    from numba import types as _types
    from numba.extending import intrinsic as _intrinsic

    @_intrinsic
    def _ctz(typingctx, word):  # type: ignore[no-untyped-def]
        """Count trailing zeros of a non-zero uint64 (LLVM's cttz: one instruction on x86-64 and arm64)."""
        sig = _types.int64(_types.uint64)

        def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
            return builder.cttz(args[0], _ir.Constant(_ir.IntType(1), 1))

        return sig, codegen

else:  # pragma: no cover - the kernel is not used without numba

    def _ctz(word):  # type: ignore[no-untyped-def]
        return (int(word) & -int(word)).bit_length() - 1


_ONE = np.uint64(1)
_ALL = np.uint64(0xFFFFFFFFFFFFFFFF)


def _bits_layout(n: int) -> np.ndarray:
    """Word offsets of each level of a 64-ary bitset over 0..n-1, bottom level first, plus the end."""
    offsets = [0]
    while True:
        words = (n + 63) >> 6
        offsets.append(offsets[-1] + words)
        if words == 1:
            return np.asarray(offsets, dtype=np.int64)
        n = words


@_njit
def _bits_set(bits, off, r):  # type: ignore[no-untyped-def]
    """Mark r non-empty; a word that was already non-zero is already marked above."""
    for lv in range(off.shape[0] - 1):
        i = off[lv] + (r >> 6)
        before = bits[i]
        bits[i] = before | (_ONE << np.uint64(r & 63))
        if before:
            return
        r >>= 6


@_njit
def _bits_clear(bits, off, r):  # type: ignore[no-untyped-def]
    """Mark r empty; a word that stays non-zero keeps its mark above."""
    for lv in range(off.shape[0] - 1):
        i = off[lv] + (r >> 6)
        after = bits[i] & ~(_ONE << np.uint64(r & 63))
        bits[i] = after
        if after:
            return
        r >>= 6


@_njit
def _bits_first(bits, off, x):  # type: ignore[no-untyped-def]
    """Smallest marked index >= x, or -1: up while the rest of the word is empty, then down."""
    n_lv = off.shape[0] - 1
    lv = 0
    pos = x
    while lv < n_lv:
        i = pos >> 6
        if off[lv] + i >= off[lv + 1]:
            return -1
        w = bits[off[lv] + i] & (_ALL << np.uint64(pos & 63))
        if w:
            pos = (i << 6) + _ctz(w)
            while lv > 0:
                lv -= 1
                pos = (pos << 6) + _ctz(bits[off[lv] + pos])
            return pos
        pos = i + 1
        lv += 1
    return -1


# a level's row: item count k, packs, first and last node of its pack-id ranges, next level at the same r
_K, _SIZE, _HEAD, _TAIL, _NEXT = 0, 1, 2, 3, 4
# a node's row: a pack-id range [start, end) and its neighbours in its level's list
_S, _E, _PREV, _NXT = 0, 1, 2, 3


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
def _put(lv, r_head, bits, off, nd, slot_free, top, r, k, ch_head, ch_tail, m):  # type: ignore[no-untyped-def]
    """Append the chain ch_head..ch_tail (m packs) to the level (remaining r, k items), creating the level
    in r's list (k ascending) when absent: Python's `put` (planner._grouped_best_fit_python)."""
    prev_sl = -1
    sl = r_head[r]
    while sl >= 0 and lv[sl, _K] < k:
        prev_sl = sl
        sl = lv[sl, _NEXT]
    if sl >= 0 and lv[sl, _K] == k:
        t = lv[sl, _TAIL]
        if t >= 0:
            nd[t, _NXT] = ch_head
            nd[ch_head, _PREV] = t
        else:
            lv[sl, _HEAD] = ch_head
        lv[sl, _TAIL] = ch_tail
        lv[sl, _SIZE] += m
        return
    ns = _take(slot_free, top, 2)
    lv[ns, _K] = k
    lv[ns, _SIZE] = m
    lv[ns, _HEAD] = ch_head
    lv[ns, _TAIL] = ch_tail
    lv[ns, _NEXT] = sl
    if prev_sl >= 0:
        lv[prev_sl, _NEXT] = ns
    else:
        if r_head[r] < 0:
            _bits_set(bits, off, r)
        r_head[r] = ns


@_njit
def _run(values, counts, capacity, k_max, max_events, max_ranges, off):  # type: ignore[no-untyped-def]
    n_groups = values.shape[0]
    n_items = 0
    for g in range(n_groups):
        n_items += counts[g]
    smallest = values[n_groups - 1]
    bits = np.zeros(off[-1], dtype=np.uint64)  # remaining capacities 0..capacity that have a level
    r_head = np.full(capacity + 1, -1, dtype=np.int64)  # first level slot at remaining r (k ascending)

    n_slots = n_items + 2
    lv = np.empty((n_slots, 5), dtype=np.int64)
    slot_free = np.empty(n_slots, dtype=np.int64)
    # free-list counters: [free nodes, next new node, free slots, next new slot]
    top = np.zeros(4, dtype=np.int64)

    n_nodes = 2 * n_items + 4
    nd = np.empty((n_nodes, 4), dtype=np.int64)
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
            r = _bits_first(bits, off, length)
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
                        c = _take(node_free, top, 0)
                        nd[c, _S] = next_id
                        nd[c, _E] = next_id + m
                        nd[c, _PREV] = -1
                        nd[c, _NXT] = -1
                        _put(lv, r_head, bits, off, nd, slot_free, top, nr, qq, c, c, m)
                    next_id += m
                break
            sl = r_head[r]
            k = lv[sl, _K]
            m = lv[sl, _SIZE]
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
                    ch_head = lv[sl, _HEAD]
                    ch_tail = lv[sl, _TAIL]
                    lv[sl, _HEAD] = -1
                    lv[sl, _TAIL] = -1
                    lv[sl, _SIZE] = 0
                else:
                    ch_head = -1
                    ch_tail = -1
                    left = want
                    while left:
                        t = lv[sl, _TAIL]
                        cnt = nd[t, _E] - nd[t, _S]
                        if cnt <= left:
                            p = nd[t, _PREV]
                            lv[sl, _TAIL] = p
                            if p >= 0:
                                nd[p, _NXT] = -1
                            else:
                                lv[sl, _HEAD] = -1
                            left -= cnt
                            c = t
                        else:
                            c = _take(node_free, top, 0)
                            nd[c, _S] = nd[t, _E] - left
                            nd[c, _E] = nd[t, _E]
                            nd[t, _E] = nd[t, _E] - left
                            left = 0
                        nd[c, _PREV] = ch_tail
                        nd[c, _NXT] = -1
                        if ch_tail >= 0:
                            nd[ch_tail, _NXT] = c
                        else:
                            ch_head = c
                        ch_tail = c
                    lv[sl, _SIZE] -= want
                # record the event
                if n_ev >= max_events:
                    return -1, ev_g, ev_q, ev_start, rr_s, rr_e, n_ev, next_id
                ev_g[n_ev] = g
                ev_q[n_ev] = qq
                ev_start[n_ev] = n_rr
                c = ch_head
                while c >= 0:
                    if n_rr >= max_ranges:
                        return -1, ev_g, ev_q, ev_start, rr_s, rr_e, n_ev, next_id
                    rr_s[n_rr] = nd[c, _S]
                    rr_e[n_rr] = nd[c, _E]
                    n_rr += 1
                    c = nd[c, _NXT]
                n_ev += 1
                ev_start[n_ev] = n_rr
                # put((r - qq * length, k + qq), chain, want)
                nr = r - qq * length
                nk = k + qq
                if nr < smallest or nk >= k_max:
                    c = ch_head
                    while c >= 0:
                        _give(node_free, top, 0, c)
                        c = nd[c, _NXT]
                else:
                    _put(lv, r_head, bits, off, nd, slot_free, top, nr, nk, ch_head, ch_tail, want)
            # drop the source level if it is empty (it is the head of r's list: smallest k)
            if lv[sl, _SIZE] == 0:
                r_head[r] = lv[sl, _NEXT]
                if r_head[r] < 0:
                    _bits_clear(bits, off, r)
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
            values, counts, int(capacity), int(k_max), max_events, max_ranges, _bits_layout(int(capacity) + 1)
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
