"""Most-constrained-first exact packs, then bfd on what they leave: a lead for the rows where bfd misses the
packs target (issue 23: 600 / 999 distinct lengths at 2k and 4k). The planner runs it compiled as the
refinement stage's exact try, before its other tries (`packcfg/packing/_exact_kernel.py`, which this script
times; `--check` compares it with the NumPy version below, the readable reference, which takes seconds to
minutes a row). Here what is left goes to `plan()` whole; the planner's try plans it with best fit and the
nested stage, and gives up where that cannot reach the target.

bfd builds its packs longest sample first, and the refinement stage's minimum bin slack does too. The
cutting-stock LP's plans (bench/lp_bound.py, LB + 1 on those rows) look different: they fill the big items'
room with short and middling samples and leave the 684-1,024-token samples (at 2k) to packs of two of them and
an exact third (docs/planner-history.md, "Where the LP's plan puts the lengths"). This builds exact packs in
another order, on the length histogram:

1. Every exact pair first (a sample of x >= capacity / 2 with one of capacity - x).
2. For every length v left, count its exact completions by one or two other samples: a sample of capacity - v,
   or a pair summing to it (the pair-sum counts are the histogram convolved with itself), and order the lengths
   by their completions per sample, fewest first (the most constrained, as in exact-cover search). The order is
   computed once (until stop 53 it was recomputed after every pack, a pass over the lengths a pack; computed
   once, the planner's plans are better on the whole: docs/planner-history.md, "The most constrained order
   computed once").
3. Drain each length in that order: complete it with the single sample if there is one, else with the pair
   whose rarer length has the most samples left, apply that exact pack to as many samples as `share` of the
   rarest of its lengths allows (at least once), and go on until the length has no sample or no completion left.

What is set aside is planned by `packcfg.packing.planner.plan` (bfd with its refinement stage). Every pack
of step 3 is exactly full, so the plan is valid and its packs are an upper bound on the optimum.

    python bench/most_constrained.py                      # the rows bfd misses at 64k-130k samples
    python bench/most_constrained.py 100000:4096:999      # N:capacity:distinct lengths
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from packing import _switched_off, few_distinct_lengths, packs_lower_bound, print_table  # noqa: E402

from packcfg.packing import _exact_kernel  # noqa: E402
from packcfg.packing.planner import plan  # noqa: E402
from packcfg.packing.planning.refine import EXACT_SHARE  # noqa: E402

ROWS = ("64000:2048:600", "64000:2048:999", "100000:2048:600", "130000:2048:600", "100000:4096:999")


def exact_packs(counts: np.ndarray, capacity: int, share: float = 0.1) -> tuple[int, np.ndarray, int]:
    """The exact packs as the planner's kernel makes them, on `counts` (samples of each length 0..capacity):
    every exact pair first, then the most constrained order, computed once, each length drained in it (its
    packs until it has no sample or no completion left). Returns (packs, the counts left, patterns)."""
    cnt = counts.astype(np.int64).copy()
    packs = steps = 0
    # the exact pairs: x >= capacity / 2 with capacity - x
    for x in range(capacity, (capacity - 1) // 2, -1):
        y = capacity - x
        times = cnt[x] if y == 0 else cnt[x] // 2 if y == x else min(cnt[x], cnt[y])
        if times:
            cnt[x] -= times * (2 if y == x and y else 1)
            if y and y != x:
                cnt[y] -= times
            packs += int(times)
            steps += 1
    live = np.flatnonzero(cnt)
    pair_sums = np.convolve(cnt, cnt)[: capacity + 1]  # ordered pairs by their sum
    room = capacity - live
    options = pair_sums[room] + 2 * cnt[room]
    ok = (options > 0) | (room == 0)
    live, options = live[ok], options[ok]
    for v in live[np.argsort(options / cnt[live], kind="stable")].tolist():  # fewest per sample first
        while cnt[v] > 0:
            fill = _completion(cnt, v, capacity)
            if fill is None:
                break
            need: dict[int, int] = {}
            for length in (v, *fill):
                need[length] = need.get(length, 0) + 1
            assert sum(k * n for k, n in need.items()) == capacity
            times = max(1, int(share * min(cnt[length] for length in need)))
            times = min([times] + [int(cnt[length]) // n for length, n in need.items()])
            for length, n in need.items():
                cnt[length] -= times * n
            packs += times
            steps += 1
    return packs, cnt, steps


def _completion(cnt: np.ndarray, v: int, capacity: int) -> tuple[int, ...] | None:
    """One sample of capacity - v, else the pair summing to it whose rarer length has the most samples (v's own
    sample taken out first); None where neither exists."""
    room = capacity - v
    cnt[v] -= 1
    try:
        if room == 0:
            return ()
        if cnt[room] > 0:
            return (room,)
        xs = np.arange(1, room // 2 + 1)
        ok = (cnt[xs] > 0) & (cnt[room - xs] > np.where(room - xs == xs, 1, 0))
        if not ok.any():
            return None
        xs = xs[ok]
        x = int(xs[np.argmax(np.minimum(cnt[xs], cnt[room - xs]))])
        return (x, room - x)
    finally:
        cnt[v] += 1


def compare(n: int, capacity: int, distinct: int, share: float, check: bool) -> list[str]:
    """One row: bfd's packs over LB without its exact try, and most-constrained-first exact packs plus bfd on the rest; the exact
    packs' time compiled (process CPU, the second of two calls) against one argsort of the lengths, and with
    `check` the NumPy version's too, which must give the same packs."""
    a = few_distinct_lengths(n, capacity, distinct)
    lb = packs_lower_bound(a, capacity)
    with _switched_off("PACKCFG_PLANNER_EXACT"):  # the baseline this script began from
        bfd = plan(a, capacity).num_packs
    counts = np.bincount(a, minlength=capacity + 1)
    t0 = time.process_time()
    np.argsort(a)
    argsort_s = time.process_time() - t0
    present = np.flatnonzero(counts)
    _exact_kernel.exact_patterns(present[:1], counts[present[:1]], capacity, share, 1)  # compiled / cached
    t0 = time.process_time()
    pat_k, _, _, _, left_of, packs = _exact_kernel.exact_patterns(
        present, counts[present], capacity, share, 64 * (len(present) + 16)
    )
    compiled_s = time.process_time() - t0
    compiled_ms, ratio = f"{compiled_s * 1000:.0f}", f"{compiled_s / argsort_s:.2f}x"
    left = np.zeros(capacity + 1, dtype=np.int64)
    left[present] = left_of
    steps = len(pat_k)
    numpy_s = "-"
    if check:
        t0 = time.process_time()
        reference = exact_packs(counts, capacity, share)
        numpy_s = f"{time.process_time() - t0:.1f}"
        if not (reference[0] == packs and np.array_equal(reference[1], left) and reference[2] == steps):
            raise SystemExit(
                f"the planner's kernel and the NumPy version differ on {n}:{capacity}:{distinct}"
            )
    rest = np.repeat(np.arange(capacity + 1), left)
    total = packs + (plan(rest, capacity).num_packs if len(rest) else 0)
    return [
        f"{distinct} distinct",
        f"{n:,}",
        str(capacity),
        f"+{bfd - lb}",
        f"+{total - lb}",
        f"{len(rest):,}",
        f"{steps:,}",
        compiled_ms,
        ratio,
        numpy_s,
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("rows", nargs="*", default=list(ROWS), help="N:capacity:distinct (default: %(default)s)")
    ap.add_argument(
        "--share",
        type=float,
        default=EXACT_SHARE,
        help="step 3's share (default: the planner's, %(default)s)",
    )
    ap.add_argument(
        "--check", action="store_true", help="also run the NumPy version (seconds to minutes a row)"
    )
    args = ap.parse_args()
    out = []
    for row in args.rows:
        try:
            n, capacity, distinct = (int(x) for x in row.split(":"))
        except ValueError:
            ap.error(f"a row is N:capacity:distinct, not {row!r}")
        print(f"  {distinct} distinct N={n:,} cap={capacity}", file=sys.stderr, flush=True)
        out.append(compare(n, capacity, distinct, args.share, args.check))
    print_table(
        [
            "lengths",
            "N",
            "cap",
            "bfd without the try: packs - LB",
            "most constrained + bfd",
            "left to bfd",
            "steps",
            "ms compiled",
            "x argsort",
            "s NumPy",
        ],
        out,
    )


if __name__ == "__main__":
    main()
