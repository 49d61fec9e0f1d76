"""TP-aware gradient clipping (issue 12): TP 2 equals TP 1 after clipping and after the optimizer step.

The grad norm is megatron-core's `get_grad_norm_fp32`: TP-sharded gradients on every rank, replicated
ones on TP rank 0, summed over the TP group. The control `grad_norm_not_summed_over_tp` leaves out the
TP sum, so each rank clips with its own partial norm: the norm and the clipped gradients must differ.
The clip threshold is far below the first-step norm, so every gradient is scaled.
"""

from __future__ import annotations

import pytest

from packcfg.train.equivalence import LossAndGrads, compare

from .test_sp_equivalence import CLIP, run_sp_case, torchrun_case


@pytest.mark.torchrun
@pytest.mark.slow
def test_clipping_tp2_equals_tp1(tmp_path):
    two = torchrun_case("tp", ["grad_norm_not_summed_over_tp"], tmp_path)
    reference = run_sp_case("tp", ["none"])["none"]
    assert reference["norm"] > 4 * CLIP, "clipping must be active for this test to mean anything"
    got = two["none"]
    assert abs(got["norm"] - reference["norm"]) <= 1e-6 * reference["norm"], (got["norm"], reference["norm"])
    assert compare(LossAndGrads(0.0, reference["clipped"]), LossAndGrads(0.0, got["clipped"])) == []
    assert compare(LossAndGrads(0.0, reference["weights"]), LossAndGrads(0.0, got["weights"])) == []

    bad = two["grad_norm_not_summed_over_tp"]
    assert abs(bad["norm"] - reference["norm"]) > 1e-3 * reference["norm"], "control: norm unchanged"
    assert compare(LossAndGrads(0.0, reference["clipped"]), LossAndGrads(0.0, bad["clipped"])), (
        "control grad_norm_not_summed_over_tp was not detected in the clipped gradients"
    )


def test_clip_norm_counts_replicated_grads_once(tiny_world):
    """World of 1: the norm is the plain global norm, and clipping scales it to the threshold."""
    import torch

    from packcfg.train.batches import pack_thd
    from packcfg.train.equivalence import loss_and_grads
    from packcfg.train.parallel import clip_grad_norm

    from .cases import synthetic_samples

    model, _ = tiny_world
    loss_and_grads(model, [pack_thd(synthetic_samples(4, seed=9))])
    params = [p for p in model.parameters()]
    expected = float(torch.sqrt(sum(p.grad.double().pow(2).sum() for p in params)))
    assert clip_grad_norm(params, 0.0) == pytest.approx(expected, rel=1e-9)
    assert clip_grad_norm(params, expected / 10) == pytest.approx(expected, rel=1e-9)
    after = float(torch.sqrt(sum(p.grad.double().pow(2).sum() for p in params)))
    assert after == pytest.approx(expected / 10, rel=1e-4)
