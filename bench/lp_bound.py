"""The cutting-stock LP lower bound on packs (Gilmore-Gomory), for the benchmark's "packs over LB" column only:
never on the planner's path.

Bin packing is cutting stock with demands d_i (the items of each distinct length l_i): min sum_p x_p over
patterns p (a_ip items of length l_i, sum_i a_ip l_i <= capacity) with sum_p a_ip x_p >= d_i, x >= 0 real. Its
optimum z_LP is a lower bound on the packs of every plan, so ceil(z_LP) is one, and it is at least the
volume bound (patterns hold at most `capacity` tokens); it is usually above Martello-Toth's L2 where the items
interact (few distinct lengths).

Column generation: the restricted master LP (HiGHS, `scipy.optimize.linprog`) over the patterns of a
given plan plus one pattern per length (as many copies as fit), then repeatedly the pattern of largest dual
value (an unbounded integer knapsack over the distinct lengths, compiled with numba where it is installed)
is added while its value exceeds 1. Patterns may hold more items of a length than there are (the classic
Gilmore-Gomory LP): a relaxation of the bounded one, so its bound is still valid, if slightly weaker.

With `pack_rest`, the master's last optimum is also made whole (`rounded_packs`): each of its patterns used
as many whole times as the LP uses it (as far as the items last), and the few hundred items left planned by
`pack_rest` (bfd). That is a real plan, so its packs are an upper bound on the optimum: where it lands within a
target that bfd misses, the target is reachable and the gap is bfd's (2k rows of 600 / 999 distinct lengths:
LB + 1 from 64k to 1M samples, docs/planner-history.md).

The bound at every iteration is Farley's: for any duals y >= 0, sum_i d_i y_i / max_p (sum_i a_ip y_i) is a
lower bound on z_LP (y / max is dual feasible), and with the master's duals it equals z_RMP / v_max. The
search stops when ceil of that equals ceil(z_RMP) (the LP cannot raise the integer bound further), or after
`max_iter` iterations / `time_limit` seconds: the bound returned is valid wherever it stops.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

try:
    import numba as _nb

    _jit = _nb.njit(cache=True, nogil=True)
except Exception:  # pragma: no cover - without numba the pricing runs in Python (slow, small inputs only)

    def _jit(fn):  # type: ignore[no-untyped-def]
        return fn


@_jit
def _price(values, duals, capacity, want):  # type: ignore[no-untyped-def]
    """Unbounded knapsack on the duals: up to `want` patterns (rows: items per length) of value > 1 within
    capacity, the best first, and the largest value. best[c]: the largest value with weight <= c; last[c]:
    the length that last improved it; a pattern is read back from each of the `want` best end weights."""
    best = np.zeros(capacity + 1)
    last = np.full(capacity + 1, -1, dtype=np.int64)
    for i in range(values.shape[0]):
        v = values[i]
        y = duals[i]
        if y <= 0.0:
            continue
        for c in range(v, capacity + 1):
            cand = best[c - v] + y
            if cand > best[c] + 1e-12:
                best[c] = cand
                last[c] = i
    ends = np.argsort(-best)
    out = np.zeros((want, values.shape[0]), dtype=np.int64)
    n = 0
    for j in range(ends.shape[0]):
        c = ends[j]
        if n == want or best[c] <= 1.0 + 1e-9:
            break
        if last[c] < 0 or (c + 1 <= capacity and best[c + 1] == best[c] and last[c + 1] == last[c]):
            continue  # the same pattern as a heavier end weight's
        while c > 0 and last[c] >= 0:
            i = last[c]
            out[n, i] += 1
            c -= values[i]
        n += 1
    return out[:n], best.max()


@_jit
def _price_limited(values, duals, capacity, k_max, want):  # type: ignore[no-untyped-def]
    """_price with at most k_max items a pattern (max_per_pack): best[j, c], the largest value with at most j
    items and weight <= c, over j = 1..k_max; last[j, c] the length that last improved it. Costs k_max times
    _price's DP; a pattern is read back from each of the `want` best end weights at j = k_max."""
    best = np.zeros((k_max + 1, capacity + 1))
    last = np.full((k_max + 1, capacity + 1), -1, dtype=np.int64)
    for j in range(1, k_max + 1):
        prev = best[j - 1]
        cur = best[j]
        for c in range(capacity + 1):
            cur[c] = prev[c]  # at most j items includes at most j - 1
        for i in range(values.shape[0]):
            v = values[i]
            y = duals[i]
            if y <= 0.0:
                continue
            for c in range(v, capacity + 1):
                cand = prev[c - v] + y
                if cand > cur[c] + 1e-12:
                    cur[c] = cand
                    last[j, c] = i
    top = best[k_max]
    ends = np.argsort(-top)
    out = np.zeros((want, values.shape[0]), dtype=np.int64)
    n = 0
    for e in range(ends.shape[0]):
        c = ends[e]
        if n == want or top[c] <= 1.0 + 1e-9:
            break
        if c + 1 <= capacity and top[c + 1] == top[c]:
            continue  # a heavier end weight reads back the same pattern or one as good
        j = k_max
        while j > 0 and c > 0:
            while j > 0 and last[j, c] < 0:
                j -= 1  # best[j, c] came from best[j - 1, c]
            if j == 0:
                break
            i = last[j, c]
            out[n, i] += 1
            c -= values[i]
            j -= 1
        n += 1
    return out[:n], top.max()


def plan_patterns(
    a: np.ndarray, offsets: np.ndarray, order: np.ndarray, values: np.ndarray
) -> list[tuple[np.ndarray, np.ndarray]]:
    """The distinct patterns of a plan, sparse: (indices into `values`, ascending lengths; items of each)
    per pattern. The master starts from them, so its first optimum is at most the plan's packs."""
    n = len(values)
    group = np.searchsorted(values, a[order])
    pack = np.repeat(np.arange(len(offsets) - 1, dtype=np.int64), np.diff(offsets))
    uk, cnt = np.unique(pack * n + group, return_counts=True)
    bounds = np.searchsorted(uk // n, np.arange(len(offsets)))
    out: dict[bytes, tuple[np.ndarray, np.ndarray]] = {}
    for p in range(len(offsets) - 1):
        idx, k = uk[bounds[p] : bounds[p + 1]] % n, cnt[bounds[p] : bounds[p + 1]]
        out.setdefault(idx.tobytes() + k.tobytes(), (idx, k))
    return list(out.values())


class _Master:
    """The restricted master LP, min sum x s.t. columns x >= demand, x >= 0: HiGHS through SciPy's bundled
    binding, columns added in place so that each solve starts from the last basis (a few ms where a fresh
    `linprog` takes 50-100 ms at a thousand rows); `scipy.optimize.linprog` where that binding is absent."""

    def __init__(self, demand: np.ndarray) -> None:
        self.demand = demand
        self.rows: list[np.ndarray] = []
        self.data: list[np.ndarray] = []
        self.x = np.zeros(0)  # the last optimum's pattern use (solve)
        try:
            from scipy.optimize._highspy import _core  # private, but bundled with SciPy >= 1.15

            self.h = _core._Highs()
            self.h.setOptionValue("output_flag", False)
            inf = self.h.getInfinity()
            n = len(demand)
            empty_i = np.zeros(n, dtype=np.int32)
            self.h.addRows(n, demand, np.full(n, inf), 0, empty_i, np.zeros(0, dtype=np.int32), np.zeros(0))
        except Exception:  # pragma: no cover - another SciPy
            self.h = None

    def add(self, rows: list[np.ndarray], data: list[np.ndarray]) -> None:
        self.rows += rows
        self.data += data
        if self.h is not None:
            inf = self.h.getInfinity()
            starts = np.zeros(len(rows), dtype=np.int32)
            np.cumsum([len(r) for r in rows[:-1]], out=starts[1:])
            self.h.addCols(
                len(rows),
                np.ones(len(rows)),
                np.zeros(len(rows)),
                np.full(len(rows), inf),
                int(sum(len(r) for r in rows)),
                starts,
                np.concatenate(rows).astype(np.int32),
                np.concatenate(data),
            )

    def solve(self) -> tuple[float, np.ndarray]:
        """(the master's optimum, the duals of its rows, >= 0); the primal (patterns used) in self.x."""
        if self.h is not None:
            self.h.run()
            if str(self.h.getModelStatus()).split(".")[-1] != "kOptimal":
                raise RuntimeError(f"cutting-stock master LP: {self.h.getModelStatus()}")
            self.x = np.asarray(self.h.getSolution().col_value, dtype=float)
            return float(self.h.getObjectiveValue()), np.maximum(
                0.0, np.asarray(self.h.getSolution().row_dual)
            )
        from scipy import sparse
        from scipy.optimize import linprog

        n = len(self.demand)
        indptr = np.zeros(len(self.rows) + 1, dtype=np.int64)
        np.cumsum([len(r) for r in self.rows], out=indptr[1:])
        cols = sparse.csc_matrix(
            (-np.concatenate(self.data), np.concatenate(self.rows), indptr), shape=(n, len(self.rows))
        )
        res = linprog(np.ones(len(self.rows)), A_ub=cols, b_ub=-self.demand, bounds=(0, None), method="highs")
        if res.status != 0:
            raise RuntimeError(f"cutting-stock master LP failed: {res.message}")
        self.x = np.asarray(res.x, dtype=float)
        return float(res.fun), np.maximum(0.0, -np.asarray(res.ineqlin.marginals, dtype=float))


def cutting_stock_bound(
    a: np.ndarray,
    capacity: int,
    seed_patterns: list[tuple[np.ndarray, np.ndarray]] | None = None,
    max_iter: int = 3000,
    time_limit: float = 120.0,
    per_iter: int = 32,
    known: int = 0,
    max_per_pack: int | None = None,
    pack_rest: Callable[[np.ndarray], int] | None = None,
) -> dict:
    """{"lp": the master's optimum at the end (an upper bound on z_LP, equal to it where "exact"), "bound":
    a valid integer lower bound on the packs (the larger of `known`, the volume bound and ceil of Farley's
    bound), "exact": whether the LP was solved (no pattern of value > 1 left), "capped": whether the search
    stopped because ceil(master) <= `known` (a valid bound the caller has, e.g. L2: the LP cannot raise it),
    "iters", "seconds"}; with `pack_rest(lengths) -> packs` also "rounded" (the packs of the master's last
    optimum made whole, rounded_packs) and "rounded_rest" (the items it left to pack_rest)."""
    t0 = time.perf_counter()
    values, demand = np.unique(a, return_counts=True)
    n = len(values)
    # the master's columns, sparse (a pattern holds a few lengths): row indices and counts per column
    rows: list[np.ndarray] = []
    data: list[np.ndarray] = []
    seen: set[bytes] = set()

    def add(nz: np.ndarray, k: np.ndarray) -> bool:
        key = nz.astype(np.int64).tobytes() + k.astype(np.int64).tobytes()
        if key in seen:
            return False
        seen.add(key)
        rows.append(nz.astype(np.int64))
        data.append(k.astype(float))
        return True

    for i in range(n):  # one pattern per length: as many copies as fit (and exist)
        most = min(capacity // int(values[i]), int(demand[i]))
        add(np.array([i]), np.array([most if max_per_pack is None else min(most, max_per_pack)]))
    for nz, k in seed_patterns if seed_patterns is not None else ():
        add(np.asarray(nz), np.asarray(k))
    bound = max(known, -(-int(a.sum()) // capacity))
    if max_per_pack is not None:
        bound = max(bound, -(-len(a) // max_per_pack))
    capped = False
    master = _Master(demand.astype(float))
    master.add(rows, data)
    z = float("inf")
    exact = False
    it = 0
    while True:
        it += 1
        z, duals = master.solve()
        if max_per_pack is None:
            new, value = _price(values.astype(np.int64), duals, int(capacity), per_iter)
        else:
            new, value = _price_limited(
                values.astype(np.int64), duals, int(capacity), int(max_per_pack), per_iter
            )
        # Farley: y / max(1, v_max) is dual feasible, so its objective is a lower bound on the LP whatever the
        # master's accuracy (the duals' own objective, not the master's primal value)
        value = max(float(value), 1.0)
        bound = max(bound, int(np.ceil(float(np.dot(demand, duals)) / value - 1e-6)))
        if value <= 1.0 + 1e-9:
            exact = True
            break
        if bound >= int(np.ceil(z - 1e-7)):
            capped = bound == known
            break
        if it >= max_iter or time.perf_counter() - t0 > time_limit:
            break
        n_old = len(rows)
        if not sum(add(np.flatnonzero(row), row[row > 0]) for row in new):
            break  # (numerical: the best patterns are in the master already)
        master.add(rows[n_old:], data[n_old:])
    out = {
        "lp": z,
        "bound": bound,
        "exact": exact,
        "capped": capped,
        "iters": it,
        "seconds": time.perf_counter() - t0,
        "distinct": n,
    }
    if pack_rest is not None:
        out["rounded"], out["rounded_rest"] = rounded_packs(demand, values, master, pack_rest)
    return out


def rounded_packs(
    demand: np.ndarray, values: np.ndarray, master: _Master, pack_rest: Callable[[np.ndarray], int]
) -> tuple[int, int]:
    """The master's optimum made whole: its patterns, most used first, each floor(x) times, as far as the items
    left allow (a Gilmore-Gomory pattern may hold more items of a length than a plan of them has left), then
    `pack_rest` on what is left. Returns (packs, items left to pack_rest)."""
    left = demand.astype(np.int64).copy()
    packs = 0
    x = master.x
    for j in np.argsort(-x, kind="stable"):
        k = int(np.floor(x[j] + 1e-9))
        if k <= 0:
            break
        rows, cnt = master.rows[j], master.data[j].astype(np.int64)
        k = min(k, int(np.min(left[rows] // cnt)))
        if k > 0:
            left[rows] -= k * cnt
            packs += k
    rest = np.repeat(values, left)
    return packs + (pack_rest(rest) if len(rest) else 0), len(rest)


def rounded_down_bound(
    a: np.ndarray, capacity: int, grid: int, time_limit: float = 120.0, known: int = 0
) -> dict:
    """The cutting-stock LP's bound on the lengths rounded down to a multiple of `grid` (those under it dropped):
    every plan of `a` is a plan of those lengths, so a lower bound on their packs is one on `a`'s, and the
    larger of it and `known` (a bound on `a`, e.g. LB) is returned as "bound". The rounding loses up to
    grid - 1 tokens an item, so the bound is weaker than the LP's on `a`; but with about capacity / grid
    distinct lengths the LP converges where on thousands it does not (8,191 distinct requested at 4k, 3,539
    lengths, 30k samples: the LP on the lengths themselves at LB + 0 after 900 s, unconverged; with grid 4,
    1,013 lengths, solved in 40 s at LB + 25). Farley's bound is valid wherever the search stops, converged
    or not. Bin packing only (no max_per_pack: the dropped items would free their slots)."""
    if grid < 1:
        raise ValueError(f"grid {grid}: a positive number of tokens")
    b = (np.asarray(a, dtype=np.int64) // grid) * grid
    b = b[b > 0]
    if not len(b):
        return {"bound": known, "exact": True, "grid": grid, "distinct": 0, "seconds": 0.0}
    r = cutting_stock_bound(b, capacity, time_limit=time_limit)
    return {
        "bound": max(known, r["bound"]),
        "exact": r["exact"],
        "grid": grid,
        "distinct": r["distinct"],
        "seconds": r["seconds"],
    }
