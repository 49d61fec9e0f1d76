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

from packcfg.core.cli_args import add_deprecated_alias, add_merge_arguments

DESCRIPTION = (
    "Check experiment YAMLs against every packing rule. PATHS are files or folders (searched for "
    "*.yaml/*.yml); each file is one experiment, with -c files and overrides (KEY=VALUE words, -o KEY=VALUE) "
    "merged on top, over --recipe NAME (or the file's recipe.base) when given. With no PATHS, the -c files "
    "(then the overrides) are merged into ONE experiment, as `packcfg launch` does."
)
FORMATS = ("text", "json", "sarif", "github", "junit")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "paths",
        nargs="*",
        metavar="PATHS",
        help="YAML files or folders to lint, and overrides (KEY=VALUE, +KEY=VALUE, ++KEY=VALUE, ~KEY) applied "
        "to every file: a word that is an existing path is a path",
    )
    add_merge_arguments(parser, positional=False)
    parser.add_argument(
        "--list-recipes", action="store_true", help="list the Bridge base recipes --recipe / recipe.base take"
    )
    parser.add_argument(
        "--format", dest="format", choices=FORMATS, default="text", help="output format (default: text)"
    )
    add_deprecated_alias(parser, "--output-format", dest="format", new="--format", choices=FORMATS)
    parser.add_argument("--output", metavar="FILE", help="write the report to FILE instead of stdout")
    parser.add_argument(
        "--statistics",
        action="store_true",
        help="print the number of findings per code instead of each finding (text or json)",
    )
    parser.add_argument(
        "--exit-zero",
        action="store_true",
        help="exit 0 even when there are findings (2 still means could not run)",
    )
    parser.add_argument(
        "--experiments-only",
        action="store_true",
        help="skip, silently, YAML files that are not experiment configs (no Bridge section, no recipe/launch; "
        "several documents): the pre-commit hook's mode",
    )
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
    from packcfg.lint.reporters import escape_text

    print(f"packcfg lint: {escape_text(message)}", file=sys.stderr)
    return 2


def _read_pack_metadata(path: str) -> list[dict[str, Any]]:
    import json

    from packcfg.core.inputs import check_input, describe_os_error

    # never block on /dev/zero or a FIFO, nor read gigabytes: packing metadata is one small object per split
    check_input(path, what="--pack-metadata", error=ValueError, max_bytes=64 * 1024 * 1024)
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except OSError as exc:
        raise ValueError(f"--pack-metadata {path}: cannot read ({describe_os_error(exc)})") from None
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise ValueError(f"--pack-metadata {path}: not JSON ({str(exc).splitlines()[0][:200]})") from None
    if isinstance(data, dict):
        data = [data]
    if not isinstance(data, list) or not all(isinstance(x, dict) for x in data):
        raise ValueError(f"--pack-metadata {path}: expected a list of objects (one per split)")
    return data


def write_report(text: str, output: str | None, inputs: list[str] | None = None) -> None:
    """Write to stdout, or atomically to `output` (a temporary name in the same folder, then rename).

    `output` is never one of `inputs`, a symlink or a special file (packcfg.core.atomic's output rule)."""
    if output is None:
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    from packcfg.core.atomic import atomic_write_text

    atomic_write_text(Path(output), text, inputs=inputs or (), what="--output")


def run(args: argparse.Namespace) -> int:
    from packcfg.core.config import ConfigError
    from packcfg.lint import engine
    from packcfg.lint.reporters import get_reporter
    from packcfg.lint.settings import SettingsError, load_settings, split_codes

    if args.list_recipes:
        from packcfg.core.base_recipes import recipe_names

        sys.stdout.write("".join(f"{name}\n" for name in recipe_names()))
        return 0
    from packcfg.core.cli_args import split_paths_and_overrides

    args.paths, positional_overrides = split_paths_and_overrides(args.paths)
    args.overrides = [*positional_overrides, *args.overrides]
    try:
        from packcfg.core.config import check_overrides

        check_overrides(args.overrides)
    except ConfigError as exc:
        return _fail(str(exc))
    if not args.paths and not args.config_files:
        return _fail("nothing to lint: give PATHS (files or folders), or -c FILE for one merged experiment")
    if args.fix and args.diff:
        return _fail("--fix and --diff are exclusive: --diff shows what --fix would write")
    if args.jobs is not None and args.jobs < 1:
        return _fail("--jobs must be at least 1")
    if args.statistics and args.format not in ("text", "json"):
        return _fail(f"--statistics prints text or json, not {args.format}")
    paths = list(args.paths)
    if args.experiments_only and paths:
        # pre-commit hands over every staged YAML: keep the experiment configs, skip the rest silently
        files, walk_errors = engine.expand_paths(paths)
        if walk_errors:
            for message in walk_errors:
                _fail(message)
            return 2
        paths = [str(f) for f in files if engine.is_experiment_file(f)]
        if not paths:
            return 0  # nothing in this commit is an experiment config
    try:
        start = Path(paths[0] if paths else (args.paths or args.config_files)[0])
        settings = load_settings(start, known_codes=engine.rules()).with_cli(
            select=split_codes(args.select) if args.select is not None else None,
            ignore=split_codes(args.ignore) if args.ignore is not None else None,
            profile=args.profile,
            known_codes=engine.rules(),
        )
        metadata = _read_pack_metadata(args.pack_metadata) if args.pack_metadata else None
    except (SettingsError, ValueError) as exc:
        return _fail(str(exc))

    inputs: list[str] = []
    if args.output is not None:
        # refuse before any work: the report must never replace a config it reads (or a symlink, a device)
        from packcfg.core.atomic import OutputRefused, check_output

        listed, _ = engine.expand_paths(args.paths)  # files skipped by --experiments-only are inputs too
        inputs = [
            *map(str, listed),
            *args.config_files,
            *([args.pack_metadata] if args.pack_metadata else []),
            *([str(settings.source)] if settings.source is not None else []),  # pyproject.toml/packcfg.toml
        ]
        try:
            check_output(args.output, inputs=inputs, what="--output")
        except OutputRefused as exc:
            return _fail(str(exc))

    options: dict[str, Any] = {
        "settings": settings,
        "pack_metadata": metadata,
        "check_paths": args.check_paths,
    }
    unwritten: list[str] = []  # --fix: files whose fixes could not be written (exit 2)
    try:
        if args.fix or args.diff:
            from packcfg.lint.fix import FixError, fix_paths

            try:
                outcome = fix_paths(
                    paths,
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
            unwritten = list(outcome.write_failed)
            for name in outcome.changed:
                n = outcome.edits_per_file.get(name, 0)
                print(f"packcfg lint: fixed {n} edit{'s' if n != 1 else ''} in {name}", file=sys.stderr)
        if paths:
            result = engine.lint_paths(
                paths,
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
    # core.atomic (with secrets, hashlib, signal) only where a report file is written: stdout never refuses
    refused: tuple[type[Exception], ...] = ()
    if args.output is not None:
        from packcfg.core.atomic import OutputRefused

        refused = (OutputRefused,)

    try:
        if result.files or not result.errors:  # nothing was linted: the one-line errors below say why
            if args.statistics:
                from packcfg.lint.reporters import statistics

                report = statistics(result.diagnostics, result.files, fmt=args.format)
            else:
                report = get_reporter(args.format)(result.diagnostics, result.files, color=color)
            write_report(report, args.output, inputs)
    except refused as exc:
        return _fail(str(exc))
    except OSError as exc:
        return _fail(f"--output {args.output}: cannot write ({exc.strerror or exc})")

    for message in result.errors:
        _fail(message)
    if result.errors or unwritten:
        return 2
    if result.internal_errors and not result.rules_ran and not result.diagnostics:
        return 2
    if args.exit_zero:
        return 0
    worst = {d.severity.value for d in result.diagnostics}
    if "error" in worst or (args.strict and "warning" in worst):
        return 1
    return 0
