"""Compiled (numba) kernel for `bfd`/`histogram`: the same grouped best fit as
`planning.best_fit.grouped_best_fit`, step for step, so the plans are identical byte for byte.

The pure-Python version keeps open packs as levels (remaining, items) in a sorted list and finds the
tightest level with a bisect; inserting into that list costs O(levels) and every step runs in the
interpreter. Here the levels live in per-remaining-capacity lists (sorted by item count) and the
non-empty remaining capacities in a 64-ary bitset tree (a word per 64 capacities, a bit per non-empty
word above it), so finding the tightest fit is O(log64 C) word reads and one count-trailing-zeros per
level: three levels for capacities up to 262,143. A level's fields share one row, and so do a node's,
so a step touches a cache line per record rather than one per field. The pack-id ranges of a level
are a linked list whose nodes move between levels exactly as the Python lists do (same order, so the
same tie-breaking). Each placement writes the pack of the next items in decreasing-length order
(`assign`); one stable scatter then gives the packs' item lists. Ids are int32 while they fit (half
the memory the pointer chasing walks), and work arrays are np.empty so that only pages the run
writes are ever faulted in: at 150k samples page faults were a third of the planning time.

`available()` is False when numba is not installed (or `PACKCFG_PLANNER_KERNEL=python`); the planner
then runs the pure-Python path, which is also the test oracle.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

try:  # numba is optional: the planner falls back to pure Python without it
    import numba as _nb

    HAVE_NUMBA = True
except Exception:  # pragma: no cover - exercised where numba is absent
    _nb = None
    HAVE_NUMBA = False


def available() -> bool:
    """Whether the compiled kernel can be used (numba importable and not disabled by the env var)."""
    return HAVE_NUMBA and os.environ.get("PACKCFG_PLANNER_KERNEL", "").lower() not in ("python", "0", "off")


def loaded() -> bool:
    """Whether the kernel is compiled (or loaded from numba's cache) in this process: then a call costs
    what the planning costs, with nothing to load first."""
    return HAVE_NUMBA and bool(_run.signatures) and bool(_scatter.signatures)


def compiled(fn: Any) -> Any:
    """`fn` compiled by numba (cached next to its module), or `fn` itself without numba: every kernel of the
    package is made by this (or `inlined`), so that they are compiled alike."""
    if HAVE_NUMBA:
        return _nb.njit(cache=True, nogil=True)(fn)
    return fn


def inlined(fn: Any) -> Any:
    """`compiled`, and inlined into its callers by numba itself (not left to LLVM)."""
    if HAVE_NUMBA:
        return _nb.njit(cache=True, nogil=True, inline="always")(fn)
    return fn


if HAVE_NUMBA:
    from llvmlite import ir as _ir
    from numba import types as _types
    from numba.extending import intrinsic as _intrinsic

    @_intrinsic
    def ctz(typingctx, word):  # type: ignore[no-untyped-def]
        """Count trailing zeros of a non-zero uint64 (LLVM's cttz: one instruction on x86-64 and arm64)."""
        sig = _types.int64(_types.uint64)

        def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
            return builder.cttz(args[0], _ir.Constant(_ir.IntType(1), 1))

        return sig, codegen

    @_intrinsic
    def clz(typingctx, word):  # type: ignore[no-untyped-def]
        """Count leading zeros of a non-zero uint64 (LLVM's ctlz: one instruction on x86-64 and arm64)."""
        sig = _types.int64(_types.uint64)

        def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
            return builder.ctlz(args[0], _ir.Constant(_ir.IntType(1), 1))

        return sig, codegen

else:  # pragma: no cover - the kernel is not used without numba

    def ctz(word):  # type: ignore[no-untyped-def]
        return (int(word) & -int(word)).bit_length() - 1

    def clz(word):  # type: ignore[no-untyped-def]
        return 64 - int(word).bit_length()


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


@compiled
def _bits_set(bits, off, r):  # type: ignore[no-untyped-def]
    """Mark r non-empty; a word that was already non-zero is already marked above."""
    for lv in range(off.shape[0] - 1):
        i = off[lv] + (r >> 6)
        before = bits[i]
        bits[i] = before | (_ONE << np.uint64(r & 63))
        if before:
            return
        r >>= 6


@compiled
def _bits_clear(bits, off, r):  # type: ignore[no-untyped-def]
    """Mark r empty; a word that stays non-zero keeps its mark above."""
    for lv in range(off.shape[0] - 1):
        i = off[lv] + (r >> 6)
        after = bits[i] & ~(_ONE << np.uint64(r & 63))
        bits[i] = after
        if after:
            return
        r >>= 6


@compiled
def _bits_has(bits, off, r):  # type: ignore[no-untyped-def]
    return (bits[off[0] + (r >> 6)] >> np.uint64(r & 63)) & _ONE


@compiled
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
            pos = (i << 6) + ctz(w)
            while lv > 0:
                lv -= 1
                pos = (pos << 6) + ctz(bits[off[lv] + pos])
            return pos
        pos = i + 1
        lv += 1
    return -1


# a level's row: item count k, packs, first and last node of its pack-id ranges, next level at the same r
_K, _SIZE, _HEAD, _TAIL, _NEXT = 0, 1, 2, 3, 4
# a node's row: a pack-id range [start, end) and its neighbours in its level's list
_S, _E, _PREV, _NXT = 0, 1, 2, 3


@compiled
def _take(free, top, which):  # type: ignore[no-untyped-def]
    """A node (which=0) or level slot (which=2) id: the last one freed, else a new one."""
    if top[which]:
        top[which] -= 1
        return free[top[which]]
    top[which + 1] += 1
    return top[which + 1] - 1


@compiled
def _give(free, top, which, i):  # type: ignore[no-untyped-def]
    free[top[which]] = i
    top[which] += 1


@compiled
def _fit(space, length, most):  # type: ignore[no-untyped-def]
    """How many items of `length` fit in `space`, at most `most` (all of `most` for zero lengths)."""
    q = space // length if length else most
    return most if q > most else q


@compiled
def _part(part, full, q, rest):  # type: ignore[no-untyped-def]
    """A step places `full` packs of q items (part 0), then one pack of the `rest` (part 1): (packs,
    items per pack), (0, 0) for an empty part."""
    if part == 0:
        return (full, q) if full else (0, 0)
    return (1, rest) if rest else (0, 0)


@compiled
def _put(lv, r_head, bits, off, nd, slot_free, top, r, k, ch_head, ch_tail, m):  # type: ignore[no-untyped-def]
    """Append the chain ch_head..ch_tail (m packs) to the level (remaining r, k items), creating the level
    in r's list (k ascending) when absent: Python's `put` (planning.best_fit.grouped_best_fit_python)."""
    prev_sl = -1
    has = _bits_has(bits, off, r)
    sl = r_head[r] if has else -1  # r_head is only written where a bit is set: untouched pages stay unmapped
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
        if not has:
            _bits_set(bits, off, r)
        r_head[r] = ns


@compiled
def _close(nd, per_pack, fills, c, k, fill):  # type: ignore[no-untyped-def]
    """Record the final item count and fill of every pack in the chain from node c (a closed pack)."""
    while c >= 0:
        for p in range(nd[c, _S], nd[c, _E]):
            per_pack[p] = k
            fills[p] = fill
        c = nd[c, _NXT]


@compiled
def _run(  # type: ignore[no-untyped-def]
    values,
    counts,
    capacity,
    k_max,
    off,
    r_head,
    lv,
    slot_free,
    nd,
    node_free,
    per_pack,
    fills,
    assign,
    largest,
):
    """The grouped best fit. Work arrays come from the caller, so their integer width (int32 while ids
    fit: half the cache footprint of the pointer chasing) picks the compiled specialisation; an empty
    `assign` counts the packs without writing the items' packs or each pack's longest item (`largest`: the
    one that opened it) (pack_counter)."""
    n_groups = values.shape[0]
    smallest = values[n_groups - 1]
    bits = np.zeros(off[-1], dtype=np.uint64)  # remaining capacities 0..capacity that have a level
    # r_head[r]: first level slot at remaining r (k ascending); lv: level rows; nd: node rows
    # free-list counters: [free nodes, next new node, free slots, next new slot]
    top = np.zeros(4, dtype=np.int64)

    slot = 0  # the next item in decreasing-length order (items of a group are taken in order)
    write = assign.shape[0] > 0  # an empty assign: only the packs are counted (pack_counter)
    next_id = 0
    # chain: a detached list of nodes (head..tail), built per step then handed to `put`
    for g in range(n_groups):
        length = values[g]
        n = counts[g]
        while n > 0:
            r = _bits_first(bits, off, length)
            if r < 0:
                if n == 1:  # most groups at long context hold one item: skip the divisions
                    q = 1
                    full = 1
                    rest = 0
                else:
                    q = min(_fit(capacity, length, k_max), n)
                    full = n // q
                    rest = n - full * q
                for part in range(2):
                    m, qq = _part(part, full, q, rest)
                    if m == 0:
                        continue
                    if write:
                        for p in range(next_id, next_id + m):
                            largest[p] = length
                            for _ in range(qq):
                                assign[slot] = p
                                slot += 1
                    # put((capacity - qq * length, qq), [(next_id, next_id + m)])
                    nr = capacity - qq * length
                    if nr < smallest or qq >= k_max:
                        for p in range(next_id, next_id + m):
                            per_pack[p] = qq
                            fills[p] = capacity - nr
                    else:
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
            if n == 1:  # one item into one pack: what the general case below gives, without divisions
                q = 1
                whole = m == 1
                full = 1
                rest = 0
            else:
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
                # the next qq items go to each pack of the chain, in chain order
                c = ch_head
                while c >= 0 and write:
                    for p in range(nd[c, _S], nd[c, _E]):
                        for _ in range(qq):
                            assign[slot] = p
                            slot += 1
                    c = nd[c, _NXT]
                # put((r - qq * length, k + qq), chain, want)
                nr = r - qq * length
                nk = k + qq
                if nr < smallest or nk >= k_max:
                    _close(nd, per_pack, fills, ch_head, nk, capacity - nr)
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
    r = _bits_first(bits, off, 0)
    while r >= 0:  # the packs still open
        sl = r_head[r]
        while sl >= 0:
            _close(nd, per_pack, fills, lv[sl, _HEAD], lv[sl, _K], capacity - r)
            sl = lv[sl, _NEXT]
        r = _bits_first(bits, off, r + 1)
    return next_id


@compiled
def _scatter(idx, assign, offsets):  # type: ignore[no-untyped-def]
    """Item ids pack after pack. A pack receives its items in decreasing-length order (groups are
    placed one after another, each from its first item on), so a stable pass over the items in that
    order puts every pack's items where best fit placed them."""
    order = np.empty(idx.shape[0], dtype=np.int64)
    _scatter_into(idx, assign, offsets, order, 0)
    return order


@compiled
def _scatter_into(idx, assign, offsets, out, start):  # type: ignore[no-untyped-def]
    """`_scatter`'s order written into out[start:]."""
    fill = offsets[:-1] + start
    for s in range(idx.shape[0]):
        p = assign[s]
        out[fill[p]] = idx[s]
        fill[p] += 1


@compiled
def _counting_order(a, values, group_start, cur, idx):  # type: ignore[no-untyped-def]
    """Item ids by decreasing length, ties by increasing id (`planning.common.sorted_desc`) into idx, in
    O(N + max); cur[v] is only read for lengths v that occur, so it can come from np.empty."""
    for g in range(values.shape[0]):
        cur[values[g]] = group_start[g]
    for i in range(a.shape[0]):
        v = a[i]
        idx[cur[v]] = i
        cur[v] += 1
    return idx


def scatter(ids: np.ndarray, assign: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Item ids pack after pack: `ids` in decreasing-length order, `assign` the pack of each, `offsets` the
    packs' boundaries; each pack's items in the order given (`_scatter`)."""
    return _scatter(ids, assign, offsets)


def scatter_into(
    ids: np.ndarray, assign: np.ndarray, offsets: np.ndarray, out: np.ndarray, start: int
) -> None:
    """`scatter`'s order written into out[start:] (out: int64)."""
    _scatter_into(np.ascontiguousarray(ids, dtype=np.int64), assign, offsets, out, int(start))


def descending_order(a: np.ndarray, values: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Item ids of `a` by decreasing length, ties by increasing id (`planning.common.sorted_desc`'s order),
    from its histogram (values descending, counts) by counting: 1.1-1.2 ms at 1M samples where sorted_desc's
    stable argsort takes 4.3-4.7 ms on lengths under 2**16 (radix) and 47 ms on longer ones (128k: timsort)."""
    a = np.ascontiguousarray(a, dtype=np.int64)
    values = np.ascontiguousarray(values, dtype=np.int64)
    group_start = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=group_start[1:])
    if not len(a):
        return np.empty(0, dtype=np.int64)
    if int(values[0]) > 16 * len(a):  # a table of every length would be large and nearly empty: sort instead
        return np.argsort(-a, kind="stable")
    return _counting_order(
        a, values, group_start, np.empty(int(values[0]) + 1, np.int64), np.empty(len(a), np.int64)
    )


# every id the kernel stores (pack, node, level slot, item count) is below 2 * n_items + 4: int32 up to
# here (tests lower it to run the int64 specialisation)
INT32_MAX_ITEMS = (int(np.iinfo(np.int32).max) - 4) // 2


def pack_counter(capacity: int, k_max: int, n_max: int) -> Any:
    """count(values, counts) -> the packs of the kernel's best fit on a histogram (values descending) of at
    most `n_max` items, nothing else: bfd's refinement stage asks this for every cut point it tries (up to
    ~30 histograms at 64k samples). The work arrays are allocated once for all calls (np.empty: the pages a
    run touches stay faulted in for the next) and the same dtypes as `grouped_best_fit` passes, so the
    same compiled specialisation runs; no offsets or item order are built (an empty `assign`)."""
    ids = np.int32 if n_max <= INT32_MAX_ITEMS else np.int64
    work = (
        _bits_layout(int(capacity) + 1),
        np.empty(int(capacity) + 1, dtype=ids),
        np.empty((n_max + 2, 5), dtype=ids),
        np.empty(n_max + 2, dtype=ids),
        np.empty((2 * n_max + 4, 4), dtype=ids),
        np.empty(2 * n_max + 4, dtype=ids),
        np.empty(n_max, dtype=ids),
        np.empty(n_max, dtype=np.int64),
        np.empty(0, dtype=ids),  # no item order: _run writes none (35% of a count at 64k samples)
        np.empty(0, dtype=np.int64),  # nor each pack's longest item
    )
    capacity, k_max = int(capacity), int(k_max)

    def count(values: np.ndarray, counts: np.ndarray) -> int:
        values = np.ascontiguousarray(values, dtype=np.int64)
        counts = np.ascontiguousarray(counts, dtype=np.int64)
        if int(counts.sum()) > n_max:  # the work arrays hold n_max items (the kernel does not bounds-check)
            raise ValueError(f"pack_counter: {int(counts.sum())} items, sized for {n_max}")
        return int(_run(values, counts, capacity, k_max, *work))

    return count


def grouped_best_fit(
    values: np.ndarray, counts: np.ndarray, capacity: int, k_max: int
) -> tuple[np.ndarray, np.ndarray, Any, np.ndarray, np.ndarray]:
    """Run the kernel on the length histogram (distinct lengths descending, their counts).

    Returns (offsets, fills, build, assign, largest): build(a) gives the CSR order of the items `a` (the
    aligned lengths the histogram was taken of); assign, the pack of each item in decreasing-length order
    (ties by id: `descending_order`'s), and largest, each pack's longest item, let bfd's refinement stage
    split the plan by pack without building that order (planning/refine.py).
    """
    values = np.ascontiguousarray(values, dtype=np.int64)
    counts = np.ascontiguousarray(counts, dtype=np.int64)
    n_items = int(counts.sum())
    ids = np.int32 if n_items <= INT32_MAX_ITEMS else np.int64
    # np.empty throughout: only what the run writes is ever touched (page faults are a real cost)
    per_pack = np.empty(n_items, dtype=ids)  # items per pack (a pack holds at least one item)
    fills = np.empty(n_items, dtype=np.int64)
    assign = np.empty(n_items, dtype=ids)  # pack of each item, items in decreasing-length order
    largest = np.empty(n_items, dtype=np.int64)  # each pack's longest item
    n_packs = _run(
        values,
        counts,
        int(capacity),
        int(k_max),
        _bits_layout(int(capacity) + 1),
        np.empty(int(capacity) + 1, dtype=ids),  # r_head (read only where the bitset says written)
        np.empty((n_items + 2, 5), dtype=ids),  # level rows
        np.empty(n_items + 2, dtype=ids),  # free level slots
        np.empty((2 * n_items + 4, 4), dtype=ids),  # node rows
        np.empty(2 * n_items + 4, dtype=ids),  # free nodes
        per_pack,
        fills,
        assign,
        largest,
    )
    per_pack, fills, largest = per_pack[:n_packs], fills[:n_packs], largest[:n_packs]
    offsets = np.zeros(n_packs + 1, dtype=np.int64)
    np.cumsum(per_pack, out=offsets[1:])
    group_start = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=group_start[1:])

    def build(a: np.ndarray) -> np.ndarray:
        a = np.ascontiguousarray(a, dtype=np.int64)
        idx = _counting_order(a, values, group_start, np.empty(values[0] + 1, ids), np.empty(len(a), ids))
        return _scatter(idx, assign, offsets)

    return offsets, fills, build, assign, largest
