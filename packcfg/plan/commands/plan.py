"""`packcfg plan`: propose ranked TP/CP/PP/pack-size/batch/recomputation layouts for a config's model and data.

Exit codes: 0 proposals printed (or written with --apply), 1 no layout is feasible (one line names the
constraint that rules them out), 2 the tool could not run (bad arguments or config, unreadable data).
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable
from pathlib import Path

from packcfg.core.cli_args import add_merge_arguments

DESCRIPTION = (
    "Propose ranked parallelism and batch layouts (TP, CP, PP, SP, global batch, pack size, pad_seq_to_mult, "
    "recomputation) for an offline packed config: per-GPU memory by part, step time and real tokens/s from "
    "FLOPs (attention per sample inside each pack) and communication, packing efficiency from the data's real "
    "lengths. Every proposal passes `packcfg lint`. See docs/plan.md for the model and its assumptions. "
    "Exit 0 proposals, 1 no layout is feasible (one line says which constraint), 2 the tool could not run."
)

_UNITS = {"": 1, "b": 1, "kb": 1000, "mb": 1000**2, "gb": 1000**3, "tb": 1000**4,
          "kib": 1024, "mib": 1024**2, "gib": 1024**3, "tib": 1024**4}  # fmt: skip


def memory_size(text: str) -> int:
    """'80GiB', '80GB', '141 GiB' or bytes -> bytes (a bare number under 10000 is GiB)."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([kmgt]i?b|b)?\s*", text.lower())
    if not m:
        raise argparse.ArgumentTypeError(f"{text!r} is not a memory size (e.g. 80GiB, 141GB)")
    value, unit = float(m.group(1)), m.group(2) or ""
    if not unit and value < 10000:
        unit = "gib"
    size = int(value * _UNITS[unit])
    if size <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: must be > 0")
    return size


def _positive(kind: Callable[[str], float]) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if value <= 0:
            raise argparse.ArgumentTypeError(f"{text!r}: must be > 0")
        return value

    return parse


def _int_list(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of integers") from None
    if not values or any(v <= 0 for v in values):
        raise argparse.ArgumentTypeError(f"{text!r}: give positive integers, e.g. 1,2,4")
    return values


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"{text!r}: must be in (0, 1]")
    return value


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("input", nargs="?", help="experiment YAML (default: the tiny CPU recipe)")
    add_merge_arguments(p)
    g = p.add_argument_group("the job")
    g.add_argument(
        "--gpus", metavar="N", type=_positive(int), help="GPUs in all (default: launch.nodes x gpus_per_node)"
    )
    g.add_argument(
        "--gpus-per-node",
        metavar="G",
        type=_positive(int),
        help="GPUs per node (default: launch.gpus_per_node)",
    )
    g.add_argument(
        "--gpu-memory",
        metavar="SIZE",
        type=memory_size,
        default="80GiB",
        help="memory per GPU (default 80GiB)",
    )
    g.add_argument(
        "--data",
        metavar="FILE",
        type=Path,
        help="training data to read lengths from (default: dataset.dataset_root)",
    )
    s = p.add_argument_group("the search (default: every valid value)")
    s.add_argument(
        "--tp", metavar="LIST", type=_int_list, help="tensor-parallel sizes to consider, e.g. 1,2,4"
    )
    s.add_argument("--cp", metavar="LIST", type=_int_list, help="context-parallel sizes to consider")
    s.add_argument("--pp", metavar="LIST", type=_int_list, help="pipeline-parallel sizes to consider")
    s.add_argument("--pack-sizes", metavar="LIST", type=_int_list, help="pack sizes (default: powers of two from the "
                   "longest sample to twice the config's packed_sequence_size, and that size)")  # fmt: skip
    s.add_argument(
        "--recompute", choices=("none", "full", "both"), default="both", help="recomputation (default both)"
    )
    s.add_argument("--samples-per-step", metavar="N", type=_positive(float), help="samples per optimizer step to keep "
                   "(default: the config's global batch of packs x its samples per pack)")  # fmt: skip
    s.add_argument(
        "--top", metavar="N", type=_positive(int), default=10, help="proposals to show (default 10)"
    )
    a = p.add_argument_group("assumptions (printed with the table)")
    a.add_argument("--peak-tflops", metavar="T", type=_positive(float), help="peak TFLOP/s per GPU (default 989: H100 "
                   "SXM dense bf16; 67 for fp32 configs)")  # fmt: skip
    a.add_argument(
        "--mfu", metavar="F", type=_fraction, default=0.45, help="fraction of peak reached (default 0.45)"
    )
    a.add_argument(
        "--headroom", metavar="F", type=_fraction, default=0.10, help="memory kept free (default 0.10)"
    )
    a.add_argument(
        "--intra-node-bw",
        metavar="GBPS",
        type=_positive(float),
        default=360.0,
        help="GB/s inside a node (360)",
    )
    a.add_argument(
        "--inter-node-bw",
        metavar="GBPS",
        type=_positive(float),
        default=40.0,
        help="GB/s per GPU across nodes (40)",
    )
    o = p.add_argument_group("output")
    o.add_argument(
        "--format", choices=("table", "json"), default="table", help="output format (default table)"
    )
    o.add_argument("--apply", type=_positive(int), metavar="N", help="write proposal N as an override YAML")
    o.add_argument("--output", type=Path, metavar="FILE",
                   help="where --apply writes (default: ./CONFIG_STEM.planN.yaml)")  # fmt: skip
    o.add_argument("--force", action="store_true", help="let --apply replace an existing file")


def run(args: argparse.Namespace) -> int:
    from packcfg.core.atomic import OutputRefused
    from packcfg.plan.shape import PlanError

    try:
        return _run(args)
    except (PlanError, OutputRefused) as exc:
        print(f"packcfg plan: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        raise  # the CLI's: output cut short by `| head` is not an error
    except OSError as exc:
        where = f"{exc.filename}: " if getattr(exc, "filename", None) else ""
        print(f"packcfg plan: error: {where}{exc.strerror or exc}", file=sys.stderr)
        return 2


def _run(args: argparse.Namespace) -> int:
    from packcfg.plan.estimate import Hardware
    from packcfg.plan.report import format_table, override_yaml, to_json
    from packcfg.plan.search import Request, plan_config
    from packcfg.plan.shape import PlanError
    from packcfg.resources import tiny_recipe

    config = Path(args.input) if args.input else tiny_recipe()
    if not config.is_file():
        raise PlanError(f"{config}: no such config file")
    files = [config, *map(Path, args.config_files)]
    if args.data is not None and not args.data.exists():
        raise PlanError(f"--data {args.data}: no such file or folder")
    if args.output is not None and args.apply is None:
        raise PlanError("--output names the file --apply N writes; give --apply N")
    peak = args.peak_tflops
    if peak is None:
        from packcfg.core.config import ConfigError, load_config
        from packcfg.plan.search import precision_of

        try:
            peak = 989.0 if precision_of(load_config(files, args.overrides)).bf16 else 67.0
        except ConfigError as exc:
            raise PlanError(str(exc)) from None
    recompute = ("none", "full") if args.recompute == "both" else (args.recompute,)
    request = Request(
        gpus=args.gpus,
        gpus_per_node=args.gpus_per_node,
        hardware=Hardware(
            gpu_memory_bytes=args.gpu_memory,
            headroom=args.headroom,
            peak_tflops=peak,
            mfu=args.mfu,
            intra_node_gbps=args.intra_node_bw,
            inter_node_gbps=args.inter_node_bw,
        ),
        pack_sizes=args.pack_sizes,
        tp=args.tp,
        cp=args.cp,
        pp=args.pp,
        recompute=recompute,
        samples_per_step=args.samples_per_step,
        top=args.top,
        data=args.data,
    )
    result = plan_config(files, args.overrides, request)
    if result.infeasible:
        if args.format == "json":
            print(to_json(result))
        print(f"packcfg plan: no proposal: {result.infeasible}", file=sys.stderr)
        return 1
    if args.apply is not None:
        if args.apply > len(result.proposals):
            raise PlanError(f"--apply {args.apply}: the plan has {len(result.proposals)} proposal(s)")
        from packcfg.core.atomic import atomic_write_text

        out = args.output or Path(f"{config.stem}.plan{args.apply}.yaml")
        text = override_yaml(result.proposals[args.apply - 1], str(config), args.overrides)
        # never over an input; an existing file only with --force
        atomic_write_text(
            out, text, inputs=files, force=args.force, may_replace=lambda _p: False, what="--apply"
        )
        print(
            f"wrote {out} (proposal {args.apply}); check it: packcfg lint {config} -c {out}", file=sys.stderr
        )
    print(to_json(result) if args.format == "json" else format_table(result))
    return 0
