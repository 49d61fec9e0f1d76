"""`packcfg demo [CONFIG]`: lint, analyze, pack, train packed and padded on the tiny CPU recipe, then a summary.

Standard-library imports only at top level: building the CLI parser must not import torch.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from packcfg.core.cli_args import add_merge_arguments, add_out_argument, warn_deprecated

DESCRIPTION = (
    "Run the whole packed pipeline on the embedded tiny CPU recipe (or CONFIG, with -c files and overrides "
    "merged over it as in every command): lint, analyze, pack, train packed, train the same samples padded, "
    "then print a summary and write summary.json, summary.md and demo.svg (loss curves, pack fill, "
    "throughput) into --out DIR. The folder is replaced only when the run completes; an existing folder that "
    "is not a previous demo output is refused."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", nargs="?", metavar="CONFIG", help="experiment YAML (default: the tiny CPU recipe)")  # fmt: skip
    add_merge_arguments(parser)
    add_out_argument(
        parser, "--output-dir", dest="output_dir", type=Path, default=Path("runs/demo"),
        help="the folder everything goes into (default runs/demo)",
    )  # fmt: skip
    parser.add_argument("--train-iters", type=int, metavar="N", help="optimizer steps per run (default 8; 4 with --quick)")  # fmt: skip
    parser.add_argument("--quick", action="store_true", help="a short run (4 steps per run) to try it out")
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        metavar="N",
        help="torch CPU threads for training (default 1: more threads on a busy machine is much slower)",
    )


def config_arguments(args: argparse.Namespace) -> tuple[Path | None, list[Path], list[str]]:
    """CONFIG, the -c files and the overrides. `demo -c RECIPE` without CONFIG is the old spelling of
    `demo RECIPE` (warned); a first word that is an override, not a file, is an override of the default recipe."""
    config, files, overrides = args.config, list(args.config_files), list(args.overrides)
    if config is not None and not os.path.lexists(config):
        from packcfg.core.overrides import looks_like_override

        if looks_like_override(config):
            config, overrides = None, [config, *overrides]
    if config is None and files:
        warn_deprecated(
            "`demo -c RECIPE` for the demo's recipe",
            "`packcfg demo RECIPE` (-c FILE adds a file merged over the config, as in every command)",
        )
        config, files = files[-1], files[:-1]  # the old -c took one recipe: the last one given
    return (Path(config) if config is not None else None), [Path(f) for f in files], overrides


def run(args: argparse.Namespace) -> int:
    from packcfg.demo import DemoError, DemoOptions, LintBlocked, run_demo

    config, files, overrides = config_arguments(args)
    options = DemoOptions(
        output_dir=args.output_dir,
        config=config,
        config_files=files,
        overrides=overrides,
        train_iters=args.train_iters,
        quick=args.quick,
        threads=args.threads,
    )
    try:
        run_demo(options)
    except LintBlocked as exc:
        print(f"packcfg demo: {exc}", file=sys.stderr)
        return 1
    except DemoError as exc:
        print(f"packcfg demo: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"packcfg demo: interrupted; {args.output_dir} left as it was", file=sys.stderr)
        return 130
    return 0
