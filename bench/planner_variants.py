"""bfd's refinement stage under several settings, side by side, interleaved per input.

Each variant sets module constants of `packcfg.packing.planning.refine` (restored after it). On the few-distinct
inputs drawn with several seeds (docs/planner-history.md, "What one seed hides": seeds 1-3, 400 / 800 / 999 /
1,500 distinct lengths, 64k / 150k samples, 2k-128k) every variant plans every input warm, process CPU, median
of --repeat runs. The runs of one input alternate between the variants, so that the drift of a shared machine
hits them alike: separate runs of the same code differ by up to 6 rows over the time bar on a 2-core machine,
which is more than most changes move.

Prints a row per input, then for each variant: rows over the packs target (LB + max(5, 0.01% LB)), over the time
bar (3x one argsort of the lengths, or 10 ms), within both, and the packs over LB and the planning time summed
over the rows.

With --lp-bound SECONDS, the rows where the first variant is over the packs target get the cutting-stock LP
(bench/lp_bound.py, needs SciPy; at most SECONDS a row): its lower bound and its plan made whole, over LB, and
whether the target can be met at all (not where the LP's bound is past it: there LB is below the optimum).
Where the LP does not converge in SECONDS (thousands of distinct lengths), the LP on the lengths rounded down to
multiples of 4, then 2 tokens (a relaxation: its bound holds for the lengths themselves) gets as many seconds
again each, and may still prove the target out of reach.

Usage: python bench/planner_variants.py --variant shipped --variant "stop44: EXACT_SHARE=0.5; EXACT_WAYS_AGAIN=()"
       [--seeds 1,2,3] [--distinct 400,800,999,1500] [--n 64000,150000] [--capacities 2048,4096,8192,32768,131072]
       [--repeat 5] [--lp-bound SECONDS]
A variant is NAME, or NAME: CONSTANT=VALUE; CONSTANT=VALUE (Python literals: -1, 0.5, (), ((True, 1, True),)); a
constant is refine's, or MODULE.CONSTANT for one of another module of packcfg.packing (_exact_kernel.ROOMS_MAX_SPAN=0).
"""

from __future__ import annotations

import argparse
import ast
import importlib
import importlib.util
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's packcfg, not an installed one

from packcfg.packing import plan  # noqa: E402
from packcfg.packing.planning import refine  # noqa: E402


def _bench_packing():  # type: ignore[no-untyped-def]
    """bench/packing.py (its inputs, bound and machine line), loaded by path: a `packing` on sys.path may be
    another module (the tests' package of that name)."""
    spec = importlib.util.spec_from_file_location(
        "bench_packing", Path(__file__).resolve().parent / "packing.py"
    )
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


_packing = _bench_packing()
few_distinct_lengths, packs_lower_bound, machine = (
    _packing.few_distinct_lengths,
    _packing.packs_lower_bound,
    _packing.machine,
)

Variant = tuple[str, dict[str, object]]


def parse_variant(text: str) -> Variant:
    """NAME or NAME: CONSTANT=VALUE; ... -> (name, {constant: value}); ValueError naming what is wrong."""
    name, _, body = text.partition(":")
    name = name.strip()
    if not name:
        raise ValueError(f"--variant {text!r}: no name before ':'")
    settings: dict[str, object] = {}
    for part in filter(None, (p.strip() for p in body.split(";"))):
        constant, eq, value = part.partition("=")
        constant = constant.strip()
        if not eq or _owner(constant) is None:
            raise ValueError(
                f"--variant {text!r}: {part!r} is not CONSTANT=VALUE for a constant of packcfg.packing.planning.refine"
                " (or MODULE.CONSTANT=VALUE for one of packcfg.packing.MODULE)"
            )
        try:
            settings[constant] = ast.literal_eval(value.strip())
        except (ValueError, SyntaxError):
            raise ValueError(f"--variant {text!r}: {value.strip()!r} is not a Python literal") from None
    return name, settings


def _owner(constant: str):  # type: ignore[no-untyped-def]
    """The module that holds `constant` (refine's NAME, or packcfg.packing's MODULE.NAME: the kernels' switches,
    e.g. _exact_kernel.ROOMS_MAX_SPAN) and its name there, or None where it holds no such constant."""
    module_name, _, name = constant.rpartition(".")
    if not module_name:
        module = refine
    else:
        try:
            module = importlib.import_module(f"packcfg.packing.{module_name}")
        except (ImportError, ValueError, TypeError):  # no such module, or no module name at all ("a..B")
            return None
    if not name.isupper() or not hasattr(module, name):
        return None
    return module, name


def _set(settings: dict[str, object]) -> dict[str, object]:
    """Apply `settings` (refine's constants, or other modules' by MODULE.NAME); returns what they replaced."""
    old = {}
    for k, v in settings.items():
        module, name = _owner(k)
        old[k] = getattr(module, name)
        setattr(module, name, v)
    return old


def _cpu(fn, *args) -> float:  # type: ignore[no-untyped-def]
    """The process CPU seconds of fn(*args)."""
    t = time.process_time()
    fn(*args)
    return time.process_time() - t


def _plan_and_order(a: np.ndarray, capacity: int) -> None:
    """A plan with its item order built, as `pack` uses it (bench/packing.py times the same)."""
    _ = plan(a, capacity).order


def compare(
    variants: list[Variant],
    seeds: tuple[int, ...],
    distinct: tuple[int, ...],
    sizes: tuple[int, ...],
    capacities: tuple[int, ...],
    repeat: int,
    out=sys.stdout,  # type: ignore[no-untyped-def]
    lp: float = 0.0,
) -> dict[str, list[float]]:
    """Print the rows and the summary; returns {name: [over packs, over time, within both, packs over LB, ms]}.
    With `lp` seconds, then the LP's table of the rows where the first variant misses the packs target."""
    names = [name for name, _ in variants]
    misses: list[tuple[str, np.ndarray, int, int, int]] = []  # (input, lengths, capacity, LB, first's packs)
    total = {name: [0, 0, 0, 0, 0.0] for name in names}
    print(f"# packcfg bench/planner_variants.py  {machine()}", file=out)
    print("input | " + " | ".join(f"{name}: packs over LB, ms" for name in names), file=out)
    for capacity in capacities:
        for n in sizes:
            for d in distinct:
                for seed in seeds:
                    a = few_distinct_lengths(n, capacity, d, seed)
                    lb = packs_lower_bound(a, capacity)
                    target = lb + refine.margin(lb)
                    bar = max(0.010, 3 * float(np.median([_cpu(np.argsort, a) for _ in range(3)])))
                    packs: dict[str, int] = {}
                    times: dict[str, list[float]] = {name: [] for name in names}
                    for name, settings in variants:  # warm: numba loaded, caches faulted in
                        old = _set(settings)
                        try:
                            packs[name] = plan(a, capacity).num_packs
                        finally:
                            _set(old)
                    for _ in range(repeat):
                        for name, settings in variants:
                            old = _set(settings)
                            try:
                                times[name].append(_cpu(_plan_and_order, a, capacity))
                            finally:
                                _set(old)
                    cells = []
                    for name in names:
                        t = float(np.median(times[name]))
                        packs_ok, time_ok = packs[name] <= target, t <= bar
                        row = total[name]
                        row[0] += not packs_ok
                        row[1] += not time_ok
                        row[2] += packs_ok and time_ok
                        row[3] += packs[name] - lb
                        row[4] += t * 1e3
                        cells.append(
                            f"+{packs[name] - lb}{'' if packs_ok else ' over'}, "
                            f"{t * 1e3:.1f}{'' if time_ok else ' over'}"
                        )
                    label = f"{d} distinct at {capacity}, {n} samples, seed {seed}"
                    print(f"{label} | " + " | ".join(cells), file=out)
                    out.flush()
                    if lp and packs[names[0]] > target:
                        misses.append((label, a, capacity, lb, packs[names[0]]))
    print("", file=out)
    print("variant | over the packs target | over the time bar | within both | packs over LB | ms", file=out)
    for name in names:
        over_packs, over_time, both, over_lb, ms = total[name]
        print(f"{name} | {over_packs} | {over_time} | {both} | {over_lb:,} | {ms:,.0f}", file=out)
    if misses:
        _lp_table(misses, names[0], variants[0][1], lp, out)
    return total


# where the LP on the lengths themselves does not converge in its seconds (thousands of distinct lengths), its
# bound on the lengths rounded down to these multiples, coarsest first (lp_bound.rounded_down_bound), each in
# as many seconds again, until one proves the target out of reach
LP_GRIDS = (4, 2)


def _lp_table(misses, name, settings, seconds, out) -> None:  # type: ignore[no-untyped-def]
    """The cutting-stock LP on the rows `name` misses: its lower bound and its plan made whole (its patterns
    used whole times, best fit on the rest: a real plan), over LB, and whether the target can be met at all.
    Where the LP does not converge and its bound is within the target, the bound of the LP on the lengths
    rounded down (LP_GRIDS) may still prove the target out of reach."""
    lp_bound = sys.modules.get("lp_bound")
    if lp_bound is None:  # by path, under its own name (numba's cache of its kernels names that module)
        spec = importlib.util.spec_from_file_location(
            "lp_bound", Path(__file__).resolve().parent / "lp_bound.py"
        )
        lp_bound = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
        sys.modules["lp_bound"] = lp_bound
        spec.loader.exec_module(lp_bound)  # type: ignore[union-attr]
    print("", file=out)
    print(
        f"input | {name}: packs over LB | LP bound over LB | LP plan over LB | the target met by some plan",
        file=out,
    )
    for label, a, capacity, lb, packs in misses:
        old = _set(settings)
        try:
            p = plan(a, capacity)
            r = lp_bound.cutting_stock_bound(
                a,
                capacity,
                lp_bound.plan_patterns(a, p.offsets, p.order, np.unique(a)),
                time_limit=seconds,
                known=lb,
                pack_rest=lambda rest, c=capacity: plan(rest, c).num_packs,
            )
        finally:
            _set(old)
        target = lb + refine.margin(lb)
        bound, how = r["bound"], ""
        # not converged and not past the target: the LP on the lengths rounded down, which converges sooner
        for grid in LP_GRIDS if not r["exact"] and bound <= target else ():
            g = lp_bound.rounded_down_bound(a, capacity, grid, time_limit=seconds, known=lb)
            if g["bound"] > bound:
                bound, how = g["bound"], f" (lengths rounded down to {grid}s)"
            if bound > target:
                break
        r["bound"] = bound
        verdict = (
            "no (every plan is over it)"
            if r["bound"] > target
            else "yes"
            if r["rounded"] <= target
            else "open"
        )
        print(
            f"{label} | +{packs - lb} | +{r['bound'] - lb}{how} | +{r['rounded'] - lb} | {verdict}",
            file=out,
        )
        out.flush()


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(","))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--variant", action="append", required=True, help="NAME or NAME: CONSTANT=VALUE; ...")
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--distinct", default="400,800,999,1500")
    ap.add_argument("--n", default="64000,150000", help="samples per input")
    ap.add_argument("--capacities", default="2048,4096,8192,32768,131072")
    ap.add_argument("--repeat", type=int, default=5, help="timed runs of each variant per input (median)")
    ap.add_argument(
        "--lp-bound", type=float, default=0.0, metavar="SECONDS", help="the LP on the first variant's misses"
    )
    args = ap.parse_args(argv)
    try:
        variants = [parse_variant(v) for v in args.variant]
        numbers = [_ints(x) for x in (args.seeds, args.distinct, args.n, args.capacities)]
    except ValueError as exc:
        print(f"planner_variants: {exc}", file=sys.stderr)
        return 2
    if len({name for name, _ in variants}) < len(variants) or args.repeat < 1:
        print("planner_variants: variant names must differ, and --repeat be at least 1", file=sys.stderr)
        return 2
    if not 0 <= args.lp_bound < float("inf"):
        print(f"planner_variants: --lp-bound {args.lp_bound}: seconds, 0 or more", file=sys.stderr)
        return 2
    if args.lp_bound and importlib.util.find_spec("scipy") is None:
        print(
            "planner_variants: --lp-bound needs SciPy (pip install scipy): the LP's solver", file=sys.stderr
        )
        return 2
    compare(variants, *numbers, args.repeat, lp=args.lp_bound)  # type: ignore[arg-type]
    return 0


if __name__ == "__main__":
    sys.exit(main())
