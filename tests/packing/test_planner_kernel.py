"""The compiled bfd kernel (packcfg/packing/_bfd_kernel.py) gives the pure-Python planner's plans exactly."""

from __future__ import annotations

import contextlib
import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from packcfg.packing import _bfd_kernel
from packcfg.packing.planner import plan
from packcfg.packing.planning import best_fit


@contextlib.contextmanager
def _kernel(which: str):
    old = os.environ.get("PACKCFG_PLANNER_KERNEL")
    os.environ["PACKCFG_PLANNER_KERNEL"] = which
    try:
        yield
    finally:
        if old is None:
            del os.environ["PACKCFG_PLANNER_KERNEL"]
        else:
            os.environ["PACKCFG_PLANNER_KERNEL"] = old


@contextlib.contextmanager
def _always_kernel():
    old = (
        best_fit._KERNEL_MIN_DISTINCT,
        best_fit._KERNEL_SURE_DISTINCT,
        best_fit._KERNEL_SURE_ITEMS_PER_DISTINCT,
    )
    # small arrays too, and at once even before the kernel is loaded: otherwise they take the Python path
    best_fit._KERNEL_MIN_DISTINCT = best_fit._KERNEL_SURE_DISTINCT = 0
    best_fit._KERNEL_SURE_ITEMS_PER_DISTINCT = 1 << 62
    try:
        yield
    finally:
        (
            best_fit._KERNEL_MIN_DISTINCT,
            best_fit._KERNEL_SURE_DISTINCT,
            best_fit._KERNEL_SURE_ITEMS_PER_DISTINCT,
        ) = old


def _both(lengths, capacity, algorithm="bfd", **kw):
    with _kernel("python"):
        assert not _bfd_kernel.available()
        old = plan(lengths, capacity, algorithm, **kw)
        old_order = old.order
    called = []
    real = _bfd_kernel.grouped_best_fit
    with _kernel(""), _always_kernel():
        _bfd_kernel.grouped_best_fit = lambda *a: called.append(1) or real(*a)
        try:
            new = plan(lengths, capacity, algorithm, **kw)
        finally:
            _bfd_kernel.grouped_best_fit = real
        assert called, "the kernel did not run"
        new_order = new.order
    assert np.array_equal(new.offsets, old.offsets)
    assert np.array_equal(new_order, old_order)
    assert np.array_equal(new.pack_lengths(), old.pack_lengths())
    assert np.array_equal(new.pack_lengths(), np.add.reduceat(new.item_aligned[new_order], new.offsets[:-1]))
    assert new.stats == old.stats
    return new


needs_numba = pytest.mark.skipif(not _bfd_kernel.HAVE_NUMBA, reason="numba not installed")


def _lengths(dist: str, n: int, capacity: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if dist == "uniform":
        x = rng.integers(0, capacity + 1, n)
    elif dist == "lognormal":
        x = rng.lognormal(np.log(max(capacity, 2) / 8), 1.0, n).astype(np.int64)
    elif dist == "few":  # many ties: a handful of distinct lengths
        x = rng.choice([0, 1, capacity // 3, capacity // 2, capacity], n)
    else:  # bimodal: short chat turns plus long documents
        x = np.where(
            rng.random(n) < 0.8, rng.integers(1, max(capacity // 16, 2), n), rng.integers(0, capacity, n)
        )
    return np.minimum(x, capacity)


@needs_numba
@settings(max_examples=150, deadline=None)
@given(
    dist=st.sampled_from(["uniform", "lognormal", "few", "bimodal"]),
    n=st.integers(min_value=1, max_value=400),
    capacity=st.integers(min_value=1, max_value=5000),
    align=st.sampled_from([1, 1, 2, 8, 64]),
    max_per_pack=st.one_of(st.none(), st.integers(min_value=1, max_value=8)),
    seed=st.integers(min_value=0, max_value=2**31),
    algorithm=st.sampled_from(["bfd", "histogram"]),
)
def test_kernel_plans_equal_python(dist, n, capacity, align, max_per_pack, seed, algorithm):
    capacity = max(capacity, align)
    lengths = _lengths(dist, n, capacity, seed)
    _both(lengths, capacity, algorithm, align=align, max_per_pack=max_per_pack, oversize="truncate")


@needs_numba
@settings(max_examples=100, deadline=None)
@given(
    lengths=st.lists(st.integers(min_value=0, max_value=40), min_size=1, max_size=80),
    capacity=st.integers(min_value=1, max_value=40),
    max_per_pack=st.one_of(st.none(), st.integers(min_value=1, max_value=4)),
    oversize=st.sampled_from(["split", "drop", "truncate"]),
)
def test_kernel_equal_on_small_arrays_with_ties_and_zeros(lengths, capacity, max_per_pack, oversize):
    if all(x > capacity for x in lengths) and oversize == "drop":
        lengths = lengths + [0]
    _both(lengths, capacity, max_per_pack=max_per_pack, oversize=oversize)


@needs_numba
@pytest.mark.parametrize("capacity", [32_768, 131_072])
def test_kernel_equal_at_long_context(capacity):
    for dist in ("uniform", "lognormal", "bimodal"):
        _both(_lengths(dist, 30_000, capacity, 7), capacity)


@needs_numba
def test_kernel_equal_for_dpo_pairs():
    lengths = _lengths("lognormal", 2_000, 2048, 3)
    _both(lengths, 4096, pairs=True)


def test_fallback_without_numba_gives_the_same_plan(monkeypatch):
    lengths = _lengths("lognormal", 5_000, 8192, 1)
    monkeypatch.setattr(best_fit, "_KERNEL_MIN_DISTINCT", 0)
    ref = plan(lengths, 8192, "bfd", max_per_pack=5)
    monkeypatch.setattr(_bfd_kernel, "HAVE_NUMBA", False)
    assert not _bfd_kernel.available()
    called = []
    real = best_fit.grouped_best_fit_python
    monkeypatch.setattr(best_fit, "grouped_best_fit_python", lambda *a: called.append(1) or real(*a))
    fb = plan(lengths, 8192, "bfd", max_per_pack=5)
    assert called, "the pure-Python path must run when numba is absent"
    assert np.array_equal(fb.offsets, ref.offsets) and np.array_equal(fb.order, ref.order)


@needs_numba
def test_kernel_is_used_when_numba_is_installed(monkeypatch):
    monkeypatch.delenv("PACKCFG_PLANNER_KERNEL", raising=False)
    monkeypatch.setattr(best_fit, "_KERNEL_MIN_DISTINCT", 0)
    monkeypatch.setattr(best_fit, "_KERNEL_SURE_DISTINCT", 0)
    monkeypatch.setattr(best_fit, "_KERNEL_SURE_ITEMS_PER_DISTINCT", 1 << 62)
    assert _bfd_kernel.available()
    monkeypatch.setattr(best_fit, "grouped_best_fit_python", lambda *a: pytest.fail("python path ran"))
    p = plan([5, 3, 3, 2, 8, 1], 8)
    assert p.num_packs == 3


def test_small_histograms_skip_the_kernel(monkeypatch):
    monkeypatch.setattr(_bfd_kernel, "grouped_best_fit", lambda *a: pytest.fail("kernel ran for 3 lengths"))
    assert plan([5, 3, 3, 2, 8, 1], 8).num_packs == 3


def _few_hundred_distinct(n=20_000, seed=4):
    rng = np.random.default_rng(seed)
    values = rng.choice(np.arange(1, 30_000), size=400, replace=False)
    return rng.choice(values, size=n)


@needs_numba
def test_a_loaded_kernel_plans_a_few_hundred_distinct_lengths(monkeypatch):
    """Once the kernel is loaded it plans inputs far below the old 1,000-distinct threshold (issue 23)."""
    monkeypatch.setenv("PACKCFG_PLANNER_REFINE", "off")  # its best fit of a small rest would take Python
    monkeypatch.delenv("PACKCFG_PLANNER_KERNEL", raising=False)
    best_fit.load_kernel()
    assert _bfd_kernel.loaded()
    a = _few_hundred_distinct()
    with _kernel("python"):
        want = plan(a, 32_768)
    monkeypatch.setattr(best_fit, "grouped_best_fit_python", lambda *a: pytest.fail("python path ran"))
    got = plan(a, 32_768)
    assert np.array_equal(got.offsets, want.offsets) and np.array_equal(got.order, want.order)


@needs_numba
def test_cold_python_hands_over_to_the_kernel_when_over_budget(monkeypatch):
    """Cold, the Python path plans within the kernel's load cost or hands over: the same plan either way."""
    monkeypatch.setenv("PACKCFG_PLANNER_REFINE", "off")  # its best fit of the rest would be a second call
    monkeypatch.delenv("PACKCFG_PLANNER_KERNEL", raising=False)
    a = _few_hundred_distinct()
    with _kernel("python"):
        want = plan(a, 32_768)
    monkeypatch.setattr(best_fit, "_python_spent", 0.0)
    monkeypatch.setattr(best_fit, "_kernel_budget", lambda: 1e-9)  # as if loading the kernel cost nothing
    ran = []
    real_py, real_k = best_fit.grouped_best_fit_python, _bfd_kernel.grouped_best_fit
    monkeypatch.setattr(best_fit, "grouped_best_fit_python", lambda *x: ran.append("py") or real_py(*x))
    monkeypatch.setattr(_bfd_kernel, "grouped_best_fit", lambda *x: ran.append("kernel") or real_k(*x))
    got = plan(a, 32_768)
    assert ran == ["py", "kernel"]
    assert np.array_equal(got.offsets, want.offsets) and np.array_equal(got.order, want.order)
    monkeypatch.setattr(best_fit, "_python_spent", 0.0)
    monkeypatch.setattr(best_fit, "_kernel_budget", lambda: 100.0)  # loading would cost more: Python plans
    ran.clear()
    got = plan(a, 32_768)
    assert ran == ["py"]
    assert np.array_equal(got.offsets, want.offsets) and np.array_equal(got.order, want.order)


@needs_numba
def test_python_time_spent_across_calls_counts_against_the_load(monkeypatch):
    """Ski rental: each cold Python plan spends from the kernel's load budget; once the process has spent
    it, the kernel plans (a long-lived process never pays more than twice the cheaper choice)."""
    monkeypatch.setenv("PACKCFG_PLANNER_REFINE", "off")  # its best fit of the rest would be a second call
    monkeypatch.delenv("PACKCFG_PLANNER_KERNEL", raising=False)
    a = _few_hundred_distinct()
    monkeypatch.setattr(best_fit, "_kernel_budget", lambda: 100.0)  # not loaded: loading costs 100 s
    monkeypatch.setattr(best_fit, "_python_spent", 0.0)
    plan(a, 32_768)
    assert best_fit._python_spent > 0.0  # the Python plan counted
    ran = []
    real_py, real_k = best_fit.grouped_best_fit_python, _bfd_kernel.grouped_best_fit
    monkeypatch.setattr(best_fit, "grouped_best_fit_python", lambda *x: ran.append("py") or real_py(*x))
    monkeypatch.setattr(_bfd_kernel, "grouped_best_fit", lambda *x: ran.append("kernel") or real_k(*x))
    monkeypatch.setattr(best_fit, "_python_spent", 100.0)  # the process has spent what the load costs
    want = plan(a, 32_768, "bfd")
    assert ran == ["kernel"]
    with _kernel("python"):
        ref = plan(a, 32_768)
    assert np.array_equal(want.order, ref.order) and np.array_equal(want.offsets, ref.offsets)


@needs_numba
def test_load_kernel_loads_it(monkeypatch):
    monkeypatch.delenv("PACKCFG_PLANNER_KERNEL", raising=False)
    assert best_fit.load_kernel() and _bfd_kernel.loaded()


def test_load_kernel_is_false_when_the_kernel_is_off(monkeypatch):
    monkeypatch.setenv("PACKCFG_PLANNER_KERNEL", "python")
    assert best_fit.load_kernel() is False


@needs_numba
def test_cold_kernel_at_once_where_python_would_cost_over_the_sort_bound(monkeypatch):
    """Cold, from max(1,000, N / 100) distinct lengths the kernel plans at once (Python would cost more than
    3x an argsort there); below it the Python path plans with the load as its budget."""
    monkeypatch.delenv("PACKCFG_PLANNER_KERNEL", raising=False)
    monkeypatch.setattr(best_fit, "_kernel_budget", lambda: 100.0)  # not loaded
    monkeypatch.setattr(best_fit, "_python_spent", 0.0)
    ran = []
    real_py, real_k = best_fit.grouped_best_fit_python, _bfd_kernel.grouped_best_fit
    monkeypatch.setattr(best_fit, "grouped_best_fit_python", lambda *x: ran.append("py") or real_py(*x))
    monkeypatch.setattr(_bfd_kernel, "grouped_best_fit", lambda *x: ran.append("kernel") or real_k(*x))
    rng = np.random.default_rng(0)
    plan(rng.integers(1, 1_001, 20_000), 4096)  # 1,000 distinct: the kernel
    assert ran == ["kernel"]
    ran.clear()
    plan(rng.integers(1, 999, 20_000), 4096)  # 998 distinct, 20k samples: Python
    assert ran == ["py"]
    ran.clear()
    plan(rng.integers(1, 1_500, 200_000), 4096)  # 1,499 distinct but 200k samples (bar 2,000): Python
    assert ran == ["py"]


def test_python_path_gives_up_past_its_budget():
    a = _few_hundred_distinct()
    present, counts = np.unique(a, return_counts=True)
    args = (a, 32_768, 1 << 62, counts[::-1], present[::-1])
    assert best_fit.grouped_best_fit_python(*args, 0.0) is None
    assert best_fit.grouped_best_fit_python(*args, None) is not None


@needs_numba
@settings(max_examples=200, deadline=None)
@given(
    n=st.sampled_from([1, 2, 63, 64, 65, 4095, 4096, 4097, 262_144, 262_145]),
    ops=st.lists(st.tuples(st.booleans(), st.integers(min_value=0, max_value=10**6)), max_size=60),
    probes=st.lists(st.integers(min_value=0, max_value=10**6), min_size=1, max_size=20),
)
def test_bitset_finds_the_smallest_marked_index_at_or_above(n, ops, probes):
    """The 64-ary bitset tree against a plain set, across level boundaries (64, 4096, 262,144)."""
    off = _bfd_kernel._bits_layout(n)
    bits = np.zeros(off[-1], dtype=np.uint64)
    marked: set[int] = set()
    for on, r in ops:
        r %= n
        if on and r not in marked:  # the kernel marks an r only when its first level appears
            _bfd_kernel._bits_set(bits, off, r)
            marked.add(r)
        elif not on and r in marked:
            _bfd_kernel._bits_clear(bits, off, r)
            marked.discard(r)
    for x in [p % n for p in probes] + [0, n - 1]:
        want = min((r for r in marked if r >= x), default=-1)
        assert _bfd_kernel._bits_first(bits, off, x) == want


@needs_numba
def test_kernel_int64_ids_give_the_same_plans(monkeypatch):
    """Past 1e9 items the kernel stores ids as int64: that specialisation plans exactly as int32 does."""
    monkeypatch.setattr(_bfd_kernel, "INT32_MAX_ITEMS", 0)
    for dist in ("uniform", "lognormal", "few", "bimodal"):
        _both(_lengths(dist, 3_000, 4096, 3), 4096, max_per_pack=None)
        _both(_lengths(dist, 3_000, 4096, 4), 4096, max_per_pack=3)
    # the int64 specialisation is what ran (argument 5 is r_head, an id array)
    assert any(str(sig[5].dtype) == "int64" for sig in _bfd_kernel._run.signatures)


@needs_numba
@settings(max_examples=60, deadline=None)
@given(lengths=st.lists(st.integers(0, 300_000), min_size=1, max_size=400), narrow=st.booleans())
def test_descending_order_is_sorted_descs(lengths, narrow):
    """The counting order the refinement stage and the slot plan use gives sorted_desc's order exactly
    (decreasing length, ties by increasing id), under 2**16 (where sorted_desc sorts radix) and over it."""
    from packcfg.packing.planning.common import length_histogram, sorted_desc

    a = np.asarray(lengths, dtype=np.int64) % (1 << 10) if narrow else np.asarray(lengths, dtype=np.int64)
    present, counts = length_histogram(a)
    assert np.array_equal(_bfd_kernel.descending_order(a, present, counts), sorted_desc(a))


@needs_numba
@settings(max_examples=80, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 5_000), min_size=1, max_size=400),
    capacity=st.integers(1, 6_000),
    max_per_pack=st.one_of(st.none(), st.integers(1, 6)),
    kernel=st.booleans(),
    few=st.integers(1, 40),
)
def test_placement_is_the_plans_own(lengths, capacity, max_per_pack, kernel, few):
    """Best fit's `placement()` (kernel and Python path), which bfd's refinement stage splits plans by, says
    what the item order it builds says: the pack of each item in decreasing-length order (ties by id), and
    each pack's longest item."""
    from packcfg.packing.planning.common import length_histogram

    a = np.minimum(np.asarray(lengths, dtype=np.int64) % few * (capacity // few // 3 + 1), capacity)  # ties
    present, counts = length_histogram(a)
    k_max = max_per_pack if max_per_pack is not None else 1 << 62
    if kernel:
        offsets, fills, build, assign, largest = _bfd_kernel.grouped_best_fit(
            present, counts, capacity, k_max
        )
        order = build(a)
    else:
        p = best_fit.grouped_best_fit_python(a, capacity, k_max, counts, present)
        assert p is not None and p.placement is not None
        offsets, (assign, largest), order = p.offsets, p.placement(), p.build()
    pack_of = np.empty(len(a), dtype=np.int64)
    pack_of[order] = np.repeat(np.arange(len(offsets) - 1), np.diff(offsets))
    assert np.array_equal(assign, pack_of[_bfd_kernel.descending_order(a, present, counts)])
    assert np.array_equal(largest, np.maximum.reduceat(a[order], offsets[:-1]))
