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

For every length left, count its exact completions by one or two other samples: a sample of capacity - v, or
a pair summing to it (the pair-sum counts, the histogram convolved with itself, kept up to date as counts
change: conv(c + d) = conv(c) + 2 conv(c, d) + conv(d, d)). Take the length with the fewest per sample of it
(the most constrained, as in exact-cover search), complete it with the single sample if there is one, else
with the pair whose rarer length has the most samples left, and apply that exactly full pack to as many samples
as `share` of the rarest of its lengths allows (at least once). A length with no completion left is set aside
for best fit. docs/packing.md, "The lead: most constrained first", has what this order does that best fit's
does not; `bench/most_constrained.py` keeps the NumPy reference.

With `disjoint`, a length's completions by two samples are counted as those that share no sample (over the
pairs x + y of its room, min(cnt[x], cnt[y]); cnt[x] // 2 where x = y), not as products of counts: a length
with thousands of samples may have millions of pairs that sum to its room and too few that share no sample to
complete each of its samples once (64k samples of 800 distinct at 2k, seed 3: 1,510, with 4,501 samples, has
1.75M ordered pairs and 4,208 that share none). The sums follow the counts exactly as packs are taken
(`_update_disjoint`); planning.refine makes such packs once more where the plan is still over its target.

With `tolerance` t > 0 a completion may leave up to t tokens of slack: a length's completions are counted over
capacity - v - s for s in 0..t, and it is completed at the least s that has one (exact where it can be);
planning.refine makes such packs with t = 1 where the exact ones miss (the cutting-stock LP's plans of those
inputs pair long samples with one other at a token or two of slack). The counts stay within the integer
comparison's range: every ordered pair sums to one room, so a length's completions over all its rooms are at
most N**2 + 2 N + 1, as with t = 0.

Two kernels make these packs, pattern for pattern the same. `_exact` keeps the lengths with samples left in a
compacted list and reads the pair-sum counts through tables by length: each pack costs a few passes over the
lengths left, whose reads jump about those tables (1-3 ns a length). `_exact_rooms` keeps every array by
length or by room (capacity - length): a length's completions are kept for its room and updated for a pack of
lengths l by adding the counts at room - l, shifted copies of one array; the most constrained length is found
in passes that key each room by its completions x 1 / its samples (a float within 2.1 epsilons of the
fraction), take the least key (floats >= 0 order as their bits do) and the last room within 2**-48 of it; where
several are that near, their fractions settle it, as `_exact` compares. Those passes run over capacity + 1 slots
in contiguous memory and vectorise (0.05-0.19 ns a slot each), so they cost less than `_exact`'s where the
capacity spans a few times the lengths (ROOMS_MAX_SPAN), and more at long context with few lengths.
"""

from __future__ import annotations

import numpy as np

from packcfg.packing._refine_kernel import HAVE_NUMBA, compiled, inlined

if HAVE_NUMBA:
    import numba as _nb

    # a float division by 0 gives inf rather than raising: no check in the loop, so that it vectorises
    _compiled_numpy_errors = _nb.njit(cache=True, nogil=True, error_model="numpy")
else:  # pragma: no cover
    _compiled_numpy_errors = compiled

# Under this many samples the kernel compares completions per sample as integer cross products, exact and a
# quarter faster than dividing (1M samples of 999 distinct at 2k: 3.4 -> 2.5 ms, the same packs on 120 inputs):
# a length has at most N**2 pair completions and N samples, so no product passes N**3 < 2**63. From it, floats.
EXACT_COMPARE_MAX_ITEMS = 1 << 21
# the near-exact packs (_near) count completions by three samples in int64 (up to N**3, and 3 N**3 while they
# are updated): they run on what the exact packs leave only under this many samples
NEAR_MAX_ITEMS = 1 << 20
# `_exact_rooms` (every array by length or room, contiguous passes that vectorise) where the capacity spans at
# most this many times the distinct lengths; `_exact` (the lengths compacted, read through tables by length)
# above. The same patterns either way; measured at 2k-32k with 600-4,095 distinct (docs/packing.md, "The exact
# kernel by room"): by room 0.3-0.8x the time up to a span of 5.5, about 1x at 6-7.5, 1.3-1.6x at 8-10.
ROOMS_MAX_SPAN = 6


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
def _most_constrained(nz, m_nz, cnt, aside, pair_sums, single, capacity, exact_compare, tolerance, tolerant):  # type: ignore[no-untyped-def]
    """The length with the fewest completions per sample (the first minimum, ascending), or -1, and how many
    lengths have samples left: nz[:m_nz] is compacted to them as it goes. A length with no completion is set
    aside. pair_sums[t]: t's completions by two samples (ordered products of counts, or those that share no
    sample); `single`: what one sample of t counts (2 and 1 with them). `tolerant` (a constant at each call site,
    inlined): count completions leaving 1..tolerance tokens."""
    v = -1
    best_num = 0  # the fewest completions per sample so far: best_num / best_den (= best)
    best_den = 1
    best = 0.0
    k = 0
    for i in range(m_nz):
        u = nz[i]
        if cnt[u] == 0:
            continue
        nz[k] = u
        k += 1
        if aside[u]:
            continue
        room = capacity - u
        num = pair_sums[room] + single * cnt[room]
        if tolerant:
            for s in range(1, min(tolerance, room) + 1):  # completions leaving s tokens (room - s >= 0)
                num += pair_sums[room - s] + single * cnt[room - s] + (1 if s == room else 0)
        if num == 0 and room > 0:
            # no completion: such a length is the minimum (0) before any other is taken, and set aside
            # then; counts only fall, so it is set aside now, in one scan rather than one each
            aside[u] = True
            continue
        if v < 0:
            fewer = True
        elif exact_compare:  # num / cnt[u] < best_num / best_den in integers (EXACT_COMPARE_MAX_ITEMS)
            fewer = num * best_den < best_num * cnt[u]
        else:
            fewer = num / cnt[u] < best
        if fewer:
            best_num = num
            best_den = cnt[u]
            best = num / best_den
            v = u
    return v, k


@compiled
def _completion(cnt, nz, m_nz, room):  # type: ignore[no-untyped-def]
    """A completion of `room` tokens: (-2, -1) where room is 0 (the sample fills its pack alone), (y, -1) for a
    single sample of it, (x, y) for the pair x + y = room whose rarer length has the most samples left (x
    smallest among equals), (-1, -1) for none."""
    if room == 0:
        return -2, -1
    if cnt[room] > 0:
        return room, -1
    most = -1
    f0 = -1
    f1 = -1
    for i in range(m_nz):
        x = nz[i]
        if 2 * x > room:
            break
        y = room - x
        if cnt[x] > 0 and cnt[y] > (1 if y == x else 0) and min(cnt[x], cnt[y]) > most:
            most = min(cnt[x], cnt[y])
            f0 = x
            f1 = y
    return f0, f1


@inlined
def _update_disjoint(cnt, sums, nz, m_nz, lengths, per_pack, m, times, olds, news):  # type: ignore[no-untyped-def]
    """A pack of lengths[:m] (per_pack[:m] samples each) applied `times` times: the counts fall, and sums[t], the
    completions of t that share no sample (over the unordered pairs x + y = t, min(cnt[x], cnt[y]); cnt[x] // 2
    where x = y), follow them. One pass over the lengths for every length of the pack, each pair with a length
    y counted at y's old count, then the pairs within the pack set right."""
    for i in range(m):
        olds[i] = cnt[lengths[i]]
        news[i] = olds[i] - times * per_pack[i]
    for j in range(m_nz):
        y = nz[j]
        c = cnt[y]
        for i in range(m):
            sums[lengths[i] + y] += min(news[i], c) - min(olds[i], c)
    for i in range(m):
        li = lengths[i]
        # y = li itself was counted as a pair of two samples at min(new, old) - old
        sums[2 * li] += news[i] // 2 - olds[i] // 2 - (news[i] - olds[i])
        for j in range(i + 1, m):
            lj = lengths[j]
            counted = (min(news[i], olds[j]) - min(olds[i], olds[j])) + (
                min(news[j], olds[i]) - min(olds[j], olds[i])
            )
            sums[li + lj] += min(news[i], news[j]) - min(olds[i], olds[j]) - counted
    for i in range(m):
        cnt[lengths[i]] = news[i]


@compiled
def _exact(
    present,
    counts,
    capacity,
    share,
    exact_compare,
    pairs_first,
    tolerance,
    disjoint,
    pat_k,
    pat_end,
    ent_g,
    ent_n,
):  # type: ignore[no-untyped-def]
    n = capacity + 1
    cnt = np.zeros(n, np.int64)
    group = _histogram(present, counts, cnt)
    n_pat, n_ent, packs = 0, 0, 0
    if pairs_first:  # every exact pair first: some best plan holds them all (the module's docstring)
        n_pat, n_ent, packs = _pairs_first(present, cnt, group, capacity, pat_k, pat_end, ent_g, ent_n)
    aside = np.zeros(n, np.bool_)
    # lengths with samples left, ascending (compacted as they run out)
    nz = np.empty(present.shape[0], np.int64)
    m_nz = 0
    for length in range(n):
        if cnt[length] > 0:
            nz[m_nz] = length
            m_nz += 1
    pair_sums = np.zeros(2 * n, np.int64)
    # a room's completions by two samples: ordered products of counts, or (`disjoint`) those that share no
    # sample, min(cnt[x], cnt[y]) an unordered pair and cnt[x] // 2 for x + x; by one: `single` a sample
    if disjoint:
        single = 1
        for i in range(m_nz):
            x = nz[i]
            pair_sums[2 * x] += cnt[x] // 2
            for j in range(i + 1, m_nz):
                pair_sums[x + nz[j]] += min(cnt[x], cnt[nz[j]])
    else:
        single = 2
        # ordered pairs: each unordered one twice, i with itself once (half the products)
        for i in range(m_nz):
            x = nz[i]
            c = cnt[x]
            pair_sums[2 * x] += c * c
            for j in range(i + 1, m_nz):
                pair_sums[x + nz[j]] += 2 * c * cnt[nz[j]]
    lengths = np.zeros(4, np.int64)
    per_pack = np.zeros(4, np.int64)
    delta = np.zeros(4, np.int64)
    olds = np.zeros(4, np.int64)
    news = np.zeros(4, np.int64)
    while True:
        # the scan, with the tolerance's rooms compiled in or out (a constant at each call: a branch in the
        # loop cost the exact ways 5-10%)
        if tolerance:
            v, m_nz = _most_constrained(
                nz, m_nz, cnt, aside, pair_sums, single, capacity, exact_compare, tolerance, True
            )
        else:
            v, m_nz = _most_constrained(
                nz, m_nz, cnt, aside, pair_sums, single, capacity, exact_compare, 0, False
            )
        if v < 0 or n_pat == pat_k.shape[0]:
            return n_pat, n_ent, packs
        cnt[v] -= 1
        f0, f1 = _completion(cnt, nz, m_nz, capacity - v)
        s = 0
        while f0 == -1 and s < min(tolerance, capacity - v):  # the least slack s with a completion
            s += 1
            f0, f1 = _completion(cnt, nz, m_nz, capacity - v - s)
        cnt[v] += 1
        if f0 == -1:
            aside[v] = True
            continue
        m = _pack_of(lengths, per_pack, v, f0, f1, -1)
        times = _times(cnt, lengths, per_pack, m, share)
        if disjoint:
            _update_disjoint(cnt, pair_sums, nz, m_nz, lengths, per_pack, m, times, olds, news)
        else:
            for i in range(m):  # what a pair with one sample of the rest loses, per sample
                delta[i] = -2 * times * per_pack[i]
            for j in range(m_nz):  # one pass for the pack's lengths (a count of 0 adds nothing)
                y = nz[j]
                c = cnt[y]
                for i in range(m):
                    pair_sums[lengths[i] + y] += delta[i] * c
            for i in range(m):
                for j in range(m):
                    pair_sums[lengths[i] + lengths[j]] += times * per_pack[i] * times * per_pack[j]
            for i in range(m):
                cnt[lengths[i]] -= times * per_pack[i]
        n_ent = _record(group, lengths, per_pack, m, times, n_pat, n_ent, pat_k, pat_end, ent_g, ent_n)
        n_pat += 1
        packs += times


@_compiled_numpy_errors
def _exact_rooms(
    present,
    counts,
    capacity,
    share,
    exact_compare,
    pairs_first,
    tolerance,
    disjoint,
    pat_k,
    pat_end,
    ent_g,
    ent_n,
):  # type: ignore[no-untyped-def]
    """`_exact` with every array indexed by length or room, so that its passes run over contiguous memory
    (and vectorise): the same patterns, in a time that follows the capacity rather than the lengths."""
    n = capacity + 1
    t1 = tolerance + 1
    pad = capacity + t1
    cntp = np.zeros(pad + n, np.int64)  # cntp[pad + x]: the samples of length x (0 below 0)
    cnt = cntp[pad:]
    group = _histogram(present, counts, cnt)
    n_pat, n_ent, packs = 0, 0, 0
    if pairs_first:  # every exact pair first: some best plan holds them all (the module's docstring)
        n_pat, n_ent, packs = _pairs_first(present, cnt, group, capacity, pat_k, pat_end, ent_g, ent_n)
    # by room r = capacity - u: the samples of u (below: its completions num, whether it is set aside, 1 / its
    # samples inv; pair_sums by the sum of a pair, which is the room it completes)
    by_room = np.empty(n, np.int64)
    for r in range(n):
        by_room[r] = cnt[capacity - r]
    pair_sums = np.zeros(n, np.int64)  # completions by two samples, by their sum (up to the capacity)
    if disjoint:
        single = 1
        for x in range(n):
            c = cnt[x]
            if c == 0:
                continue
            if 2 * x <= capacity:
                pair_sums[2 * x] += c // 2
            if 2 * x + 1 <= capacity:  # x + y for y over x + 1..capacity - x
                dst = pair_sums[2 * x + 1 :]
                src = cnt[x + 1 : n - x]
                for j in range(src.shape[0]):
                    dst[j] += min(c, src[j])
    else:
        single = 2
        for x in range(n):
            c = cnt[x]
            if c == 0:
                continue
            dst = pair_sums[x:]
            src = cnt[: n - x]
            for j in range(src.shape[0]):
                dst[j] += c * src[j]
    num = np.zeros(n, np.int64)
    for r in range(n):
        for s in range(min(tolerance, r) + 1):
            num[r] += pair_sums[r - s] + single * cnt[r - s] + (1 if s == r and s > 0 else 0)
    aside = np.zeros(n, np.uint8)  # set aside where no completion was found (or none is left: num 0)
    key = np.empty(n, np.float64)
    key_bits = key.view(np.int64)  # keys are >= 0 (or inf): as integers they order alike
    inf = np.inf
    no_key = np.array([inf]).view(np.int64)[0]
    one = np.zeros(1, np.float64)  # a float and its bits
    one_bits = one.view(np.int64)
    # 1 / samples by room (inf for none): a key is completions x this, within 2.1 float epsilons of the fraction
    inv = np.empty(n, np.float64)
    for r in range(n):
        inv[r] = 1.0 / by_room[r] if by_room[r] > 0 else inf
    lo = 0  # the rooms of lengths with samples left, not set aside, lie in lo..hi
    hi = capacity
    lengths = np.zeros(4, np.int64)
    per_pack = np.zeros(4, np.int64)
    olds = np.zeros(4, np.int64)
    news = np.zeros(4, np.int64)
    while True:
        while lo <= hi and (by_room[lo] == 0 or aside[lo] != 0 or (num[lo] == 0 and lo > 0)):
            lo += 1
        while hi >= lo and (by_room[hi] == 0 or aside[hi] != 0 or (num[hi] == 0 and hi > 0)):
            hi -= 1
        if lo > hi or n_pat == pat_k.shape[0]:
            return n_pat, n_ent, packs
        # the scan: each length's completions per sample (inf where it has no sample, no completion or is set
        # aside), their least, and the last room (first length) within a few float epsilons of it: by
        # multiplying by 1 / samples, each key is within 2.1 epsilons of its fraction, so the least fraction is
        # among those; where there are several, the fractions settle it, as `_exact` compares
        kv = key[lo : hi + 1]
        cv = by_room[lo : hi + 1]
        xv = num[lo : hi + 1]
        av = aside[lo : hi + 1]
        iw = inv[lo : hi + 1]
        for j in range(kv.shape[0]):
            c = cv[j]
            x = xv[j]
            q = np.float64(x) * iw[j]
            kv[j] = inf if (av[j] != 0) | (c == 0) | ((x == 0) & (lo + j > 0)) else q
        kb = key_bits[lo : hi + 1]
        least = no_key
        for j in range(kb.shape[0]):
            least = min(least, kb[j])
        if least == no_key:
            return n_pat, n_ent, packs
        one_bits[0] = least
        one[0] = one[0] * (1.0 + 2.0**-48)
        near = one_bits[0]
        ties = 0
        last = -1  # the last room (first length) near the least
        for j in range(kb.shape[0]):
            tie = kb[j] <= near
            ties += tie
            last = max(last, j if tie else -1)
        iv = lo + last
        if ties > 1:  # the least fraction among them, the first length first (in integers, or by dividing)
            best_num = num[iv]
            best_den = by_room[iv]
            best = best_num / best_den
            for r in range(iv - 1, lo - 1, -1):
                if key_bits[r] <= near:
                    if exact_compare:
                        fewer = num[r] * best_den < best_num * by_room[r]
                    else:
                        fewer = num[r] / by_room[r] < best
                    if fewer:
                        iv = r
                        best_num = num[r]
                        best_den = by_room[r]
                        best = best_num / best_den
        v = capacity - iv
        cnt[v] -= 1
        by_room[iv] -= 1
        f0, f1 = _room_completion(cnt, by_room, capacity, iv)
        s = 0
        while f0 == -1 and s < min(tolerance, iv):  # the least slack s with a completion
            s += 1
            f0, f1 = _room_completion(cnt, by_room, capacity, iv - s)
        cnt[v] += 1
        by_room[iv] += 1
        if f0 == -1:
            aside[iv] = 1
            continue
        m = _pack_of(lengths, per_pack, v, f0, f1, -1)
        times = _times(cnt, lengths, per_pack, m, share)
        for i in range(m):
            olds[i] = cnt[lengths[i]]
            news[i] = olds[i] - times * per_pack[i]
        # the completions follow the counts (read at the old counts): over the rooms r of the lengths left, the
        # pairs of a pack's length l with a sample of r - s - l
        for i in range(m, 3):  # a pack of fewer lengths: the others change nothing
            lengths[i] = 0
            olds[i] = 0
            news[i] = 0
        for s in range(t1):  # one pass over the rooms for each slack, the pack's (up to 3) lengths in it
            dst = num[lo : hi + 1]
            src0 = cntp[pad + lo - s - lengths[0] : pad + hi + 1 - s - lengths[0]]
            src1 = cntp[pad + lo - s - lengths[1] : pad + hi + 1 - s - lengths[1]]
            src2 = cntp[pad + lo - s - lengths[2] : pad + hi + 1 - s - lengths[2]]
            if disjoint:
                o0, o1, o2 = olds[0], olds[1], olds[2]
                w0, w1, w2 = news[0], news[1], news[2]
                for j in range(dst.shape[0]):
                    c0 = src0[j]
                    c1 = src1[j]
                    c2 = src2[j]
                    dst[j] += (
                        (min(w0, c0) - min(o0, c0))
                        + (min(w1, c1) - min(o1, c1))
                        + (min(w2, c2) - min(o2, c2))
                    )
            else:
                d0, d1, d2 = 2 * (news[0] - olds[0]), 2 * (news[1] - olds[1]), 2 * (news[2] - olds[2])
                for j in range(dst.shape[0]):
                    dst[j] += d0 * src0[j] + d1 * src1[j] + d2 * src2[j]
        # then at single sums: the pairs within the pack set right, and the pack's lengths as single samples
        for i in range(m):
            li = lengths[i]
            _add_rooms(num, li, t1, single * (news[i] - olds[i]))
            if disjoint:
                # y = li itself was counted as a pair of two samples at min(new, old) - old
                _add_rooms(num, 2 * li, t1, news[i] // 2 - olds[i] // 2 - (news[i] - olds[i]))
                for j in range(i + 1, m):
                    lj = lengths[j]
                    counted = (min(news[i], olds[j]) - min(olds[i], olds[j])) + (
                        min(news[j], olds[i]) - min(olds[j], olds[i])
                    )
                    _add_rooms(num, li + lj, t1, min(news[i], news[j]) - min(olds[i], olds[j]) - counted)
            else:
                for j in range(m):
                    _add_rooms(num, li + lengths[j], t1, times * per_pack[i] * times * per_pack[j])
        for i in range(m):
            cnt[lengths[i]] = news[i]
            by_room[capacity - lengths[i]] = news[i]
            inv[capacity - lengths[i]] = 1.0 / news[i] if news[i] > 0 else inf
        n_ent = _record(group, lengths, per_pack, m, times, n_pat, n_ent, pat_k, pat_end, ent_g, ent_n)
        n_pat += 1
        packs += times


@inlined
def _add_rooms(num, total, t1, amount):  # type: ignore[no-untyped-def]
    """A change of `amount` in the completions that sum to `total`, in num[r] for every room r that counts
    them (r = total + s, s < t1)."""
    for s in range(t1):
        r = total + s
        if r < num.shape[0]:
            num[r] += amount


@compiled
def _room_completion(cnt, by_room, capacity, room):  # type: ignore[no-untyped-def]
    """`_completion` over the lengths 1..room // 2 (by_room[capacity - y] = cnt[y], read forward): two passes
    over views that start at 0, which vectorise (the most samples of a pair's rarer length, then the first x
    that has it)."""
    if room == 0:
        return -2, -1
    if cnt[room] > 0:
        return room, -1
    half = room // 2
    top = (room - 1) // 2  # x < y = room - x, x from 1
    xs = cnt[1 : top + 1]
    ys = by_room[capacity - room + 1 : capacity - room + top + 1]
    most = 0
    for j in range(xs.shape[0]):
        most = max(most, min(xs[j], ys[j]))
    f0 = -1
    f1 = -1
    if most > 0:
        first = top
        for j in range(xs.shape[0]):
            first = min(first, j if min(xs[j], ys[j]) == most else top)
        f0 = first + 1
        f1 = room - f0
    if 2 * half == room and cnt[half] > 1 and cnt[half] > most:  # x = y = room / 2, last (as in _completion)
        f0 = half
        f1 = half
    return f0, f1


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


def exact_patterns(
    present: np.ndarray,
    counts: np.ndarray,
    capacity: int,
    share: float,
    max_patterns: int,
    pairs_first: bool = True,
    tolerance: int = 0,
    disjoint: bool = False,
    by_room: bool | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:
    """The exact packs on the histogram (present: distinct lengths, each <= capacity; counts: samples of
    each), at most `max_patterns` patterns: (pat_k, pat_end, ent_g, ent_n, left, packs) in the form
    `_refine_kernel.patterns` gives them (ent_g indexes `present`), left: the samples of each length left.
    `pairs_first`: every exact pair of samples before the most constrained order (the module's docstring);
    `tolerance`: the slack a pack after them may have, in tokens (0: exactly full). `by_room`: which of the two
    kernels makes them (the same patterns either way; None: `_exact_rooms` where the capacity spans at most
    ROOMS_MAX_SPAN times the lengths, else `_exact`)."""
    present = np.ascontiguousarray(present, dtype=np.int64)
    counts = np.ascontiguousarray(counts, dtype=np.int64)
    pat_k = np.empty(max_patterns, dtype=np.int64)
    pat_end = np.empty(max_patterns, dtype=np.int64)
    ent_g = np.empty(3 * max_patterns, dtype=np.int64)
    ent_n = np.empty(3 * max_patterns, dtype=np.int64)
    exact_compare = int(counts.sum()) < EXACT_COMPARE_MAX_ITEMS
    if by_room is None:
        by_room = capacity + 1 <= ROOMS_MAX_SPAN * len(present)
    kernel = _exact_rooms if by_room else _exact
    n_pat, n_ent, packs = kernel(
        present,
        counts,
        int(capacity),
        float(share),
        exact_compare,
        pairs_first,
        int(tolerance),
        bool(disjoint),
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


def _used(pat_k: np.ndarray, pat_end: np.ndarray, ent_g: np.ndarray, ent_n: np.ndarray, n: int) -> np.ndarray:
    """The samples of each of the n lengths the patterns take."""
    used = np.bincount(ent_g, weights=np.repeat(pat_k, np.diff(pat_end, prepend=0)) * ent_n, minlength=n)
    return used.astype(np.int64)
