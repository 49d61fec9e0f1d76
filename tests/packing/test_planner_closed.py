"""Closed packs (packing/_exact_kernel.closed_patterns; planning/refine.py's CLOSED_FIRST and CLOSED_REST;
PACKCFG_PLANNER_CLOSED=off skips them): a pack starts with the longest sample left and is closed by one sample
of its room or by the most balanced pair that fills it, else led on by the longest samples that fit."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from packcfg.packing import _exact_kernel, _refine_kernel
from packcfg.packing.planner import plan
from packcfg.packing.planning import refine
from tests.packing.test_planner_refine import SMALL_INPUTS, _check, _check_forced_plan, _few_distinct, _lb

needs_numba = pytest.mark.skipif(not _refine_kernel.HAVE_NUMBA, reason="the stage needs numba")


def _closed_reference(present, counts, capacity, balanced=True):
    """closed_patterns in plain Python, each search a scan over the lengths: [(times, [(length, samples a
    pack)])], the lengths of a pack in the order they were taken. `balanced=False` closes by the pair with the
    shortest sample instead of the most balanced one (a control)."""
    cnt = {int(x): int(c) for x, c in zip(present, counts, strict=True) if c > 0}
    out = []

    def take(pack, x, k):
        pack[x] = pack.get(x, 0) + k
        cnt[x] -= k

    while any(cnt.values()):
        pack: dict[int, int] = {}
        room = capacity
        while room > 0:
            if pack:
                if cnt.get(room, 0) > 0:
                    take(pack, room, 1)
                    break
                xs = [x for x in range(room // 2, 0, -1) if cnt.get(x, 0) >= 1 + (x == room - x)]
                pairs = [x for x in xs if cnt.get(room - x, 0) > 0]
                if pairs:
                    x = pairs[0] if balanced else pairs[-1]
                    take(pack, x, 1)
                    take(pack, room - x, 1)
                    break
            fits = [x for x, c in cnt.items() if c > 0 and x <= room]
            if not fits:
                break
            v = max(fits)
            k = cnt[v] if v == 0 else min(cnt[v], room // v)
            take(pack, v, k)
            room -= k * v
        more = min(cnt[x] // k for x, k in pack.items())
        for x, k in pack.items():
            cnt[x] -= more * k
        out.append((1 + more, list(pack.items())))
    return out


def _closed_patterns(present, counts, capacity, max_work=1 << 62):
    """closed_patterns as [(times, [(length, samples a pack)])], what it leaves and the words it read."""
    pat_k, pat_end, ent_g, ent_n, left, packs, work = _exact_kernel.closed_patterns(
        present, counts, capacity, max_work
    )
    starts = np.concatenate([[0], pat_end]).astype(np.int64)[:-1]
    found = [
        (int(k), [(int(present[g]), int(m)) for g, m in zip(ent_g[s:e], ent_n[s:e], strict=True)])
        for k, s, e in zip(pat_k, starts, pat_end, strict=True)
    ]
    assert packs == sum(k for k, _ in found)
    return found, left, work


HISTOGRAMS = {
    "counts": st.lists(st.integers(0, 30), min_size=1, max_size=60),
    # past 64 lengths a word and past 4,096 (64 words, one word of the summary level) where lengths are sparse
    "capacity": st.sampled_from([40, 63, 64, 65, 127, 300, 1000, 4095, 4096, 4097, 9000]),
    "seed": st.integers(0, 10_000),
}


def _histogram(counts, capacity, seed):
    present = np.unique(np.random.default_rng(seed).integers(0, capacity + 1, len(counts)))[::-1]
    return present.astype(np.int64), np.asarray(counts[: len(present)], dtype=np.int64)


@needs_numba
@settings(max_examples=150, deadline=None)
@given(**HISTOGRAMS)
def test_closed_packs_follow_the_reference_and_take_every_sample(counts, capacity, seed):
    """Every pack within the capacity, every sample in one (the packs are the histogram), and the kernel's
    choices (the pair with the longest shorter sample, a single sample first, the longest that fit as many as
    fit, each pack as often as the counts allow) those of a plain scan of the lengths."""
    present, counts = _histogram(counts, capacity, seed)
    found, left, _ = _closed_patterns(present, counts, capacity)
    for times, pack in found:
        assert times >= 1 and sum(x * m for x, m in pack) <= capacity
    assert not left.any()
    used: dict[int, int] = {}
    for times, pack in found:
        for x, m in pack:
            used[x] = used.get(x, 0) + times * m
    assert {int(x): int(c) for x, c in zip(present, counts, strict=True) if c} == used
    assert found == _closed_reference(present, counts, capacity)


def test_the_reference_tells_the_most_balanced_pair_from_another():
    """The control: closing by the pair with the shortest sample takes other packs (16 = 8 + 8 rather than
    3 + 13), so the test above would catch a kernel that did."""
    present, counts, capacity = np.array([20, 13, 8, 3]), np.array([2, 1, 2, 1]), 36
    balanced = _closed_reference(present, counts, capacity)
    assert balanced == [(1, [(20, 1), (8, 2)]), (1, [(20, 1), (3, 1), (13, 1)])]
    assert _closed_reference(present, counts, capacity, balanced=False) != balanced


@needs_numba
@settings(max_examples=40, deadline=None)
@given(**HISTOGRAMS, share=st.floats(0.0, 0.9))
def test_closed_packs_stop_when_their_words_run_out(counts, capacity, seed, share):
    """With fewer words than a whole run reads, the kernel stops after the pack that passes them: its packs are
    the first of the whole run's, and what it leaves is the rest of the histogram."""
    present, counts = _histogram(counts, capacity, seed)
    whole, _, work = _closed_patterns(present, counts, capacity)
    found, left, spent = _closed_patterns(present, counts, capacity, int(share * work))
    assert found == whole[: len(found)] and spent <= work
    used = np.zeros(len(counts), dtype=np.int64)
    index = {int(x): i for i, x in enumerate(present)}
    for times, pack in found:
        for x, m in pack:
            used[index[x]] += times * m
    assert np.array_equal(used + left, counts)


@needs_numba
def test_closed_packs_first_reach_the_target_at_128k(monkeypatch):
    """150k samples of 4,095 distinct lengths at 128k: LB + 1 when measured, within the target (LB + 5), from
    the closed packs the stage makes first. Control: with PACKCFG_PLANNER_CLOSED=off, LB + 6 (the exact packs
    and the nested stage). Both plans are valid."""
    a = _few_distinct(150_000, 131_072, 4095)
    lb = _lb(a, 131_072)
    calls = []
    real = _exact_kernel.closed_patterns
    monkeypatch.setattr(_exact_kernel, "closed_patterns", lambda *args: calls.append(args) or real(*args))
    p = plan(a, 131_072)
    assert len(calls[0][0]) == len(np.unique(a))  # the first call plans every sample
    monkeypatch.setenv("PACKCFG_PLANNER_CLOSED", "off")
    calls.clear()
    control = plan(a, 131_072)
    assert not calls
    _check(p, a, 131_072)
    _check(control, a, 131_072)
    assert p.num_packs - lb <= 5 < control.num_packs - lb


@needs_numba
def test_closed_packs_on_the_exact_packs_rest_reach_lb(monkeypatch):
    """1M samples of 8,191 distinct lengths at 128k: closed packs alone land LB + 23 when measured, over the
    target (LB + 21); on what the exact packs leave they bring the plan to LB itself (CLOSED_REST). Control:
    without closed packs on the rests, the closed packs first are the best plan."""
    a = _few_distinct(1_000_000, 131_072, 8191)
    lb = _lb(a, 131_072)
    target = lb + refine.margin(lb)
    assert plan(a, 131_072).num_packs == lb
    monkeypatch.setattr(refine, "CLOSED_REST", False)
    assert plan(a, 131_072).num_packs > target


@needs_numba
@settings(max_examples=40, deadline=None)
@given(**SMALL_INPUTS, pairs=st.booleans())
def test_forced_closed_packs_are_valid_and_never_worse(lengths, capacity, max_per_pack, align, pairs):
    """With the stage forced on and closed packs at every capacity, plans are valid (max_per_pack, align, DPO
    pairs side by side) and never have more packs than best fit."""
    _check_forced_plan(lengths, capacity, max_per_pack, align, pairs, (refine, "CLOSED_MIN_CAPACITY", 0))
