"""bench/planner_variants.py: the variant syntax, and a small comparison that restores the stage's constants."""

from __future__ import annotations

import importlib.util
import io
from pathlib import Path

import pytest

from packcfg.packing.planning import refine
from tests.packing.test_planner_exact import needs_numba

_PATH = Path(__file__).resolve().parents[2] / "bench" / "planner_variants.py"


def _bench():
    spec = importlib.util.spec_from_file_location("planner_variants", _PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_variant_names_constants_of_the_stage_with_literal_values(monkeypatch, capsys):
    bench = _bench()
    assert bench.parse_variant("shipped") == ("shipped", {})
    assert bench.parse_variant("old: EXACT_SHARE=0.5; EXACT_WAYS_AGAIN=()") == (
        "old",
        {"EXACT_SHARE": 0.5, "EXACT_WAYS_AGAIN": ()},
    )
    assert bench.parse_variant("w: EXACT_WAYS_AGAIN=((True, 1, True),)")[1] == {
        "EXACT_WAYS_AGAIN": ((True, 1, True),)
    }
    # another module of packcfg.packing by MODULE.CONSTANT (the kernels' switches), set and put back
    assert bench.parse_variant("k: _exact_kernel.ROOMS_MAX_SPAN=0")[1] == {"_exact_kernel.ROOMS_MAX_SPAN": 0}
    from packcfg.packing import _exact_kernel

    span = _exact_kernel.ROOMS_MAX_SPAN
    old = bench._set({"_exact_kernel.ROOMS_MAX_SPAN": 0})
    assert _exact_kernel.ROOMS_MAX_SPAN == 0 and old == {"_exact_kernel.ROOMS_MAX_SPAN": span}
    bench._set(old)
    assert _exact_kernel.ROOMS_MAX_SPAN == span
    for bad, says in [
        ("x: _exact_kernel.NOPE=1", "NOPE=1"),
        ("x: _exact_kernel.np=1", "np=1"),  # a module's name, not a constant
        ("x: no_such_module.X=1", "no_such_module"),
        ("x: a..B=1", "a..B"),
        ("x: NOT_A_CONSTANT=1", "NOT_A_CONSTANT=1"),
        ("x: margin=1", "margin=1"),  # a function, not a constant
        ("x: EXACT_SHARE=__import__('os')", "not a Python literal"),
        ("x: EXACT_SHARE", "EXACT_SHARE"),
        (": EXACT_SHARE=1", "no name"),
    ]:
        with pytest.raises(ValueError, match=says):
            bench.parse_variant(bad)
    assert bench.main(["--variant", "a", "--variant", "a"]) == 2
    for seconds in ("-1", "nan", "inf"):
        assert bench.main(["--variant", "a", "--lp-bound", seconds]) == 2
    real = bench.importlib.util.find_spec
    monkeypatch.setattr(
        bench.importlib.util, "find_spec", lambda name: None if name == "scipy" else real(name)
    )
    assert bench.main(["--variant", "a", "--lp-bound", "10"]) == 2  # before any input is planned
    assert "needs SciPy" in capsys.readouterr().err


@needs_numba
def test_a_comparison_counts_its_rows_and_restores_the_stage():
    """One input (64k samples of 800 distinct lengths at 2k, seed 1), the shipped stage against no exact packs
    with two or three tokens last, and against none of those, no exact packs once more and no near pairs: +7
    against +17 and +56, all over the target (test_planner_exact pins the first two); the constants are as they
    were afterwards, also where a variant's plan raises."""
    bench = _bench()
    before = refine.EXACT_WAYS_AGAIN, refine.NEAR_PAIR_MAX_CAPACITY, refine.EXACT_WAYS_LAST
    out = io.StringIO()
    no_last = {"EXACT_WAYS_LAST": ()}
    without = {
        "EXACT_WAYS_AGAIN": (),
        "NEAR_PAIR_MAX_CAPACITY": 0,
        "EXACT_WAYS_LAST": (),
        "NOT_FULL_AGAIN": False,
    }
    total = bench.compare(
        [("shipped", {}), ("no_last", no_last), ("without", without)],
        (1,),
        (800,),
        (64_000,),
        (2048,),
        1,
        out,
    )
    assert (refine.EXACT_WAYS_AGAIN, refine.NEAR_PAIR_MAX_CAPACITY, refine.EXACT_WAYS_LAST) == before
    assert total["shipped"][0] == 1 and total["shipped"][3] == 7
    assert total["no_last"][0] == 1 and total["no_last"][3] == 17
    assert total["without"][0] == 1 and total["without"][3] == 56
    assert "800 distinct at 2048, 64000 samples, seed 1 | +7 over, " in out.getvalue()
    assert "| +17 over" in out.getvalue()
    with pytest.raises(ValueError):
        bench.compare(
            [("bad", {"EXACT_WAYS_AGAIN": "not ways"})], (1,), (800,), (64_000,), (2048,), 1, io.StringIO()
        )
    assert (refine.EXACT_WAYS_AGAIN, refine.NEAR_PAIR_MAX_CAPACITY, refine.EXACT_WAYS_LAST) == before


@needs_numba
def test_the_lp_table_bounds_the_rows_a_variant_misses():
    """With the stage given no budget (best fit's plan: 8,000 samples of 300 distinct at 2k, seed 1, +10 over
    LB, past the target of +5), --lp-bound's table gives that row the LP's bound (at least LB, at most the
    plan's packs) and its rounded plan (at least the bound), and says whether the target can be met. Needs
    SciPy (the LP's solver; the dev set-up installs it, packcfg never imports it)."""
    pytest.importorskip("scipy")
    bench = _bench()
    out = io.StringIO()
    bench.compare(
        [("off", {"EFFORT_MIN": 0, "EFFORT_PER_ITEM": 0})], (1,), (300,), (8_000,), (2048,), 1, out, lp=60
    )
    row = out.getvalue().splitlines()[-1].split(" | ")
    assert row[0] == "300 distinct at 2048, 8000 samples, seed 1"
    packs, bound, rounded = (int(x.lstrip("+")) for x in row[1:4])
    assert packs > 5 and 0 <= bound <= packs and bound <= rounded
    assert row[4] in ("yes", "open", "no (every plan is over it)")
    assert refine.EFFORT_MIN > 0  # restored
