"""Loss and full gradients of one global batch, and the comparison the equivalence tests use.

`compare` is the single judge of "computes the same": loss within an absolute tolerance and every
parameter's gradient within a relative (norm-wise) tolerance. The tests run each configuration
against its reference and each control (a deliberate bug the tests inject, tests/train/faults.py) against the same reference, expecting
`compare` to find no mismatch and a mismatch respectively.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from packcfg.train.batches import MicroBatch
from packcfg.train.mcore_compat import parallel_state
from packcfg.train.parallel import grad_of
from packcfg.train.step import forward_backward

LOSS_ATOL = 1e-5
GRAD_RTOL = 1e-4


@dataclass
class LossAndGrads:
    loss: float
    grads: dict[str, torch.Tensor]  # full (TP-gathered) gradients by parameter name


def load_results(path: str | Path) -> Any:
    """Results a multi-process equivalence run saved with `torch.save`: loaded with
    `weights_only=True` (tensors, containers and `LossAndGrads` only; nothing in the file runs code)."""
    with torch.serialization.safe_globals([LossAndGrads]):
        return torch.load(path, map_location="cpu", weights_only=True)


def _full(model: torch.nn.Module, name: str, p: torch.nn.Parameter, local: torch.Tensor) -> torch.Tensor:
    """A TP shard gathered to full size along its partition dim (on CPU); replicated tensors as they are."""
    tp_group = parallel_state.get_tensor_model_parallel_group()
    tp = dist.get_world_size(tp_group)
    g = local.detach().clone()
    dim = int(getattr(p, "partition_dim", 0))
    if tp > 1 and getattr(p, "tensor_model_parallel", False):
        parts = [torch.empty_like(g) for _ in range(tp)]
        dist.all_gather(parts, g.contiguous(), group=tp_group)
        if name.endswith("mlp.linear_fc1.weight") and getattr(model.config, "gated_linear_unit", False):
            # SwiGLU: each TP shard is [gate_r; up_r]; the full layout is [gate; up].
            halves = [part.chunk(2, dim=dim) for part in parts]
            parts = [h[0] for h in halves] + [h[1] for h in halves]
        g = torch.cat(parts, dim=dim)
    return g.cpu()


def _whole_model(model: torch.nn.Module, local: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Under PP, every stage's tensors by their whole-model names (`pipeline.global_names`), gathered
    over the pipeline group; the last stage's copy of a tied embedding is left out (the first stage's
    word embedding is the tensor PP 1 has). Without PP, `local` as it is."""
    if parallel_state.get_pipeline_model_parallel_world_size() == 1:
        return local
    from packcfg.train.pipeline import global_names, is_tied_copy

    names = global_names(model)
    params = dict(model.named_parameters())
    mine = {names[n]: t for n, t in local.items() if not is_tied_copy(params[n])}
    stages: list[dict[str, torch.Tensor]] = [
        {} for _ in range(parallel_state.get_pipeline_model_parallel_world_size())
    ]
    dist.all_gather_object(stages, mine, group=parallel_state.get_pipeline_model_parallel_group())
    return {name: t for stage in stages for name, t in stage.items()}


def full_gradients(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Every parameter's gradient at full size (the fp32 main grad where there is one): TP shards
    gathered along their partition dim; under PP, every stage's, by whole-model name."""
    out = {}
    for name, p in model.named_parameters():
        g = grad_of(p)
        assert g is not None, f"{name}: no gradient"
        out[name] = _full(model, name, p, g)
    return _whole_model(model, out)


def full_weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Every parameter at full size (TP shards gathered; under PP every stage's), on CPU."""
    return _whole_model(model, {name: _full(model, name, p, p.data) for name, p in model.named_parameters()})


def loss_and_grads(model: torch.nn.Module, micro_batches: Sequence[MicroBatch]) -> LossAndGrads:
    """One step's global per-token loss and the DP/CP-reduced gradients (no optimizer step)."""
    model.zero_grad(set_to_none=False)
    loss, _ = forward_backward(model, micro_batches)
    return LossAndGrads(loss=loss, grads=full_gradients(model))


def compare(
    reference: LossAndGrads,
    candidate: LossAndGrads,
    loss_atol: float = LOSS_ATOL,
    grad_rtol: float = GRAD_RTOL,
) -> list[str]:
    """Mismatches beyond tolerance, worst first; an empty list means "the same computation"."""
    problems: list[tuple[float, str]] = []
    dl = abs(reference.loss - candidate.loss)
    if not dl <= loss_atol:
        problems.append(
            (dl / loss_atol, f"loss {candidate.loss:.8f} vs {reference.loss:.8f} (|diff| {dl:.2e})")
        )
    for name, ref in reference.grads.items():
        got = candidate.grads.get(name)
        if got is None or got.shape != ref.shape:
            problems.append(
                (
                    float("inf"),
                    f"{name}: shape {None if got is None else tuple(got.shape)} vs {tuple(ref.shape)}",
                )
            )
            continue
        rel = float((got.double() - ref.double()).norm() / ref.double().norm().clamp_min(1e-30))
        if not rel <= grad_rtol:
            problems.append((rel / grad_rtol, f"{name}: relative gradient difference {rel:.2e}"))
    return [text for _, text in sorted(problems, key=lambda x: -x[0])]
