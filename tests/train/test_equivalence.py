"""Packed training computes what unpacked training computes (issue 4's equivalence tests).

Each test compares a configuration with its reference through `equivalence.compare` (loss within
1e-5, every gradient within 1e-4 relative) and runs a control: the same configuration with one known
packing bug injected (tests/train/faults.py), for which `compare` must report a mismatch.
"""

from __future__ import annotations

import pytest
import torch

from packcfg.train.batches import pack_thd, pad_batch
from packcfg.train.data import build_micro_batch
from packcfg.train.equivalence import compare, load_results, loss_and_grads
from packcfg.train.settings import Batching, DataSettings

from .cases import PARALLEL_CASES, greedy_packs, run_case, run_torchrun, synthetic_samples
from .faults import Faults, injected

SAMPLES = synthetic_samples(10, seed=1)


def _data(batching: Batching, pad_to_max_length: bool = False) -> DataSettings:
    return DataSettings(
        batching=batching, seq_length=64, pack_size=64, pad_to_max_length=pad_to_max_length, seed=0
    )


# ---- 1. packed THD batch vs the same samples one by one, unpacked


def _packed_vs_one_by_one(model, faults: Faults) -> list[str]:
    packs = greedy_packs(SAMPLES, 64)
    assert any(len(p) > 2 for p in packs), "packs must hold several samples to test anything"
    one_by_one = loss_and_grads(model, [pad_batch([s]) for s in SAMPLES])
    with injected(faults):
        packed = loss_and_grads(model, [pack_thd(p) for p in packs])
    return compare(one_by_one, packed)


def test_packed_thd_equals_samples_one_by_one(tiny_world):
    model, _ = tiny_world
    assert _packed_vs_one_by_one(model, Faults()) == []


def test_mask_across_samples_control_breaks(tiny_world):
    model, _ = tiny_world
    assert _packed_vs_one_by_one(model, Faults(mask_across_samples=True))


def test_positions_not_reset_are_invisible_to_rope(tiny_world):
    """RoPE scores depend on position differences only, so a constant per-sample offset (positions
    counting across the pack) cancels exactly. Position bugs RoPE does see are those that change
    differences within a sample, e.g. CP ranks taking positions from their local cu_seqlens; that is
    the `cp_local_positions` control of the CP test."""
    model, _ = tiny_world
    assert _packed_vs_one_by_one(model, Faults(no_position_reset=True)) == []


# ---- 2. in-batch packing vs offline packing vs padded, same samples


def _layouts() -> dict[str, list]:
    offline = [build_micro_batch([p], _data("packed")) for p in greedy_packs(SAMPLES, 64)]
    offline_fixed = [build_micro_batch([p], _data("packed", True)) for p in greedy_packs(SAMPLES, 64)]
    groups = [[[s] for s in SAMPLES[i : i + 4]] for i in range(0, len(SAMPLES), 4)]  # MBS 4 (last has 2)
    return {
        "offline": offline,
        "offline_pad_to_max_length": offline_fixed,
        "in_batch": [build_micro_batch(g, _data("in_batch")) for g in groups],
        "padded": [build_micro_batch(g, _data("padded")) for g in groups],
        "padded_to_seq_length": [build_micro_batch(g, _data("padded", True)) for g in groups],
    }


def test_in_batch_offline_and_padded_agree(tiny_world):
    model, _ = tiny_world
    reference = loss_and_grads(model, [pad_batch([s]) for s in SAMPLES])
    for name, batches in _layouts().items():
        assert compare(reference, loss_and_grads(model, batches)) == [], name
    # The layouts differ in padding, not in real tokens.
    layouts = _layouts()
    assert {sum(b.real_tokens for b in v) for v in layouts.values()} == {
        sum(s.runtime_length for s in SAMPLES)
    }
    assert sum(b.padded_tokens for b in layouts["padded_to_seq_length"]) > sum(
        b.padded_tokens for b in layouts["offline"]
    )


def test_per_microbatch_loss_mean_control_breaks(tiny_world):
    model, _ = tiny_world
    reference = loss_and_grads(model, [pad_batch([s]) for s in SAMPLES])
    for name in ("offline", "in_batch", "padded"):
        with injected(Faults(per_microbatch_loss_mean=True)):
            broken = loss_and_grads(model, _layouts()[name])
        assert compare(reference, broken), name


def test_thd_row_keeps_samples_apart():
    """Labels never reach into the next sample, positions restart, cu_seqlens bound runtime lengths."""
    batch = pack_thd(SAMPLES[:3])
    lengths = [s.runtime_length for s in SAMPLES[:3]]
    ends = torch.tensor(lengths).cumsum(0)
    assert batch.thd is not None and batch.thd.cu_seqlens_list == [0, *ends.tolist()]
    for sample, end in zip(SAMPLES[:3], ends.tolist(), strict=True):
        assert batch.labels[0, end - 1] == int(sample.input_ids[-1])  # its own last token
    assert batch.position_ids[0].tolist() == [p for n in lengths for p in range(n)]


def test_pad_to_max_length_adds_a_padding_segment():
    batch = pack_thd(SAMPLES[:2], pad_to=64)
    real = sum(s.runtime_length for s in SAMPLES[:2])
    assert batch.thd is not None and batch.thd.cu_seqlens_list[-2:] == [real, 64]
    assert batch.real_tokens == real and batch.padded_tokens == 64
    assert batch.loss_mask[0, real:].sum() == 0


# ---- 3-5. DP 2 vs DP 1, CP 2 vs CP 1, TP 2 vs TP 1 (torchrun, 2 processes on CPU/gloo)

CONTROLS = {
    "dp": ["per_microbatch_loss_mean"],
    "cp": ["cp_wrong_chunks", "cp_local_positions", "mask_across_samples"],
    "tp": ["mask_across_samples"],
}


@pytest.mark.torchrun
@pytest.mark.slow
@pytest.mark.parametrize("case", PARALLEL_CASES)
def test_parallel_equals_single_process(case, tmp_path):
    out = tmp_path / f"{case}.pt"
    run_torchrun(["tests/train/harness.py", case, str(out), *CONTROLS[case]])
    two = load_results(out)
    reference = run_case(case, ["none"])["none"]
    assert compare(reference, two["none"]) == [], f"{case} 2 differs from {case} 1"
    for control in CONTROLS[case]:
        assert compare(reference, two[control]), f"{case}: control {control} was not detected"
