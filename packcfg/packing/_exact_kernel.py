"""Compiled (numba) kernel of the refinement stage's exact try (`planning.refine`, where best fit misses the
target): exact packs built most constrained length first, on the length histogram.

First (`pairs_first`), every exact pair: a sample of length x >= capacity / 2 with one of capacity - x, as many
such packs as the two counts allow (capacity / 2 with itself; a sample of the capacity alone). Some best plan
holds all of them (Martello and Toth's dominance, as in their reduction MTRP): where x and y = capacity - x sit
in different packs, x with others S (sum(S) <= y), swapping S and y leaves {x, y} exactly full and puts S where
y was, in no more room. Without `max_per_pack` that is a proof; with it the swap may exceed the limit and the
pairs are a heuristic. On 999 distinct lengths at 2k they are what the most constrained order misses: with them
the exact packs and L2 of what they leave come to LB + 0 at 64k samples (LB + 9 without).

`near_patterns` (`_near`) goes on where the exact packs' rest plans badly: near-exact packs of up to four
samples, filled to within a slack of the capacity, again most constrained length first (completions by one, two
or three samples, counted by the histogram convolved with itself once and twice); planning.refine runs it on the
rest only where the plan of the exact packs and their rest misses the target.

After them, for every length left, count its exact completions by one or two other samples: a sample of
capacity - v, or a pair summing to it (the pair-sum counts, the histogram convolved with itself), and order the
lengths by their completions per sample, fewest first (the most constrained, as in exact-cover search; equal
fractions keep the shorter length first). Then drain each length in that order: complete it with the single
sample if there is one, else with the pair whose rarer length has the most samples left, apply that exactly
full pack to as many samples as `share` of the rarest of its lengths allows (at least once), and go on until
the length has no sample or no completion left; what is left goes to best fit. The order is computed once:
until stop 53 the kernel recomputed it after every pack (the pair sums updated, every length scanned again: a
pass over the lengths a pack, which was most of the stage's time with 2,000-4,095 distinct lengths), and took
the pack's length only once before looking again. Computed once and drained, the exact packs cost the pair sums
and a completion search a pack, and the plans are better on the whole (docs/planner-history.md, "The most
constrained order computed once"). docs/planner-history.md, "The lead: most constrained first", has what this
order does that best fit's does not; `bench/most_constrained.py` keeps the NumPy reference.

With `disjoint`, a length's completions by two samples are counted as those that share no sample (over the
pairs x + y of its room, min(cnt[x], cnt[y]); cnt[x] // 2 where x = y), not as products of counts: a length
with thousands of samples may have millions of pairs that sum to its room and too few that share no sample to
complete each of its samples once (64k samples of 800 distinct at 2k, seed 3: 1,510, with 4,501 samples, has
1.75M ordered pairs and 4,208 that share none). planning.refine makes such packs once more where the
plan is still over its target.

With `tolerance` t > 0 a completion may leave up to t tokens of slack: a length's completions are counted over
capacity - v - s for s in 0..t, and it is completed at the least s that has one (exact where it can be);
planning.refine makes such packs with t = 1 where the exact ones miss (the cutting-stock LP's plans of those
inputs pair long samples with one other at a token or two of slack). The counts stay within the integer
comparison's range: every ordered pair sums to one room, so a length's completions over all its rooms are at
most N**2 + 2 N + 1, as with t = 0.

The pair sums are counted in one of three ways, the same sums any way (so the same packs): by FFT (NumPy,
outside the kernel, on the smallest 2**a 3**b 5**c points that hold every sum; products of counts only, under
EXACT_COMPARE_MAX_ITEMS samples), by room, a pass over contiguous slices of the counts for every length with
samples (they vectorise, about capacity x lengths steps), or by pairs of lengths with samples (lengths**2 / 2
scattered writes); `_sums_by` takes the cheapest by measured costs.

The completion search (`_completion`) reads bitsets: a bit a length with samples and the same bits reversed,
so that the pairs of a room are their AND at a shift, 64 lengths a word, room / 128 words a search (since
stop 54; before, a pass over every length up to half the room, which was most of the kernel's time: 4,091
lengths at 32k, 30k samples, 10.4 -> 3.9 ms; docs/planner-history.md, "The near pairs on near-continuous
lengths at 8k-16k").
"""

from __future__ import annotations

import numpy as np

from packcfg.packing._bfd_kernel import clz, compiled, ctz, inlined

_ALL = np.uint64(0xFFFFFFFFFFFFFFFF)  # every bit of a word (the closed packs' masks)

# Under this many samples the kernel settles lengths whose completions per sample round to the same float by
# their fractions, compared as integer cross products (a length has at most N**2 pair completions and N samples,
# so no product passes N**3 < 2**63); from it, such ties go to the shorter length.
EXACT_COMPARE_MAX_ITEMS = 1 << 21
# the near-exact packs (_near) count completions by three samples in int64 (up to N**3, and 3 N**3 while they
# are updated): they run on what the exact packs leave only under this many samples
NEAR_MAX_ITEMS = 1 << 20
# The pair sums by room (contiguous passes that vectorise) where the capacity spans at most this many times the
# distinct lengths, by pairs of lengths above. The same sums either way; the exact kernel on 30k samples
# (stop 53): by room 0.7-0.9x the time at a span of 1.4-4.1, 1.2x at 8, 1.8-2.9x at 16-32.
ROOMS_MAX_SPAN = 6
# The completion search ANDs a search's words in one pass first (`_completion`) where the capacity spans at least
# this many times the lengths with samples: there most words have no candidate. The same pair either way; a search
# (stop 57, 30k-150k samples): 128k with 8,181 lengths 2.6 -> 1.5 us, 64k with 8,191 3.6 -> 2.6 us; 32k with 8,191
# (span 4) 2.3 -> 2.4 us, 8k with 4,095 (span 2) 1.0 -> 1.1 us.
SPARSE_SEARCH_SPAN = 6
# how the exact kernel counts the pair sums (`_sums_by`): in it by room or by pairs of lengths, or given (FFT)
SUMS_BY_ROOM, SUMS_BY_LENGTH, SUMS_GIVEN = 0, 1, 2
# the costs `_sums_by` weighs (ns, this machine): a point of the FFT's size (rfft, irfft and rounding: 13 at 2**15,
# 33 at 2**17-2**19; on the sizes _fft_size gives since stop 54, 14-45 at 16,875-262,440 points), a pair of lengths
# counted in the kernel (1.4)
FFT_NS_A_POINT = 30
PAIR_NS = 1.4
# The kernel's cost (`kernel_ns`), which planning.refine charges to its budget before it runs the kernel: fitted
# on 250 runs (stop 55: 300-8,191 distinct lengths drawn as the ratio table's, 2k-128k, 30k / 150k samples, the
# five ways refine runs), within 0.37-2.3x of the time measured, median 1.0
SUMS_FACTOR = 2
ROOM_NS = 0.07
SEARCH_NS_A_WORD = 0.25
NS_A_LENGTH = 60


@compiled
def _pack_of(lengths, per_pack, s0, s1, s2, s3):  # type: ignore[no-untyped-def]
    """A pack of the samples of lengths s0..s3 (-1: no sample) as its distinct lengths, lengths[:m], and the
    samples of each, per_pack[:m]; returns m."""
    m = 0
    for length in (s0, s1, s2, s3):
        if length < 0:
            continue
        for i in range(m + 1):
            if i == m:
                lengths[m] = length
                per_pack[m] = 1
                m += 1
                break
            if lengths[i] == length:
                per_pack[i] += 1
                break
    return m


@inlined
def _histogram(present, counts, cnt):  # type: ignore[no-untyped-def]
    """cnt[length] = its samples; returns group[length], the length's index in `present` (-1: none)."""
    group = np.full(cnt.shape[0], -1, np.int64)
    for g in range(present.shape[0]):
        cnt[present[g]] = counts[g]
        group[present[g]] = g
    return group


@inlined
def _pairs_first(present, cnt, group, capacity, pat_k, pat_end, ent_g, ent_n):  # type: ignore[no-untyped-def]
    """Every exact pair (a sample of x >= capacity / 2 with one of capacity - x; x = capacity alone) as many
    times as the counts allow, into the patterns from the first; cnt falls by what they take. Returns
    (n_pat, n_ent, packs)."""
    n_pat = 0
    n_ent = 0
    packs = 0
    for g in range(present.shape[0]):
        x = present[g]
        y = capacity - x
        if y > x or cnt[x] == 0 or n_pat == pat_k.shape[0]:
            continue
        if y == 0:
            times = cnt[x]
            ent_g[n_ent] = g
            ent_n[n_ent] = 1
            n_ent += 1
            cnt[x] = 0
        elif y == x:
            times = cnt[x] // 2
            if times == 0:
                continue
            ent_g[n_ent] = g
            ent_n[n_ent] = 2
            n_ent += 1
            cnt[x] -= 2 * times
        else:
            times = min(cnt[x], cnt[y])
            if times == 0:
                continue
            ent_g[n_ent] = g
            ent_n[n_ent] = 1
            ent_g[n_ent + 1] = group[y]
            ent_n[n_ent + 1] = 1
            n_ent += 2
            cnt[x] -= times
            cnt[y] -= times
        pat_k[n_pat] = times
        pat_end[n_pat] = n_ent
        n_pat += 1
        packs += times
    return n_pat, n_ent, packs


@inlined
def _times(cnt, lengths, per_pack, m, share):  # type: ignore[no-untyped-def]
    """How many times a pack of lengths[:m] (per_pack[:m] samples each) is taken: `share` of the samples of
    its rarest length (at least once), as far as every count allows."""
    rarest = cnt[lengths[0]]
    for i in range(1, m):
        rarest = min(rarest, cnt[lengths[i]])
    times = max(1, int(share * rarest))
    for i in range(m):
        times = min(times, cnt[lengths[i]] // per_pack[i])
    return times


@inlined
def _record(group, lengths, per_pack, m, times, n_pat, n_ent, pat_k, pat_end, ent_g, ent_n):  # type: ignore[no-untyped-def]
    """The pack of lengths[:m] taken `times` times, as pattern n_pat from entry n_ent on; returns the next
    entry."""
    for i in range(m):
        ent_g[n_ent] = group[lengths[i]]
        ent_n[n_ent] = per_pack[i]
        n_ent += 1
    pat_k[n_pat] = times
    pat_end[n_pat] = n_ent
    return n_ent


@inlined
def _best_pair(cnt, room, w, m, most, f0, f1):  # type: ignore[no-untyped-def]
    """The candidates of word w (bits of m: lengths x whose room - x may have samples) against the best pair so
    far (most: its rarer length's samples; f0, f1): the pair whose rarer length has the most samples left, the
    first (smallest x) among equals."""
    while m:
        x = (w << 6) + ctz(m)
        m &= m - np.uint64(1)
        y = room - x
        if cnt[x] == 0 or cnt[y] <= (1 if y == x else 0):
            continue  # a bit left on (the length being completed, or run out since)
        c = min(cnt[x], cnt[y])
        if c > most:
            most = c
            f0 = x
            f1 = y
    return most, f0, f1


@compiled
def _completion(cnt, hb, rb, capacity, room, words, nonzero):  # type: ignore[no-untyped-def]
    """A completion of `room` tokens: (-2, -1) where room is 0 (the sample fills its pack alone), (y, -1) for a
    single sample of it, (x, y) for the pair x + y = room whose rarer length has the most samples left (x
    smallest among equals), (-1, -1) for none. hb: a bit a length that may have samples; rb: the same bits
    reversed (bit j for length capacity - j), so that the lengths x <= room / 2 whose room - x may also have
    samples are hb & rb shifted by capacity - room, 64 at a word: the search reads room / 128 words, not every
    length (cnt decides among them).

    `words` given (work arrays of hb's size; SPARSE_SEARCH_SPAN), the words are ANDed in one pass first, which
    vectorises (the shift is the same for every word of a search), and only the words with a bit are read
    again: where the lengths are sparse most words have none, and a branch a word on that mispredicts (8,181
    lengths at 128k, 64k samples: 790 words and 124 candidates a search, 2.6 -> 1.5 us). The same pair either
    way."""
    if room == 0:
        return -2, -1
    if cnt[room] > 0:
        return room, -1
    most = -1
    f0 = -1
    f1 = -1
    half = room >> 1
    d = capacity - room  # room - x has samples where rb's bit x + d is set
    last = half >> 6
    # the last word holds lengths up to half only
    tail = (np.uint64(1) << np.uint64((half & 63) + 1)) - np.uint64(1) if (half & 63) < 63 else ~np.uint64(0)
    if words.shape[0] == 0:
        for w in range(last + 1):
            at = (w << 6) + d
            q = at >> 6
            b = at & 63
            r = rb[q] if b == 0 else (rb[q] >> np.uint64(b)) | (rb[q + 1] << np.uint64(64 - b))
            m = hb[w] & r
            if w == last:
                m &= tail
            most, f0, f1 = _best_pair(cnt, room, w, m, most, f0, f1)
        return f0, f1
    q0 = d >> 6
    if d & 63 == 0:
        for w in range(last + 1):
            words[w] = hb[w] & rb[w + q0]
    else:
        lo = np.uint64(d & 63)
        hi = np.uint64(64 - (d & 63))
        for w in range(last + 1):
            words[w] = hb[w] & ((rb[w + q0] >> lo) | (rb[w + q0 + 1] << hi))
    words[last] &= tail
    k = 0
    for w in range(last + 1):  # the words with a candidate, without a branch
        nonzero[k] = w
        k += words[w] != 0
    for i in range(k):
        w = nonzero[i]
        most, f0, f1 = _best_pair(cnt, room, w, words[w], most, f0, f1)
    return f0, f1


@inlined
def _bit_set(hb, rb, capacity, length):  # type: ignore[no-untyped-def]
    """`length` has samples: its bit on in hb and in rb (bit capacity - length)."""
    hb[length >> 6] |= np.uint64(1) << np.uint64(length & 63)
    j = capacity - length
    rb[j >> 6] |= np.uint64(1) << np.uint64(j & 63)


@inlined
def _bit_clear(hb, rb, capacity, length):  # type: ignore[no-untyped-def]
    """`length` has no sample left: its bit off in hb and in rb."""
    hb[length >> 6] &= ~(np.uint64(1) << np.uint64(length & 63))
    j = capacity - length
    rb[j >> 6] &= ~(np.uint64(1) << np.uint64(j & 63))


@inlined
def _pair_sums_by_room(cnt, capacity, disjoint, pair_sums):  # type: ignore[no-untyped-def]
    """pair_sums[t] for t <= capacity, in passes over contiguous slices (one a length with samples, each
    vectorises): the ordered products of counts over x + y = t, or (`disjoint`) the pairs that share no
    sample, min(cnt[x], cnt[y]) an unordered pair and cnt[x] // 2 for x + x."""
    n = capacity + 1
    for x in range(n):
        c = cnt[x]
        if c == 0:
            continue
        if disjoint:
            if 2 * x <= capacity:
                pair_sums[2 * x] += c // 2
            if 2 * x + 1 <= capacity:  # x + y for y over x + 1..capacity - x
                dst = pair_sums[2 * x + 1 :]
                src = cnt[x + 1 : n - x]
                for j in range(src.shape[0]):
                    dst[j] += min(c, src[j])
        else:
            dst = pair_sums[x:]
            src = cnt[: n - x]
            for j in range(src.shape[0]):
                dst[j] += c * src[j]


@inlined
def _pair_sums_by_length(cnt, nz, m_nz, capacity, disjoint, pair_sums):  # type: ignore[no-untyped-def]
    """pair_sums as `_pair_sums_by_room` gives them, over the pairs of lengths with samples (nz[:m_nz],
    ascending): fewer steps where the capacity spans many times the lengths, each a write at a rising index."""
    cz = np.empty(m_nz, np.int64)  # cz[j] = cnt[nz[j]]: read in order
    for j in range(m_nz):
        cz[j] = cnt[nz[j]]
    for i in range(m_nz):
        x = nz[i]
        c = cz[i]
        if 2 * x > capacity:
            break
        pair_sums[2 * x] += c // 2 if disjoint else c * c
        end = i + 1  # the pairs (x, y) with x < y and x + y <= capacity: nz[i + 1:end]
        while end < m_nz and x + nz[end] <= capacity:
            end += 1
        if disjoint:
            for j in range(i + 1, end):
                pair_sums[x + nz[j]] += min(c, cz[j])
        else:
            for j in range(i + 1, end):
                pair_sums[x + nz[j]] += 2 * c * cz[j]


@compiled
def _exact_start(present, counts, capacity, pairs_first, pat_k, pat_end, ent_g, ent_n):  # type: ignore[no-untyped-def]
    """The histogram cnt by length and group (each length's index in `present`), and with `pairs_first` every
    exact pair taken from it: (cnt, group, n_pat, n_ent, packs)."""
    cnt = np.zeros(capacity + 1, np.int64)
    group = _histogram(present, counts, cnt)
    n_pat, n_ent, packs = 0, 0, 0
    if pairs_first:  # every exact pair first: some best plan holds them all (the module's docstring)
        n_pat, n_ent, packs = _pairs_first(present, cnt, group, capacity, pat_k, pat_end, ent_g, ent_n)
    return cnt, group, n_pat, n_ent, packs


@compiled
def _exact(
    cnt,
    group,
    capacity,
    share,
    exact_compare,
    tolerance,
    disjoint,
    sums_by,
    pair_sums,
    sparse,
    n_pat,
    n_ent,
    packs,
    pat_k,
    pat_end,
    ent_g,
    ent_n,
):  # type: ignore[no-untyped-def]
    """The exact packs after the pairs (`_exact_start`), in the most constrained order; `pair_sums` counted here
    by room (sums_by SUMS_BY_ROOM) or by pairs of lengths (SUMS_BY_LENGTH), or given (SUMS_GIVEN); `sparse`: the
    completion search ANDs its words in one pass first (_completion)."""
    n = capacity + 1
    nz = np.empty(np.count_nonzero(cnt), np.int64)  # the lengths with samples left, ascending
    m_nz = 0
    for length in range(n):
        if cnt[length] > 0:
            nz[m_nz] = length
            m_nz += 1
    if sums_by == SUMS_BY_ROOM:
        _pair_sums_by_room(cnt, capacity, disjoint, pair_sums)
    elif sums_by == SUMS_BY_LENGTH:
        _pair_sums_by_length(cnt, nz, m_nz, capacity, disjoint, pair_sums)
    single = 1 if disjoint else 2  # what one sample of the room counts (an ordered pair counts each way)
    # every length's completions (within `tolerance` tokens of slack) and the order: fewest per sample first
    nums = np.zeros(m_nz, np.int64)
    keys = np.empty(m_nz, np.float64)
    for i in range(m_nz):
        u = nz[i]
        room = capacity - u
        for s in range(min(tolerance, room) + 1):
            nums[i] += pair_sums[room - s] + single * cnt[room - s] + (1 if s == room and s > 0 else 0)
        keys[i] = nums[i] / cnt[u] if (nums[i] > 0 or room == 0) else np.inf
    order = np.argsort(keys, kind="mergesort")  # stable: the first length, ascending, among equal keys
    if exact_compare:  # floats that round alike settle by their fractions (an insertion pass; near-sorted)
        for a in range(1, m_nz):
            j = a
            while j > 0:
                p, q = order[j - 1], order[j]
                if keys[p] != keys[q] or keys[p] == np.inf:
                    break
                if nums[q] * cnt[nz[p]] >= nums[p] * cnt[nz[q]]:
                    break  # in order (equal fractions keep the first length first)
                order[j - 1], order[j] = q, p
                j -= 1
    lengths = np.zeros(4, np.int64)
    per_pack = np.zeros(4, np.int64)
    by_order = nz[order]  # the lengths in the order
    hb = np.zeros((n >> 6) + 2, np.uint64)  # a bit a length with samples (_completion)
    rb = np.zeros((n >> 6) + 3, np.uint64)  # the same, reversed: bit capacity - length
    for i in range(m_nz):
        _bit_set(hb, rb, capacity, nz[i])
    words = np.empty(hb.shape[0] if sparse else 0, np.uint64)  # the words ANDed first (_completion)
    nonzero = np.empty(hb.shape[0] if sparse else 0, np.int64)
    for k in range(by_order.shape[0]):
        i = order[k]
        if keys[i] == np.inf:
            break  # no completion left for this length, nor for any after it
        v = by_order[k]
        while cnt[v] > 0:  # this length's exact packs, as long as it has samples and completions
            if n_pat == pat_k.shape[0]:
                return n_pat, n_ent, packs
            # the sample being completed is not its own completion (its bit may stay on: cnt decides)
            cnt[v] -= 1
            f0, f1 = _completion(cnt, hb, rb, capacity, capacity - v, words, nonzero)
            s = 0
            while f0 == -1 and s < min(tolerance, capacity - v):  # the least slack s with a completion
                s += 1
                f0, f1 = _completion(cnt, hb, rb, capacity, capacity - v - s, words, nonzero)
            cnt[v] += 1
            if f0 == -1:
                break
            m = _pack_of(lengths, per_pack, v, f0, f1, -1)
            times = _times(cnt, lengths, per_pack, m, share)
            for j in range(m):
                cnt[lengths[j]] -= times * per_pack[j]
                if cnt[lengths[j]] == 0:
                    _bit_clear(hb, rb, capacity, lengths[j])
            n_ent = _record(group, lengths, per_pack, m, times, n_pat, n_ent, pat_k, pat_end, ent_g, ent_n)
            n_pat += 1
            packs += times
    return n_pat, n_ent, packs


@compiled
def _near(present, counts, capacity, slack, pat_k, pat_end, ent_g, ent_n, n_pat, n_ent):  # type: ignore[no-untyped-def]
    """Near-exact packs of up to four samples on what the exact packs leave (present: distinct lengths, counts:
    samples left of each): a pack's fill is within `slack` of the capacity. As `_exact`, the length with the
    fewest completions per sample first, but a completion is one, two or three samples (P1 + P2 + P3, the
    histogram convolved with itself once and twice, ordered, kept up to date as counts change) summing to
    capacity - u - s for any s in 0..slack; it is completed at the least slack it can be, by the completion
    whose rarest length has the most samples left, and that pack applied as often as the counts allow. A length
    with no completion is set aside. Appends to the patterns from (n_pat, n_ent); returns (n_pat, n_ent,
    packs). The counts of completions are int64: near_patterns keeps the samples under NEAR_MAX_ITEMS. The
    search for a completion goes over pairs x <= y, the third sample the longest z <= room - x - y (a pointer
    that only moves down as y grows), and once an exact completion is found it passes over every x and y with
    no more samples than its rarest length has (none of theirs could be taken instead)."""
    n = capacity + 1
    cnt = np.zeros(n, np.int64)
    group = np.full(n, -1, np.int64)
    for g in range(present.shape[0]):
        if counts[g] > 0:
            cnt[present[g]] = counts[g]
            group[present[g]] = g
    nz = np.empty(present.shape[0], np.int64)  # lengths with samples left, ascending
    m_nz = 0
    for length in range(n):
        if cnt[length] > 0:
            nz[m_nz] = length
            m_nz += 1
    p2 = np.zeros(n, np.int64)  # ordered pairs by sum (up to the capacity)
    for i in range(m_nz):
        for j in range(m_nz):
            t = nz[i] + nz[j]
            if t > capacity:
                break
            p2[t] += cnt[nz[i]] * cnt[nz[j]]
    p3 = np.zeros(n, np.int64)  # ordered triples by sum
    for i in range(m_nz):
        x = nz[i]
        c = cnt[x]
        for t in range(x, n):
            p3[t] += c * p2[t - x]
    aside = np.zeros(n, np.bool_)
    lengths = np.zeros(4, np.int64)
    per_pack = np.zeros(4, np.int64)
    delta = np.zeros(4, np.int64)
    old = np.zeros(n, np.int64)
    packs = 0
    while n_pat < pat_k.shape[0]:
        v = -1
        best = 0.0
        k = 0
        for i in range(m_nz):  # the first minimum of completions per sample, ascending
            u = nz[i]
            if cnt[u] == 0:
                continue
            nz[k] = u
            k += 1
            if aside[u]:
                continue
            num = 0
            for s in range(slack + 1):
                r = capacity - u - s
                if r < 0:
                    break
                num += cnt[r] + p2[r] + p3[r] + (1 if r == 0 else 0)
            if num == 0:
                aside[u] = True  # counts only fall: it never has one again
                continue
            if v < 0 or num / cnt[u] < best:  # (floats: num * cnt could pass 2**63 at 1M samples)
                best = num / cnt[u]
                v = u
        m_nz = k
        if v < 0:
            break
        room = capacity - v
        cnt[v] -= 1
        # the completion: least slack, then the most samples of its rarest length; f = (x, y, z), -1 unused
        best_s = slack + 1
        best_most = -1
        f0 = -1
        f1 = -1
        f2 = -1
        if room <= slack:
            best_s = room
            best_most = 1 << 62
        for i in range(m_nz):
            x = nz[i]
            if x > room or cnt[x] == 0:
                if x > room:
                    break
                continue
            if best_s == 0 and cnt[x] <= best_most:
                continue  # an exact completion is found, and none with x has more samples of its rarest
            s = room - x  # x alone
            if s <= slack and (s < best_s or s == best_s and cnt[x] > best_most):
                best_s = s
                best_most = cnt[x]
                f0, f1, f2 = x, -1, -1
            # y ascending, but only where it can complete: y <= (room - x) / 2 (a triple, z >= y) or
            # y >= room - x - slack (a pair); between the two there is nothing to find
            j = i
            # qz: the first length over t = room - x - y, for the triples below; t only falls as y grows, so
            # it only moves down (found once for y = x, then walked)
            lo = i
            hi = m_nz
            while lo < hi:
                mid = (lo + hi) >> 1
                if nz[mid] > room - 2 * x:
                    hi = mid
                else:
                    lo = mid + 1
            qz = lo
            while j < m_nz:
                y = nz[j]
                if x + y > room:
                    break
                if 2 * y > room - x and x + y < room - slack:
                    lo = j  # on to the first y >= room - x - slack
                    hi = m_nz
                    while lo < hi:
                        mid = (lo + hi) >> 1
                        if nz[mid] < room - x - slack:
                            lo = mid + 1
                        else:
                            hi = mid
                    j = lo
                    continue
                j += 1
                cy = cnt[y] - (1 if y == x else 0)
                if cy <= 0 or best_s == 0 and min(cnt[x], cnt[y]) <= best_most:
                    continue  # (nor with x and y)
                most_xy = min(cnt[x] // 2, cnt[y] // 2) if y == x else min(cnt[x], cnt[y])
                s = room - x - y
                if s <= slack and (s < best_s or s == best_s and most_xy > best_most):
                    best_s = s
                    best_most = most_xy
                    f0, f1, f2 = x, y, -1
                t = room - x - y  # the longest z <= t with z >= y (then the least slack for x, y)
                if t < y:
                    continue
                while qz > j and nz[qz - 1] > t:
                    qz -= 1
                q = qz - 1
                while q >= j - 1:  # the longest z with a sample left for this triple
                    z = nz[q]
                    need_z = 1 + (1 if z == x else 0) + (1 if z == y else 0)
                    if cnt[z] >= need_z:
                        break
                    q -= 1
                if q < j - 1:
                    continue
                z = nz[q]
                s = t - z
                if s > slack or s > best_s:
                    continue
                if z == x:  # x == y == z
                    most = cnt[x] // 3
                elif z == y:
                    most = min(cnt[x] // (2 if x == y else 1), cnt[y] // 2)
                else:
                    most = min(cnt[z], cnt[y] // (2 if y == x else 1), cnt[x] // (2 if y == x else 1))
                if s < best_s or most > best_most:
                    best_s = s
                    best_most = most
                    f0, f1, f2 = x, y, z
        cnt[v] += 1
        if best_s > slack:
            aside[v] = True
            continue
        m = _pack_of(lengths, per_pack, v, f0, f1, f2)
        times = cnt[lengths[0]] // per_pack[0]
        for i in range(1, m):
            times = min(times, cnt[lengths[i]] // per_pack[i])
        for i in range(m):
            delta[i] = -times * per_pack[i]
        # P3 += 3 (d * P2) + 3 (d * d * c) + d * d * d; P2 += 2 (d * c) + d * d (old counts and P2)
        for t in range(n):
            old[t] = p2[t]
        for i in range(m):
            li = lengths[i]
            for t in range(li, n):
                p3[t] += 3 * delta[i] * old[t - li]
            for a in range(m):
                la = li + lengths[a]
                if la > capacity:
                    continue
                dd = delta[i] * delta[a]
                for jj in range(m_nz):
                    t = la + nz[jj]
                    if t > capacity:
                        break
                    p3[t] += 3 * dd * cnt[nz[jj]]
                for b in range(m):
                    t = la + lengths[b]
                    if t <= capacity:
                        p3[t] += dd * delta[b]
            for jj in range(m_nz):
                t = li + nz[jj]
                if t > capacity:
                    break
                p2[t] += 2 * delta[i] * cnt[nz[jj]]
            for a in range(m):
                t = li + lengths[a]
                if t <= capacity:
                    p2[t] += delta[i] * delta[a]
        for i in range(m):
            cnt[lengths[i]] += delta[i]
            ent_g[n_ent] = group[lengths[i]]
            ent_n[n_ent] = per_pack[i]
            n_ent += 1
        pat_k[n_pat] = times
        pat_end[n_pat] = n_ent
        n_pat += 1
        packs += times
    return n_pat, n_ent, packs


@compiled
def _packs_bound(values, counts, big, capacity, enough):  # type: ignore[no-untyped-def]
    """An upper bound on the exact packs of at most three samples (values ascending, distinct; big: the
    indexes of the lengths of at least a third of the capacity, most samples first), or at least `enough`
    once the bound passes it (the caller only asks whether it does). Every such pack holds a sample u of at
    least a third of the capacity, its longest, and the others complete capacity - u exactly: one sample of
    it, or a pair x + y of it. Pairs of different packs share no sample, and x fixes y, so the packs whose
    longest is u are at most min(cnt[u], f(u)), f(u) the completions of capacity - u that share no sample:
    cnt[capacity - u] + sum over x < y of min(cnt[x], cnt[y]) + cnt[(capacity - u) / 2] // 2. The sum over u
    counts every pack once (fillers counted under several u only loosen it)."""
    n = values.shape[0]
    total = 0
    for k in big:
        u = values[k]
        g = capacity - u
        if g == 0:
            total += counts[k]
        else:
            # f(u), counted only until it reaches cnt[u]
            f = 0
            lo = 0
            hi = n
            while lo < hi:  # the first length over g
                mid = (lo + hi) >> 1
                if values[mid] > g:
                    hi = mid
                else:
                    lo = mid + 1
            i = 0
            j = lo - 1
            if j >= 0 and values[j] == g:
                f += counts[j]
            while i < j and f < counts[k]:
                s = values[i] + values[j]
                if s == g:
                    f += min(counts[i], counts[j])
                    i += 1
                    j -= 1
                elif s < g:
                    i += 1
                else:
                    j -= 1
            if i == j and 2 * values[i] == g:
                f += counts[i] // 2
            total += min(counts[k], f)
        if total >= enough:
            return total
    return total


def packs_bound(present: np.ndarray, counts: np.ndarray, capacity: int, enough: int) -> int:
    """An upper bound on the exact packs of at most three samples the histogram allows (present: distinct
    lengths, either order), or a number >= `enough` once it is clear the bound is at least that (the lengths
    with the most samples are counted first, so that it is clear soon where it is)."""
    order = np.argsort(present)
    values = np.ascontiguousarray(present[order], dtype=np.int64)
    counts = np.ascontiguousarray(counts[order], dtype=np.int64)
    big = np.flatnonzero(3 * values >= capacity)
    big = big[np.argsort(-counts[big], kind="stable")]
    return int(_packs_bound(values, counts, big, int(capacity), int(enough)))


def _sums_by(capacity: int, lengths: int, samples: int, disjoint: bool) -> str:
    """The cheapest way to count the pair sums of `lengths` distinct lengths (measured, stop 53): a convolution
    by FFT (about FFT_NS_A_POINT a point of its size) where they are products of counts and under
    EXACT_COMPARE_MAX_ITEMS samples (so that its floats round to the exact sums), else by room where the
    capacity spans at most ROOMS_MAX_SPAN times the lengths, else by pairs of lengths (PAIR_NS a pair)."""
    size = _fft_size(2 * capacity + 1)
    if (
        not disjoint
        and samples < EXACT_COMPARE_MAX_ITEMS
        and FFT_NS_A_POINT * size < PAIR_NS * lengths**2 / 2
    ):
        return "fft"
    return "room" if capacity + 1 <= ROOMS_MAX_SPAN * lengths else "length"


def kernel_ns(capacity: int, lengths: int, samples: int, tolerance: int = 0, disjoint: bool = False) -> float:
    """What `exact_patterns` costs on `lengths` distinct lengths (ns, this machine; a model, never a clock): the
    pair sums the way `_sums_by` counts them (SUMS_FACTOR times their own cost; by room ROOM_NS a length and a
    token), the completion searches (SEARCH_NS_A_WORD a word of the bitsets, capacity / 64 words a length and a
    room, 1 + tolerance rooms) and NS_A_LENGTH a length (its order and drain)."""
    sums = _sums_by(capacity, lengths, samples, disjoint)
    if sums == "fft":
        sums_ns = SUMS_FACTOR * FFT_NS_A_POINT * _fft_size(2 * capacity + 1)
    elif sums == "length":
        sums_ns = SUMS_FACTOR * PAIR_NS * lengths**2 / 2
    else:
        sums_ns = ROOM_NS * capacity * lengths
    words = (1 + tolerance) * lengths * capacity / 64
    return sums_ns + SEARCH_NS_A_WORD * words + NS_A_LENGTH * lengths


def _fft_size(n: int) -> int:
    """The smallest 2**a 3**b 5**c >= n: NumPy's FFT (pocketfft) is as fast a point on these as on powers of
    two, and a capacity that is a power of two (n = 2 capacity + 1) would otherwise take twice its size
    (measured, stop 54: the counts at 32k convolved 3.3 -> 0.9 ms, at 128k 15.6 -> 4.3 ms)."""
    best = 1 << max(0, n - 1).bit_length()
    p5 = 1
    while p5 < best:
        p35 = p5
        while p35 < best:
            m = p35
            while m < n:
                m *= 2
            best = min(best, m)
            p35 *= 3
        p5 *= 5
    return best


def _pair_sums_by_fft(cnt: np.ndarray) -> np.ndarray:
    """The ordered products of counts over x + y = t, t up to the capacity: the counts convolved with
    themselves, by FFT (zero-padded past twice the capacity, so that no sum wraps; _fft_size), rounded to
    integers. Exact where the sums are under about 2**40 (under EXACT_COMPARE_MAX_ITEMS samples: N**2 < 2**42,
    an error of about N**2 x 1e-15 x log of the size)."""
    n = cnt.shape[0]
    size = _fft_size(2 * n - 1)
    f = np.fft.rfft(cnt.astype(np.float64), size)
    f *= f  # in place, as the rounding below: fresh pages cost ~4 us each here (128k: 3,043 -> 1,954 a call,
    # 10.3 -> 7.7 ms), and the same sums
    sums = np.fft.irfft(f, size)[:n]
    np.rint(sums, out=sums)
    return sums.astype(np.int64)


def exact_patterns(
    present: np.ndarray,
    counts: np.ndarray,
    capacity: int,
    share: float,
    max_patterns: int,
    pairs_first: bool = True,
    tolerance: int = 0,
    disjoint: bool = False,
    sums: str | None = None,
    search: str | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:
    """The exact packs on the histogram (present: distinct lengths, each <= capacity; counts: samples of
    each), at most `max_patterns` patterns: (pat_k, pat_end, ent_g, ent_n, left, packs) in the form
    `_refine_kernel.patterns` gives them (ent_g indexes `present`), left: the samples of each length left.
    `pairs_first`: every exact pair of samples before the most constrained order (the module's docstring);
    `tolerance`: the slack a pack after them may have, in tokens (0: exactly full). `sums`: how the pair sums
    are counted, "room", "length" or "fft" (not with `disjoint`): the same sums, so the same patterns, any way;
    None: the cheapest (`_sums_by`). `search`: how the completions are searched, "words" (a word at a time) or
    "sparse" (the words ANDed in one pass first): the same completions either way; None: "sparse" where the
    capacity spans at least SPARSE_SEARCH_SPAN times the lengths with samples."""
    present = np.ascontiguousarray(present, dtype=np.int64)
    counts = np.ascontiguousarray(counts, dtype=np.int64)
    pat_k = np.empty(max_patterns, dtype=np.int64)
    pat_end = np.empty(max_patterns, dtype=np.int64)
    ent_g = np.empty(3 * max_patterns, dtype=np.int64)
    ent_n = np.empty(3 * max_patterns, dtype=np.int64)
    samples = int(counts.sum())
    exact_compare = samples < EXACT_COMPARE_MAX_ITEMS
    cnt, group, n_pat, n_ent, packs = _exact_start(
        present, counts, int(capacity), pairs_first, pat_k, pat_end, ent_g, ent_n
    )
    if sums is None:
        sums = _sums_by(int(capacity), int(np.count_nonzero(cnt)), samples, disjoint)
    if sums == "fft":
        if disjoint:
            raise ValueError(
                "the pair sums that share no sample are not a convolution: sums='room' or 'length'"
            )
        pair_sums, sums_by = _pair_sums_by_fft(cnt), SUMS_GIVEN
    elif sums in ("room", "length"):  # counted in the kernel
        pair_sums = np.zeros(int(capacity) + 1, np.int64)
        sums_by = SUMS_BY_ROOM if sums == "room" else SUMS_BY_LENGTH
    else:
        raise ValueError(f"sums is 'room', 'length', 'fft' or None, not {sums!r}")
    if search is None:
        search = "sparse" if capacity >= SPARSE_SEARCH_SPAN * int(np.count_nonzero(cnt)) else "words"
    if search not in ("words", "sparse"):
        raise ValueError(f"search is 'words', 'sparse' or None, not {search!r}")
    n_pat, n_ent, packs = _exact(
        cnt,
        group,
        int(capacity),
        float(share),
        exact_compare,
        int(tolerance),
        bool(disjoint),
        sums_by,
        pair_sums,
        search == "sparse",
        n_pat,
        n_ent,
        packs,
        pat_k,
        pat_end,
        ent_g,
        ent_n,
    )
    ent_g, ent_n = ent_g[:n_ent], ent_n[:n_ent]
    pat_k, pat_end = pat_k[:n_pat], pat_end[:n_pat]
    return pat_k, pat_end, ent_g, ent_n, counts - _used(pat_k, pat_end, ent_g, ent_n, len(counts)), int(packs)


def near_patterns(
    present: np.ndarray, counts: np.ndarray, capacity: int, slack: int, max_patterns: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:
    """Near-exact packs of up to four samples, each filled to within `slack` of the capacity (`_near`), on the
    histogram (present: distinct lengths; counts: samples of each, zeros allowed), at most `max_patterns`
    patterns, in `exact_patterns`'s form. Under NEAR_MAX_ITEMS samples only (ValueError above)."""
    present = np.ascontiguousarray(present, dtype=np.int64)
    counts = np.ascontiguousarray(counts, dtype=np.int64)
    if int(counts.sum()) >= NEAR_MAX_ITEMS:
        raise ValueError(f"near_patterns: {int(counts.sum())} samples, at most {NEAR_MAX_ITEMS - 1}")
    pat_k = np.empty(max_patterns, dtype=np.int64)
    pat_end = np.empty(max_patterns, dtype=np.int64)
    ent_g = np.empty(4 * max_patterns, dtype=np.int64)
    ent_n = np.empty(4 * max_patterns, dtype=np.int64)
    n_pat, n_ent, packs = _near(
        present, counts, int(capacity), int(slack), pat_k, pat_end, ent_g, ent_n, 0, 0
    )
    ent_g, ent_n = ent_g[:n_ent], ent_n[:n_ent]
    pat_k, pat_end = pat_k[:n_pat], pat_end[:n_pat]
    return pat_k, pat_end, ent_g, ent_n, counts - _used(pat_k, pat_end, ent_g, ent_n, len(counts)), int(packs)


@inlined
def _highest(hb, top, limit):  # type: ignore[no-untyped-def]
    """The longest length at most `limit` with samples left (its bit in hb; top: a bit a non-zero word of hb),
    or -1; and the words read."""
    w = limit >> 6
    word = hb[w] & (_ALL >> np.uint64(63 - (limit & 63)))
    if word != 0:
        return (w << 6) + 63 - clz(word), 1
    t = w - 1  # the non-zero words below w, read from `top`
    read = 1
    while t >= 0:
        tw = t >> 6
        tword = top[tw] & (_ALL >> np.uint64(63 - (t & 63)))
        read += 1
        if tword != 0:
            ww = (tw << 6) + 63 - clz(tword)
            return (ww << 6) + 63 - clz(hb[ww]), read + 1
        t = (tw << 6) - 1
    return -1, read


@inlined
def _balanced_pair(cnt, hb, rb, capacity, room):  # type: ignore[no-untyped-def]
    """The pair x + y = room (x <= y, both with samples left; two of x where x = y) with the largest x, the
    most balanced, or -1; and the words read. hb & rb shifted, as in `_completion`, from the word of room / 2
    down, its highest bit first, so that a search that finds a pair usually ends in its first word."""
    half = room >> 1
    d = capacity - room  # room - x has samples where rb's bit x + d is set
    last = half >> 6
    tail = (np.uint64(1) << np.uint64((half & 63) + 1)) - np.uint64(1) if (half & 63) < 63 else _ALL
    w = last
    while w >= 0:
        # the same read as _completion's, written out: through an inlined helper shared by the two, both
        # kernels ran 3-4x slower (numba 0.68: 8,191 distinct at 32k, the exact kernel 7 -> 28 ms)
        at = (w << 6) + d
        q = at >> 6
        b = at & 63
        r = rb[q] if b == 0 else (rb[q] >> np.uint64(b)) | (rb[q + 1] << np.uint64(64 - b))
        m = hb[w] & r
        if w == last:
            m &= tail
        while m != 0:
            bit = 63 - clz(m)
            x = (w << 6) + bit
            if x != room - x or cnt[x] >= 2:
                return x, last - w + 1
            m &= ~(np.uint64(1) << np.uint64(bit))
        w -= 1
    return -1, last + 1


@inlined
def _run_out(hb, rb, top, capacity, length):  # type: ignore[no-untyped-def]
    """`length` has no sample left: its bits off in hb and rb, and its word's in top where that was the last."""
    _bit_clear(hb, rb, capacity, length)
    w = length >> 6
    if hb[w] == 0:
        top[w >> 6] &= ~(np.uint64(1) << np.uint64(w & 63))


@inlined
def _take(cnt, hb, rb, top, capacity, lengths, per_pack, m, length, k):  # type: ignore[no-untyped-def]
    """k samples of `length` into the pack of lengths[:m] (per_pack[:m] each), taken from cnt; returns the
    pack's distinct lengths."""
    i = 0
    while i < m and lengths[i] != length:
        i += 1
    if i == m:
        lengths[m] = length
        per_pack[m] = 0
        m += 1
    per_pack[i] += k
    cnt[length] -= k
    if cnt[length] == 0:
        _run_out(hb, rb, top, capacity, length)
    return m


@compiled
def _closed(present, counts, capacity, max_work, pat_k, pat_end, ent_g, ent_n):  # type: ignore[no-untyped-def]
    """The closed packs (`closed_patterns`) of the histogram until the words read pass max_work: (patterns,
    entries, packs, words read)."""
    cnt = np.zeros(capacity + 1, np.int64)
    group = _histogram(present, counts, cnt)
    n_words = (capacity >> 6) + 2  # rb's shifted reads take the word after
    hb = np.zeros(n_words, np.uint64)
    rb = np.zeros(n_words, np.uint64)
    top = np.zeros((n_words >> 6) + 1, np.uint64)
    for g in range(present.shape[0]):
        if counts[g] > 0:
            _bit_set(hb, rb, capacity, present[g])
            w = present[g] >> 6
            top[w >> 6] |= np.uint64(1) << np.uint64(w & 63)
    lengths = np.empty(present.shape[0], np.int64)
    per_pack = np.empty(present.shape[0], np.int64)
    n_pat = 0
    n_ent = 0
    packs = 0
    work = 0
    while work <= max_work:
        room = capacity
        m = 0
        while room > 0:
            if m > 0:  # closed by one sample of the room, else by the most balanced pair
                if cnt[room] > 0:
                    m = _take(cnt, hb, rb, top, capacity, lengths, per_pack, m, room, 1)
                    break
                x, read = _balanced_pair(cnt, hb, rb, capacity, room)
                work += read
                if x >= 0:
                    m = _take(cnt, hb, rb, top, capacity, lengths, per_pack, m, x, 1)
                    m = _take(cnt, hb, rb, top, capacity, lengths, per_pack, m, room - x, 1)
                    break
            v, read = _highest(hb, top, room)  # else led on: the longest samples that fit, as many as fit
            work += read
            if v < 0:
                break  # no sample fits the room left
            k = cnt[v] if v == 0 else min(cnt[v], room // v)  # samples of length 0 all in one pack
            m = _take(cnt, hb, rb, top, capacity, lengths, per_pack, m, v, k)
            room -= k * v
        if m == 0:
            break  # no sample left
        # the pack once more as often as every count allows
        more = cnt[lengths[0]] // per_pack[0]
        for i in range(1, m):
            more = min(more, cnt[lengths[i]] // per_pack[i])
        if more > 0:
            for i in range(m):
                cnt[lengths[i]] -= more * per_pack[i]
                if cnt[lengths[i]] == 0:
                    _run_out(hb, rb, top, capacity, lengths[i])
        n_ent = _record(group, lengths, per_pack, m, 1 + more, n_pat, n_ent, pat_k, pat_end, ent_g, ent_n)
        n_pat += 1
        packs += 1 + more
        work += m
    return n_pat, n_ent, packs, work


def closed_patterns(
    present: np.ndarray, counts: np.ndarray, capacity: int, max_work: int = 1 << 62
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, int, int]:
    """The samples in closed packs, in `exact_patterns`'s form, and the words the kernel read (its cost): every
    sample (left all zeros), or those of the packs made before the words read passed `max_work`.

    A pack starts with the longest sample left; then, until it is full, it is closed by one sample of its room,
    or else by the pair that fills its room exactly with the longest shorter sample (the most balanced: two
    middling samples rather than a long one and a short one, which keeps the short ones for the rooms only they
    fill), or else led on by the longest samples that fit, as many as fit. Each pack is taken as often as its
    counts allow."""
    present = np.ascontiguousarray(present, dtype=np.int64)
    counts = np.ascontiguousarray(counts, dtype=np.int64)
    samples = int(counts.sum())
    # every pattern, and every entry of one, takes at least one sample
    pat_k = np.empty(samples, dtype=np.int64)
    pat_end = np.empty(samples, dtype=np.int64)
    ent_g = np.empty(samples, dtype=np.int64)
    ent_n = np.empty(samples, dtype=np.int64)
    n_pat, n_ent, packs, work = _closed(
        present, counts, int(capacity), int(max_work), pat_k, pat_end, ent_g, ent_n
    )
    pat_k, pat_end = pat_k[:n_pat], pat_end[:n_pat]
    ent_g, ent_n = ent_g[:n_ent], ent_n[:n_ent]
    left = counts - _used(pat_k, pat_end, ent_g, ent_n, len(counts))
    return pat_k, pat_end, ent_g, ent_n, left, int(packs), int(work)


def _used(pat_k: np.ndarray, pat_end: np.ndarray, ent_g: np.ndarray, ent_n: np.ndarray, n: int) -> np.ndarray:
    """The samples of each of the n lengths the patterns take."""
    used = np.bincount(ent_g, weights=np.repeat(pat_k, np.diff(pat_end, prepend=0)) * ent_n, minlength=n)
    return used.astype(np.int64)
