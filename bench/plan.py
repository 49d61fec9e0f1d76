"""`packcfg plan`'s throughput model against the executor's measured throughput, on this machine.

    python bench/plan.py [--steps 12] [--warmup 4] [--threads 1] [--only NAME ...]
    python bench/plan.py --memory          # on one CUDA GPU: estimated vs measured peak memory

For each configuration of the tiny recipes: `packcfg train CONFIG --out TMP` (the real executor, one
process) run for WARMUP and for WARMUP + STEPS steps; the difference of their CPU times over STEPS is the
measured step time (start-up, packing, model build and warm-up cancel) -> measured real tokens/s; and the
plan's estimate for the same layout (TP 1, CP 1, PP 1, DP 1, the config's pack size and global batch),
with the device's peak set to the matmul rate this CPU reaches *at the model's own GEMM shapes* (measured
here with torch.mm, one pack of tokens through every projection and the output layer) and MFU 1.0: what
the step would take if it ran only the model's FLOPs at that rate. The ratio measured/estimate is the share
of the step the FLOP model explains; the rest is what a CPU step spends outside matmuls (elementwise ops,
the per-sample attention loop, the optimizer, Python). Prints a table; asserts nothing.

`--memory` (CUDA only): the executor trains three shapes for 3 steps in this process (TP 1, one GPU,
bf16), and the plan's per-GPU memory estimate for the same layout is printed beside
`torch.cuda.max_memory_allocated()`.

Timing is CPU time (the child processes' user + system time, `--threads` torch threads), not wall-clock:
development machines are shared, and wall-clock measures the neighbours.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from dataclasses import replace
from pathlib import Path

warnings.filterwarnings("ignore")
REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from packcfg.core.config import load_config  # noqa: E402
from packcfg.plan.estimate import Hardware, Layout, estimate, step_flops  # noqa: E402
from packcfg.plan.search import Profiles, precision_of, sample_lengths  # noqa: E402
from packcfg.plan.shape import ModelShape, shape_from_config  # noqa: E402

WIDE = [  # the bench/train.py `tiny` preset's shape: 4 layers x 256, GQA 8/4 x 32, FFN 768, vocab 2048
    "model.num_layers=4", "model.hidden_size=256", "model.ffn_hidden_size=768",
    "model.num_attention_heads=8", "model.num_query_groups=4", "model.kv_channels=32",
]  # fmt: skip
PACK_1024 = [
    "model.seq_length=1024", "dataset.seq_length=1024",
    "dataset.offline_packing_specs.packed_sequence_size=1024", "train.global_batch_size=4",
]  # fmt: skip
CASES: dict[str, tuple[str, list[str]]] = {
    "sft 2x64 pack 512": ("recipes/tiny_cpu_sft.yaml", []),
    "sft 2x64 pack 1024": ("recipes/tiny_cpu_sft.yaml", PACK_1024),
    "sft 4x256 pack 512": ("recipes/tiny_cpu_sft.yaml", WIDE),
    "sft 4x256 pack 1024": ("recipes/tiny_cpu_sft.yaml", [*WIDE, *PACK_1024]),
    "dpo 2x64 pack 256": ("recipes/tiny_cpu_dpo.yaml", []),
}


def matmul_rate(shape: ModelShape, tokens: int, threads: int, repeats: int = 5) -> float:
    """FLOP/s of torch.mm (fp32) over one pack's forward GEMMs of this model, best of `repeats`."""
    import torch

    torch.set_num_threads(threads)
    h, f = shape.hidden_size, shape.ffn_hidden_size
    dims = [(h, shape.q_size + 2 * shape.kv_size), (shape.q_size, h), (h, 2 * f), (f, h)]
    mats = [(torch.randn(tokens, k), torch.randn(k, n)) for k, n in dims]
    head = (torch.randn(tokens, h), torch.randn(h, shape.vocab_size))
    flops = 2 * tokens * (shape.num_layers * sum(k * n for k, n in dims) + h * shape.vocab_size)
    best = float("inf")
    for _ in range(repeats):
        t = time.process_time()  # CPU time: the machine is shared
        for _layer in range(shape.num_layers):
            for a, b in mats:
                torch.mm(a, b)
        torch.mm(*head)
        best = min(best, (time.process_time() - t) / threads)
    return flops / best


def _train(config: str, overrides: list[str], steps: int, threads: int) -> tuple[float, list[dict]]:
    """CPU seconds of `packcfg train` for `steps` steps (the child's user + system time), and its metrics."""
    with tempfile.TemporaryDirectory(prefix="packcfg-bench-plan-") as tmp:
        env = {
            **os.environ,
            "OMP_NUM_THREADS": str(threads),
            "PYTHONPATH": str(REPO),
            "PYTHONWARNINGS": "ignore",
        }
        cmd = [
            sys.executable, "-m", "packcfg", "train", config, "--out", tmp, f"train.train_iters={steps}",
            f"checkpoint.save_interval={steps * 10}", *overrides,
        ]  # fmt: skip
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if proc.returncode:
            raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stderr[-2000:]}")
        lines = [json.loads(x) for x in (Path(tmp) / "metrics.jsonl").read_text().splitlines() if x.strip()]
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, lines


def measure(config: str, overrides: list[str], steps: int, warmup: int, threads: int) -> dict[str, float]:
    """Per-step CPU time as the difference of a `warmup`-step and a `warmup + steps`-step run (start-up,
    packing, model build and the first steps cancel out); CPU time, not wall-clock, because the machine is
    shared. Real tokens per step from the longer run's metrics."""
    short, _ = _train(config, overrides, warmup, threads)
    long, lines = _train(config, overrides, warmup + steps, threads)
    step = (long - short) / steps / threads
    real = statistics.mean(x["real_tokens"] for x in lines[warmup:])
    wall = statistics.median(x["step_time"] for x in lines[warmup:])
    return {"step_time": step, "tokens_per_s": real / step, "real_tokens": real, "wall_step_time": wall}


ONE_B = [  # a 1B-class Llama shape (Llama 3.2 1B: 16 x 2048, GQA 32/8 x 64, FFN 8192, vocab 128256), bf16
    "model.num_layers=16", "model.hidden_size=2048", "model.ffn_hidden_size=8192",
    "model.num_attention_heads=32", "model.num_query_groups=8", "model.kv_channels=64",
    "model.vocab_size=128256", "model.bf16=true", "optimizer.bf16=true", "++ddp.grad_reduce_in_fp32=true",
]  # fmt: skip


def _pack(size: int, gbs: int) -> list[str]:
    return [
        f"model.seq_length={size}", f"dataset.seq_length={size}",
        f"dataset.offline_packing_specs.packed_sequence_size={size}", f"train.global_batch_size={gbs}",
    ]  # fmt: skip


MEMORY_CASES: dict[str, list[str]] = {
    "4x256 fp32 pack 2048": [*WIDE, *_pack(2048, 4)],
    "1b bf16 pack 2048": [*ONE_B, *_pack(2048, 4)],
    "1b bf16 pack 8192": [*ONE_B, *_pack(8192, 2)],
}


def measure_memory() -> int:
    """Estimated vs measured peak GPU memory of the executor, one process, TP 1 (three shapes)."""
    import torch

    from packcfg.plan.estimate import GIB, Precision, memory
    from packcfg.train.loop import TrainOptions, train
    from packcfg.train.model import mlp_keeps_fc1_output_only
    from packcfg.train.settings import TrainSettings

    if not torch.cuda.is_available():
        print("bench/plan.py --memory needs a CUDA GPU", file=sys.stderr)
        return 2
    print(f"device: {torch.cuda.get_device_name()}")
    print(f"{'case':<24} {'estimate GiB':>12} {'measured GiB':>12} {'meas/est':>8}  parts (GiB)")
    for name, overrides in MEMORY_CASES.items():
        with tempfile.TemporaryDirectory(prefix="packcfg-bench-plan-") as tmp:
            cfg = load_config(
                [REPO / "recipes/tiny_cpu_sft.yaml"],
                [*overrides, "train.train_iters=3", "checkpoint.save_interval=0"],
            )
            # as the executor builds the model here: TE's fused SwiGLU or packcfg's (both keep fc1's output
            # only), megatron's unfused GLU where this megatron-core cannot take an activation module
            shape = shape_from_config(cfg)
            fused = mlp_keeps_fc1_output_only(TrainSettings.from_config(cfg).model)
            shape = replace(shape, fused_activation=fused)
            specs = cfg["dataset"]["offline_packing_specs"]
            layout = Layout(
                1, 1, 1, 1, int(specs["packed_sequence_size"]), 1, int(cfg["train"]["global_batch_size"])
            )
            prec = precision_of(cfg)
            # the executor: no distributed optimizer (torch AdamW on every rank)
            parts, _ = memory(shape, layout, Precision(prec.bf16, prec.grad_reduce_in_fp32, False))
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
            train(cfg, TrainOptions(output_dir=tmp, progress=False))
            peak = torch.cuda.max_memory_allocated()
        detail = ", ".join(f"{k} {v / GIB:.2f}" for k, v in parts.items() if k != "total")
        print(
            f"{name:<24} {parts['total'] / GIB:>12.2f} {peak / GIB:>12.2f} {peak / parts['total']:>8.2f}  {detail}",
            flush=True,
        )
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=12, help="steps measured (after the warm-up)")
    parser.add_argument("--warmup", type=int, default=4)
    parser.add_argument("--threads", type=int, default=1, help="torch threads in both (default 1)")
    parser.add_argument("--only", nargs="*", help="case names to run (default all)")
    parser.add_argument("--memory", action="store_true", help="CUDA: estimated vs measured peak memory")
    args = parser.parse_args(argv)
    if args.memory:
        return measure_memory()
    header = (
        f"{'case':<22} {'params':>8} {'GFLOP/step':>10} {'mm GFLOP/s':>10} {'est tok/s':>10} "
        f"{'meas tok/s':>10} {'meas/est':>8} {'est step s':>10} {'meas step s':>11}"
    )
    print(header)
    rows = []
    for name, (config, overrides) in CASES.items():
        if args.only and name not in args.only:
            continue
        cfg = load_config([REPO / config], overrides)
        shape = shape_from_config(cfg)
        specs = cfg["dataset"]["offline_packing_specs"]
        pack, mult = int(specs["packed_sequence_size"]), int(specs.get("pad_seq_to_mult") or 1)
        dpo = cfg.get("recipe", {}).get("mode") == "dpo"
        fixed = bool(cfg["dataset"].get("dataset_kwargs", {}).get("pad_to_max_length"))
        profile = Profiles(sample_lengths(cfg), dpo, int(cfg["dataset"].get("seed", 0)), fixed).get(
            pack, mult
        )
        gbs = int(cfg["train"]["global_batch_size"])
        rate = matmul_rate(shape, pack, args.threads)
        hw = Hardware(peak_tflops=rate / 1e12, mfu=1.0, gpus_per_node=1)
        layout = Layout(tp=1, cp=1, pp=1, dp=1, pack_size=pack, pad_seq_to_mult=mult, global_batch_size=gbs)
        est = estimate(shape, layout, profile, precision_of(cfg), hw, reference=dpo)
        got = measure(str(REPO / config), overrides, args.steps, args.warmup, args.threads)
        flops = step_flops(shape, profile, "none", dpo)[0] * gbs
        row = {
            "case": name,
            "params": shape.total_params(),
            "gflop_per_step": flops / 1e9,
            "matmul_gflops": rate / 1e9,
            "estimate_tokens_per_s": est.tokens_per_second,
            "measured_tokens_per_s": got["tokens_per_s"],
            "ratio": got["tokens_per_s"] / est.tokens_per_second,
            "estimate_step_s": est.step_seconds,
            "measured_step_s": got["step_time"],
        }
        rows.append(row)
        print(
            f"{name:<22} {row['params'] / 1e6:>7.2f}M {row['gflop_per_step']:>10.2f} {row['matmul_gflops']:>10.1f} "
            f"{row['estimate_tokens_per_s']:>10,.0f} {row['measured_tokens_per_s']:>10,.0f} {row['ratio']:>8.2f} "
            f"{row['estimate_step_s']:>10.3f} {row['measured_step_s']:>11.3f}",
            flush=True,
        )
    order_est = sorted(rows, key=lambda r: -r["estimate_tokens_per_s"])
    order_meas = sorted(rows, key=lambda r: -r["measured_tokens_per_s"])
    same = [r["case"] for r in order_est] == [r["case"] for r in order_meas]
    print(f"ranking by estimate {'matches' if same else 'differs from'} the measured ranking")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
