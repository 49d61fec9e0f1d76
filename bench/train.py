"""Packed vs padded training throughput, same real tokens, on CPU or one GPU (issues 4 and 27).

    python bench/train.py [--preset tiny|1b] [--device auto|cpu|cuda] [--samples N] [--seq-length L]
                          [--rounds 2] [--threads 1] [--wall] [--no-profiles]

Trains one pass over the same samples several ways with the executor's own pieces (model, batches,
forward/backward, AdamW; bf16 presets as `packcfg train` runs them: bf16 model, fp32 master weights):
offline packed (THD, packs planned by packcfg.packing.plan); padded with a length-grouped sampler (similar
lengths share a micro-batch: the strongest padded baseline); padded to the longest sample of each
micro-batch in data order; and padded to seq_length (Bridge's pad_to_max_length, the worst case). Two
length mixes: a realistic one (log-normal, most samples far shorter than seq_length) and a uniform one
(every sample the same length: nothing to remove, so packed must simply not be slower).

What packing can buy over a padded layout is bounded by that layout's computed/real token ratio; the
table's last columns say how much of it packing keeps: packed real tokens/s divided by the padded
layout's *computed* tokens/s (1.0: packing costs nothing per token; the goal is >= 0.95), and MFU
(model FLOPs of the real tokens, attention per sample, over the device's bf16 dense peak).

Presets: `tiny` (4 layers x 256, GQA 8/4, vocab 4096, fp32; the CPU default) and `1b` (a 1B-class Llama
shape: 16 layers x 2048, GQA 32/8 x 64, FFN 8192, vocab 128256, bf16; the GPU default, seq 4096).

Then profiles: THD RoPE time vs samples per pack (packcfg's gather vs megatron's unfused loop), and the
attention methods for packs: on CPU the per-sample SDPA loop vs a block-diagonal mask vs unpack-to-padded;
on a GPU one layer's attention fwd+bwd per method (per-sample loop, each fused varlen kernel that can
run, and length-grouped padded SDPA).

Timing: on CPU this process's CPU time (`time.process_time`) with one torch thread by default
(development machines are shared: wall-clock measures the neighbours), `--wall` for wall-clock; on CUDA
wall-clock between `torch.cuda.synchronize()` calls. Best of `--rounds` interleaved rounds after a warm-up.
Prints tables; asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import re
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass

warnings.filterwarnings("ignore")
# before torch is imported: the 1b preset's largest micro-batches need the allocator's free blocks to merge
# (without it an H100 ran out of memory with 10.6 GiB reserved but unallocated)
os.environ.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from packcfg.packing import plan  # noqa: E402
from packcfg.train.attention import Rope, RopeSpec, thd_positions  # noqa: E402
from packcfg.train.batches import MicroBatch, Sample, pack_thd, pad_batch  # noqa: E402
from packcfg.train.forward import to_device  # noqa: E402
from packcfg.train.model import build_model  # noqa: E402
from packcfg.train.optim import MasterWeights, build_optimizer  # noqa: E402
from packcfg.train.parallel import distributed  # noqa: E402
from packcfg.train.settings import TrainSettings  # noqa: E402
from packcfg.train.step import forward_backward  # noqa: E402

PRESETS: dict[str, dict] = {
    "tiny": {
        "num_layers": 4, "hidden_size": 256, "ffn_hidden_size": 768, "num_attention_heads": 8,
        "num_query_groups": 4, "kv_channels": 32, "vocab_size": 4096, "bf16": False,
    },
    "1b": {  # Llama 3.2 1B's shape (untied output layer)
        "num_layers": 16, "hidden_size": 2048, "ffn_hidden_size": 8192, "num_attention_heads": 32,
        "num_query_groups": 8, "kv_channels": 64, "vocab_size": 128256, "bf16": True,
    },
}  # fmt: skip
# bf16 dense peak (TFLOP/s) by device name, from NVIDIA's data sheets (SXM parts)
PEAK_TFLOPS = {"H100": 989.0, "H200": 989.0, "A100": 312.0, "B200": 2250.0}


def bench_config(preset: str, seq_length: int) -> dict:
    model = {**PRESETS[preset], "seq_length": seq_length, "transformer_impl": "local", "rotary_base": 500000}
    return {"model": model, "train": {"train_iters": 1}, "optimizer": {"lr": 1e-4}}


def model_flops(settings, lengths: list[int]) -> float:
    """Training FLOPs (fwd + bwd = 3x fwd) of samples of these runtime lengths: every linear layer
    (QKV, output projection, SwiGLU MLP, the output layer), plus causal attention per sample (QK^T and
    AV over L(L+1)/2 pairs), as Megatron-LM's `num_floating_point_operations` counts them."""
    m = settings.model
    q, kv = m.num_attention_heads * m.kv_channels, m.num_query_groups * m.kv_channels
    per_layer = m.hidden_size * (q + 2 * kv) + q * m.hidden_size + 3 * m.hidden_size * m.ffn_hidden_size
    linear = m.num_layers * per_layer + m.hidden_size * m.vocab_size
    tokens = sum(lengths)
    pairs = sum(n * (n + 1) // 2 for n in lengths)
    return 3 * (2 * linear * tokens + m.num_layers * 4 * pairs * q)


def length_mix(kind: str, n: int, seq_length: int, rng: np.random.Generator) -> np.ndarray:
    """Runtime lengths. `realistic`: log-normal around seq_length/8 (a long tail up to seq_length)."""
    if kind == "uniform":
        return np.full(n, seq_length // 4)
    return np.clip(rng.lognormal(np.log(seq_length / 8), 0.8, n), 8, seq_length).astype(int)


def make_samples(lengths: np.ndarray, vocab: int, rng: np.random.Generator) -> list[Sample]:
    return [Sample(rng.integers(1, vocab, n + 1), np.ones(n + 1, np.int8)) for n in lengths]


def length_grouped(
    lengths: np.ndarray, mbs: int, rng: np.random.Generator, window: int = 16
) -> list[list[int]]:
    """Micro-batches of samples of similar length, as a length-grouped sampler makes them (HF
    `group_by_length`, Megatron's bucketed batching): shuffle, sort each window of `window` x MBS
    samples by length, cut it into micro-batches, shuffle the micro-batches. Each is padded to its
    longest sample only; on the realistic mix about 90% of computed tokens are real."""
    order = rng.permutation(len(lengths))
    groups: list[list[int]] = []
    for start in range(0, len(order), window * mbs):
        chunk = sorted(order[start : start + window * mbs].tolist(), key=lambda i: lengths[i])
        groups += [chunk[i : i + mbs] for i in range(0, len(chunk), mbs)]
    return [groups[i] for i in rng.permutation(len(groups))]


@dataclass
class Row:
    mix: str
    layout: str
    micro_batches: int
    real: int
    computed: int
    seconds: float
    flops: float = 0.0


CLOCK: Callable[[], float] = time.process_time
DEVICE = torch.device("cpu")


def sync() -> None:
    if DEVICE.type == "cuda":
        torch.cuda.synchronize()


def run_layout(trainer: Trainer, batches: list[MicroBatch]) -> float:
    """Seconds for one pass as one global batch: every micro-batch accumulated, one AdamW step (so
    each layout does the same optimizer work and differs only in how the tokens are laid out)."""
    sync()
    t0 = CLOCK()
    trainer.step(batches)
    sync()
    return CLOCK() - t0


class Trainer:
    """The executor's step as `packcfg train` runs it: bf16 model with fp32 master weights when the preset
    is bf16 (packcfg.train.loop), AdamW, the global per-token loss over the micro-batches."""

    def __init__(self, settings, adamw: str = "auto") -> None:
        self.settings = settings
        self.model = build_model(settings.model, seed=0)
        params = [p for p in self.model.parameters() if p.requires_grad]
        self.master = None
        if settings.model.bf16:
            self.model.bfloat16()
            self.master = MasterWeights(params, grad_reduce_in_fp32=True)
            params = self.master.master_params
        self.adamw = adamw
        self.params = params  # what AdamW updates: the fp32 masters with bf16
        fused = {"auto": None, "fused": True, "single": False}[adamw]
        self.optimizer = build_optimizer(self.model, settings.optim, params, fused=fused)

    def step(self, batches: list[MicroBatch]) -> None:
        self.model.zero_grad(set_to_none=False)
        forward_backward(self.model, batches, device=DEVICE)
        if self.master is not None:
            self.master.grads_to_master()
        self.optimizer.step()
        if self.master is not None:
            self.master.master_to_model()


def throughput_tables(args: argparse.Namespace, trainer: Trainer) -> Iterator[list[Row]]:
    """One table's rows per length mix, as each is measured (a run stopped by a timeout keeps the first)."""
    settings = trainer.settings
    for mix in args.mixes:
        rows = []
        rng = np.random.default_rng(0)
        lengths = length_mix(mix, args.samples, args.seq_length, rng)
        samples = make_samples(lengths, settings.model.vocab_size, rng)
        mbs = args.micro_batch_size
        layouts = {}
        # packs of seq_length (MBS 1, as Bridge trains offline packs), and packs of MBS x seq_length: the
        # same token budget per micro-batch as the padded MBS rows (PK110's equivalent configuration)
        for size in (args.seq_length, mbs * args.seq_length):
            packs = plan(lengths, size, algorithm="bfd").bins
            layouts[f"packed (THD), packs of {size:,}"] = [pack_thd([samples[i] for i in b]) for b in packs]
        grouped = length_grouped(lengths, mbs, rng)
        layouts[f"padded, length-grouped MBS {mbs}"] = [pad_batch([samples[i] for i in g]) for g in grouped]
        for size in (mbs, 2 * mbs):
            layouts[f"padded, longest in MBS {size}"] = [
                pad_batch(samples[i : i + size]) for i in range(0, len(samples), size)
            ]
        layouts[f"padded to seq_length, MBS {mbs}"] = [
            pad_batch(samples[i : i + mbs], pad_to=args.seq_length) for i in range(0, len(samples), mbs)
        ]
        # on the device before timing, as a data loader's pinned, prefetched batches would be
        layouts = {name: [to_device(b, DEVICE) for b in batches] for name, batches in layouts.items()}
        for name in list(layouts):  # warm-up: allocator, first-call costs per shape, optimizer state
            batches = layouts[name]
            try:  # on a GPU every shape once
                run_layout(trainer, batches if DEVICE.type == "cuda" else batches[:2])
            except torch.OutOfMemoryError:
                # a micro-batch too large for this device (the 1b preset's padded MBS 8 on 80 GB): leave the
                # layout out of the table, say so once, and go on with the others
                longest = max(b.padded_tokens for b in batches)
                print(f"{mix}: {name} left out: out of device memory (a micro-batch of {longest:,} tokens)")
                del layouts[name]
                trainer.model.zero_grad(set_to_none=False)
                torch.cuda.empty_cache()
        best = dict.fromkeys(layouts, float("inf"))
        for _ in range(args.rounds):  # interleaved, so a burst of load hits every layout alike
            for name, batches in layouts.items():
                best[name] = min(best[name], run_layout(trainer, batches))
        if args.profile and DEVICE.type == "cuda" and mix == args.mixes[0]:
            # the packed layouts against the two strongest padded ones: length-grouped, and longest in 2 x MBS
            profiled = [
                n for n in layouts if n.startswith("packed") or "length-grouped" in n or f"MBS {2 * mbs}" in n
            ]
            for name in profiled:
                kernel_profile(trainer, name, layouts[name])
        flops = model_flops(settings, [int(n) for n in lengths])
        for name, batches in layouts.items():
            real = sum(b.real_tokens for b in batches)
            computed = sum(b.padded_tokens for b in batches)
            rows.append(Row(mix, name, len(batches), real, computed, best[name], flops))
        del layouts
        yield rows


KERNEL_KINDS = (  # first match wins; names of cuBLAS/CUTLASS/flash/triton kernels on Hopper
    ("attention", re.compile(r"flash|fmha|attention|varlen", re.I)),
    ("matmul", re.compile(r"gemm|cutlass|xmma|nvjet|cublas|sm90_|sm80_", re.I)),
    ("cross-entropy / softmax", re.compile(r"softmax|cross_entropy|nll|log_softmax|logsumexp", re.I)),
    ("optimizer", re.compile(r"adam|multi_tensor|foreach", re.I)),
    ("copies / casts", re.compile(r"copy|cat|index|gather|scatter|repeat|fill|zero", re.I)),
    ("other elementwise / reductions", re.compile(r".")),
)


def kernel_profile(trainer: Trainer, name: str, batches: list[MicroBatch]) -> None:
    """One step under torch.profiler: GPU time by kind of kernel, kernel count, and the share of the
    step's wall-clock the GPU was busy (launch-bound steps leave it idle). Diagnostics, printed only."""
    from torch.profiler import ProfilerActivity, profile

    sync()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        t0 = time.perf_counter()
        trainer.step(batches)
        sync()
        wall = time.perf_counter() - t0
    kinds: dict[str, float] = dict.fromkeys(k for k, _ in KERNEL_KINDS)
    top: dict[str, float] = {}
    count = 0
    for event in prof.events():
        if event.device_type != torch.autograd.DeviceType.CUDA:
            continue
        us = event.time_range.elapsed_us()
        count += 1
        kind = next(k for k, pattern in KERNEL_KINDS if pattern.search(event.name))
        kinds[kind] = (kinds[kind] or 0.0) + us
        top[event.name] = top.get(event.name, 0.0) + us
    busy = sum(v or 0.0 for v in kinds.values()) or float("nan")
    real = sum(b.real_tokens for b in batches)
    computed = sum(b.padded_tokens for b in batches)
    print(
        f"\n### Kernels, one step: {name} ({len(batches)} micro-batches, {real:,} real / {computed:,} computed "
        f"tokens): wall {wall * 1e3:.1f} ms (profiled), GPU busy {busy / 1e3:.1f} ms ({busy / 1e3 / (wall * 1e3):.0%}), "
        f"{count:,} kernels"
    )
    print("| kind | GPU ms | share | us per 1k computed tokens |")
    print("|---|---|---|---|")
    for kind, us in kinds.items():
        if us:
            print(f"| {kind} | {us / 1e3:.1f} | {us / busy:.0%} | {us / computed * 1e3:.1f} |")
    for kernel, us in sorted(top.items(), key=lambda kv: -kv[1])[:8]:
        print(f"- {us / 1e3:7.1f} ms  {kernel[:110]}")


def peak_flops() -> float | None:
    if DEVICE.type != "cuda":
        return None
    name = torch.cuda.get_device_name()
    return next((tf * 1e12 for key, tf in PEAK_TFLOPS.items() if key in name), None)


def print_throughput(rows: list[Row], args: argparse.Namespace) -> None:
    peak = peak_flops()
    where = torch.cuda.get_device_name() if DEVICE.type == "cuda" else "CPU"
    print(
        f"\n## Packed vs padded, same samples, one pass as one global batch (fwd+bwd, one AdamW step), "
        f"{args.preset} preset, seq {args.seq_length}, {where}"
    )
    print(
        "| length mix | layout | micro-batches | real tokens | computed tokens | padding | s | real tok/s "
        "| computed tok/s | packed real tok/s / this layout's | packed real tok/s / this layout's computed tok/s "
        "| MFU (real tokens) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        packed = next(r for r in rows if r.mix == row.mix and r.layout.startswith("packed"))
        packed_rate = packed.real / packed.seconds
        mfu = f"{row.flops / row.seconds / peak:.1%}" if peak else "n/a"
        print(
            f"| {row.mix} | {row.layout} | {row.micro_batches} | {row.real:,} | {row.computed:,} | "
            f"{1 - row.real / row.computed:.0%} | {row.seconds:.3f} | {row.real / row.seconds:,.0f} | "
            f"{row.computed / row.seconds:,.0f} | {row.seconds / packed.seconds:.2f}x | "
            f"{packed_rate / (row.computed / row.seconds):.2f} | {mfu} |"
        )
    for mix in dict.fromkeys(r.mix for r in rows):
        mine = [r for r in rows if r.mix == mix]
        packed = [r for r in mine if r.layout.startswith("packed")]
        padded = [r for r in mine if not r.layout.startswith("packed")]
        grouped = next(r for r in padded if "length-grouped" in r.layout)
        full = next(r for r in padded if "seq_length" in r.layout)
        print(f"\n{mix}:")
        for p in packed:
            rate = p.real / p.seconds
            worst = min(padded, key=lambda r: rate / (r.computed / r.seconds))
            kept = rate / (worst.computed / worst.seconds)
            print(
                f"- {p.layout}: {grouped.seconds / p.seconds:.2f}x the real tokens/s of length-grouped padding "
                f"({1 - grouped.real / grouped.computed:.0%} padding), {full.seconds / p.seconds:.2f}x that of "
                f"padding to seq_length ({1 - full.real / full.computed:.0%}); per token it keeps "
                f"{kept:.3f} of the fastest padded layout's computed rate ({worst.layout}; "
                f"goal 0.95: {'met' if kept >= 0.95 else 'missed'})"
            )


def optimizer_table(trainer: Trainer) -> None:
    """One AdamW step over the preset's parameters (the fp32 masters with bf16), torch's fused kernel
    against the single-tensor one: the step's fixed cost, which packing spreads over fewer micro-batches
    than padding does. Run last: the trainer's own moments are dropped to make room."""
    params = trainer.params
    trainer.optimizer = None
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    times = {}
    for kernel, fused in (("fused", True), ("single-tensor", False)):
        if DEVICE.type == "cuda":
            torch.cuda.empty_cache()
        optimizer = build_optimizer(trainer.model, trainer.settings.optim, params, fused=fused)
        times[kernel] = timed(optimizer.step, repeat=5) * 1e3
        del optimizer
    count = sum(p.numel() for p in params)
    print(
        f"\n## AdamW step over {count / 1e6:,.1f}M parameters ({params[0].dtype}), best of 5: "
        + ", ".join(f"{kernel} {ms:.1f} ms" for kernel, ms in times.items())
        + f" (the throughput tables above ran with --adamw {trainer.adamw})"
    )


def timed(fn: Callable[[], object], repeat: int = 5) -> float:
    """Best of `repeat` calls after one warm-up."""
    fn()
    best = float("inf")
    for _ in range(repeat):
        sync()
        t0 = CLOCK()
        fn()
        sync()
        best = min(best, CLOCK() - t0)
    return best


def rope_profile(total: int = 8192, heads: int = 8, dim: int = 32) -> None:
    """THD RoPE for one pack of `total` tokens split into n samples: packcfg vs megatron's loop."""
    from megatron.core.models.common.embeddings.rope_utils import _apply_rotary_pos_emb_thd

    from packcfg.train.mcore_compat import parallel_state

    rope = Rope(RopeSpec(dim=dim))
    x = torch.randn(total, heads, dim)
    # megatron's table covers the longest sample (positions restart per sample); one longer than the
    # pack so megatron never takes its "positions run across the pack" branch.
    freqs_table = torch.outer(torch.arange(total + 1, dtype=torch.float32), rope.inv_freq)
    freqs_table = torch.cat((freqs_table, freqs_table), -1)[:, None, None, :]
    print(f"\n## THD RoPE cost vs samples per pack ({total:,} tokens, {heads} heads x {dim}), forward, CPU")
    print(
        "| samples in pack | packcfg (positions by searchsorted, one gather) ms | megatron unfused THD (per-sample loop) ms | max abs diff |"
    )
    print("|---|---|---|---|")
    cp_group = parallel_state.get_context_parallel_group()
    for n in (1, 8, 64, 512):
        cu = torch.linspace(0, total, n + 1).round().to(torch.int32)

        def ours(cu: torch.Tensor = cu) -> torch.Tensor:
            cos, sin = rope.cos_sin(thd_positions(cu, total))
            return rope.apply(x, cos, sin)

        def theirs(cu: torch.Tensor = cu) -> torch.Tensor:
            return _apply_rotary_pos_emb_thd(x, cu, freqs_table, cp_group=cp_group)

        diff = float((ours() - theirs()).abs().max())
        print(f"| {n} | {timed(ours) * 1e3:.2f} | {timed(theirs) * 1e3:.2f} | {diff:.1e} |")


def attention_profile(total: int = 4096, heads: int = 8, dim: int = 32, samples: int = 16) -> None:
    """Exact causal-within-sample attention over one pack, fwd+bwd, three CPU methods."""
    rng = np.random.default_rng(1)
    cuts = np.sort(rng.choice(np.arange(1, total), samples - 1, replace=False))
    cu = [0, *cuts.tolist(), total]
    q, k, v = (torch.randn(heads, total, dim, requires_grad=True) for _ in range(3))

    lengths = np.diff(cu).tolist()

    def loop() -> None:
        parts = zip(*(torch.split(t, lengths, dim=1) for t in (q, k, v)), strict=True)
        torch.cat(
            [
                F.scaled_dot_product_attention(a[None], b[None], c[None], is_causal=True)[0]
                for a, b, c in parts
            ],
            1,
        ).sum().backward()

    seg = torch.repeat_interleave(torch.arange(samples), torch.tensor(np.diff(cu)))
    idx = torch.arange(total)
    mask = (seg[:, None] == seg[None, :]) & (idx[None, :] <= idx[:, None])

    def block_diagonal() -> None:
        F.scaled_dot_product_attention(q, k, v, attn_mask=mask).sum().backward()

    width = int(np.diff(cu).max())

    def unpack_pad() -> None:
        def pad(t: torch.Tensor) -> torch.Tensor:
            return torch.stack(
                [F.pad(t[:, a:b], (0, 0, 0, width - (b - a))) for a, b in zip(cu[:-1], cu[1:], strict=True)]
            )

        out = F.scaled_dot_product_attention(pad(q), pad(k), pad(v), is_causal=True)
        torch.cat(
            [out[i, :, : b - a] for i, (a, b) in enumerate(zip(cu[:-1], cu[1:], strict=True))], dim=1
        ).sum().backward()

    print(
        f"\n## Attention methods, one pack of {total:,} tokens, {samples} samples, {heads} heads x {dim}, fwd+bwd, CPU"
    )
    print("| method | ms |")
    print("|---|---|")
    for name, fn in (("per-sample SDPA loop (packcfg)", loop), ("unpack to padded, one SDPA", unpack_pad),
                     ("one SDPA, block-diagonal mask", block_diagonal)):  # fmt: skip
        print(f"| {name} | {timed(fn, repeat=3) * 1e3:.0f} |")


def gpu_attention_profile(
    packs: int = 8, pack: int = 4096, heads: int = 32, groups: int = 8, dim: int = 64
) -> None:
    """One layer's attention, fwd+bwd, bf16, on packs of a realistic length mix: each method that runs."""
    from megatron.core.transformer.enums import AttnMaskType
    from megatron.core.transformer.transformer_config import TransformerConfig

    from packcfg.train import varlen
    from packcfg.train.attention import PackedCoreAttention

    config = TransformerConfig(
        num_layers=1, hidden_size=heads * dim, num_attention_heads=heads, num_query_groups=groups,
        kv_channels=dim, attention_dropout=0.0, masked_softmax_fusion=False, apply_rope_fusion=False,
    )  # fmt: skip
    rng = np.random.default_rng(0)
    lengths = length_mix("realistic", 64 * packs, pack, rng)
    bins = plan(lengths, pack, algorithm="bfd").bins
    bins = [bins[i] for i in rng.permutation(len(bins))[:packs]]  # BFD fills its first packs with the longest
    samples = make_samples(lengths, 1000, rng)
    thd = [to_device(pack_thd([samples[i] for i in b]), DEVICE) for b in bins]
    members = [int(lengths[i]) for b in bins for i in b]

    def qkv(n: int, shape: tuple[int, ...] = ()) -> list[torch.Tensor]:
        return [
            torch.randn(*shape, n, h, dim, device=DEVICE, dtype=torch.bfloat16, requires_grad=True)
            for h in (heads, groups, groups)
        ]

    def thd_method(method: str) -> Callable[[], None]:
        attention = PackedCoreAttention(config, 1, AttnMaskType.causal, "self", method=method)
        inputs = [qkv(b.padded_tokens) for b in thd]

        def run() -> None:
            for (q, k, v), b in zip(inputs, thd, strict=True):
                attention(q, k, v, None, packed_seq_params=b.thd).sum().backward()

        return run

    # the same samples, length-grouped into padded micro-batches of 4 ([s, b, h, d])
    order = sorted(members)
    groups_ = [order[i : i + 4] for i in range(0, len(order), 4)]
    padded_inputs = [qkv(max(g), (len(g),)) for g in groups_]
    padded_attention = PackedCoreAttention(config, 1, AttnMaskType.causal, "self")

    def padded() -> None:
        for q, k, v in padded_inputs:
            q, k, v = (t.transpose(0, 1) for t in (q, k, v))  # [s, b, h, d]
            padded_attention(q, k, v, None).sum().backward()

    padded_tokens = sum(len(g) * max(g) for g in groups_)
    print(
        f"\n## Attention, one layer fwd+bwd, bf16, {heads}/{groups} heads x {dim}, {len(thd)} packs of {pack:,} "
        f"holding {len(members)} samples ({sum(members):,} real tokens), {torch.cuda.get_device_name()}"
    )
    print("| method | ms | calls per layer and pack |")
    print("|---|---|---|")
    runs = [("per-sample SDPA loop (sdpa_loop)", thd_method("sdpa_loop"), "one per distinct length")]
    runs += [
        (f"{varlen.DESCRIPTIONS[m]} ({m})", thd_method(m), "1")
        for m in varlen.FUSED_METHODS
        if varlen.available(m)
    ]
    runs.append(
        (
            f"length-grouped padded SDPA, MBS 4 ({1 - sum(members) / padded_tokens:.0%} padding)",
            padded,
            "1 per micro-batch",
        )
    )
    for name, fn, calls in runs:
        print(f"| {name} | {timed(fn, repeat=5) * 1e3:.1f} | {calls} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", choices=sorted(PRESETS), default=None, help="tiny on CPU, 1b on CUDA")
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    parser.add_argument("--samples", type=int, default=None, help="default: 96 (tiny), 160 (1b)")
    parser.add_argument("--seq-length", type=int, default=None, help="default: 1024 (tiny), 4096 (1b)")
    parser.add_argument("--micro-batch-size", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--mixes", nargs="+", choices=["realistic", "uniform"], default=["realistic", "uniform"]
    )
    parser.add_argument(
        "--profiles", action=argparse.BooleanOptionalAction, default=True, help="RoPE/attention tables"
    )
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument(
        "--adamw",
        choices=["auto", "fused", "single"],
        default="auto",
        help="AdamW kernel: auto (the executor's: fused on CUDA), fused, or single-tensor (the baseline)",
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="CUDA: GPU time by kind of kernel, one step per layout (first mix)",
    )
    parser.add_argument("--wall", action="store_true", help="time wall-clock instead of process CPU time")
    args = parser.parse_args()
    global CLOCK, DEVICE
    cuda = torch.cuda.is_available() if args.device == "auto" else args.device == "cuda"
    if cuda and not torch.cuda.is_available():
        parser.error("--device cuda: CUDA is not available here")
    DEVICE = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
    args.preset = args.preset or ("1b" if cuda else "tiny")
    big = args.preset == "1b"
    args.samples = args.samples or (160 if big else 96)
    args.seq_length = args.seq_length or (4096 if big else 1024)
    CLOCK = time.perf_counter if (args.wall or cuda) else time.process_time
    torch.set_num_threads(args.threads)
    shape = PRESETS[args.preset]
    print(
        f"torch {torch.__version__}, {'CUDA ' + torch.cuda.get_device_name() if cuda else 'CPU'}, "
        f"{torch.get_num_threads()} thread(s), {'wall-clock' if CLOCK is time.perf_counter else 'process CPU'} time; "
        f"{args.preset}: {shape['num_layers']} layers x {shape['hidden_size']}, GQA {shape['num_attention_heads']}/"
        f"{shape['num_query_groups']}, vocab {shape['vocab_size']}, {'bf16' if shape['bf16'] else 'fp32'}, "
        f"seq_length {args.seq_length}"
    )
    with distributed():
        trainer = Trainer(TrainSettings.from_config(bench_config(args.preset, args.seq_length)), args.adamw)
        for rows in throughput_tables(args, trainer):
            print_throughput(rows, args)
        optimizer_table(trainer)
        del trainer
        if args.profiles:
            if cuda:
                gpu_attention_profile()
            else:
                rope_profile()
                attention_profile()


if __name__ == "__main__":
    main()
