"""`packcfg demo`: lint, analyze, pack, train packed and padded on the tiny CPU recipe, then a summary.

Standard-library imports only at top level: building the CLI parser must not import torch.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

DESCRIPTION = (
    "Run the whole packed pipeline on the embedded tiny CPU recipe (or --config): lint, analyze, pack, "
    "train packed, train the same samples padded, then print a summary and write summary.json, summary.md "
    "and demo.png (loss curves, pack fill) into --output-dir. The directory is replaced only when the run "
    "completes; an existing directory that is not a previous demo output is refused."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--out", "--output-dir", dest="output_dir", type=Path, default=Path("runs/demo"), metavar="DIR",
        help="where everything goes (default runs/demo)",
    )  # fmt: skip
    parser.add_argument("-c", "--config", type=Path, metavar="RECIPE", help="experiment YAML (default: the tiny CPU recipe)")  # fmt: skip
    parser.add_argument("--train-iters", type=int, metavar="N", help="optimizer steps per run (default 8; 4 with --quick)")  # fmt: skip
    parser.add_argument("--quick", action="store_true", help="a short run (4 steps per run) to try it out")
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        metavar="N",
        help="torch CPU threads for training (default 1: more threads on a busy machine is much slower)",
    )


def run(args: argparse.Namespace) -> int:
    from packcfg.demo import DemoError, DemoOptions, LintBlocked, run_demo

    options = DemoOptions(
        output_dir=args.output_dir,
        config=args.config,
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
