"""Property tests: for random lengths, capacities, aligns and algorithms the plan is always valid."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from packcfg.packing import ALGORITHMS, plan

lengths_st = st.lists(st.integers(min_value=0, max_value=300), min_size=1, max_size=120)


@settings(max_examples=60, deadline=None)
@given(
    lengths=lengths_st,
    capacity=st.integers(min_value=1, max_value=400),
    align=st.sampled_from([1, 1, 2, 3, 8, 16]),
    algorithm=st.sampled_from(ALGORITHMS),
    oversize=st.sampled_from(["truncate", "split", "drop"]),
    max_per_pack=st.one_of(st.none(), st.integers(min_value=1, max_value=6)),
    seed=st.integers(min_value=0, max_value=2**31),
)
def test_plan_is_valid(lengths, capacity, align, algorithm, oversize, max_per_pack, seed):
    if capacity < align:
        capacity = align  # a pack must hold at least one aligned token (tested separately as an error)
    p = plan(
        lengths, capacity, algorithm, align=align, max_per_pack=max_per_pack, seed=seed, oversize=oversize
    )
    raw = np.asarray(lengths)
    aligned_raw = -(-raw // align) * align
    over = aligned_raw > capacity

    # every item placed exactly once
    placed = np.concatenate(list(p.bins)) if p.num_packs else np.zeros(0, dtype=np.int64)
    assert np.array_equal(np.sort(placed), np.arange(len(p.item_sample)))
    # ... and every sample accounted for by the oversize policy
    o = p.stats["oversize"]
    assert o["count"] == int(over.sum())
    if oversize == "drop":
        assert set(p.item_sample.tolist()) == set(np.flatnonzero(~over).tolist())
        assert o["dropped"] == int(over.sum())
    else:
        assert set(p.item_sample.tolist()) == set(range(len(raw)))
    if oversize == "split":  # pieces of a sample tile it exactly
        for i in range(len(raw)):
            sel = p.item_sample == i
            starts, lens = p.item_start[sel], p.item_length[sel]
            assert starts[0] == 0 and lens.sum() == raw[i]
            assert np.array_equal(starts[1:], np.cumsum(lens)[:-1])
    if oversize == "truncate":
        assert np.array_equal(p.item_length[~over], raw[~over])
        assert (p.item_length[over] <= capacity).all()

    # no pack over capacity, none over max_per_pack, aligned lengths are multiples of align
    for b in p.bins:
        assert 1 <= len(b)
        assert int(p.item_aligned[b].sum()) <= capacity
        if max_per_pack is not None:
            assert len(b) <= max_per_pack
    assert (p.item_aligned % align == 0).all()
    assert (p.item_aligned >= p.item_length).all()
    # the lower bound holds
    lb = -(-int(p.item_aligned.sum()) // capacity)
    assert p.stats["lower_bound"] == lb <= p.num_packs
    # the padding split adds up
    s = p.stats
    assert s["padding_tokens"] == s["bin_waste_tokens"] + s["alignment_waste_tokens"]
    assert s["bin_waste_tokens"] >= 0 and s["alignment_waste_tokens"] >= 0

    # determinism: the same inputs and seed give the same plan
    q = plan(
        lengths, capacity, algorithm, align=align, max_per_pack=max_per_pack, seed=seed, oversize=oversize
    )
    assert np.array_equal(p.order, q.order) and np.array_equal(p.offsets, q.offsets)


@settings(max_examples=40, deadline=None)
@given(
    lengths=st.lists(st.integers(min_value=1, max_value=100), min_size=1, max_size=200),
    capacity=st.integers(min_value=100, max_value=300),
    algorithm=st.sampled_from(["bfd", "ffd", "first_fit_shuffle", "histogram", "sequential"]),
)
def test_fit_algorithms_leave_at_most_one_pack_half_empty(lengths, capacity, algorithm):
    """Any-fit and next-fit only open a pack when the item fits no open one (the current one), so two
    packs together always hold more than the capacity: packs <= 2 * LB + 1."""
    p = plan(lengths, capacity, algorithm)
    fills = p.pack_lengths()
    if algorithm == "sequential":  # next fit: each pack and the next together overflow the capacity
        assert (fills[:-1] + fills[1:] > capacity).all()
    else:  # any fit: a second half-empty pack would have been filled into the first
        assert (fills <= capacity // 2).sum() <= 1
    assert p.num_packs <= 2 * p.stats["lower_bound"] + 1


@settings(max_examples=30, deadline=None)
@given(
    lengths=st.lists(st.integers(min_value=1, max_value=60), min_size=2, max_size=80).filter(
        lambda x: len(x) % 2 == 0
    ),
    algorithm=st.sampled_from(ALGORITHMS),
)
def test_pairs_always_adjacent(lengths, algorithm):
    p = plan(lengths, 128, algorithm, pairs=True)
    for b in p.bins:
        items = b.tolist()
        assert len(items) % 2 == 0
        for j in range(0, len(items), 2):
            assert items[j] // 2 == items[j + 1] // 2 and items[j] != items[j + 1]
