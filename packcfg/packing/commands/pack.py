"""`packcfg pack`: pack a tokenized dataset into Megatron Bridge's packed Parquet plus metadata JSON."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from packcfg.packing.commands._common import add_plan_arguments, resolve_settings, run_guarded

DESCRIPTION = (
    "Pack samples into Bridge's packed Parquet (one row per pack: input_ids, loss_mask, seq_start_id) and "
    "write the metadata JSON. With an experiment YAML, reads packed_sequence_size, pad_seq_to_mult, seed, "
    "dataset_root/training.jsonl, the tokenizer and the output paths from it. Re-running with the same "
    "inputs and settings does nothing unless --force."
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_plan_arguments(p)
    p.add_argument(
        "--out",
        dest="out_dir",
        type=Path,
        metavar="DIR",
        action=_OutFolder,
        help="folder for the packed Parquet and the metadata JSON, under the names the config gives them "
        "(INPUT.packed.parquet for a data file)",
    )
    p.add_argument(
        "--parquet",
        type=Path,
        metavar="FILE",
        help="the packed Parquet file itself (default: from the config, or INPUT.packed.parquet)",
    )
    p.add_argument(
        "--metadata", type=Path, metavar="FILE", help="metadata JSON path (default: from the config)"
    )
    p.add_argument(
        "--pad-id", type=int, help="pad token for pad_seq_to_mult (default: the tokenizer's EOS, else 0)"
    )
    p.add_argument(
        "--force",
        action="store_true",
        help="repack even if the output is up to date, and replace a packed file packcfg did not write",
    )
    p.add_argument(
        "--bridge-npy",
        type=Path,
        metavar="PATH",
        help="also write the training packs as Megatron Bridge 0.3.1's .npy at PATH (0.3.1 reads packed "
        "data only as .npy; Parquet from 0.4.0 on), also when the Parquet is up to date",
    )
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar and no summary")


class _OutFolder(argparse.Action):
    """`--out DIR`; `--out FILE.parquet` is the old spelling of `--parquet FILE.parquet` (warned)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any, option_string: str | None = None) -> None:  # fmt: skip
        if Path(values).suffix.lower() in (".parquet", ".pq"):
            from packcfg.core.cli_args import warn_deprecated

            warn_deprecated(
                "`pack --out FILE.parquet`", "`--parquet FILE.parquet` (--out is always a folder)"
            )
            namespace.parquet = values
            return
        setattr(namespace, self.dest, values)


def run(args: argparse.Namespace) -> int:
    return run_guarded("pack", lambda: _run(args))


def _run(args: argparse.Namespace) -> int:
    from packcfg.core.atomic import exit_on_signals
    from packcfg.packing.api import pack_dataset

    settings, config = resolve_settings(args, need_output=True)
    inputs = [Path(args.input), *map(Path, args.config_files)] if config is not None else []
    from packcfg.packing.sources import tokenizer_inputs

    npy_inputs = (settings.source, *tokenizer_inputs(settings.tokenizer), settings.metadata, *inputs)
    if args.bridge_npy is not None:  # refused before any packing, not after
        from packcfg.packing.writer import check_bridge_npy_output

        check_bridge_npy_output(Path(args.bridge_npy), settings.output, inputs=npy_inputs, force=args.force)
    # SIGTERM/SIGINT unwind through every cleanup (temporary file, spool folder): exit 143/130
    with exit_on_signals():
        result = pack_dataset(settings, force=args.force, progress=not args.quiet, inputs=inputs)
    if not args.quiet:
        m = result.metadata
        if result.created:
            print(
                f"packed {m['samples_packed']:,} samples into {m['packs']:,} packs of {m['pack_size']} "
                f"(lower bound {m['lower_bound']:,}, efficiency {m['packing_efficiency']:.2f}%, "
                f"{m['packing_factor']:.2f} samples/pack, {m['algorithm']})"
            )
            print(f"wrote {result.train_path}")
            print(f"wrote {result.metadata_path}")
        else:
            print(
                f"up to date: {result.train_path} ({m['packs']:,} packs); use --force to repack",
                file=sys.stdout,
            )
    if args.bridge_npy is not None:
        from packcfg.packing.writer import write_bridge_npy

        with exit_on_signals():
            write_bridge_npy(result.train_path, Path(args.bridge_npy), force=args.force, inputs=npy_inputs)
        if not args.quiet:
            print(f"wrote {args.bridge_npy} (Megatron Bridge 0.3.1 .npy)")
    return 0
