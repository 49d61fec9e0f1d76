"""`packcfg verify`: check a packed Parquet file, and against its source that every sample is there once."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from packcfg.core.cli_args import add_merge_arguments
from packcfg.packing.commands._common import (
    CONFIG_SUFFIXES,
    reject_config_arguments,
    reject_stray_words,
    run_guarded,
)

DESCRIPTION = (
    "Check a packed Parquet file: loss_mask as long as input_ids and label-aligned, seq_start_id from 0, "
    "increasing and inside the row, token ids not negative, each pack within pack_size (from the metadata); "
    "row and sample counts and the samples digest against the metadata (a sample dropped, duplicated or "
    "altered after packing is found without the source). With --source, also that every source sample "
    "appears exactly once with its tokens and loss mask intact. Exit 0 ok, 1 violations, 2 unreadable "
    "input. An experiment YAML stands for its packed file, metadata and source."
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("packed", type=Path, help="packed Parquet file (or an experiment YAML)")
    add_merge_arguments(p)  # -c FILE, KEY=VALUE overrides, --recipe: for an experiment YAML
    p.add_argument(
        "--source", type=Path, help="the data it was packed from (JSONL/Parquet of ids, or SFT text)"
    )
    p.add_argument(
        "--metadata",
        type=Path,
        help="metadata JSON (default: X.metadata.json, metadata.json or Bridge's <size>_metadata.jsonl "
        "beside the file X, else the entry pack stores in the file itself)",
    )
    p.add_argument(
        "--tokenizer", type=Path, help="tokenizer.json for SFT text sources (default: from metadata)"
    )
    p.add_argument("--capacity", type=int, help="pack size to check against (default: pack_size in metadata)")
    p.add_argument("--max-errors", type=int, default=20, help="violations to print (default 20)")
    p.add_argument("-q", "--quiet", action="store_true", help="print violations only")


def run(args: argparse.Namespace) -> int:
    return run_guarded("verify", lambda: _run(args))


def _run(args: argparse.Namespace) -> int:
    from packcfg.packing.errors import PackingError
    from packcfg.packing.verify import verify_packed

    packed, metadata, source, tokenizer = args.packed, args.metadata, args.source, args.tokenizer
    if packed.suffix.lower() in CONFIG_SUFFIXES:
        from packcfg.core.config import ConfigError, load_config
        from packcfg.packing.api import settings_from_config

        reject_stray_words(args, None)
        try:
            settings = settings_from_config(load_config([packed, *args.config_files], args.overrides))
        except ConfigError as exc:
            raise PackingError(str(exc)) from None
        packed, metadata = settings.output, metadata or settings.metadata
        source = source or settings.source
        tokenizer = tokenizer or settings.tokenizer
    else:
        reject_config_arguments(args, packed, "a packed file")
    if args.capacity is not None and args.capacity <= 0:
        raise PackingError(f"--capacity must be > 0, got {args.capacity}")
    if metadata is not None:
        from packcfg.core.inputs import check_input

        check_input(metadata, what="--metadata", error=PackingError)
    report = verify_packed(packed, metadata, source, tokenizer, args.capacity, max(1, args.max_errors))
    for msg in report.errors:
        print(msg, file=sys.stderr)
    for msg in report.warnings[: max(1, args.max_errors)]:
        print(f"warning: {msg}", file=sys.stderr)
    if report.error_count > len(report.errors):
        print(f"... and {report.error_count - len(report.errors)} more", file=sys.stderr)
    if report.rows == 0:
        print(f"{packed}: no rows (empty packed file)", file=sys.stderr)
        return 1
    if not args.quiet:
        what = "rows and source" if report.source_checked else "rows"
        cap = f", pack_size {report.capacity}" if report.capacity else ", no pack_size (no metadata)"
        status = "ok" if report.ok else f"{report.error_count} violation(s)"
        digest = " (samples digest matches the metadata)" if report.digest_checked and report.ok else ""
        print(
            f"{packed}: {report.rows:,} packs, {report.samples:,} samples{cap}; checked {what}: {status}{digest}"
        )
    return 0 if report.ok else 1
