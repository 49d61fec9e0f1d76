"""Per-GPU memory and step time of one parallel layout, by formula (docs/plan.md has the derivations).

Memory follows Megatron-LM's `megatron/training/theoretical_memory_usage.py` (commit d98e8a6): weights,
gradients and optimizer state per parameter of the most loaded rank, the optimizer state (and the fp32
master copy) sharded over the data-parallel ranks (DP x CP) with the distributed optimizer; activations
per token and layer itemised after Korthikanti et al. 2022 (arXiv 2205.05198, Table 2) for a Llama-style
layer with flash attention (no s^2 score matrix is stored), divided by TP (all of them with sequence
parallel, the matmul ones without), tokens per GPU = pack size / CP, 1F1B keeping up to PP micro-batches
in flight on the first stage. Step FLOPs follow Megatron-LM's `num_floating_point_operations`
(`megatron/training/training.py`, same commit): 2 x matmul weights per token, 3x for forward and
backward (4x with full recomputation), and causal core attention 2 x q_size x sum(L_i^2) per layer in
the forward pass, where L_i are the samples inside each pack, not the pack length.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from packcfg.plan.shape import ModelShape

GIB = 1024**3
RECOMPUTE = ("none", "full")


@dataclass(frozen=True)
class Hardware:
    """What the step-time model assumes; all of it is printed beside the table."""

    gpu_memory_bytes: int = 80 * GIB
    headroom: float = 0.10  # kept free: CUDA context, NCCL buffers, allocator fragmentation
    peak_tflops: float = 989.0  # dense bf16 of one H100 SXM (NVIDIA datasheet)
    mfu: float = 0.45  # fraction of peak the matmuls and attention reach
    intra_node_gbps: float = 360.0  # NCCL bus bandwidth inside a node, GB/s (NVLink)
    inter_node_gbps: float = 40.0  # per GPU between nodes, GB/s (400 Gb/s InfiniBand)
    gpus_per_node: int = 8

    def as_dict(self) -> dict[str, Any]:
        return {
            "gpu_memory_gib": round(self.gpu_memory_bytes / GIB, 2),
            "headroom": self.headroom,
            "peak_tflops": self.peak_tflops,
            "mfu": self.mfu,
            "intra_node_GBps": self.intra_node_gbps,
            "inter_node_GBps": self.inter_node_gbps,
            "gpus_per_node": self.gpus_per_node,
        }


@dataclass(frozen=True)
class Precision:
    """Bytes per parameter and per activation element, from the config's precision settings."""

    bf16: bool = True
    grad_reduce_in_fp32: bool = True
    distributed_optimizer: bool = False

    @property
    def weight_bytes(self) -> int:
        return 2 if self.bf16 else 4

    @property
    def grad_bytes(self) -> int:
        return 4 if (not self.bf16 or self.grad_reduce_in_fp32) else 2

    @property
    def optimizer_states_per_param(self) -> int:
        """fp32 values per parameter in the optimizer: Adam's two moments, plus the fp32 master copy
        under bf16 (megatron's mixed-precision optimizer)."""
        return 3 if self.bf16 else 2

    @property
    def activation_bytes(self) -> int:
        return 2 if self.bf16 else 4


@dataclass(frozen=True)
class Layout:
    """One proposal's parallel and batch settings."""

    tp: int
    cp: int
    pp: int
    dp: int
    pack_size: int
    pad_seq_to_mult: int
    global_batch_size: int  # packs per step (offline packing: MBS 1)
    recompute: str = "none"
    micro_batch_size: int = 1

    @property
    def sp(self) -> bool:
        return self.tp > 1  # sequence parallel whenever TP > 1 (Bridge turns it off at TP 1, PL603)

    @property
    def microbatches(self) -> int:
        return self.global_batch_size // (self.micro_batch_size * self.dp)

    @property
    def gpus(self) -> int:
        return self.tp * self.cp * self.pp * self.dp


@dataclass(frozen=True)
class PackProfile:
    """What the packing planner says about the user's lengths at one pack size and alignment."""

    pack_size: int
    pad_seq_to_mult: int
    packs: int
    samples: int
    real_tokens: int  # runtime tokens of all samples (before alignment)
    aligned_tokens: int  # after rounding every sample up to pad_seq_to_mult
    sum_sq_lengths: float  # sum over samples of (aligned length)^2
    efficiency: float  # the planner's packing efficiency
    fixed_width: bool = True  # pad_to_max_length: every pack is pack_size wide

    @property
    def samples_per_pack(self) -> float:
        return self.samples / self.packs

    @property
    def computed_tokens_per_pack(self) -> float:
        return float(self.pack_size) if self.fixed_width else self.aligned_tokens / self.packs

    @property
    def real_tokens_per_pack(self) -> float:
        return self.real_tokens / self.packs

    @property
    def sum_sq_per_pack(self) -> float:
        return self.sum_sq_lengths / self.packs


@dataclass
class Estimate:
    layout: Layout
    memory: dict[str, float]  # bytes per GPU of the most loaded rank, by part, and "total"
    counts: dict[str, int]  # elements per rank: params, grads, optimizer_states
    step_seconds: float
    compute_seconds: float
    comm_seconds: dict[str, float]
    bubble_fraction: float
    tokens_per_second: float  # real (non-padding) tokens per second, whole job
    samples_per_step: float
    flops_per_step: float
    fits: bool
    notes: list[str] = field(default_factory=list)


def _stage_layers(shape: ModelShape, pp: int) -> int:
    return shape.num_layers // pp


def mlp_saved_elements(shape: ModelShape) -> int:
    """Elements per token the MLP keeps for backward past its input (at TP 1): fc1's output (2f gated, f
    otherwise) and the activation's output (f, fc2's input); megatron-core's unfused GLU (the local spec,
    0.16.1 mlp.py `glu`) also keeps silu(x1) and x2 + offset, 2f more."""
    f = shape.ffn_hidden_size
    if not shape.gated_linear_unit:
        return 2 * f
    return 3 * f if shape.fused_activation else 5 * f


def activation_bytes_per_token_layer(shape: ModelShape, layout: Layout, precision: Precision) -> float:
    """Bytes one token keeps for the backward pass in one layer without recomputation (on one TP rank).

    Saved per token (elements): the two norms' inputs and outputs (4h; split by TP only with sequence
    parallel), q, k, v after RoPE and the attention output (2q + 2kv), the MLP's fc1 output (2f gated,
    f otherwise) and the activation's output (f), all split by TP; plus flash attention's fp32
    log-sum-exp per head. An unfused GLU (`shape.fused_activation` false) also keeps silu(x1) and
    x2 + offset (2f more)."""
    h = shape.hidden_size
    a, tp = precision.activation_bytes, layout.tp
    replicated = 4 * h
    sharded = 2 * shape.q_size + 2 * shape.kv_size + mlp_saved_elements(shape)
    per_token = a * (replicated / (tp if layout.sp else 1) + sharded / tp)
    return per_token + 4 * shape.num_attention_heads / tp


def memory(
    shape: ModelShape, layout: Layout, precision: Precision, reference: bool = False
) -> tuple[dict[str, float], dict[str, int]]:
    """Per-GPU bytes of the most loaded pipeline stage, by part, and the element counts per rank;
    `reference`: DPO's frozen reference model, one more copy of the weights."""
    best: tuple[float, dict[str, float], dict[str, int]] | None = None
    shard = layout.dp * layout.cp if precision.distributed_optimizer else 1
    tokens = layout.micro_batch_size * layout.pack_size / layout.cp  # per GPU per micro-batch
    sp_div = layout.tp if layout.sp else 1
    a = precision.activation_bytes
    layers = _stage_layers(shape, layout.pp)
    for stage in range(layout.pp):
        params = shape.stage_params(layout.tp, layout.pp, stage)
        states = params * precision.optimizer_states_per_param
        inflight = min(layout.pp - stage, max(1, layout.microbatches))
        if layout.recompute == "full":
            # each layer keeps its input; one layer at a time is recomputed with everything it saves
            per_micro = layers * a * shape.hidden_size / sp_div + activation_bytes_per_token_layer(
                shape, layout, precision
            )
        else:
            per_micro = layers * activation_bytes_per_token_layer(shape, layout, precision)
        act = per_micro * tokens * inflight
        if stage == 0:
            act += a * shape.hidden_size / sp_div * tokens * inflight  # embedding output
        logits = 0.0
        if stage == layout.pp - 1:
            # output layer input and the fp32 logits of vocab-parallel cross entropy (Megatron-LM's
            # 4 x s x b x h x (1 + V/h), divided by TP); in bf16 the logits themselves stay alive beside
            # their fp32 copy until the loss is taken (megatron-core 0.16.1 cross_entropy.py makes the copy
            # with `.float()`; in fp32 that is the same tensor, worked on in place)
            vocab = shape.padded_vocab(layout.tp)
            logits = (4 * (shape.hidden_size + vocab) + (a * vocab if a < 4 else 0)) * tokens / layout.tp
        parts = {
            "weights": params * precision.weight_bytes,
            "gradients": params * precision.grad_bytes,
            "optimizer": states * 4 / shard,
            "activations": act,
            "logits": logits,
        }
        if reference:
            parts["reference"] = params * precision.weight_bytes
        parts["total"] = sum(parts.values())
        counts = {
            "params": params,
            "grads": params,
            "optimizer_states": -(-states // shard),
        }
        if best is None or parts["total"] > best[0]:
            best = (parts["total"], parts, counts)
    assert best is not None
    return best[1], best[2]


def step_flops(
    shape: ModelShape, profile: PackProfile, recompute: str, reference: bool = False
) -> tuple[float, float]:
    """(hardware FLOPs per pack, of which attention): dense work over every computed token (padding
    included), causal attention over each sample's own length; forward + backward is 3 forwards, full
    recomputation adds one, DPO's frozen reference model one more."""
    dense = 2.0 * shape.matmul_params_per_token() * profile.computed_tokens_per_pack
    attn = 2.0 * shape.q_size * profile.sum_sq_per_pack * shape.num_layers
    passes = 3.0 + (recompute == "full") + reference
    return passes * (dense + attn), passes * attn


def _bandwidth(hw: Hardware, span: int) -> float:
    """GB/s for a group whose members lie within `span` consecutive ranks."""
    return (hw.intra_node_gbps if span <= hw.gpus_per_node else hw.inter_node_gbps) * 1e9


def estimate(
    shape: ModelShape,
    layout: Layout,
    profile: PackProfile,
    precision: Precision,
    hw: Hardware,
    overlap_grad_reduce: bool = False,
    reference: bool = False,
) -> Estimate:
    """Memory and step time of `layout`; `reference`: DPO (a frozen reference model: its weights, and one
    more forward pass per micro-batch)."""
    mem, counts = memory(shape, layout, precision, reference)
    flops_pack, _ = step_flops(shape, profile, layout.recompute, reference)
    rate = hw.peak_tflops * 1e12 * hw.mfu
    per_micro = flops_pack * layout.micro_batch_size / (layout.tp * layout.cp * layout.pp) / rate
    m, pp = layout.microbatches, layout.pp
    compute = (m + pp - 1) * per_micro
    bubble = (pp - 1) / (m + pp - 1)

    a = precision.activation_bytes
    tokens = layout.micro_batch_size * layout.pack_size / layout.cp
    layers = _stage_layers(shape, pp)
    comm: dict[str, float] = {}
    if layout.tp > 1:  # 2 all-reduces (or reduce-scatter + all-gather) forward, 2 backward, per layer
        collectives = 6 if layout.recompute == "full" else 4
        volume = a * tokens * shape.hidden_size * 2 * (layout.tp - 1) / layout.tp
        comm["tp"] = (m + pp - 1) * layers * collectives * volume / _bandwidth(hw, layout.tp)
    if layout.cp > 1:  # ring attention: K and V pass CP-1 times forward, K, V and their grads backward
        volume = a * tokens * 2 * shape.kv_size / layout.tp * (layout.cp - 1)
        comm["cp"] = (m + pp - 1) * layers * 3 * volume / _bandwidth(hw, layout.tp * layout.cp)
    if pp > 1:  # activations forward and their gradients backward between stages
        volume = a * tokens * shape.hidden_size / (layout.tp if layout.sp else 1)
        comm["pp"] = 2 * m * volume / _bandwidth(hw, layout.gpus)
    group = layout.dp * layout.cp
    if group > 1 and not overlap_grad_reduce:
        volume = counts["params"] * precision.grad_bytes * 2 * (group - 1) / group
        comm["dp"] = volume / _bandwidth(hw, layout.tp * group)
    step = compute + sum(comm.values())
    real_tokens = layout.global_batch_size * profile.real_tokens_per_pack
    budget = hw.gpu_memory_bytes * (1 - hw.headroom)
    return Estimate(
        layout=layout,
        memory=mem,
        counts=counts,
        step_seconds=step,
        compute_seconds=compute,
        comm_seconds=comm,
        bubble_fraction=bubble,
        tokens_per_second=real_tokens / step if step > 0 else 0.0,
        samples_per_step=layout.global_batch_size * profile.samples_per_pack,
        flops_per_step=flops_pack * layout.global_batch_size,
        fits=mem["total"] <= budget,
    )
