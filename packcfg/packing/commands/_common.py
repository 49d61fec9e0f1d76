"""Shared argument handling for `packcfg analyze|pack|verify` (standard library only at import)."""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from packcfg.core.cli_args import add_merge_arguments

CONFIG_SUFFIXES = (".yaml", ".yml")
# the planner's ALGORITHMS, spelled out so that building the parser imports no numpy
ALGORITHM_NAMES = ("bfd", "ffd", "first_fit_shuffle", "histogram", "sequential", "greedy_buffer")


def add_plan_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "input",
        nargs="?",
        help="experiment YAML (reads dataset/tokenizer settings) or a data file: JSONL/Parquet of "
        "input_ids, or Bridge SFT JSONL (input/output, or chat 'messages') with --tokenizer; default: the "
        "tiny CPU recipe",
    )
    add_merge_arguments(p)
    p.add_argument("--capacity", type=int, help="pack size in runtime tokens (default: packed_sequence_size)")
    p.add_argument("--align", type=int, help="round each sample up to a multiple (pad_seq_to_mult)")
    p.add_argument(
        "--algorithm",
        choices=ALGORITHM_NAMES,
        help="packing algorithm (default bfd; see docs/packing.md)",
    )
    p.add_argument("--seed", type=int, help="seed (default: dataset.seed, else 0)")
    p.add_argument(
        "--oversize",
        choices=("error", "truncate", "split", "drop"),
        help="samples longer than the capacity (default: error)",
    )
    p.add_argument("--max-per-pack", type=int, help="at most this many samples per pack")
    p.add_argument(
        "--tokenizer",
        type=Path,
        help="local tokenizer.json (or its HF folder) for SFT text; chat rows need the folder's chat template",
    )
    p.add_argument(
        "--pairs",
        action="store_true",
        help="DPO: samples 2k and 2k+1 (chosen, rejected) stay adjacent in one pack",
    )
    p.add_argument(
        "--split",
        choices=("train", "validation"),
        default="train",
        help="which split of dataset_root to use with a config (default: train)",
    )


def is_config(path: Path) -> bool:
    return path.suffix.lower() in CONFIG_SUFFIXES


def reject_stray_words(args: argparse.Namespace, output_flags: str | None) -> None:
    """PackingError where a word after the input is not an override (`-o out.parquet`: -o is --set, not an
    output), naming the command's output flags where it has them."""
    from packcfg.core.overrides import looks_like_override
    from packcfg.packing.errors import PackingError

    stray = [w for w in args.overrides if not looks_like_override(str(w))]
    if stray:
        where = f"; the output is {output_flags}" if output_flags else ""
        raise PackingError(
            f"{stray[0]!r} is not an override (KEY=VALUE): -o/--set and the words after the input override an "
            f"experiment YAML's settings{where}"
        )


def reject_config_arguments(
    args: argparse.Namespace, source: Path, what: str, output_flags: str | None = None
) -> None:
    """PackingError where -c files or overrides came with an input that is not an experiment YAML, naming
    them as typed (`--recipe NAME`, not its override); a word that is not KEY=VALUE (`-o out.parquet`) is told
    apart: -o is an override, not an output."""
    from packcfg.packing.errors import PackingError

    reject_stray_words(args, output_flags)
    if args.config_files or args.overrides:
        given = [f"-c {f}" for f in args.config_files] + [getattr(w, "typed", str(w)) for w in args.overrides]
        raise PackingError(
            f"{source}: {', '.join(given)}: -c and overrides apply to an experiment YAML input, not to {what} "
            "(use the command's flags, e.g. --capacity)"
        )


def resolve_settings(args: argparse.Namespace, need_output: bool) -> tuple[Any, dict[str, Any] | None]:
    """PackSettings (+ the loaded config, if any) from the arguments."""
    from packcfg.packing.api import PackSettings, settings_from_config
    from packcfg.packing.errors import PackingError
    from packcfg.resources import tiny_recipe

    if args.input and not os.path.lexists(args.input):
        from packcfg.core.overrides import looks_like_override

        if looks_like_override(args.input):  # `packcfg analyze k=v`: an override of the default recipe
            args.overrides = [args.input, *args.overrides]
            args.input = str(tiny_recipe())
    if not args.input:  # the default recipe, named so that callers can list it among the inputs
        args.input = str(tiny_recipe())
    source = Path(args.input)
    out = getattr(args, "parquet", None)
    meta = getattr(args, "metadata", None)
    overrides = {
        "capacity": args.capacity,
        "align": args.align,
        "algorithm": args.algorithm,
        "seed": args.seed,
        "oversize": args.oversize,
        "max_per_pack": args.max_per_pack,
        "tokenizer": args.tokenizer,
        "output": out,
        "metadata": meta,
        "pad_id": getattr(args, "pad_id", None),
        "split": args.split,
        "pairs": args.pairs,
    }
    output_flags = "--parquet FILE or --out DIR" if need_output else None
    if is_config(source):
        from packcfg.core.config import ConfigError, load_config

        reject_stray_words(args, output_flags)

        try:
            config = load_config([source, *args.config_files], args.overrides)
        except ConfigError as exc:
            raise PackingError(str(exc)) from None
        settings = settings_from_config(config, None, **overrides)
        return _into_folder(settings, args), config
    reject_config_arguments(args, source, "a data file", output_flags)
    if args.capacity is None:
        raise PackingError(f"{source}: a data file needs --capacity N (the pack size in tokens)")
    if args.capacity <= 0:
        raise PackingError(f"--capacity must be > 0, got {args.capacity}")
    from packcfg.packing.api import MAX_PACK_SIZE

    if args.capacity > MAX_PACK_SIZE:
        raise PackingError(
            f"--capacity {args.capacity} is larger than a packed row can be ({MAX_PACK_SIZE}: seq_start_id is int32)"
        )
    if args.seed is not None and args.seed < 0:
        raise PackingError(f"--seed must be >= 0, got {args.seed}")
    if out is None:
        out = source.with_name(source.stem + ".packed.parquet")
    if meta is None:
        meta = Path(out).with_name(Path(out).stem + ".metadata.json")
    settings = PackSettings(
        source=source,
        output=Path(out),
        metadata=Path(meta),
        capacity=args.capacity,
        tokenizer=args.tokenizer,
        align=args.align or 1,
        algorithm=args.algorithm or "bfd",
        seed=args.seed if args.seed is not None else 0,
        oversize=args.oversize,
        max_per_pack=args.max_per_pack,
        pad_id=getattr(args, "pad_id", None),
        split=args.split,
        pairs=args.pairs,
    )
    return _into_folder(settings, args), None


def _into_folder(settings: Any, args: argparse.Namespace) -> Any:
    """`pack --out DIR`: the packed Parquet and the metadata JSON go into DIR under the names they would have
    had; a file named on its own (--parquet, --metadata) stays where it is named."""
    folder = getattr(args, "out_dir", None)
    if folder is None:
        return settings
    if getattr(args, "parquet", None) is None:
        settings.output = Path(folder) / Path(settings.output).name
    if getattr(args, "metadata", None) is None:
        settings.metadata = Path(folder) / Path(settings.metadata).name
    return settings


def run_guarded(prog: str, body: Callable[[], int]) -> int:
    """Run a command body: bad input -> one line on stderr and exit 2, never a traceback."""
    from packcfg.packing.errors import PackingError
    from packcfg.packing.planner import PlanError

    try:
        return body()
    except (PackingError, PlanError) as exc:
        print(f"packcfg {prog}: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        if os.environ.get("PACKCFG_DEBUG"):
            traceback.print_exc()
        where = f"{exc.filename}: " if getattr(exc, "filename", None) else ""
        print(f"packcfg {prog}: error: {where}{exc.strerror or exc}", file=sys.stderr)
        return 2
    except (KeyboardInterrupt, BrokenPipeError):
        raise
    except Exception as exc:  # an unexpected failure still gets one line; the traceback on request
        if os.environ.get("PACKCFG_DEBUG"):
            traceback.print_exc()
        first = str(exc).splitlines()[0] if str(exc) else ""
        print(
            f"packcfg {prog}: error: {type(exc).__name__}: {first} (set PACKCFG_DEBUG=1 for a traceback)",
            file=sys.stderr,
        )
        return 2
