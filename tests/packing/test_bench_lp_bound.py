"""bench/lp_bound.py's bound on lengths rounded down (rounded_down_bound): a lower bound on the packs of the
lengths themselves, whatever the grid. Bench only; needs SciPy (the LP's solver), which the dev set-up
installs (packcfg never imports it): skipped only in an environment without it."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.packing.test_planner_refine import _optimum

pytest.importorskip("scipy")

_PATH = Path(__file__).resolve().parents[2] / "bench" / "lp_bound.py"


def _lp_bound():
    """bench/lp_bound.py by path, under its own name in sys.modules, as planner_variants.py loads it: numba's
    cache of its kernels names the module, and a cache written by an unnamed one cannot be read back."""
    module = sys.modules.get("lp_bound")
    if module is None:
        spec = importlib.util.spec_from_file_location("lp_bound", _PATH)
        module = importlib.util.module_from_spec(spec)
        sys.modules["lp_bound"] = module
        spec.loader.exec_module(module)
    return module


lp_bound = _lp_bound()


@settings(max_examples=60, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 20), min_size=1, max_size=6),
    capacity=st.integers(20, 30),
    grid=st.integers(1, 7),
)
def test_the_bound_on_lengths_rounded_down_never_passes_the_optimum(lengths, capacity, grid):
    r = lp_bound.rounded_down_bound(np.array(lengths), capacity, grid, time_limit=10)
    assert r["bound"] <= _optimum(lengths, capacity)


def test_rounded_down_not_up_and_a_grid_of_one_is_the_lp_itself():
    # four items of 5 at capacity 10: 2 packs. Rounded down to 4s they still need 2 (8 fits, 12 does not);
    # rounded up to 8s (the control: not a relaxation) they would need 4
    a = np.array([5, 5, 5, 5])
    assert lp_bound.rounded_down_bound(a, 10, 4)["bound"] == 2 == _optimum([5, 5, 5, 5], 10)
    assert lp_bound.cutting_stock_bound(np.array([8, 8, 8, 8]), 10)["bound"] == 4
    rng = np.random.default_rng(3)
    b = rng.integers(1, 100, 300)
    assert lp_bound.rounded_down_bound(b, 128, 1)["bound"] == lp_bound.cutting_stock_bound(b, 128)["bound"]
    assert lp_bound.rounded_down_bound(np.array([1, 2, 3]), 10, 4)["bound"] == 0  # all dropped
    with pytest.raises(ValueError, match="grid 0"):
        lp_bound.rounded_down_bound(a, 10, 0)
