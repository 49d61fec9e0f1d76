"""Fekete and Schepers' lower bound (planning/refine.py, dff_bound) and what it decides: the target of bfd's
refinement stage on near-continuous lengths, and where the whole stage runs on them from DENSE_STAGE_MIN_ITEMS
samples."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from packcfg.packing import _refine_kernel
from packcfg.packing.planner import plan
from packcfg.packing.planning import refine
from tests.packing.test_planner_refine import _bfd_only, _few_distinct, _lb, _optimum, _spy_patterns

needs_numba = pytest.mark.skipif(not _refine_kernel.HAVE_NUMBA, reason="the stage needs numba")


def _dff_by_definition(values, counts, capacity):
    """The bound read straight off its definition, item by item, every threshold and every k of DFF_KS (in
    exact fractions): 1 over capacity - e, 0 under e, else u^(k)(x / capacity)."""
    from fractions import Fraction

    best = 0
    for e in [1, *[int(v) for v in values if 2 * v <= capacity]]:
        for k in refine.DFF_KS:
            total = Fraction(0)
            for x, n in zip(values.tolist(), counts.tolist(), strict=True):
                if x > capacity - e:
                    u = Fraction(1)
                elif x < e:
                    u = Fraction(0)
                elif (k + 1) * x % capacity == 0:
                    u = Fraction(x, capacity)
                else:
                    u = Fraction((k + 1) * x // capacity, k)
                total += n * u
            best = max(best, -(-total.numerator // total.denominator))
    return best


@settings(max_examples=200, deadline=None)
@given(st.integers(10, 40), st.lists(st.integers(1, 40), min_size=1, max_size=9))
def test_dff_bound_is_a_lower_bound(capacity, lengths):
    """Never above the optimum (exhaustive on small inputs)."""
    lengths = [min(x, capacity) for x in lengths]
    values, counts = np.unique(lengths, return_counts=True)
    assert refine.dff_bound(values, counts, capacity) <= _optimum(lengths, capacity)


@settings(max_examples=150, deadline=None)
@given(
    st.sampled_from([12, 24, 60, 97, 120, 2048]),
    st.lists(st.tuples(st.floats(0.0, 1.0), st.integers(1, 50)), min_size=1, max_size=25),
)
def test_dff_bound_is_its_definition(capacity, draws):
    """The vectorised bound (every k at once, read from counts at the steps' edges, a correction at the lengths
    where (k + 1) x / capacity is whole) equals the bound computed item by item from the definition. Capacities
    with many divisors put lengths on those whole points."""
    hist: dict[int, int] = {}
    for f, n in draws:
        x = max(1, min(capacity, round(f * capacity)))
        hist[x] = hist.get(x, 0) + n
    values = np.array(sorted(hist), dtype=np.int64)
    counts = np.array([hist[v] for v in values.tolist()], dtype=np.int64)
    assert refine.dff_bound(values, counts, capacity) == _dff_by_definition(values, counts, capacity)


def test_dff_bound_counts_items_just_over_a_third():
    """Five items of 34 at capacity 100: two share a pack, three do not fit one. L2 (and the volume) say 2;
    u^(2) counts each 1/2: 3, the optimum."""
    values, counts = np.array([34]), np.array([5])
    assert refine.l2_bound(values, counts, 100) == 2
    assert refine.dff_bound(values, counts, 100) == 3 == _optimum([34] * 5, 100)


def test_fewer_thresholds_still_give_a_bound(monkeypatch):
    """Past DFF_MAX_THRESHOLDS thresholds, an even spread of them: a bound still (never above the one with
    all), and the same here where the threshold that decides is 1."""
    a = np.random.default_rng(3).integers(1, 2049, 64_000)
    values, counts = np.unique(a, return_counts=True)
    full = refine.dff_bound(values, counts, 2048)
    monkeypatch.setattr(refine, "DFF_MAX_THRESHOLDS", 16)
    assert refine.dff_bound(values, counts, 2048) <= full
    monkeypatch.setattr(refine, "DFF_MAX_THRESHOLDS", 1)
    assert refine.dff_bound(values, counts, 2048) <= full


def test_best_fit_is_proven_optimal_on_uniform_lengths():
    """64k uniform lengths at 2k: best fit lands L2 + 9 (over the target against L2), and Fekete and Schepers'
    bound is exactly its packs, so LB (and the stage's target) has it within: the plan is optimal."""
    a = np.random.default_rng(3).integers(1, 2049, 64_000)
    values, counts = np.unique(a, return_counts=True)
    packs = _bfd_only(a, 2048).num_packs
    assert packs - _lb(a, 2048) == 9
    assert refine.dff_bound(values, counts, 2048) == packs
    assert refine.lower_bound(values[::-1], counts[::-1], 2048, 1 << 62) == packs


def test_lower_bound_leaves_the_dff_bound_out_only_where_it_cannot_matter(monkeypatch):
    """With a plan's packs within L2's target, lower_bound does not compute Fekete and Schepers' bound; over
    it, it does."""
    calls = []
    real = refine.dff_bound
    monkeypatch.setattr(refine, "dff_bound", lambda *args: calls.append(1) or real(*args))
    a = np.random.default_rng(3).integers(1, 2049, 64_000)
    values, counts = np.unique(a, return_counts=True)
    l2 = _lb(a, 2048)
    assert refine.lower_bound(values[::-1], counts[::-1], 2048, 1 << 62, l2 + 5) == l2 and not calls
    assert refine.lower_bound(values[::-1], counts[::-1], 2048, 1 << 62, l2 + 9) == l2 + 9 and calls


@needs_numba
def test_the_whole_stage_on_near_continuous_lengths_from_2_18_samples(monkeypatch):
    """270k samples of 4,095 distinct at 2k (1,773 lengths, Zipf-weighted: near-continuous): best fit lands
    L2 + 386, some 30 margins over LB; the whole stage brings it to L2 + 106 (measured). Control: with the
    near-continuous rule of smaller inputs (the stage skipped from STOP_AT_LB_ITEMS), best fit's plan."""
    a = _few_distinct(270_000, 2048, 4095)
    assert len(np.unique(a)) > refine.DENSE_FRACTION * 2048 and len(a) >= refine.DENSE_STAGE_MIN_ITEMS
    l2 = _lb(a, 2048)
    before = _bfd_only(a, 2048).num_packs
    assert before - l2 == 386
    p = plan(a, 2048)
    assert np.array_equal(np.sort(p.order), np.arange(len(a)))
    assert np.add.reduceat(a[p.order], p.offsets[:-1]).max() <= 2048
    assert p.num_packs - l2 <= 110
    monkeypatch.setattr(refine, "DENSE_STAGE_MIN_ITEMS", 1 << 62)
    assert plan(a, 2048).num_packs == before


@needs_numba
def test_near_continuous_lengths_near_lb_skip_the_stage(monkeypatch):
    """270k uniform lengths at 2k: best fit lands within DENSE_STAGE_MARGINS margins of LB (Fekete and
    Schepers' bound), where the stage saves next to nothing, so it does not run. Control: with no margins
    allowed it runs."""
    a = np.random.default_rng(5).integers(1, 2049, 270_000)
    calls = _spy_patterns(monkeypatch)
    p = plan(a, 2048)
    assert not calls and p.num_packs == _bfd_only(a, 2048).num_packs
    monkeypatch.setattr(refine, "DENSE_STAGE_MARGINS", 0)
    plan(a, 2048)
    assert calls
