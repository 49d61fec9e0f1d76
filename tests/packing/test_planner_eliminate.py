"""bfd's pack-eliminating post-pass (planning/eliminate.py, packing/_eliminate_kernel.py): on the refinement
stage's plan, where it is still above its goal, empty packs by moving their items into the others' slack."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from packcfg.packing import _eliminate_kernel
from packcfg.packing.planner import plan
from packcfg.packing.planning import eliminate, refine
from tests.packing.test_planner_refine import (
    SMALL_INPUTS,
    _check,
    _check_forced,
    _few_distinct,
    _lb,
)

needs_numba = pytest.mark.skipif(not _eliminate_kernel.HAVE_NUMBA, reason="the post-pass needs numba")

# these tests pin down the post-pass after the tries on inputs where the exact try, which runs first, would end the stage, or the
# near pairs, which run after them, would change their plan
pytestmark = pytest.mark.usefixtures("only_the_tries")


def _packs(lengths, order, offsets):
    return [
        sorted(int(lengths[i]) for i in order[offsets[p] : offsets[p + 1]]) for p in range(len(offsets) - 1)
    ]


def _run(lengths, packs, capacity, k_max=1 << 62, goal=0):
    a = np.array([x for p in packs for x in p], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum([len(p) for p in packs])])
    result, ops = _eliminate_kernel.eliminate(a, np.arange(len(a)), offsets, capacity, k_max, 10**6, goal, 8)
    return a, result, ops


@needs_numba
def test_a_pack_is_emptied_by_insertion_and_by_a_swap_between_two_packs():
    # [3] goes nowhere directly (slacks 1 and 2), but [5, 4] gives 4 to [6, 2] for its 2: [5, 2, 3] and [6, 4]
    a, result, _ = _run(None, [[5, 4], [6, 2], [3]], 10)
    assert result is not None
    order, offsets, fills = result
    assert sorted(map(tuple, _packs(a, order, offsets))) == [(2, 3, 5), (4, 6)]
    assert fills.tolist() == [10, 10]


@needs_numba
def test_slack_is_gathered_from_several_packs():
    # x = 4: the packs have slack 1, 2 and 1; [9, 6] takes 2 from [7, 5] (6 <-> 4) and 1 from [8, 7] (9 <-> 8)
    a, result, _ = _run(None, [[9, 6], [7, 4], [8, 7], [4]], 16)
    assert result is not None
    order, offsets, fills = result
    assert len(offsets) - 1 == 3 and fills.max() <= 16
    assert sorted(a[order].tolist()) == sorted(a.tolist())


@needs_numba
def test_max_per_pack_and_an_unplaceable_item_leave_the_plan_as_it_was():
    assert _run(None, [[5, 4], [6, 2], [3]], 10, k_max=2)[1] is None  # the swap would give [5, 2, 3] 3 items
    assert _run(None, [[5, 5], [6, 3], [7]], 10)[1] is None  # 7 tokens, 1 of slack elsewhere


@needs_numba
@settings(max_examples=80, deadline=None)
@given(**SMALL_INPUTS, pairs=st.booleans())
def test_forced_post_pass_is_valid_and_never_worse(lengths, capacity, max_per_pack, align, pairs):
    """The post-pass run on best fit's plan of every input, aiming at 0 packs (bfd's refinement replaced by
    it): every item once, within the capacity, max_per_pack and align honoured, DPO pairs side by side (it
    moves pair units), never more packs than best fit."""
    kw = {"max_per_pack": max_per_pack, "align": align, "oversize": "truncate", "pairs": pairs}
    if pairs:
        lengths = [min(x, capacity // 2 - 8) for x in lengths[: len(lengths) // 2 * 2]] or [1, 1]
        kw.update(oversize="error", max_per_pack=None if max_per_pack is None else max(2, max_per_pack))
    calls = []

    def forced(a, capacity, k_max, present, counts, packing, *rest):
        calls.append(1)
        return eliminate.eliminate(a, capacity, k_max, packing, 0)

    with pytest.MonkeyPatch.context() as m:
        m.setattr(refine, "refine", forced)
        p = plan(lengths, capacity, **kw)
    assert calls
    _check_forced(p, lengths, capacity, kw)


@needs_numba
def test_the_post_pass_saves_a_pack_where_the_stage_misses_the_target(monkeypatch):
    """64k samples of 600 distinct lengths at 2k: the stage alone ends at LB + 6 (control), the post-pass
    empties its loose tail pack (71 items of 10 tokens) and reaches LB + 5; the same plan twice and from
    histogram."""
    a = _few_distinct(64_000, 2048, 600)
    lb = _lb(a, 2048)
    monkeypatch.setenv("PACKCFG_PLANNER_ELIMINATE", "off")
    assert plan(a, 2048).num_packs - lb == 6
    monkeypatch.delenv("PACKCFG_PLANNER_ELIMINATE")
    p = plan(a, 2048)
    _check(p, a, 2048)
    assert p.num_packs - lb == 5
    again = plan(a, 2048)
    assert np.array_equal(again.offsets, p.offsets) and np.array_equal(again.order, p.order)
    h = plan(a, 2048, "histogram")
    assert h._order is None and h.stats["packs"] == p.num_packs
    assert np.array_equal(h.order, p.order)


@needs_numba
def test_the_post_pass_skips_plans_too_far_over_the_target(monkeypatch):
    """The same input, with the plan one pack over the target: allowed no pack over it
    (refine.ELIMINATE_MAX_OVER 0), the post-pass does not run and the stage's LB + 6 stands (the test above
    is the control: with the default, LB + 5)."""
    a = _few_distinct(64_000, 2048, 600)
    calls = []
    real = eliminate.eliminate
    monkeypatch.setattr(eliminate, "eliminate", lambda *args: calls.append(1) or real(*args))
    monkeypatch.setattr(refine, "ELIMINATE_MAX_OVER", 0)
    assert plan(a, 2048).num_packs - _lb(a, 2048) == 6
    assert not calls
    monkeypatch.setattr(refine, "ELIMINATE_MAX_OVER", 1)
    assert plan(a, 2048).num_packs - _lb(a, 2048) == 5
    assert calls


@needs_numba
@pytest.mark.parametrize("breakage", ["overfill", "lose"])
def test_a_broken_post_pass_is_caught(monkeypatch, breakage):
    """Control for the checks above: a post-pass that moves an item into a full pack, or loses one, fails them."""
    a = _few_distinct(64_000, 2048, 600)
    real = _eliminate_kernel.eliminate

    def broken(*args):
        result, ops = real(*args)
        if result is None:  # not an AssertionError: the control must fail on _check's, not on this
            pytest.fail("the post-pass saved no pack here")
        order, offsets, fills = result
        offsets = offsets.copy()
        if breakage == "overfill":
            offsets[1] += 1  # the second pack's first item joins the first (full) pack
        else:
            order = order[:-1]
            offsets[-1] -= 1
        return (order, offsets, fills), ops

    monkeypatch.setattr(_eliminate_kernel, "eliminate", broken)
    with pytest.raises(AssertionError):
        _check(plan(a, 2048), a, 2048)


def test_the_budget_scales_with_the_items():
    assert eliminate.OPS_PER_ITEM * 64_000 <= 2 * eliminate.OPS_MIN
