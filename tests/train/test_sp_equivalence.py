"""Sequence parallel and TP-partial gradients (issue 12): SP 2 x TP 2 computes what TP 1 computes.

Run under torchrun (2 processes, gloo) against a world-of-1 reference: loss and every full gradient
after one step's forward/backward, then the TP-aware clipped gradients and the weights after one
AdamW step. The controls inject one bug each and must be detected:

- `sp_grads_not_reduced`: the SP norm weights (and q/k norm weights) keep each TP rank's partial
  gradient instead of the TP sum megatron's `finalize_model_grads` takes.
- `grad_norm_not_summed_over_tp` (tests/train/test_clip_equivalence.py): the clipping norm from one
  TP rank's shards only.

Run as a script, this module is the torchrun harness:
    python -m torch.distributed.run --nproc-per-node 2 tests/train/test_sp_equivalence.py CASE OUT.pt [FAULT ...]
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

if __package__:
    from .cases import _Packs, greedy_packs, run_torchrun, synthetic_samples, tiny_config
    from .faults import Faults, injected
else:  # torchrun harness
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from tests.train.cases import _Packs, greedy_packs, run_torchrun, synthetic_samples, tiny_config
    from tests.train.faults import Faults, injected

CLIP = 0.05  # well below the tiny model's first-step grad norm, so clipping scales every gradient


def sp_case_config(case: str, world: int) -> dict[str, Any]:
    """`sp`: TP = world with sequence parallel (TP 1 reference without); `tp_qk`: TP = world with q/k
    norms (their grads are TP-partial without SP too); `tp`: plain TP (the clipping case). Packs are
    not padded to a fixed size, so odd THD token counts reach the SP padding."""
    model: dict[str, Any] = {"tensor_model_parallel_size": world}
    if case == "sp":
        model["sequence_parallel"] = world > 1
    elif case == "tp_qk":
        model["qk_layernorm"] = True
    elif case != "tp":
        raise ValueError(case)
    return tiny_config(model=model, train={"global_batch_size": 2}, optimizer={"clip_grad": CLIP})


def run_sp_case(case: str, variants: list[str]) -> dict[str, dict[str, Any]]:
    """For each variant ("none" or a fault name), from a freshly built model: loss, full gradients,
    grad norm, clipped full gradients and full weights after one AdamW step."""
    import torch.distributed as dist

    from packcfg.train.data import BatchPlan
    from packcfg.train.equivalence import full_gradients, full_weights, loss_and_grads
    from packcfg.train.model import build_model
    from packcfg.train.optim import build_optimizer
    from packcfg.train.parallel import clip_grad_norm, distributed
    from packcfg.train.settings import TrainSettings

    world = dist.get_world_size() if dist.is_initialized() else 1
    settings = TrainSettings.from_config(sp_case_config(case, world))
    packs = greedy_packs(synthetic_samples(24, seed=5), settings.data.pack_size)
    out: dict[str, dict[str, Any]] = {}
    with distributed(tp=settings.model.tp, cp=settings.model.cp) as layout:
        for variant in variants:
            faults = Faults.from_names([variant])
            model = build_model(settings.model, settings.seed)
            plan = BatchPlan(
                _Packs(packs),
                settings.data,
                settings.micro_batch_size,
                settings.global_batch_size,
                layout.dp,
                layout.dp_rank,
            )
            with injected(faults):
                batches = plan.micro_batches(0)
                result = loss_and_grads(model, batches)
            params = [p for p in model.parameters() if p.requires_grad]
            norm = clip_grad_norm(
                params, settings.optim.clip_grad, sum_over_tp=not faults.grad_norm_not_summed_over_tp
            )
            clipped = full_gradients(model)
            optimizer = build_optimizer(model, settings.optim)
            optimizer.step()
            out[variant] = {
                "result": result,
                "norm": norm,
                "clipped": clipped,
                "weights": full_weights(model),
                "tokens": [int(b.tokens.shape[1]) for b in batches],
            }
    return out


def torchrun_case(case: str, faults: list[str], tmp_path: Path) -> dict[str, dict[str, Any]]:
    out = tmp_path / f"{case}.pt"
    run_torchrun([str(Path(__file__).resolve()), case, str(out), *faults])
    from packcfg.train.equivalence import load_results

    return load_results(out)


def _as_loss_and_grads(loss: float, tensors: dict[str, torch.Tensor]) -> Any:
    from packcfg.train.equivalence import LossAndGrads

    return LossAndGrads(loss=loss, grads=tensors)


@pytest.mark.torchrun
@pytest.mark.slow
def test_sequence_parallel_tp2_equals_tp1(tmp_path):
    from packcfg.train.equivalence import compare

    two = torchrun_case("sp", ["sp_grads_not_reduced"], tmp_path)
    reference = run_sp_case("sp", ["none"])["none"]
    # The packs' token counts are not all even: SP padding was exercised.
    assert any(n % 2 for n in reference["tokens"]), reference["tokens"]
    assert compare(reference["result"], two["none"]["result"]) == [], "SP 2 x TP 2 differs from TP 1"
    assert abs(reference["norm"] - two["none"]["norm"]) <= 1e-6 * reference["norm"]
    assert (
        compare(
            _as_loss_and_grads(0.0, reference["weights"]), _as_loss_and_grads(0.0, two["none"]["weights"])
        )
        == []
    ), "weights after clipping and one AdamW step differ"
    # Control: without the TP all-reduce only the (sequence-parallel) norm weights are wrong.
    problems = compare(reference["result"], two["sp_grads_not_reduced"]["result"])
    assert problems, "control sp_grads_not_reduced was not detected"
    assert all("layernorm" in p for p in problems), problems


@pytest.mark.torchrun
@pytest.mark.slow
def test_qk_layernorm_tp2_equals_tp1(tmp_path):
    """q/k norm weights are replicated over TP but each rank sees only its heads: megatron sums their
    grads over TP with or without SP (`finalize_model_grads`, `qk_layernorm` branch)."""
    from packcfg.train.equivalence import compare

    two = torchrun_case("tp_qk", ["sp_grads_not_reduced"], tmp_path)
    reference = run_sp_case("tp_qk", ["none"])["none"]
    assert compare(reference["result"], two["none"]["result"]) == [], "TP 2 with q/k norms differs from TP 1"
    problems = compare(reference["result"], two["sp_grads_not_reduced"]["result"])
    assert problems and all("_layernorm" in p for p in problems), problems


def test_sp_padding_makes_token_counts_divisible():
    """THD rows get (or extend) a padding segment; under CP the count is chosen so that each rank's
    share after the 2*CP alignment of every segment divides by TP; padded rows get wider."""
    from packcfg.train.batches import pack_thd, pad_batch, pad_for_sequence_parallel

    samples = synthetic_samples(6, seed=2)
    thd = next(b for k in range(2, 6) if (b := pack_thd(samples[:k])).tokens.shape[1] % 4 == 3)
    width = thd.tokens.shape[1]
    for tp in (2, 4):
        padded = pad_for_sequence_parallel(thd, tp)
        assert padded.tokens.shape[1] % tp == 0 and 0 < padded.tokens.shape[1] - width < tp
        assert padded.real_tokens == thd.real_tokens and padded.loss_mask[0, width:].sum() == 0
        assert padded.thd is not None and padded.thd.padding_segment
        assert padded.thd.cu_seqlens_list[-1] == padded.tokens.shape[1]
    # Extends an existing padding segment rather than adding a second one.
    fixed = pack_thd(samples[:2], pad_to=61)
    extended = pad_for_sequence_parallel(fixed, 2)
    assert extended.thd is not None and len(extended.thd.cu_seqlens_list) == len(fixed.thd.cu_seqlens_list)
    assert extended.thd.cu_seqlens_list[-1] == 62
    # CP 2 x TP 2: after the split every CP rank holds a multiple of TP tokens.
    from packcfg.train.batches import split_for_context_parallel

    for tp, cp in ((2, 2), (4, 2), (2, 3)):
        ready = pad_for_sequence_parallel(thd, tp, cp)
        for rank in range(cp):
            local = split_for_context_parallel(ready, cp, rank, None)
            assert local.tokens.shape[1] % tp == 0, (tp, cp, rank, local.tokens.shape)
    rows = pad_batch(samples[:3], pad_to=63)
    wide = pad_for_sequence_parallel(rows, 4)
    assert wide.tokens.shape[1] == 64 and wide.real_tokens == rows.real_tokens
    assert wide.loss_mask[:, 63:].sum() == 0


def test_sequence_parallel_at_tp1_is_turned_off():
    """As Bridge's `finalize()` does (lint PL603): megatron-core itself would refuse SP without TP."""
    from packcfg.train.model import transformer_config
    from packcfg.train.settings import TrainSettings

    settings = TrainSettings.from_config(tiny_config(model={"sequence_parallel": True}))
    assert (
        settings.model.sequence_parallel and not transformer_config(settings.model, False).sequence_parallel
    )


def main() -> None:
    import torch.distributed as dist

    warnings.filterwarnings("ignore")
    case, out, faults = sys.argv[1], Path(sys.argv[2]), sys.argv[3:]
    dist.init_process_group("gloo")
    try:
        results = run_sp_case(case, ["none", *faults])
        if dist.get_rank() == 0:
            torch.save(results, out)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
