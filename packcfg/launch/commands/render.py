"""`packcfg render CONFIG --out DIR`: write the job bundle (byte-for-byte reproducible)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from pathlib import Path

from packcfg.core.cli_args import add_deprecated_out, add_out_argument
from packcfg.launch.commands._shared import EXIT_OK, add_config_arguments, config_files, guarded, overrides_of

DESCRIPTION = (
    "Lint (the launch gate), then write the job bundle: config.yaml (resolved), manifest.json, "
    "torchrun.sh, sbatch.sh, pack.sbatch.sh, nemo_run_driver.py and the training entry point. "
    "The same config renders the same bytes (set SOURCE_DATE_EPOCH to stamp a creation time)."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser, short_override=False)
    add_out_argument(parser, "--output", help="bundle folder (created; required)")  # --output: deprecated
    add_deprecated_out(parser, "out_dir")  # `-o KEY=VALUE` is an override; `-o DIR` the old --out DIR
    parser.add_argument(
        "--force",
        action="store_true",
        help="write into a folder that holds other files (never over an input of this command)",
    )
    parser.add_argument(
        "--verbose", action="store_true", help="list every bundle file instead of the summary"
    )


def _size(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    return f"{n / 1024:.1f} KiB" if n < 1024**2 else f"{n / 1024**2:.1f} MiB"


def bundle_summary(directory: Path, files: Mapping[str, bytes]) -> str:
    """What `render` prints: the bundle folder, its job scripts (the top-level `.sh` and `.py` files),
    its config files, and how many files and bytes it holds in all (`--verbose` lists every file)."""
    top = sorted(name for name in files if "/" not in name)
    scripts = [name for name in top if name.endswith((".sh", ".py"))]
    other = [name for name in top if name not in scripts]
    total = sum(len(data) for data in files.values())
    lines = [f"bundle {directory}/"]
    if scripts:
        lines.append(f"  job scripts  {', '.join(scripts)}")
    if other:
        lines.append(f"  config       {', '.join(other)}")
    lines.append(f"  {len(files)} files, {_size(total)} (--verbose lists them)")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    if not args.out_dir:
        print("packcfg render: the bundle folder is required: --out DIR", file=sys.stderr)
        return 2

    def body() -> int:
        from packcfg.launch import service

        directory, bundle, gate = service.render(
            config_files(args),
            Path(args.out_dir),
            overrides_of(args),
            backend=args.backend,
            allow=args.allow,
            profile=args.profile,
            force=args.force,
        )
        for code in gate.unused_allows:
            print(
                f"packcfg: --allow {code}: no such lint error in this config (not recorded)", file=sys.stderr
            )
        if args.verbose:
            for name in sorted(bundle.files):
                print(directory / name)
        else:
            print(bundle_summary(directory, bundle.files))
        print(f"config sha256 {bundle.config_hash}", file=sys.stderr)
        return EXIT_OK

    return guarded(body)
