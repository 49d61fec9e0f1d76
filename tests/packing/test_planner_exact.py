"""The refinement stage's opt-in exact try (PACKCFG_PLANNER_EXACT=on; planning/refine.py, packing/_exact_kernel.py):
exact packs built most constrained length first, then best fit and the nested stage on what they set aside."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from packcfg.packing import _exact_kernel, _refine_kernel
from packcfg.packing.planner import plan
from packcfg.packing.planning import refine
from tests.packing.test_planner_refine import (
    FORCED,
    SMALL_INPUTS,
    _check_forced,
    _few_distinct,
    _lb,
    _small_input_kw,
)

needs_numba = pytest.mark.skipif(not _refine_kernel.HAVE_NUMBA, reason="the stage needs numba")


@needs_numba
@settings(max_examples=40, deadline=None)
@given(
    counts=st.lists(st.integers(0, 40), min_size=1, max_size=60),
    capacity=st.integers(60, 400),
    share=st.sampled_from([0.1, 0.5, 1.0]),
)
def test_exact_packs_are_exactly_full_and_take_what_there_is(counts, capacity, share):
    """Every pattern sums to the capacity, and the patterns plus what is left are the histogram."""
    present = np.arange(len(counts), dtype=np.int64)[::-1] * (capacity // len(counts) or 1) % (capacity + 1)
    present, first = np.unique(present, return_index=True)
    counts = np.asarray(counts, dtype=np.int64)[first]
    pat_k, pat_end, ent_g, ent_n, left, packs = _exact_kernel.exact_patterns(
        present, counts, capacity, share, 64 * (len(present) + 16)
    )
    starts = np.concatenate([[0], pat_end[:-1]]).astype(np.int64)
    if len(pat_k):
        assert (np.add.reduceat(ent_n * present[ent_g], starts) == capacity).all()
    assert (pat_k >= 1).all() and packs == int(pat_k.sum())
    used = np.bincount(
        ent_g, weights=np.repeat(pat_k, np.diff(pat_end, prepend=0)) * ent_n, minlength=len(counts)
    )
    assert (left >= 0).all() and np.array_equal(used.astype(np.int64) + left, counts)


@needs_numba
@settings(max_examples=40, deadline=None)
@given(**SMALL_INPUTS, pairs=st.booleans())
def test_forced_exact_try_is_valid_and_never_worse(lengths, capacity, max_per_pack, align, pairs):
    """With the stage forced on and the exact try on from one item, plans are valid (max_per_pack, align, DPO
    pairs side by side) and never have more packs than best fit."""
    lengths, kw = _small_input_kw(lengths, capacity, max_per_pack, align, pairs)
    with pytest.MonkeyPatch.context() as m:
        m.setenv("PACKCFG_PLANNER_EXACT", "on")
        m.setattr(refine, "margin", FORCED)
        m.setattr(refine, "EXACT_MIN_ITEMS", 1)
        p = plan(lengths, capacity, **kw)
    _check_forced(p, lengths, capacity, kw)


@needs_numba
def test_the_exact_try_reaches_lb_where_the_tries_miss(monkeypatch):
    """1M samples of 600 distinct lengths at 2k: with PACKCFG_PLANNER_EXACT=on, LB + 0 when measured (the target
    is +29). Control: off (the default), +70. Both plans are valid; the try ran (its kernel was called)."""
    a = _few_distinct(1_000_000, 2048, 600)
    lb = _lb(a, 2048)
    control = plan(a, 2048)
    calls = []
    real = _exact_kernel.exact_patterns
    monkeypatch.setattr(_exact_kernel, "exact_patterns", lambda *args: calls.append(1) or real(*args))
    assert not calls
    monkeypatch.setenv("PACKCFG_PLANNER_EXACT", "on")
    p = plan(a, 2048)
    assert calls
    for q in (p, control):
        order = q.order
        assert np.array_equal(np.sort(order), np.arange(len(a)))
        assert np.add.reduceat(a[order], q.offsets[:-1]).max() <= 2048
    assert p.num_packs - lb <= 5 < 50 < control.num_packs - lb
