"""`packcfg analyze`: plan packs for a dataset and report what packing buys, without writing packs."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from packcfg.packing.commands._common import add_plan_arguments, resolve_settings, run_guarded

DESCRIPTION = (
    "Plan packs for a dataset (an experiment YAML, or a data file with --capacity) and report: packs vs the "
    "lower bound, efficiency, padding split into pack-tail and alignment waste, samples per pack, oversize "
    "counts, the packed global batch size and whether packing is worth it. Writes no packs."
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_plan_arguments(p)
    p.add_argument(
        "--format", choices=("table", "json"), default="table", help="output format (default table)"
    )
    p.add_argument(
        "--plot", type=Path, metavar="FILE.svg", help="write the length and pack-fill histograms as SVG"
    )
    p.add_argument(
        "--gbs", type=int, help="unpacked global batch size to advise on (default: train.global_batch_size)"
    )
    p.add_argument("--compare", action="store_true", help="plan with every algorithm and compare them")


def run(args: argparse.Namespace) -> int:
    return run_guarded("analyze", lambda: _run(args))


def _run(args: argparse.Namespace) -> int:
    from packcfg.packing.api import detect_format, make_plan, spool, unpacked_global_batch_size
    from packcfg.packing.errors import PackingError
    from packcfg.packing.planner import ALGORITHMS
    from packcfg.packing.report import format_comparison, format_table, stats_rows, to_json, write_plot
    from packcfg.packing.sources import TOKENIZED_FORMATS, tokenizer_inputs

    settings, config = resolve_settings(args, need_output=False)
    inputs = [settings.source, *tokenizer_inputs(settings.tokenizer)]
    if config is not None:
        inputs += [Path(args.input), *map(Path, args.config_files)]
    if args.plot is not None:  # refused before any work: never over an input, a special file or a link
        from packcfg.core.atomic import check_output

        check_output(args.plot, inputs=inputs, what="--plot")
        if args.plot.suffix.lower() != ".svg":
            raise PackingError(
                f"--plot {args.plot}: packcfg draws its charts as SVG; name the file "
                f"{args.plot.with_suffix('.svg')}"
            )
    gbs = args.gbs
    if gbs is None and config is not None:
        gbs = unpacked_global_batch_size(config)
    if gbs is not None and gbs <= 0:
        raise PackingError(f"--gbs must be > 0, got {gbs}")
    fmt = detect_format(settings.source)
    sp = spool(settings.source, settings.tokenizer if fmt in TOKENIZED_FORMATS else None)
    if args.compare:
        all_stats, times = [], []
        for algo in ALGORITHMS:
            settings.algorithm = algo
            t = time.perf_counter()
            p = make_plan(sp, settings, gbs)
            times.append(time.perf_counter() - t)
            all_stats.append(p.stats)
        print(to_json(all_stats) if args.format == "json" else format_comparison(all_stats, times))
        return 0
    p = make_plan(sp, settings, gbs)
    stats = dict(p.stats, source=str(settings.source))
    packed_gbs = _get_packed_gbs(config) if args.gbs is None else None
    # the config already packs: say what its GBS means instead of dividing it again
    if packed_gbs is not None:
        stats["advice"] = dict(
            stats["advice"],
            config_packed_global_batch_size=packed_gbs,
            samples_per_step=round(packed_gbs * stats["packing_factor"], 1),
        )
    if args.plot is not None:
        write_plot(
            args.plot, sp.runtime_lengths(), p, f"packcfg analyze: {settings.source.name}", inputs=inputs
        )
        stats["plot"] = str(args.plot)
    if args.format == "json":
        print(to_json(stats))
    else:
        print(f"source: {settings.source}")
        print(format_table(stats_rows(stats)))
        if args.plot is not None:
            print(f"wrote {args.plot}")
    return 0


def _get_packed_gbs(config: dict | None) -> int | None:
    from packcfg.packing.api import config_is_packed

    if config is None or not config_is_packed(config):
        return None
    value = (config.get("train") or {}).get("global_batch_size")
    return value if type(value) is int and value > 0 else None
