"""The refinement stage's near pairs (planning/refine.py, `_near_pairs` and `_near_pairs_plan`;
PACKCFG_PLANNER_NEAR_PAIRS=off skips them): where the plan is still over the target after every try, pairs of a
long sample and one other within a few tokens of full first, then best fit and the stage on what they leave."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from packcfg.packing import _refine_kernel
from packcfg.packing.planner import plan
from packcfg.packing.planning import refine
from tests.packing.test_planner_refine import SMALL_INPUTS, _check_forced_plan, _few_distinct, _lb

needs_numba = pytest.mark.skipif(not _refine_kernel.HAVE_NUMBA, reason="the stage needs numba")


def _reference_pairs(present, counts, capacity, slack):
    """Sample by sample: for s = 0..slack, each long sample (over half the capacity; longest length first)
    takes one sample of capacity - s - its length while there is one. Returns {(long, other): times}, left."""
    left = dict(zip(present.tolist(), counts.tolist(), strict=True))
    pairs: dict[tuple[int, int], int] = {}
    for s in range(slack + 1):
        for x in sorted(left, reverse=True):
            y = capacity - x - s
            while 2 * x > capacity and y >= 1 and left[x] > 0 and left.get(y, 0) > 0:
                left[x] -= 1
                left[y] -= 1
                pairs[(x, y)] = pairs.get((x, y), 0) + 1
    return pairs, left


@settings(max_examples=200, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 100), min_size=1, max_size=60, unique=True),
    data=st.data(),
    capacity=st.integers(100, 130),
    slack=st.integers(0, 6),
)
def test_near_pairs_take_the_least_slack_first_as_one_sample_at_a_time_would(lengths, data, capacity, slack):
    """`_near_pairs` against a sample-by-sample reference: the same pairs and the same samples left; every pair
    holds a long sample and leaves at most `slack` tokens."""
    present = np.array(sorted(lengths, reverse=True), dtype=np.int64)
    counts = np.array(data.draw(st.lists(st.integers(1, 9), min_size=len(present), max_size=len(present))))
    times, gx, gy, left = refine._near_pairs(present, counts, capacity, slack)
    got: dict[tuple[int, int], int] = {}
    for k, x, y in zip(times.tolist(), present[gx].tolist(), present[gy].tolist(), strict=True):
        assert 2 * x > capacity and capacity - slack <= x + y <= capacity and k > 0
        got[(x, y)] = got.get((x, y), 0) + k
    want, want_left = _reference_pairs(present, counts, capacity, slack)
    assert got == want
    assert dict(zip(present.tolist(), left.tolist(), strict=True)) == want_left


def test_a_long_sample_takes_its_exact_partner_before_one_a_token_short():
    # capacity 100: 60 + 40 is exact, 60 + 39 and 55 + 44 a token short. The one 40 goes to a 60 at slack 0,
    # then at slack 1 the other 60 takes the 39 and the 55 the 44
    present = np.array([60, 55, 44, 40, 39], dtype=np.int64)
    counts = np.array([2, 1, 1, 1, 1], dtype=np.int64)
    times, gx, gy, left = refine._near_pairs(present, counts, 100, 1)
    pairs = sorted(zip(present[gx].tolist(), present[gy].tolist(), times.tolist(), strict=True))
    assert pairs == [(55, 44, 1), (60, 39, 1), (60, 40, 1)]
    assert left.tolist() == [0, 0, 0, 0, 0]
    # with no slack, only the exact pair
    times, gx, gy, left = refine._near_pairs(present, counts, 100, 0)
    assert list(zip(present[gx].tolist(), present[gy].tolist(), times.tolist(), strict=True)) == [(60, 40, 1)]
    assert left.tolist() == [1, 1, 1, 0, 1]


@needs_numba
@settings(max_examples=40, deadline=None)
@given(**SMALL_INPUTS, pairs=st.booleans())
def test_forced_near_pairs_plans_are_valid_and_never_worse(lengths, capacity, max_per_pack, align, pairs):
    """With the stage forced on (a target of 0 packs, so the near pairs run wherever no max_per_pack could
    bind), every plan is valid (every item once, the capacity, max_per_pack, DPO pairs side by side) and never
    has more packs than best fit."""
    _check_forced_plan(lengths, capacity, max_per_pack, align, pairs, (refine, "NEAR_PAIR_SLACK_SHIFT", 6))


@needs_numba
def test_the_forced_near_pairs_run(monkeypatch):
    """Control for the test above: forced as there, the near pairs run (six 60s with six 39s at capacity 100,
    a token of slack with NEAR_PAIR_SLACK_SHIFT 6) and their plan is valid."""
    from tests.packing.test_planner_refine import FORCED, _check

    monkeypatch.setattr(refine, "margin", FORCED)
    monkeypatch.setattr(refine, "NEAR_PAIR_SLACK_SHIFT", 6)
    calls = _calls(monkeypatch)
    lengths = [60] * 6 + [39] * 6 + [20] * 10
    p = plan(lengths, 100)
    assert calls == [1]
    _check(p, p.item_aligned, 100)


def _calls(monkeypatch):
    calls = []
    real = refine._near_pairs_plan
    monkeypatch.setattr(refine, "_near_pairs_plan", lambda *args: calls.append(args[5]) or real(*args))
    return calls


def _off_then_on(monkeypatch, a, capacity, off, on, slack):
    """plan() of `a` with the near pairs switched off (LB + `off`: the control), then on (LB + `on`, the near
    pairs called once, with `slack` tokens): (that plan, checked whole and within the capacity; the calls).
    Without the stage once more on the packs that are not full (NOT_FULL_AGAIN), which would take the control
    nearer (test_planner_not_full.py has it)."""
    monkeypatch.setattr(refine, "NOT_FULL_AGAIN", False)
    lb = _lb(a, capacity)
    monkeypatch.setenv("PACKCFG_PLANNER_NEAR_PAIRS", "off")
    assert plan(a, capacity).num_packs - lb == off
    monkeypatch.delenv("PACKCFG_PLANNER_NEAR_PAIRS")
    calls = _calls(monkeypatch)
    p = plan(a, capacity)
    assert calls == [slack] and p.num_packs - lb == on
    assert sorted(a[p.order].tolist()) == sorted(a.tolist())
    assert (np.add.reduceat(a[p.order], p.offsets[:-1]) <= capacity).all()
    return p, calls


@needs_numba
def test_near_pairs_bring_a_plan_the_tries_leave_far_over_the_target_much_nearer(monkeypatch):
    """64k samples of 800 distinct lengths at 2k (seed 3): every try and exact way leaves the plan at LB + 50
    (the control, PACKCFG_PLANNER_NEAR_PAIRS=off); the near pairs (8 tokens of slack at 2k) and the stage on
    their rest make LB + 16 (measured; the cutting-stock LP's plan is LB + 3). The same plan twice."""
    a = _few_distinct(64_000, 2048, 800, seed=3)
    p, _ = _off_then_on(monkeypatch, a, 2048, 50, 16, 8)
    again = plan(a, 2048)
    assert np.array_equal(again.offsets, p.offsets) and np.array_equal(again.order, p.order)


@needs_numba
def test_near_pairs_run_only_where_the_plan_misses_and_up_to_their_capacity(monkeypatch):
    """Within the target (64k samples of 400 distinct at 2k, seed 1: LB + 3) they do not run; where
    max_per_pack could bind neither (the 800-distinct input above with 8 a pack, over its target); above
    NEAR_PAIR_MAX_CAPACITY neither (that input with the limit lowered to 1k; without the stage once more on the
    packs that are not full, NOT_FULL_AGAIN)."""
    monkeypatch.setattr(refine, "NOT_FULL_AGAIN", False)
    calls = _calls(monkeypatch)
    a = _few_distinct(64_000, 2048, 400, seed=1)
    assert plan(a, 2048).num_packs - _lb(a, 2048) <= 5
    assert not calls
    b = _few_distinct(64_000, 2048, 800, seed=3)
    values, counts = np.unique(b, return_counts=True)
    limited = plan(b, 2048, max_per_pack=8)
    assert limited.num_packs > refine.target(values[::-1], counts[::-1], 2048, 8)
    assert not calls
    monkeypatch.setattr(refine, "NEAR_PAIR_MAX_CAPACITY", 1024)
    a = _few_distinct(64_000, 2048, 800, seed=3)
    assert plan(a, 2048).num_packs - _lb(a, 2048) == 50
    assert not calls


@needs_numba
def test_near_continuous_lengths_get_the_near_pairs_alone(monkeypatch):
    """30k samples of 4,095 distinct lengths at 2k (1,773 of the 2,048 present: past DENSE_FRACTION, where the
    rest of the stage does not run): best fit lands LB + 41 (control: PACKCFG_PLANNER_NEAR_PAIRS=off); the near
    pairs and the stage on their rest LB + 10 (measured; the LP's bound is LB + 3). Past
    DENSE_NEAR_PAIR_MAX_CAPACITY (lowered to 1k) they run only where best fit is more than DENSE_FAR_MARGINS
    margins over LB: +41 is 8.2 margins of 5, so they run with 8 and not with 9 (the control)."""
    a = _few_distinct(30_000, 2048, 4095)
    assert len(np.unique(a)) > refine.DENSE_FRACTION * 2048
    _, calls = _off_then_on(monkeypatch, a, 2048, 41, 10, 8)
    monkeypatch.setattr(refine, "DENSE_NEAR_PAIR_MAX_CAPACITY", 1024)
    monkeypatch.setattr(refine, "DENSE_FAR_MARGINS", 9)
    calls.clear()
    assert plan(a, 2048).num_packs - _lb(a, 2048) == 41 and not calls
    monkeypatch.setattr(refine, "DENSE_FAR_MARGINS", 8)
    assert plan(a, 2048).num_packs - _lb(a, 2048) == 10 and calls == [8]


@needs_numba
def test_near_continuous_lengths_far_over_lb_get_the_near_pairs_at_8k(monkeypatch):
    """64k samples of 8,191 distinct lengths at 8k (6,170 of the 8,192 present, Zipf-weighted: past
    DENSE_FRACTION, and past DENSE_NEAR_PAIR_MAX_CAPACITY): best fit lands LB + 41, 8 margins over LB (control:
    PACKCFG_PLANNER_NEAR_PAIRS=off); the near pairs (16 tokens of slack) and the stage on their rest LB + 15
    (measured; L2 is LB there; LB + 22 until the exact kernel was charged its cost model, which lets the
    rest's exact try run). Uniform lengths there, where best fit is within DENSE_FAR_MARGINS margins of LB
    (150k samples: LB + 3 with Fekete and Schepers' bound, margin 7), do not get them."""
    a = _few_distinct(64_000, 8192, 8191)
    assert len(np.unique(a)) > refine.DENSE_FRACTION * 8192 and 8192 > refine.DENSE_NEAR_PAIR_MAX_CAPACITY
    _, calls = _off_then_on(monkeypatch, a, 8192, 41, 15, 16)
    calls.clear()
    u = np.random.default_rng(0).integers(1, 8193, 150_000)
    values, counts = np.unique(u, return_counts=True)
    lb = refine.lower_bound(values[::-1], counts[::-1], 8192, len(u))
    assert len(values) > refine.DENSE_FRACTION * 8192
    assert 0 < plan(u, 8192).num_packs - lb <= refine.DENSE_FAR_MARGINS * refine.margin(lb) and not calls


def _top_level_events(monkeypatch, names=("_exact_try", "_replan", "_near_pairs_plan")):
    """The calls of the exact try, the tries' patterns and the near pairs (or of `names`) made by the top-level
    stage itself (not by a stage nested in one of them), in order."""
    events: list[str] = []
    depth = [0]
    real_refine = refine.refine

    def nested(*args, **kw):
        depth[0] += 1
        try:
            return real_refine(*args, **kw)
        finally:
            depth[0] -= 1

    monkeypatch.setattr(refine, "refine", nested)
    for name in names:
        real = getattr(refine, name)

        def spy(*args, _name=name, _real=real, **kw):
            if depth[0] == 1:
                events.append(_name)
            return _real(*args, **kw)

        monkeypatch.setattr(refine, name, spy)
    return events


@needs_numba
@pytest.mark.parametrize("first", [True, False])
def test_near_pairs_run_before_the_tries_where_the_exact_try_cannot_afford_its_kernel(monkeypatch, first):
    """30k samples of 6,000 distinct lengths requested at 16k (5,961 found, 36% of the values: not near-continuous,
    nor taking most values), with the exact kernel charged 12 units a nanosecond of its cost model: its first
    way would cost 32.5M units, over the stage's budget (30M), so it does not run, and the near pairs run before
    any try; with the exact try on their rest (fewer lengths, which it can afford) they land LB + 2 (measured),
    within the target, and the tries do not run. The control (NEAR_PAIRS_FIRST off): the tries run first and
    spend the budget, and the near pairs after them land LB + 10. (At the shipped charge the exact try runs
    first and lands LB + 0.)"""
    monkeypatch.setattr(refine, "NEAR_PAIRS_FIRST", first)
    monkeypatch.setattr(refine, "EXACT_UNITS_PER_NS", 12)
    events = _top_level_events(monkeypatch)
    a = _few_distinct(30_000, 16384, 6000)
    assert not refine.Effort(refine.effort_units(len(a))).allows(
        refine._exact_way_cost(len(np.unique(a)), 16384, len(a), *refine.EXACT_WAYS[0][1:])
    )
    p = plan(a, 16384)
    assert p.num_packs - _lb(a, 16384) == (2 if first else 10)
    if first:
        assert events == ["_near_pairs_plan"]
    else:
        assert events[0] == "_replan" and "_near_pairs_plan" in events
    assert sorted(a[p.order].tolist()) == sorted(a.tolist())
    assert (np.add.reduceat(a[p.order], p.offsets[:-1]) <= 16384).all()


@needs_numba
@pytest.mark.parametrize("first", [True, False])
def test_where_the_exact_try_gives_up_its_packs_once_more_and_the_near_pairs_come_before_the_tries(
    monkeypatch, first
):
    """64k samples of 4,095 distinct lengths at 4k (seed 7): the exact try runs and gives up (its exact packs and
    L2 of their rest past the target); the near pairs (and the stage once more on their packs that are not
    full), then the exact packs once more, make LB + 12 (measured), the tries after them. The control
    (NEAR_PAIRS_FIRST off): the tries first, then the exact packs once more, then the near pairs: LB + 17. (Without the near pairs ahead of the exact try, which these lengths get:
    test_near_pairs_lead_on_lengths_that_take_most_values.)"""
    monkeypatch.setattr(refine, "NEAR_PAIRS_FIRST", first)
    monkeypatch.setattr(refine, "NEAR_PAIRS_LEAD_FRACTION", 2.0)
    events = _top_level_events(monkeypatch)
    a = _few_distinct(64_000, 4096, 4095)
    p = plan(a, 4096)
    if first:
        assert p.num_packs - _lb(a, 4096) == 12
        assert events[:3] == ["_exact_try", "_near_pairs_plan", "_exact_try"]
    else:
        assert p.num_packs - _lb(a, 4096) == 17
        assert events[:2] == ["_exact_try", "_replan"] and "_near_pairs_plan" in events
    assert sorted(a[p.order].tolist()) == sorted(a.tolist())
    assert (np.add.reduceat(a[p.order], p.offsets[:-1]) <= 4096).all()


@needs_numba
def test_near_pairs_lead_on_lengths_that_take_most_values(monkeypatch):
    """64k samples of 4,095 distinct lengths requested at 4k (3,062 found, 75% of the values up to 4,096): the
    near pairs run first, before the exact try (NEAR_PAIRS_LEAD_FRACTION): LB + 12 (measured). Control: the exact
    try first, which gives up, then the near pairs: LB + 12 as well since stop 55 (LB + 21 before, when the
    exact packs once more came before the near pairs and the exact kernel was charged 4-20x its cost). What the
    lead still saves is time, which bench/planner_variants.py measures (2,000 distinct at 2k with 30k samples,
    seed 3: LB + 5 either way, 8.6 against 22.1 ms)."""
    events = _top_level_events(monkeypatch)
    a = _few_distinct(64_000, 4096, 4095)
    assert len(np.unique(a)) > refine.NEAR_PAIRS_LEAD_FRACTION * 4096
    p = plan(a, 4096)
    assert p.num_packs - _lb(a, 4096) == 12
    assert events[0] == "_near_pairs_plan" and events.count("_near_pairs_plan") == 1
    assert sorted(a[p.order].tolist()) == sorted(a.tolist())
    assert (np.add.reduceat(a[p.order], p.offsets[:-1]) <= 4096).all()
    monkeypatch.setattr(refine, "NEAR_PAIRS_LEAD_FRACTION", 2.0)
    events.clear()
    assert plan(a, 4096).num_packs - _lb(a, 4096) == 12
    assert events[:2] == ["_exact_try", "_near_pairs_plan"]


@needs_numba
def test_near_pairs_on_sparse_lengths_take_less_slack(monkeypatch):
    """150k samples of 4,095 distinct lengths at 8k (half the values up to 8,192): the near pairs take at most
    NEAR_PAIR_SPARSE_SLACK (4) tokens of slack, where 16 would be theirs at 8k, and the plan lands LB + 4, within
    the target (measured). Control: the same slack as on denser lengths (NEAR_PAIR_SPARSE_FRACTION 0), LB + 9.
    The lengths the fraction leaves at 16: 8,191 distinct at 8k (0.75 of the values)."""
    slacks = []
    real = refine._near_pairs

    def spy(present, counts, capacity, slack):
        slacks.append(slack)
        return real(present, counts, capacity, slack)

    monkeypatch.setattr(refine, "_near_pairs", spy)
    a = _few_distinct(150_000, 8192, 4095)
    assert len(np.unique(a)) < refine.NEAR_PAIR_SPARSE_FRACTION * 8192
    lb = _lb(a, 8192)
    p = plan(a, 8192)
    assert p.num_packs - lb == 4 <= refine.margin(lb) and set(slacks) == {4}
    assert sorted(a[p.order].tolist()) == sorted(a.tolist())
    assert (np.add.reduceat(a[p.order], p.offsets[:-1]) <= 8192).all()
    dense = _few_distinct(64_000, 8192, 8191)
    slacks.clear()
    plan(dense, 8192)
    assert set(slacks) == {16}
    monkeypatch.setattr(refine, "NEAR_PAIR_SPARSE_FRACTION", 0.0)
    slacks.clear()
    assert plan(a, 8192).num_packs - lb == 9 and set(slacks) == {16}
