"""DPO on packed pairs: sequence log-probabilities from THD per-token losses, and the DPO loss.

Layout (NeMo Aligner's packed DPO: `prepare_packed_dpo_dataset.py`, 2024, concatenates each example's
chosen and rejected sequences, chosen first, packs that concatenation as one unit and records both
boundaries in `seq_boundaries`; training then runs MBS 1 with the GBS rescaled by the packing factor, NeMo
Framework 25.02 DPO guide): a pack holds whole pairs, chosen then rejected, never split across packs.
Here a micro-batch holds whole pairs, `2 * pairs` real segments in chosen/rejected order, then at most
a padding segment (packcfg's planner, `pairs`, keeps samples 2k and 2k+1 adjacent).

Log-probabilities: the model's per-token loss is the cross entropy of the label, so log p(label) =
-CE; a sample's log-probability is the sum over its supervised (loss-mask) tokens, as Aligner's
`get_reduced_masked_logps` sums them. Rewards are beta * (policy - reference) log-probability.

Loss (Aligner `MegatronGPTDPOModel.loss_func`, `preference_loss: dpo | ipo`; field names follow
Aligner's `dpo.ref_policy_kl_penalty` and NeMo RL's `dpo.reference_policy_kl_penalty` for beta):
    h = (pi_c - ref_c) - (pi_r - ref_r)
    dpo: -(1 - ls) * logsigmoid(beta * h) - ls * logsigmoid(-beta * h)
    ipo: (h - 1 / (2 * beta)) ** 2
averaged over the pairs of the global batch (all micro-batches, all DP ranks), so the value does not
depend on how pairs are packed or spread over ranks.

Reference log-probabilities are computed once per micro-batch by a frozen model (the initial weights)
under `torch.no_grad` and passed in: a frozen copy costs one extra forward per step and nothing on
disk, and stays right when packs are re-planned (precomputed values would be tied to one pack plan).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from packcfg.train.batches import MicroBatch, Sample, pack_thd, pad_batch
from packcfg.train.forward import (
    StepTokens,
    count_tokens,
    model_device,
    per_token_losses,
    sequence_parallel_ready,
    to_device,
    zero_main_grads,
)
from packcfg.train.metrics import StepMetrics
from packcfg.train.parallel import all_reduce_sum, data_context_group, finalize_model_grads
from packcfg.train.preflight import dpo_refusals
from packcfg.train.settings import DpoSettings


@dataclass(frozen=True)
class Pair:
    chosen: Sample
    rejected: Sample


@dataclass
class DpoStep:
    """One step's global DPO loss and metrics (means over the pairs of the global batch)."""

    loss: float
    pairs: int
    reward_accuracy: float
    reward_margin: float
    chosen_reward: float
    rejected_reward: float

    def metrics(self) -> dict[str, float | int]:
        """The `DpoStepMetrics` fields of this step."""
        return {
            "pairs": self.pairs,
            "reward_accuracy": self.reward_accuracy,
            "reward_margin": self.reward_margin,
            "chosen_reward": self.chosen_reward,
            "rejected_reward": self.rejected_reward,
        }


def pack_pairs(pairs: Sequence[Pair], pad_to: int | None = None) -> MicroBatch:
    """Whole pairs in one THD row: chosen, rejected, chosen, rejected, ... then padding."""
    return pack_thd([s for p in pairs for s in (p.chosen, p.rejected)], pad_to=pad_to)


def unpacked_pairs(pairs: Sequence[Pair]) -> MicroBatch:
    """The same pairs one sequence per row, right-padded (the unpacked baseline)."""
    return pad_batch([s for p in pairs for s in (p.chosen, p.rejected)])


def sequence_logps(losses: Tensor, mb: MicroBatch, samples: int) -> Tensor:
    """Sum of log p (= -CE) over each sample's supervised tokens: `[samples]`. THD: the first
    `samples` segments of `cu_seqlens`; padded: one row per sample."""
    token_logps = -losses.float() * mb.loss_mask
    if mb.thd is None:
        return token_logps.sum(dim=1)[:samples]
    cu = mb.thd.cu_seqlens_list
    assert cu is not None
    if mb.thd.kv_gather_index is not None or len(cu) - 1 < samples:
        raise ValueError(
            "DPO needs unsplit THD packs holding whole pairs (context parallel is not supported)"
        )
    row = token_logps[0]
    return torch.stack([row[cu[i] : cu[i + 1]].sum() for i in range(samples)])


def pair_losses(policy: Tensor, reference: Tensor, s: DpoSettings) -> tuple[Tensor, Tensor, Tensor]:
    """Per-pair loss and chosen/rejected rewards from `[2 * pairs]` log-probs in chosen/rejected order."""
    chosen = s.beta * (policy[0::2] - reference[0::2])
    rejected = s.beta * (policy[1::2] - reference[1::2])
    logits = chosen - rejected  # beta * h
    if s.loss_type == "ipo":
        loss = (logits / s.beta - 1 / (2 * s.beta)) ** 2
    else:
        loss = -(1 - s.label_smoothing) * F.logsigmoid(logits) - s.label_smoothing * F.logsigmoid(-logits)
    return loss, chosen.detach(), rejected.detach()


def _pairs_in(mb: MicroBatch) -> int:
    if mb.thd is None:
        rows = int(mb.tokens.shape[0])
    else:
        assert mb.thd.cu_seqlens_list is not None
        rows = len(mb.thd.cu_seqlens_list) - 1 - int(mb.thd.padding_segment)
    if rows % 2:
        raise ValueError(
            f"a DPO micro-batch holds {rows} sequences; it must hold whole pairs (chosen, rejected)"
        )
    return rows // 2


@torch.no_grad()
def reference_logps(
    reference: torch.nn.Module, micro_batches: Sequence[MicroBatch], use_te: bool = False
) -> list[Tensor]:
    """The frozen reference model's sequence log-probs of every micro-batch (no graph)."""
    out = []
    device = model_device(reference)
    for mb in micro_batches:
        mb = to_device(sequence_parallel_ready(reference, mb), device)
        out.append(
            sequence_logps(per_token_losses(reference, mb, use_te=use_te), mb, 2 * _pairs_in(mb)).cpu()
        )
    return out


def dpo_forward_backward(
    model: torch.nn.Module,
    micro_batches: Sequence[MicroBatch],
    ref_logps: Sequence[Tensor],
    settings: DpoSettings,
    *,
    device: torch.device | None = None,
    use_te: bool = False,
) -> DpoStep:
    """Accumulate gradients of the global DPO loss (mean over the global batch's pairs) over this
    rank's micro-batches, reduce them as `step.forward_backward` does, and return loss and metrics."""
    micro_batches = [sequence_parallel_ready(model, mb) for mb in micro_batches]
    counts = [_pairs_in(mb) for mb in micro_batches]
    (total,) = all_reduce_sum([sum(counts)], data_context_group())
    denominator = max(int(total), 1)
    device = device or model_device(model)
    zero_main_grads(model)
    local = [0.0, 0.0, 0.0, 0.0, 0.0]  # loss, correct, margin, chosen, rejected (sums)
    for mb, pairs, ref in zip(micro_batches, counts, ref_logps, strict=True):
        mb = to_device(mb, device)
        policy = sequence_logps(per_token_losses(model, mb, use_te=use_te), mb, 2 * pairs)
        ref = ref.to(policy.device)
        loss, chosen, rejected = pair_losses(policy, ref, settings)
        (loss.sum() / denominator).backward()
        local[0] += float(loss.detach().sum()) / denominator
        local[1] += float((chosen > rejected).float().sum())
        local[2] += float((chosen - rejected).sum())
        local[3] += float(chosen.sum())
        local[4] += float(rejected.sum())
    finalize_model_grads(model)
    loss, correct, margin, chosen_sum, rejected_sum = all_reduce_sum(local, data_context_group())
    return DpoStep(
        loss=loss,
        pairs=int(total),
        reward_accuracy=correct / denominator,
        reward_margin=margin / denominator,
        chosen_reward=chosen_sum / denominator,
        rejected_reward=rejected_sum / denominator,
    )


@dataclass(frozen=True)
class DpoStepMetrics(StepMetrics):
    """A DPO step's metrics.jsonl line: the SFT fields (loss = the DPO loss) plus the preference
    metrics, means over the step's pairs (rewards are beta * (policy - reference) log-probs)."""

    pairs: int = 0
    reward_accuracy: float = 0.0
    reward_margin: float = 0.0
    chosen_reward: float = 0.0
    rejected_reward: float = 0.0


def dpo_setup(settings: DpoSettings | None, batching: str, cp: int) -> DpoSettings | None:
    """The run's DPO settings (None unless `recipe.mode` is dpo); raises ValueError (one line) for a
    layout DPO cannot train."""
    if settings is None:
        return None
    problems = dpo_refusals(cp, batching)
    if problems:
        raise ValueError("; ".join(problems))
    return settings


def frozen_reference(build: Callable[[], torch.nn.Module]) -> torch.nn.Module:
    """The reference policy: the model `build` returns (the run's initial weights, same shape and
    parallel layout), frozen. Built rather than copied from the policy: a resumed policy no longer holds
    the initial weights, and megatron modules hold process groups, which do not deep-copy."""
    reference = build()
    reference.eval()
    for p in reference.parameters():
        p.requires_grad_(False)
    return reference


def dpo_step_on(
    model: torch.nn.Module,
    reference: torch.nn.Module | None,
    micro_batches: Sequence[MicroBatch],
    settings: DpoSettings,
    device: torch.device | None,
    use_te: bool = False,
) -> tuple[float, StepTokens, DpoStep]:
    """One DPO step's forward/backward for the training loop: (loss, token counts, DPO metrics)."""
    assert reference is not None
    tokens = count_tokens(micro_batches)
    refs = reference_logps(reference, micro_batches, use_te=use_te)
    step = dpo_forward_backward(model, micro_batches, refs, settings, device=device, use_te=use_te)
    return step.loss, tokens, step
