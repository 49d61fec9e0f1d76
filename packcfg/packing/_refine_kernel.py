"""Compiled (numba) kernel of bfd's refinement stage (`planning.refine`): minimum bin slack on the length
histogram, each pattern applied with multiplicity.

A pack starts with the largest item left; the rest of it is filled by a bounded subset sum over the items
left (exact when the histogram allows), and that pattern (how many items of each length) is applied to as
many packs as the counts allow. The stage stops at the first pattern that would spend more than the waste
budget, that would hold more than `k_max` items, or once the work budget (DP cells) is spent, and where it is
given a led budget only after that: its patterns go on greedy-led, the largest items first until LED_ROOM
tokens are left and the DP on those; what is left goes to best fit. The subset sum is a bitset DP with binary
splitting of the counts (64 sums a word op).
Plain Python runs the same code (without numba it is not used: too slow to be worth it).
"""

from __future__ import annotations

import numpy as np

# numba is optional: without it the refinement stage is skipped (planning.refine.enabled)
from packcfg.packing._bfd_kernel import HAVE_NUMBA as HAVE_NUMBA
from packcfg.packing._bfd_kernel import compiled, inlined

_ALL = np.uint64(0xFFFFFFFFFFFFFFFF)


@inlined
def _shift_or(dst, src, low, w, n_words):  # type: ignore[no-untyped-def]
    """dst = src | (low << w) over the first n_words words (what passes the last is dropped). Written over
    views that start at 0, so that the loops vectorise, and inlined: indexed as low[i - q] in _bits_dp they
    did not (0.65 -> 0.30 ns a word at 513 words a row; as a call that was not inlined, the 33-word rows at 2k
    cost more than they saved)."""
    q = w >> 6
    r = w & 63
    m = q if q < n_words else n_words
    for i in range(m):
        dst[i] = src[i]
    if q >= n_words:
        return
    k = n_words - q
    d = dst[q:]
    s = src[q:]
    if r == 0:
        for i in range(k):
            d[i] = s[i] | low[i]
        return
    left = np.uint64(r)
    right = np.uint64(64 - r)
    d[0] = s[0] | (low[0] << left)
    d1 = d[1:]
    s1 = s[1:]
    hi = low[1:k]
    for i in range(k - 1):
        d1[i] = s1[i] | (hi[i] << left) | (low[i] >> right)


@compiled
def _bits_dp(values, counts, lo, n_groups, room, limit, stages, ch_g, ch_n):  # type: ignore[no-untyped-def]
    """Bounded subset sum by bitsets: group after group (values descending), each group's c copies split
    into chunks of 1, 2, 4, ... items (binary splitting: every count up to c is a sum of chunks), each chunk
    a 0/1 item; stages[j + 1, n] holds the sums reachable after chunk j (with n items where `limit` >= 0, at
    most `limit` in all: a chunk of m items moves a sum from n to n + m items; with `limit` -1 one bitset for
    any number, n = 0), for the way back. Stops once `room` is reached or the stages are full. Returns (best
    sum <= room, chunks, words written)."""
    n_words = (room >> 6) + 1
    layers = 1 if limit < 0 else limit + 1
    for n in range(layers):
        for i in range(n_words):
            stages[0, n, i] = 0
    stages[0, 0, 0] = 1
    n_ch = 0
    work = 0
    done = False
    for g in range(lo, n_groups):
        v = values[g]
        c = counts[g]
        if v == 0 or c == 0:
            continue
        most = room // v
        if c > most:
            c = most
        if limit >= 0 and c > limit:
            c = limit
        size = 1
        while c > 0 and not done:
            if size > c:
                size = c
            c -= size
            if n_ch + 1 >= stages.shape[0]:
                done = True
                break
            w = size * v
            for n in range(layers):
                src = stages[n_ch, n]
                dst = stages[n_ch + 1, n]
                if limit >= 0 and n < size:  # too few items to take this chunk
                    for i in range(n_words):
                        dst[i] = src[i]
                    continue
                low = stages[n_ch, n if limit < 0 else n - size]
                _shift_or(dst, src, low, w, n_words)
                if (dst[room >> 6] >> np.uint64(room & 63)) & np.uint64(1):
                    done = True
            work += n_words * layers
            ch_g[n_ch] = g
            ch_n[n_ch] = size
            n_ch += 1
            size <<= 1
        if done:
            break
    best = 0
    for n in range(layers):
        last = stages[n_ch, n]
        i = room >> 6
        word = last[i] & (_ALL >> np.uint64(63 - (room & 63)))
        while word == 0 and i > 0 and (i << 6) + 63 > best:
            i -= 1
            word = last[i]
        if word:
            b = 63
            while not (word >> np.uint64(b)) & np.uint64(1):
                b -= 1
            if (i << 6) + b > best:
                best = (i << 6) + b
    return best, n_ch, work


@compiled
def _way_back(stages, ch_g, ch_n, n_ch, best, limited, values, need, touched, n_touch):  # type: ignore[no-untyped-def]
    """Add _bits_dp's path back from `best` to the pattern (need per group, touched kept ascending, from
    n_touch on): with `limited`, through the most items that reach `best`. Returns (n_touch, items added)."""
    n = 0
    if limited:
        n = stages.shape[1] - 1
        while not (stages[n_ch, n, best >> 6] >> np.uint64(best & 63)) & np.uint64(1):
            n -= 1
    items = 0
    s = best
    j_ch = n_ch - 1
    while s > 0:
        # the last chunk without which s is out of reach (with n items) was used
        while (stages[j_ch, n, s >> 6] >> np.uint64(s & 63)) & np.uint64(1):
            j_ch -= 1
        g = ch_g[j_ch]
        m = ch_n[j_ch]
        j_ch -= 1
        if need[g] == 0:
            j = n_touch
            while j > 0 and touched[j - 1] > g:
                touched[j] = touched[j - 1]
                j -= 1
            touched[j] = g
            n_touch += 1
        need[g] += m
        items += m
        if limited:
            n -= m
        s -= m * values[g]
    return n_touch, items


@compiled
def _patterns(
    values,
    counts,
    capacity,
    k_max,
    waste_budget,
    work_budget,
    pat_k,
    pat_end,
    ent_g,
    ent_n,
    stages,
    ch_g,
    ch_n,
    lstages,
    led_room,
    led_budget,
    state,
):  # type: ignore[no-untyped-def]
    """Minimum bin slack over the histogram (values descending, counts). Fills pat_k (packs per pattern),
    pat_end (end of each pattern's entries), ent_g / ent_n (group and items per pack); `counts` ends as
    what is left; stages, ch_g, ch_n are the subset-sum DP's work space (_bits_dp, one bitset a chunk),
    lstages its work space with k_max item counts (a pattern over k_max items is found again with at most
    k_max - 1 besides its first where lstages has room for k_max counts; the stage stops there otherwise).
    Once work_budget is spent, patterns go on, greedy-led, for led_budget more: a pack's items are taken
    largest first until at most led_room tokens are left, and the DP fills only that. `state` holds (patterns,
    entries, packs, waste, DP cells spent: a bitset word counts as 3, the first pattern the item-limited DP
    found or -1): the run starts from it and writes it back, so that a run stopped by its budget goes on,
    called again with a larger one, exactly as one call with that budget would have. Returns whether the
    budget stopped it (False: the stage has ended, by its waste budget, max_per_pack, full tables or no
    items left)."""
    n_groups = values.shape[0]
    need = np.zeros(n_groups, dtype=np.int64)  # items per pack of each group in the pattern (0 between)
    touched = np.empty(capacity + 2, dtype=np.int64)  # the pattern's groups, ascending
    n_pat = state[0]
    n_ent = state[1]
    packs = state[2]
    waste = state[3]
    work = state[4]
    first_limited = state[5]  # the first pattern found by the item-limited DP (-1: none)
    top = 0
    out_of_budget = False
    while True:
        while top < n_groups and counts[top] == 0:
            top += 1
        led = work >= work_budget
        if top == n_groups or n_pat == pat_k.shape[0]:
            break
        if work >= work_budget + led_budget:
            out_of_budget = True
            break
        counts[top] -= 1
        room = capacity - values[top]
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
        # the pattern: the top item, the greedy-led items, then the DP's path back from `best`; its groups
        # kept ascending
        touched[0] = top
        need[top] = 1
        n_touch = 1
        items = 1
        if led:
            g = lo
            while room > led_room:
                while g < n_groups and (counts[g] == 0 or values[g] > room):
                    g += 1
                if g == n_groups:
                    break
                counts[g] -= 1
                room -= values[g]
                items += 1
                if need[g] == 0:
                    touched[n_touch] = g  # groups come in ascending order here, the top first
                    n_touch += 1
                need[g] += 1
            work += g - lo
            while lo < n_groups and values[lo] > room:
                lo += 1
        best, n_ch, words = _bits_dp(values, counts, lo, n_groups, room, -1, stages, ch_g, ch_n)
        work += words * 3  # a word op of the shift-or costs about what 3 cells of a plain DP do
        for j in range(n_touch):  # what the top and the greedy-led items took, back
            counts[touched[j]] += need[touched[j]]
        slack = room - best
        if waste + slack > waste_budget:
            for j in range(n_touch):
                need[touched[j]] = 0
            break
        n_touch, added = _way_back(stages, ch_g, ch_n, n_ch, best, False, values, need, touched, n_touch)
        items += added
        if items > k_max and lstages.shape[1] >= k_max and not led:
            # again with at most k_max - 1 items besides the top: one bitset per item count
            if first_limited < 0:
                first_limited = n_pat
            for j in range(n_touch):
                need[touched[j]] = 0
            q = k_max - 1
            counts[top] -= 1
            best, n_ch, words = _bits_dp(values, counts, lo, n_groups, room, q, lstages, ch_g, ch_n)
            work += words * 3 // min(q + 1, LIMITED_SHARE)
            counts[top] += 1
            slack = room - best
            if waste + slack > waste_budget:
                break
            touched[0] = top
            need[top] = 1
            n_touch, items = _way_back(lstages, ch_g, ch_n, n_ch, best, True, values, need, touched, 1)
            items += 1
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
    state[0] = n_pat
    state[1] = n_ent
    state[2] = packs
    state[3] = waste
    state[4] = work
    state[5] = first_limited
    return out_of_budget


@compiled
def write_patterns(pat_k, pat_end, ent_g, ent_n, group_start, ids, out, start, rest_ids):  # type: ignore[no-untyped-def]
    """The patterns' packs written into out[start:] (item i of the histogram's items, in decreasing-length
    order, written as ids[i]; a pattern takes each group's first items), and what they leave, group after
    group, into rest_ids; returns where the packs end in out. Raises ValueError where out or rest_ids has
    not exactly the room the patterns and the histogram need (numba does not check the writes)."""
    items = 0
    e0 = 0
    for j in range(pat_k.shape[0]):
        for e in range(e0, pat_end[j]):
            items += pat_k[j] * ent_n[e]
        e0 = pat_end[j]
    n_items = group_start[group_start.shape[0] - 1]
    if items > n_items or rest_ids.shape[0] != n_items - items or start + n_items > out.shape[0]:
        raise ValueError("write_patterns: the output has not the room the patterns and the histogram need")
    taken = np.zeros(group_start.shape[0] - 1, np.int64)
    pos = start
    e0 = 0
    for j in range(pat_k.shape[0]):
        e1 = pat_end[j]
        for _ in range(pat_k[j]):
            for e in range(e0, e1):
                g = ent_g[e]
                for _ in range(ent_n[e]):
                    out[pos] = ids[group_start[g] + taken[g]]
                    taken[g] += 1
                    pos += 1
        e0 = e1
    k = 0
    for g in range(taken.shape[0]):
        for i in range(group_start[g] + taken[g], group_start[g + 1]):
            rest_ids[k] = ids[i]
            k += 1
    return pos


# once the DP budget is spent, patterns go on greedy-led (for a budget of their own, refine.LED_SHARE): a
# pack's items are taken largest first until at most this many tokens are left, and the DP fills only that, so
# a pattern costs about capacity / LED_ROOM times fewer words (at capacities up to LED_ROOM it is the plain
# DP). 64k samples at 32k, where the budget covers the first 72-120 patterns (1.5k-2.3k of ~10k packs): 600 /
# 999 distinct +7 / +8 -> +3 / +4 over LB; with 2,048 left +5 / +7
LED_ROOM = 4096
# patterns the stage may apply, per distinct length (a pattern need not use up a group: counts // need)
PAT_PER_GROUP = 8
# the bitset DP's stages (sums reachable after each chunk, kept for the way back) hold at most this many words:
# under 32 MiB, glibc's largest dynamic mmap threshold on 64-bit. A block that size, once freed, raises the
# threshold to it, so the next plan's stages come from the heap, whose pages stay mapped, rather than from a
# fresh mmap whose touched rows fault in again on every plan. At 1 << 22 words and a row (32 MiB + 16 KiB at
# 128k), 150k samples of 600 distinct at 128k took 1,800-2,150 faults and 9.2-9.7 ms a plan, warm; under it
# 0-48 faults and 6.1-6.2 ms (64k samples of 999 distinct at 32k: 8.0-8.3 -> 6.6-6.9 ms; the same plans)
STAGE_WORDS = (1 << 22) - (1 << 14)
# up to this max_per_pack a pattern with more items is found again by the item-limited DP (its work grows
# with the limit); above it the stage stops at such a pattern, as it did before
LIMITED_MAX_ITEMS = 16
# the item-limited DP's words are charged to the work budget divided by min(k_max, LIMITED_SHARE): so where
# max_per_pack binds the stage may spend up to that many times its usual DP time (64k samples, 600 distinct
# at 4k with 8 a pack: charged in full +139 packs over LB, 13.9 ms; not at all +55, 22 ms; 999 distinct at 2k
# with 4 a pack +915 / +220)
LIMITED_SHARE = 4


class Workspace:
    """The bitset DP's rows, shared by every `Patterns` of one plan (bfd's refinement stage makes one per plan,
    nested stages included). A pattern's DP writes its rows afresh and reads them back before the next
    pattern, so searches that take turns can share them; what sharing saves is the pages: at 128k a search
    writes up to 13 MB of rows, and a fresh page costs ~4 us on the shared VM measured (4,095 distinct at 128k
    with 150k samples: two searches, 6,544 page faults). Buffers grow to the largest asked for and are never
    shrunk (a `Patterns` asks for the most rows any search at its capacity may take, so the searches of one
    plan get one buffer); one plan at a time (not thread-safe)."""

    def __init__(self) -> None:
        self._flat: dict[str, np.ndarray] = {}

    def rows(self, name: str, shape: tuple[int, ...], dtype: type) -> np.ndarray:
        """An array of `shape` over the buffer `name` (np.empty: its values are whatever was there)."""
        size = int(np.prod(shape))
        buf = self._flat.get(name)
        if buf is None or buf.shape[0] < size or buf.dtype != dtype:
            buf = self._flat[name] = np.empty(size, dtype=dtype)
        return buf[:size].reshape(shape)


class Patterns:
    """Minimum bin slack on a histogram, run in steps: `run(work_budget, led_budget)` goes on to that budget
    (DP cells in all, from the start) and says whether the budget stopped it, so the caller may look at the
    plan so far before it spends more; the patterns are those one run with the last budget would have found.
    After the work budget, patterns go on greedy-led for led_budget more (LED_ROOM; not where k_max is at
    most LIMITED_MAX_ITEMS: the item-limited DP does not follow greedy-led items). `workspace`: where the DP's
    rows live (Workspace; its own where None)."""

    def __init__(
        self,
        values: np.ndarray,
        counts: np.ndarray,
        capacity: int,
        k_max: int,
        waste_budget: int,
        workspace: Workspace | None = None,
    ):
        self.values = np.ascontiguousarray(values, dtype=np.int64)
        self.left = np.array(counts, dtype=np.int64)  # what the patterns so far leave of each group
        self.capacity = int(capacity)
        self.k_max = int(k_max)
        self.waste_budget = int(waste_budget)
        n = len(self.values)
        # the stage stops when these are full (a pattern holds at most one entry per group)
        n_pat = PAT_PER_GROUP * (n + 1)
        self._pat_k = np.empty(n_pat, dtype=np.int64)
        self._pat_end = np.empty(n_pat, dtype=np.int64)
        self._ent_g = np.empty(min(n, 64) * n_pat + 1, dtype=np.int64)
        self._ent_n = np.empty_like(self._ent_g)
        # the bitset DP's stages: one row of capacity / 64 + 1 words per chunk, at most STAGE_WORDS in all
        n_words = (self.capacity >> 6) + 1
        rows = max(2, min(n * (self.capacity.bit_length() + 1) + 1, STAGE_WORDS // n_words))
        if workspace is None:
            self._stages = np.empty((rows, 1, n_words), dtype=np.uint64)
            self._ch_g = np.empty(rows, dtype=np.int64)
            self._ch_n = np.empty(rows, dtype=np.int64)
        else:  # as many rows as any search at this capacity may take (np.empty: pages are touched as written)
            most = max(2, STAGE_WORDS // n_words)
            self._stages = workspace.rows("stages", (most, 1, n_words), np.uint64)[:rows]
            self._ch_g = workspace.rows("ch_g", (most,), np.int64)[:rows]
            self._ch_n = workspace.rows("ch_n", (most,), np.int64)[:rows]
        # the item-limited DP's stages (k_max item counts a chunk) where max_per_pack is small enough to bind
        if self.k_max <= LIMITED_MAX_ITEMS:
            l_rows = max(2, min(rows, STAGE_WORDS // (n_words * self.k_max)))
            shape = (l_rows, self.k_max, n_words)
            if workspace is None:
                self._lstages = np.empty(shape, dtype=np.uint64)
            else:
                most = max(2, STAGE_WORDS // (n_words * self.k_max))
                lstages = workspace.rows(f"lstages {self.k_max}", (most, self.k_max, n_words), np.uint64)
                self._lstages = lstages[:l_rows]
        else:
            self._lstages = np.empty((1, 1, 1), dtype=np.uint64)
        # patterns, entries, packs, waste, DP cells spent, the first pattern of the item-limited DP
        self._state = np.array([0, 0, 0, 0, 0, -1], dtype=np.int64)
        self.more = True  # False once the stage has ended other than by its budget

    def run(self, work_budget: int, led_budget: int = 0) -> bool:
        """Go on to work_budget DP cells (and led_budget more greedy-led); whether the budget stopped it."""
        if self.more:
            self.more = bool(
                _patterns(
                    self.values,
                    self.left,
                    self.capacity,
                    self.k_max,
                    self.waste_budget,
                    int(work_budget),
                    self._pat_k,
                    self._pat_end,
                    self._ent_g,
                    self._ent_n,
                    self._stages,
                    self._ch_g,
                    self._ch_n,
                    self._lstages,
                    LED_ROOM,
                    int(led_budget) if self.k_max > LIMITED_MAX_ITEMS else 0,
                    self._state,
                )
            )
        return self.more

    @property
    def pat_k(self) -> np.ndarray:
        """Packs of each pattern."""
        return self._pat_k[: self._state[0]]

    @property
    def pat_end(self) -> np.ndarray:
        """The end of each pattern's entries."""
        return self._pat_end[: self._state[0]]

    @property
    def ent_g(self) -> np.ndarray:
        """Each entry's group (index into values)."""
        return self._ent_g[: self._state[1]]

    @property
    def ent_n(self) -> np.ndarray:
        """Each entry's items per pack."""
        return self._ent_n[: self._state[1]]

    @property
    def packs(self) -> int:
        return int(self._state[2])

    @property
    def waste(self) -> int:
        return int(self._state[3])

    @property
    def work(self) -> int:
        """DP cells spent so far."""
        return int(self._state[4])

    @property
    def first_limited(self) -> int:
        """The first pattern over max_per_pack found again by the item-limited DP (-1: none)."""
        return int(self._state[5])


def patterns(
    values: np.ndarray,
    counts: np.ndarray,
    capacity: int,
    k_max: int,
    waste_budget: int,
    work_budget: int,
    led_budget: int = 0,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, int, int, int, int]:
    """Run minimum bin slack on the histogram, for work_budget DP cells and then led_budget more greedy-led
    (`Patterns`, in one step). Returns (pat_k, pat_end, ent_g, ent_n, left, packs, waste, work, first_limited):
    the patterns, their multiplicities, what is left of each group, the DP cells spent, and the first pattern
    over max_per_pack found again by the item-limited DP (-1: none; where the stage stopped before it could
    do that)."""
    run = Patterns(values, counts, capacity, k_max, waste_budget)
    run.run(work_budget, led_budget)
    return (
        run.pat_k,
        run.pat_end,
        run.ent_g,
        run.ent_n,
        run.left,
        run.packs,
        run.waste,
        run.work,
        run.first_limited,
    )
