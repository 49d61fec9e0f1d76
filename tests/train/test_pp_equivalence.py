"""Pipeline parallelism with packing (issue 12): PP 2 (and PP 2 x TP 2 with SP, PP 2 x CP 2) computes
what PP 1 computes.

Run under torchrun (gloo) against a world-of-1 PP 1 reference over several optimizer steps: each
step's loss, every full gradient (TP shards gathered, stages gathered by whole-model parameter name),
the grad norm (summed over the stages) and, after the last step, every weight. Packs hold several
samples of odd lengths and are not padded to the pack size, so activation shapes change from
micro-batch to micro-batch; a step has more micro-batches than stages (warm-up, 1F1B steady state and
cool-down all run). Embeddings are tied, so the first and last stage share the word embedding.

Controls (must be detected, `Faults`):
- `pp_stage_drops_thd`: stages after the first get no THD metadata and attend over the whole pack.
- `pp_embedding_grads_not_reduced`: the tied embedding's gradient is not summed over the first and
  last stage (megatron's embedding-group all-reduce in `finalize_model_grads`).

Run as a script, this module is the torchrun harness:
    python -m torch.distributed.run --nproc-per-node N tests/train/test_pp_equivalence.py CASE OUT.pt [FAULT ...]
"""

from __future__ import annotations

import sys
import time
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

STEPS = 3
CLIP = 0.5  # below the tiny model's grad norm in early steps, so clipping (and its PP sum) matters
GRAD_ATOL = 1e-5  # fp32: largest element-wise gradient difference allowed, besides `compare`'s checks
PROCESSES = {"pp": 2, "pp_tp": 4, "pp_cp": 4, "pp_dp": 4}


def pp_case_config(case: str, pp: int) -> dict[str, Any]:
    """`pp`: PP only; `pp_tp`: PP x TP 2 with sequence parallel; `pp_cp`: PP x CP 2; `pp_dp`: PP x DP 2
    (3 micro-batches per rank). `pp` 1 gives the reference (TP 1, CP 1, no SP, one process). Four layers
    (two per stage), tied embeddings, 6 packs per step."""
    model: dict[str, Any] = {
        "num_layers": 4,
        "pipeline_model_parallel_size": pp,
        "share_embeddings_and_output_weights": True,
    }
    if case == "pp_tp" and pp > 1:
        model.update(tensor_model_parallel_size=2, sequence_parallel=True)
    elif case == "pp_cp" and pp > 1:
        model["context_parallel_size"] = 2
    elif case not in PROCESSES:
        raise ValueError(case)
    return tiny_config(
        model=model,
        train={"global_batch_size": 6, "train_iters": STEPS},
        optimizer={"clip_grad": CLIP},
        scheduler={"lr_warmup_iters": 0},
    )


def run_pp_case(case: str, variants: list[str]) -> dict[str, dict[str, Any]]:
    """For each variant ("none" or a fault name), from a freshly built model, STEPS optimizer steps as
    `loop.train` runs them: per step the loss and full gradients (before clipping) and the grad norm;
    then the full weights; and the wall time of the steps."""
    import torch.distributed as dist

    from packcfg.train import batches as thd  # split looked up per call: faults.injected patches it
    from packcfg.train.data import BatchPlan
    from packcfg.train.equivalence import full_weights, loss_and_grads
    from packcfg.train.model import build_model
    from packcfg.train.optim import LrSchedule, build_optimizer
    from packcfg.train.parallel import clip_grad_norm, context_group, distributed
    from packcfg.train.settings import TrainSettings

    world = dist.get_world_size() if dist.is_initialized() else 1
    settings = TrainSettings.from_config(pp_case_config(case, 2 if world > 1 else 1))  # pp_dp: DP = rest
    packs = greedy_packs(synthetic_samples(60, seed=9), settings.data.pack_size)
    out: dict[str, dict[str, Any]] = {}
    m = settings.model
    with distributed(tp=m.tp, cp=m.cp, pp=m.pp) as layout:
        for variant in variants:
            faults = Faults.from_names([variant])
            model = build_model(m, settings.seed)
            plan = BatchPlan(
                _Packs(packs),
                settings.data,
                settings.micro_batch_size,
                settings.global_batch_size,
                layout.dp,
                layout.dp_rank,
            )
            params = [p for p in model.parameters() if p.requires_grad]
            optimizer = build_optimizer(model, settings.optim, params)
            schedule = LrSchedule(optimizer, settings.optim)
            steps, norms, widths = [], [], []
            t0 = time.perf_counter()
            for step in range(STEPS):
                schedule.advance()
                with injected(faults):
                    batches = plan.micro_batches(step)
                    widths.append([int(b.tokens.shape[1]) for b in batches])
                    if layout.cp > 1:
                        batches = [
                            thd.split_for_context_parallel(b, layout.cp, layout.cp_rank, context_group())
                            for b in batches
                        ]
                    steps.append(loss_and_grads(model, batches))
                norms.append(clip_grad_norm(params, settings.optim.clip_grad))
                optimizer.step()
            out[variant] = {
                "steps": steps,
                "norms": norms,
                "weights": full_weights(model),
                "widths": widths,
                "seconds": time.perf_counter() - t0,
            }
    return out


def torchrun_case(case: str, faults: list[str], tmp_path: Path) -> dict[str, dict[str, Any]]:
    from packcfg.train.equivalence import load_results

    out = tmp_path / f"{case}.pt"
    run_torchrun([str(Path(__file__).resolve()), case, str(out), *faults], nproc=PROCESSES[case])
    return load_results(out)


def max_grad_diff(a: Any, b: Any) -> float:
    return max(float((a.grads[n] - b.grads[n]).abs().max()) for n in a.grads)


def _check_equal(case: str, reference: dict[str, Any], candidate: dict[str, Any]) -> None:
    from packcfg.train.equivalence import LossAndGrads, compare

    if case != "pp_dp":  # (under DP each rank holds half of the step's micro-batches)
        assert candidate["widths"] == reference["widths"]
    widths = candidate["widths"]  # more micro-batches than stages, of varying widths
    assert all(len(w) > 2 for w in widths) and len({x for w in widths for x in w}) > 1, widths
    for step, (ref, got) in enumerate(zip(reference["steps"], candidate["steps"], strict=True)):
        assert set(got.grads) == set(ref.grads), f"{case} step {step}: parameter names differ"
        assert compare(ref, got) == [], f"{case} step {step}: differs from PP 1"
        assert max_grad_diff(ref, got) <= GRAD_ATOL, f"{case} step {step}: {max_grad_diff(ref, got):.2e}"
    for ref_norm, norm in zip(reference["norms"], candidate["norms"], strict=True):
        assert abs(ref_norm - norm) <= 1e-6 * ref_norm, (case, reference["norms"], candidate["norms"])
    assert max(reference["norms"]) > CLIP, "clipping must act for the PP grad-norm sum to matter"
    weights = compare(LossAndGrads(0.0, reference["weights"]), LossAndGrads(0.0, candidate["weights"]))
    assert weights == [], f"{case}: weights after {STEPS} steps differ"


CONTROLS = ["pp_stage_drops_thd", "pp_embedding_grads_not_reduced"]


@pytest.mark.torchrun
@pytest.mark.slow
def test_pp2_equals_pp1(tmp_path):
    from packcfg.train.equivalence import compare

    two = torchrun_case("pp", CONTROLS, tmp_path)
    reference = run_pp_case("pp", ["none"])["none"]
    _check_equal("pp", reference, two["none"])
    first = reference["steps"][0]
    # Control: a later stage without THD metadata changes the loss and every gradient.
    problems = compare(first, two["pp_stage_drops_thd"]["steps"][0])
    assert any(p.startswith("loss") for p in problems), problems
    # Control: without the embedding-group sum only the tied embedding's gradient is wrong.
    problems = compare(first, two["pp_embedding_grads_not_reduced"]["steps"][0])
    assert problems and all(p.startswith("embedding.word_embeddings.weight") for p in problems), problems


@pytest.mark.torchrun
@pytest.mark.slow
@pytest.mark.parametrize("case", ["pp_tp", "pp_cp", "pp_dp"])
def test_pp2_with_tp2_cp2_or_dp2_equals_pp1(case, tmp_path):
    two = torchrun_case(case, [], tmp_path)
    reference = run_pp_case(case, ["none"])["none"]
    _check_equal(case, reference, two["none"])


def test_preflight_refuses_weights_files_under_pp():
    """Checkpoints are one file per TP rank (every stage would write the same one) and HF weights load
    into a whole model: under PP those fields are refused before any rank starts, one line each."""
    from packcfg.train.preflight import preflight

    config = pp_case_config("pp", 2)
    assert preflight(config) == []
    config["checkpoint"] = {"save": "runs/x/checkpoints", "save_interval": 5, "load": "runs/y/checkpoints"}
    config["model"]["virtual_pipeline_model_parallel_size"] = 2
    problems = preflight(config)
    assert [p.split(":")[0] for p in problems] == [
        "model.virtual_pipeline_model_parallel_size",
        "checkpoint.save",
        "checkpoint.load",
    ], problems
    assert all("pipeline_model_parallel_size 2" in p and "\n" not in p for p in problems[1:])
    config["model"]["pipeline_model_parallel_size"] = 1
    assert preflight(config) == []


def main() -> None:
    import torch.distributed as dist

    warnings.filterwarnings("ignore")
    case, out, faults = sys.argv[1], Path(sys.argv[2]), sys.argv[3:]
    dist.init_process_group("gloo")
    try:
        results = run_pp_case(case, ["none", *faults])
        if dist.get_rank() == 0:
            torch.save(results, out)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
