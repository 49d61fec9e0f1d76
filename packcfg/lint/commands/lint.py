"""`packcfg lint`: check experiment YAMLs against every packing rule.

Exit codes (a contract): 0 clean (warnings allowed unless --strict), 1 findings at error severity (or
warnings with --strict), 2 the tool could not run (bad arguments, unreadable path, bad settings).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from packcfg.core.cli_args import add_merge_arguments

DESCRIPTION = (
    "Check experiment YAMLs against every packing rule. PATHS are files or folders (searched for "
    "*.yaml/*.yml); each file is one experiment, with -c files and -o overrides merged on top. With no "
    "PATHS, the -c files (then -o overrides) are merged into ONE experiment, as `packcfg launch` does."
)
FORMATS = ("text", "json", "sarif", "github", "junit")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="*", metavar="PATHS", help="YAML files or folders to lint")
    add_merge_arguments(parser)
    parser.add_argument("--format", choices=FORMATS, default="text", help="output format (default: text)")
    parser.add_argument("--output", metavar="FILE", help="write the report to FILE instead of stdout")
    parser.add_argument(
        "--fix", action="store_true", help="rewrite files with the exact fixes (keeps comments)"
    )
    parser.add_argument(
        "--diff", action="store_true", help="print the fixes as a unified diff; write nothing"
    )
    parser.add_argument("--profile", choices=("current", "legacy"), help="rule profile (default: current)")
    parser.add_argument("--select", metavar="CODES", help="only these codes or prefixes, comma-separated")
    parser.add_argument("--ignore", metavar="CODES", help="skip these codes or prefixes, comma-separated")
    parser.add_argument("--strict", action="store_true", help="exit 1 on warnings too")
    parser.add_argument("--check-paths", action="store_true", help="check that packed data paths exist")
    parser.add_argument("--pack-metadata", metavar="FILE", help="packing metadata JSON (for PK131 advice)")
    parser.add_argument("-j", "--jobs", type=int, default=None, help=argparse.SUPPRESS)


def _fail(message: str) -> int:
    print(f"packcfg lint: {message}", file=sys.stderr)
    return 2


def _read_pack_metadata(path: str) -> list[dict[str, Any]]:
    import json

    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ValueError(f"--pack-metadata {path}: cannot read ({exc})") from None
    if isinstance(data, dict):
        data = [data]
    if not isinstance(data, list) or not all(isinstance(x, dict) for x in data):
        raise ValueError(f"--pack-metadata {path}: expected a list of objects (one per split)")
    return data


def write_report(text: str, output: str | None) -> None:
    """Write to stdout, or atomically to `output` (a temporary name in the same folder, then rename)."""
    if output is None:
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    from packcfg.core.atomic import atomic_write_text

    atomic_write_text(Path(output), text)


def run(args: argparse.Namespace) -> int:
    from packcfg.core.config import ConfigError
    from packcfg.lint import engine
    from packcfg.lint.reporters import get_reporter
    from packcfg.lint.settings import SettingsError, load_settings, split_codes

    if not args.paths and not args.config_files:
        return _fail("nothing to lint: give PATHS (files or folders), or -c FILE for one merged experiment")
    if args.fix and args.diff:
        return _fail("--fix and --diff are exclusive: --diff shows what --fix would write")
    if args.jobs is not None and args.jobs < 1:
        return _fail("--jobs must be at least 1")
    try:
        start = Path(args.paths[0] if args.paths else args.config_files[0])
        settings = load_settings(start, known_codes=engine.rules()).with_cli(
            select=split_codes(args.select) if args.select is not None else None,
            ignore=split_codes(args.ignore) if args.ignore is not None else None,
            profile=args.profile,
            known_codes=engine.rules(),
        )
        metadata = _read_pack_metadata(args.pack_metadata) if args.pack_metadata else None
    except (SettingsError, ValueError) as exc:
        return _fail(str(exc))

    options: dict[str, Any] = {
        "settings": settings,
        "pack_metadata": metadata,
        "check_paths": args.check_paths,
    }
    try:
        if args.fix or args.diff:
            from packcfg.lint.fix import FixError, fix_paths

            try:
                outcome = fix_paths(
                    args.paths,
                    config_files=args.config_files,
                    overrides=args.overrides,
                    write=args.fix,
                    **options,
                )
            except FixError as exc:
                return _fail(str(exc))
            if args.diff:
                sys.stdout.write(outcome.diff)
                return 1 if outcome.diff else 0
            for message in outcome.messages:
                print(message, file=sys.stderr)
            if outcome.changed:
                print(
                    f"packcfg lint: fixed {len(outcome.changed)} file(s): {', '.join(outcome.changed)}",
                    file=sys.stderr,
                )
        if args.paths:
            result = engine.lint_paths(
                args.paths,
                config_files=args.config_files,
                overrides=args.overrides,
                jobs=args.jobs,
                **options,
            )
        else:
            result = engine.lint_experiment(args.config_files, args.overrides, **options)
    except ConfigError as exc:
        return _fail(str(exc))

    color = (
        args.format == "text"
        and args.output is None
        and sys.stdout.isatty()
        and not os.environ.get("NO_COLOR")
        and os.environ.get("TERM") != "dumb"
    )
    try:
        if result.files or not result.errors:  # nothing was linted: the one-line errors below say why
            write_report(
                get_reporter(args.format)(result.diagnostics, result.files, color=color), args.output
            )
    except OSError as exc:
        return _fail(f"--output {args.output}: cannot write ({exc.strerror or exc})")

    for message in result.errors:
        print(f"packcfg lint: {message}", file=sys.stderr)
    if result.errors:
        return 2
    if result.internal_errors and not result.rules_ran and not result.diagnostics:
        return 2
    worst = {d.severity.value for d in result.diagnostics}
    if "error" in worst or (args.strict and "warning" in worst):
        return 1
    return 0
