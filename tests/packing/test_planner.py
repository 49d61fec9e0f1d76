"""Unit tests for the planner: each algorithm, each constraint, the stats and the error messages."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from packcfg.packing import ALGORITHMS, PlanError, plan
from packcfg.packing.planner import GreedyBufferPacker, itemize, lower_bound, packed_global_batch_size


def placed_items(p) -> np.ndarray:
    return np.sort(np.concatenate(list(p.bins))) if p.num_packs else np.zeros(0, dtype=np.int64)


def check_valid(p, n_items: int | None = None) -> None:
    """Every item exactly once, no pack over capacity, the lower bound holds."""
    n = len(p.item_sample) if n_items is None else n_items
    assert np.array_equal(placed_items(p), np.arange(n))
    for b in p.bins:
        assert len(b) >= 1
        assert p.item_aligned[b].sum() <= p.capacity
    assert p.num_packs >= p.stats["lower_bound"]
    assert p.stats["lower_bound"] == lower_bound(p.item_aligned, p.capacity)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_every_algorithm_places_each_sample_once(algorithm):
    rng = np.random.default_rng(3)
    lengths = rng.integers(1, 200, size=500)
    p = plan(lengths, 256, algorithm=algorithm, seed=5)
    check_valid(p)
    assert p.stats["packs"] == p.num_packs == len(p.bins)
    assert p.stats["tokens"] == int(lengths.sum())


def test_bfd_is_optimal_on_a_perfect_instance():
    # pairs that sum exactly to the capacity: the optimum is the lower bound, and best fit finds it
    lengths = [700, 300, 600, 400, 500, 500, 900, 100]
    p = plan(lengths, 1000)
    assert p.num_packs == p.stats["lower_bound"] == 4
    assert sorted(sorted(np.asarray(lengths)[b].tolist()) for b in p.bins) == [
        [100, 900],
        [300, 700],
        [400, 600],
        [500, 500],
    ]


def test_bfd_matches_item_by_item_best_fit():
    """The histogram-grouped planner makes the same pack count as a naive item-by-item BFD."""
    rng = np.random.default_rng(11)
    for trial in range(20):
        cap = int(rng.integers(20, 300))
        lengths = rng.integers(1, cap + 1, size=int(rng.integers(1, 300)))
        bins: list[int] = []  # remaining capacities
        for length in sorted(lengths.tolist(), reverse=True):
            fits = [i for i, r in enumerate(bins) if r >= length]
            if fits:
                best = min(fits, key=lambda i: bins[i])
                bins[best] -= length
            else:
                bins.append(cap - length)
        assert plan(lengths, cap, "bfd").num_packs == len(bins), trial


def test_ffd_matches_item_by_item_first_fit_decreasing():
    rng = np.random.default_rng(12)
    for _ in range(20):
        cap = int(rng.integers(20, 300))
        lengths = rng.integers(1, cap + 1, size=int(rng.integers(1, 300)))
        bins: list[int] = []
        for length in sorted(lengths.tolist(), reverse=True):
            for i, r in enumerate(bins):
                if r >= length:
                    bins[i] -= length
                    break
            else:
                bins.append(cap - length)
        assert plan(lengths, cap, "ffd").num_packs == len(bins)


def test_histogram_builds_bins_lazily_and_equals_bfd():
    rng = np.random.default_rng(1)
    lengths = rng.integers(1, 500, size=2000)
    h = plan(lengths, 512, "histogram")
    b = plan(lengths, 512, "bfd")
    assert h._order is None  # stats came from the histogram alone
    assert h.stats["packs"] == b.stats["packs"]
    check_valid(h)  # building .bins on demand gives a valid plan
    assert np.array_equal(h.order, b.order)


def test_sequential_preserves_order_and_is_next_fit():
    lengths = [5, 5, 5, 9, 1, 1, 8]
    p = plan(lengths, 10, "sequential")
    assert [b.tolist() for b in p.bins] == [[0, 1], [2], [3, 4], [5, 6]]
    assert np.array_equal(p.order, np.arange(len(lengths)))


def test_first_fit_shuffle_depends_on_seed_only():
    lengths = np.random.default_rng(0).integers(1, 100, size=300)
    a = plan(lengths, 128, "first_fit_shuffle", seed=1)
    b = plan(lengths, 128, "first_fit_shuffle", seed=1)
    c = plan(lengths, 128, "first_fit_shuffle", seed=2)
    assert [x.tolist() for x in a.bins] == [x.tolist() for x in b.bins]
    assert [x.tolist() for x in a.bins] != [x.tolist() for x in c.bins]


def test_align_rounds_each_sample_and_reports_alignment_waste():
    p = plan([5, 8, 9, 3], 16, align=8)
    assert p.item_aligned.tolist() == [8, 8, 16, 8]
    s = p.stats
    assert s["aligned_tokens"] == 40 and s["tokens"] == 25
    assert s["alignment_waste_tokens"] == 15
    assert s["bin_waste_tokens"] == p.num_packs * 16 - 40
    assert s["padding_tokens"] == s["alignment_waste_tokens"] + s["bin_waste_tokens"]
    assert s["lower_bound"] == 3
    check_valid(p)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_max_per_pack(algorithm):
    lengths = np.full(50, 3)
    p = plan(lengths, 100, algorithm=algorithm, max_per_pack=4)
    assert max(len(b) for b in p.bins) <= 4
    assert p.num_packs == 13
    check_valid(p)


def test_oversize_error_names_the_sample():
    with pytest.raises(PlanError, match=r"sample 2 has length 300 .* > capacity 256"):
        plan([10, 20, 300, 400], 256)


def test_oversize_truncate():
    p = plan([10, 300], 256, oversize="truncate")
    assert p.item_length.tolist() == [10, 256]
    assert p.stats["oversize"] == {**p.stats["oversize"], "count": 1, "truncated_tokens": 44}
    check_valid(p)


def test_oversize_truncate_respects_align():
    p = plan([300], 250, align=16, oversize="truncate")
    assert p.item_length.tolist() == [240] and p.item_aligned.tolist() == [240]


def test_oversize_split_pieces_cover_the_sample():
    p = plan([10, 600], 256, oversize="split")
    assert p.item_sample.tolist() == [0, 1, 1, 1]
    assert p.item_start.tolist() == [0, 0, 256, 512]
    assert p.item_length.tolist() == [10, 256, 256, 88]
    assert p.stats["oversize"]["split_pieces"] == 3
    assert p.has_pieces
    check_valid(p)


def test_oversize_drop_counts():
    p = plan([10, 600, 20, 700], 256, oversize="drop")
    assert sorted(p.item_sample[placed_items(p)].tolist()) == [0, 2]
    o = p.stats["oversize"]
    assert (o["count"], o["dropped"], o["dropped_tokens"]) == (2, 2, 1300)
    assert p.stats["samples_packed"] == 2


def test_greedy_buffer_splits_by_default_like_internvl():
    p = plan([100, 1000, 50], 256, "greedy_buffer")
    assert p.stats["oversize"]["policy"] == "split"
    check_valid(p)


def test_greedy_buffer_secondary_budget():
    lengths = [10] * 12
    images = [1, 2, 0, 3, 1, 1, 2, 0, 0, 1, 2, 3]
    p = plan(lengths, 1000, "greedy_buffer", secondary=images, secondary_capacity=4)
    check_valid(p)
    for b in p.bins:
        assert sum(images[i] for i in b.tolist()) <= 4
    with pytest.raises(PlanError, match="greedy_buffer only"):
        plan(lengths, 1000, "bfd", secondary=images, secondary_capacity=4)


def test_greedy_buffer_stream_is_bounded():
    packer = GreedyBufferPacker(100, buffer_size=3)
    emitted = []
    for i in range(100):
        emitted += packer.add(i, 60)  # no two fit together: the buffer must keep emitting
        assert len(packer._open) <= 3
    emitted += packer.flush()
    assert sorted(x for pack in emitted for x in pack) == list(range(100))


def test_dpo_pairs_stay_adjacent_in_one_pack():
    rng = np.random.default_rng(4)
    lengths = rng.integers(5, 120, size=200)
    for algorithm in ALGORITHMS:
        p = plan(lengths, 256, algorithm=algorithm, pairs=True)
        check_valid(p)
        for b in p.bins:
            items = b.tolist()
            assert len(items) % 2 == 0
            for j in range(0, len(items), 2):
                assert {items[j], items[j + 1]} == {items[j] - items[j] % 2, items[j] - items[j] % 2 + 1}


def test_dpo_explicit_pairs_and_errors():
    p = plan([10, 20, 30, 40], 100, pairs=[[0, 3], [2, 1]])
    for b in p.bins:
        items = b.tolist()
        assert [sorted(items[j : j + 2]) for j in range(0, len(items), 2)] in (
            [[0, 3], [1, 2]],
            [[1, 2], [0, 3]],
        )
    with pytest.raises(PlanError, match="every sample exactly once"):
        plan([10, 20, 30], 100, pairs=[[0, 1]])
    with pytest.raises(PlanError, match="pair 0 .* needs 150 tokens > capacity 100"):
        plan([70, 80], 100, pairs=True)
    dropped = plan([70, 80, 10, 20], 100, pairs=True, oversize="drop")
    assert sorted(np.concatenate(list(dropped.bins)).tolist()) == [2, 3]
    assert dropped.stats["oversize"]["dropped"] == 2


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"lengths": [], "capacity": 10}, "empty dataset"),
        ({"lengths": [1, 2], "capacity": 0}, "capacity must be a positive integer, got 0"),
        ({"lengths": [1, 2], "capacity": -5}, "capacity must be a positive integer"),
        ({"lengths": [1, 2], "capacity": 10, "align": 0}, "align must be a positive integer"),
        ({"lengths": [1, -2], "capacity": 10}, "sample 1 has negative length -2"),
        ({"lengths": [1, 2], "capacity": 10, "algorithm": "magic"}, "unknown packing algorithm 'magic'"),
        ({"lengths": [1, 2], "capacity": 10, "oversize": "shrug"}, "unknown oversize policy"),
        ({"lengths": [1.5], "capacity": 10}, "must be integers"),
        ({"lengths": [1], "capacity": 4, "align": 8}, "smaller than align"),
    ],
)
def test_bad_input_messages(kwargs, message):
    with pytest.raises(PlanError, match=message):
        plan(**kwargs)


def test_stats_and_advice():
    lengths = [100] * 40
    p = plan(lengths, 1000, unpacked_global_batch_size=64)
    s = p.stats
    assert s["packs"] == 4 and s["lower_bound"] == 4
    assert s["efficiency"] == pytest.approx(1.0)
    assert s["packing_factor"] == pytest.approx(10.0)
    assert s["max_samples_per_pack"] == 10
    assert s["advice"]["packed_global_batch_size"] == 6  # 64 / 10, rounded
    assert s["advice"]["worth_packing"] is True
    long = plan([900] * 10, 1000)
    assert long.stats["advice"]["worth_packing"] is False
    assert packed_global_batch_size(128, 4.0) == 32
    assert packed_global_batch_size(2, 10.0) == 1


def test_itemize_matches_plan_items():
    lengths = [5, 40, 13]
    s, st, ln = itemize(lengths, 16, 4, "split")
    p = plan(lengths, 16, align=4, oversize="split")
    assert np.array_equal(s, p.item_sample) and np.array_equal(st, p.item_start)
    assert np.array_equal(ln, p.item_length)


def test_bins_sequence_behaviour():
    p = plan([3, 3, 3], 6)
    bins = p.bins
    assert len(bins) == 2
    assert bins[-1].tolist() == list(bins)[-1].tolist()
    with pytest.raises(IndexError):
        bins[5]


def test_huge_capacities_plan_in_bounded_memory():
    """A capacity of 2**31 or 10**12 tokens plans a few thousand samples under a 4 GiB address-space
    limit (a length histogram, or an index per remaining capacity, would need 17 GB to 8 TB)."""
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent(
        """
        import resource, sys
        resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))
        import numpy as np
        from packcfg.packing import ALGORITHMS, plan
        a = np.random.default_rng(0).integers(1, 2**31 - 1, 5000)
        for cap in (2**31 - 1, 10**12):
            for algo in ALGORITHMS:
                p = plan(a, cap, algo)
                assert sorted(p.order.tolist()) == list(range(5000)), algo
                assert (p.pack_lengths() <= cap).all(), algo
        print("ok")
        """
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-2000:]


def test_kernel_capacity_limit_keeps_plans():
    """Past the kernel's capacity limit the Python path plans: the same plan either way."""
    from packcfg.packing.planning import best_fit

    a = np.random.default_rng(3).integers(1, 50_000, 3000)
    want = plan(a, 60_000)
    old = best_fit._KERNEL_MAX_CAPACITY
    best_fit._KERNEL_MAX_CAPACITY = 1000
    try:
        got = plan(a, 60_000)
    finally:
        best_fit._KERNEL_MAX_CAPACITY = old
    assert np.array_equal(got.order, want.order) and np.array_equal(got.offsets, want.offsets)


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**31),
    path=st.sampled_from(["radix", "ranks", "wide"]),
    distinct=st.integers(1, 4000),
)
def test_sorted_desc_is_decreasing_length_then_id_on_every_path(seed, path, distinct):
    """sorted_desc against np.lexsort on each of its paths: radix on 16-bit keys under 2**16, ranks of the
    distinct lengths where the longest is at most 16 x the items, and a 64-bit stable sort past that."""
    from packcfg.packing.planning.common import sorted_desc

    rng = np.random.default_rng(seed)
    top = {"radix": int(rng.integers(1, 2**16)), "ranks": int(rng.integers(2**16, 2**17)), "wide": 2**31}[
        path
    ]
    n = int(rng.integers(top // 16 + 1, 20_000)) if path == "ranks" else int(rng.integers(1, 3000))
    values = rng.integers(0, top, size=min(distinct, top), endpoint=True)
    a = rng.choice(values, size=n)
    a[0] = top  # the longest is top: the path is the one drawn
    assert np.array_equal(sorted_desc(a), np.lexsort((np.arange(n), -a)))


def test_numpys_huge_page_hint_is_off_while_planning_and_restored(monkeypatch):
    """plan() turns NumPy's huge-page hint off for its own arrays (docs/planner-history.md, "NumPy's huge
    pages") and puts back what the caller had, after a plan and after an error; PACKCFG_PLANNER_HUGEPAGES=on
    leaves it on."""
    from packcfg.packing import planner

    setter = getattr(getattr(getattr(np, "_core", None), "multiarray", None), "_set_madvise_hugepage", None)
    if setter is None:
        pytest.skip("this NumPy has no huge-page hint")
    seen = []
    real = planner._dispatch

    def spy(*args):
        now = setter(False)  # reading it means setting it: put it back at once
        setter(now)
        seen.append(now)
        return real(*args)

    monkeypatch.setattr(planner, "_dispatch", spy)
    caller = setter(True)
    try:
        plan([3, 4, 5, 6], 10)
        assert seen == [False] and setter(True) is True
        with pytest.raises(PlanError):
            plan([], 10)
        assert setter(True) is True
        monkeypatch.setenv("PACKCFG_PLANNER_HUGEPAGES", "on")
        plan([3, 4, 5, 6], 10)
        assert seen == [False, True]
    finally:
        setter(caller)


def test_plans_in_threads_at_once_put_the_huge_page_hint_back():
    """Two plans overlapping in two threads, the first to start ending first: the hint stays off until the
    second ends too, then is what the caller had (a switch that restored what each call found would leave it
    off)."""
    import threading

    from packcfg.packing import planner

    setter = getattr(getattr(getattr(np, "_core", None), "multiarray", None), "_set_madvise_hugepage", None)
    if setter is None:
        pytest.skip("this NumPy has no huge-page hint")
    inside = {"first": threading.Event(), "second": threading.Event()}
    go = {"first": threading.Event(), "second": threading.Event()}
    real = planner._dispatch

    def held(*args):
        name = threading.current_thread().name
        inside[name].set()
        assert go[name].wait(timeout=30)
        return real(*args)

    def hint() -> bool:
        now = setter(False)  # reading it means setting it: put it back at once
        setter(now)
        return now

    caller = setter(True)
    try:
        with pytest.MonkeyPatch.context() as m:
            m.setattr(planner, "_dispatch", held)
            threads = {
                name: threading.Thread(target=plan, args=([3, 4, 5, 6], 10), name=name)
                for name in ("first", "second")
            }
            threads["first"].start()
            assert inside["first"].wait(timeout=30)
            threads["second"].start()
            assert inside["second"].wait(timeout=30)
            assert hint() is False
            go["first"].set()
            threads["first"].join(timeout=30)
            assert hint() is False  # the second plan still runs
            go["second"].set()
            threads["second"].join(timeout=30)
        assert hint() is True
    finally:
        for event in go.values():  # a failed check above must not leave a thread waiting
            event.set()
        setter(caller)
