"""Arguments and error handling shared by the launch commands (standard library only)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from packcfg.core.cli_args import add_merge_arguments

EXIT_OK, EXIT_REFUSED, EXIT_ERROR = 0, 1, 2


def add_config_arguments(parser: argparse.ArgumentParser, *, short_override: bool = True) -> None:
    """CONFIG, -c FILE, overrides (KEY=VALUE after CONFIG, -o/--set), --recipe, --backend, --allow, --profile.
    `render` handles `-o` itself (an override, or the deprecated spelling of its --out DIR)."""
    parser.add_argument("config", metavar="CONFIG", help="experiment YAML")
    add_merge_arguments(parser, short_override=short_override)
    parser.add_argument("--backend", choices=("local", "slurm", "nemo-run"), help="override launch.backend")
    parser.add_argument(
        "--engine",
        choices=("packcfg", "bridge"),
        help="override launch.engine (the same as -o launch.engine=...; recorded with the overrides)",
    )
    parser.add_argument(
        "--allow",
        action="append",
        default=[],
        metavar="CODE",
        help="let lint errors of this rule through (repeatable; recorded in the manifest)",
    )
    parser.add_argument("--profile", help="lint profile for the gate")


def add_state_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--state-dir",
        metavar="DIR",
        help="job records folder (default $PACKCFG_STATE_DIR or ~/.local/state/packcfg)",
    )


def warn(message: str) -> None:
    """One warning line on stderr (e.g. a corrupt job record that was skipped)."""
    print(f"packcfg: warning: {message}", file=sys.stderr)


def overrides_of(args: argparse.Namespace) -> list[str]:
    """The command's overrides; `--engine E` is `launch.engine=E`, last so that it wins."""
    from packcfg.core.cli_args import TypedOverride

    engine = getattr(args, "engine", None)
    extra = [TypedOverride(f"launch.engine={engine}", f"--engine {engine}")] if engine else []
    return [*(args.overrides or []), *extra]


def config_files(args: argparse.Namespace) -> list[str]:
    return [args.config, *args.config_files]


def guarded(body: Callable[[], int]) -> int:
    """Run a command body; a LaunchError is one line on stderr, never a traceback."""
    from packcfg.launch import LaunchError

    try:
        return body()
    except LaunchError as exc:
        report = getattr(exc, "report", None)
        if report:
            sys.stdout.write(report)
            sys.stdout.flush()
        print(f"packcfg: {exc}", file=sys.stderr)
        refused = exc.__class__.__name__ in ("GateRefused", "DuplicateJob", "JobStopped")
        return EXIT_REFUSED if refused else EXIT_ERROR
