"""Packed vs padded training throughput on CPU, for the same real tokens (issue 4's speed table).

    python bench/train.py [--samples 96] [--seq-length 1024] [--rounds 2] [--threads 1]

Trains one pass over the same samples several ways with the executor's own pieces (model, batches,
forward/backward, AdamW): offline packed (THD, packs planned by packcfg.packing.plan); padded with a
length-grouped sampler (similar lengths share a micro-batch, about 90% real tokens: the strongest
padded baseline); padded to the longest sample of each micro-batch in data order; and padded to
seq_length (Bridge's pad_to_max_length, the worst case). Two length
mixes: a realistic one (log-normal, most samples far shorter than seq_length) and a uniform one (every
sample the same length: nothing to remove, so packed must simply not be slower).

Then two profiles: THD RoPE time as the number of samples in a pack grows (packcfg's gather vs
megatron's unfused per-sample loop), and the CPU attention methods for one pack (per-sample SDPA loop,
one SDPA with a block-diagonal mask, unpack-to-padded SDPA). Prints tables; asserts nothing.

Times are this process's CPU time (`time.process_time`), best of `--rounds` interleaved rounds, with
one torch thread by default: development machines are shared, and wall-clock there measures the
neighbours' load as much as this code. `--wall` times wall-clock instead (use it on a quiet machine).
"""

from __future__ import annotations

import argparse
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass

warnings.filterwarnings("ignore")

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from packcfg.packing import plan  # noqa: E402
from packcfg.train.attention import Rope, RopeSpec, thd_positions  # noqa: E402
from packcfg.train.batches import MicroBatch, Sample, pack_thd, pad_batch  # noqa: E402
from packcfg.train.model import build_model  # noqa: E402
from packcfg.train.optim import build_optimizer  # noqa: E402
from packcfg.train.parallel import distributed  # noqa: E402
from packcfg.train.settings import TrainSettings  # noqa: E402
from packcfg.train.step import forward_backward  # noqa: E402


def bench_config(seq_length: int) -> dict:
    return {
        "model": {
            "num_layers": 4, "hidden_size": 256, "ffn_hidden_size": 768, "num_attention_heads": 8,
            "num_query_groups": 4, "kv_channels": 32, "seq_length": seq_length, "vocab_size": 4096,
            "transformer_impl": "local",
        },
        "train": {"train_iters": 1},
        "optimizer": {"lr": 1e-4},
    }  # fmt: skip


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


CLOCK: Callable[[], float] = time.process_time


def run_layout(model, optimizer, batches: list[MicroBatch]) -> float:
    """Seconds for one pass as one global batch: every micro-batch accumulated, one AdamW step (so
    each layout does the same optimizer work and differs only in how the tokens are laid out)."""
    t0 = CLOCK()
    optimizer.zero_grad(set_to_none=False)
    forward_backward(model, batches)
    optimizer.step()
    return CLOCK() - t0


def throughput_table(args: argparse.Namespace) -> list[Row]:
    rows = []
    settings = TrainSettings.from_config(bench_config(args.seq_length))
    model = build_model(settings.model, seed=0)
    optimizer = build_optimizer(model, settings.optim)
    for mix in args.mixes:
        rng = np.random.default_rng(0)
        lengths = length_mix(mix, args.samples, args.seq_length, rng)
        samples = make_samples(lengths, settings.model.vocab_size, rng)
        packs = plan(lengths, args.seq_length, algorithm="bfd").bins
        mbs = args.micro_batch_size
        layouts = {"packed (THD)": [pack_thd([samples[i] for i in b]) for b in packs]}
        grouped = length_grouped(lengths, mbs, rng)
        layouts[f"padded, length-grouped MBS {mbs}"] = [pad_batch([samples[i] for i in g]) for g in grouped]
        for size in (mbs, 2 * mbs):
            layouts[f"padded, longest in MBS {size}"] = [
                pad_batch(samples[i : i + size]) for i in range(0, len(samples), size)
            ]
        layouts[f"padded to seq_length, MBS {mbs}"] = [
            pad_batch(samples[i : i + mbs], pad_to=args.seq_length) for i in range(0, len(samples), mbs)
        ]
        for batches in layouts.values():  # warm-up: allocator, first-call costs per shape, optimizer state
            run_layout(model, optimizer, batches[:1])
        best = dict.fromkeys(layouts, float("inf"))
        for _ in range(args.rounds):  # interleaved, so a burst of load hits every layout alike
            for name, batches in layouts.items():
                best[name] = min(best[name], run_layout(model, optimizer, batches))
        for name, batches in layouts.items():
            real = sum(b.real_tokens for b in batches)
            computed = sum(b.padded_tokens for b in batches)
            rows.append(Row(mix, name, len(batches), real, computed, best[name]))
    return rows


def print_throughput(rows: list[Row]) -> None:
    print("\n## Packed vs padded, same samples, one pass as one global batch (fwd+bwd, one AdamW step), CPU")
    print(
        "| length mix | layout | micro-batches | real tokens | computed tokens | padding | CPU s | real tok/s "
        "| packed speedup vs this layout |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        packed = next(r for r in rows if r.mix == row.mix and r.layout.startswith("packed"))
        print(
            f"| {row.mix} | {row.layout} | {row.micro_batches} | {row.real:,} | {row.computed:,} | "
            f"{1 - row.real / row.computed:.0%} | {row.seconds:.2f} | {row.real / row.seconds:,.0f} | "
            f"{row.seconds / packed.seconds:.2f}x |"
        )
    for mix in dict.fromkeys(r.mix for r in rows):
        mine = [r for r in rows if r.mix == mix]
        packed = next(r for r in mine if r.layout.startswith("packed"))
        grouped = next(r for r in mine if "length-grouped" in r.layout)
        full = next(r for r in mine if "seq_length" in r.layout)
        print(
            f"\n{mix}: packed {grouped.seconds / packed.seconds:.2f}x the real tokens/s of length-grouped "
            f"padding ({1 - grouped.real / grouped.computed:.0%} padding), {full.seconds / packed.seconds:.2f}x "
            f"that of padding to seq_length ({1 - full.real / full.computed:.0%} padding)"
        )


def timed(fn: Callable[[], object], repeat: int = 5) -> float:
    """Best of `repeat` calls after one warm-up."""
    fn()
    best = float("inf")
    for _ in range(repeat):
        t0 = CLOCK()
        fn()
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=96)
    parser.add_argument("--seq-length", type=int, default=1024)
    parser.add_argument("--micro-batch-size", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--mixes", nargs="+", choices=["realistic", "uniform"], default=["realistic", "uniform"]
    )
    parser.add_argument(
        "--profiles", action=argparse.BooleanOptionalAction, default=True, help="RoPE/attention tables"
    )
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--wall", action="store_true", help="time wall-clock instead of process CPU time")
    args = parser.parse_args()
    global CLOCK
    CLOCK = time.perf_counter if args.wall else time.process_time
    torch.set_num_threads(args.threads)
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} thread(s), {'wall-clock' if args.wall else 'process CPU'} "
        f"time; model 4 layers x 256 hidden, GQA 8/4 heads, seq_length {args.seq_length}"
    )
    with distributed():
        print_throughput(throughput_table(args))
        if args.profiles:
            rope_profile()
            attention_profile()


if __name__ == "__main__":
    main()
