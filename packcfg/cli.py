"""The `packcfg` command line: a thin dispatcher over the flows.

Each subcommand lives in a light `commands` module of its flow that defines
`add_arguments(parser)` and `run(args) -> int`; those modules import only the
standard library at top level, so building the parser never imports a heavy flow.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from packcfg import __version__

# subcommand -> (module, one-line help). Order is the order shown in --help.
COMMANDS: dict[str, tuple[str, str]] = {
    "lint": ("packcfg.lint.commands.lint", "check experiment YAMLs against every packing rule"),
    "explain": ("packcfg.lint.commands.explain", "explain a rule: why, a failing and a passing example"),
    "rules": ("packcfg.lint.commands.rules", "list every rule with its code and severity"),
    "schema": ("packcfg.lint.commands.schema", "print the JSON Schema of the experiment config"),
    "analyze": ("packcfg.packing.commands.analyze", "plan packs for a dataset and report the stats"),
    "pack": ("packcfg.packing.commands.pack", "pack a tokenized dataset into Bridge's packed Parquet"),
    "verify": ("packcfg.packing.commands.verify", "check a packed Parquet file (and against its source)"),
    "plan": ("packcfg.plan.commands.plan", "propose ranked parallelism, batch and pack-size layouts"),
    "train": ("packcfg.train.commands.train", "run the bundled megatron-core packed-training executor"),
    "export-hf": ("packcfg.train.hf.command", "export a run's checkpoint as a Hugging Face folder"),
    "render": ("packcfg.launch.commands.render", "render the job bundle (scripts, manifest, config)"),
    "launch": ("packcfg.launch.commands.launch", "lint, render and submit a job"),
    "status": ("packcfg.launch.commands.status", "show job records and their state"),
    "logs": ("packcfg.launch.commands.logs", "print a job's logs"),
    "cancel": ("packcfg.launch.commands.cancel", "cancel a job"),
    "demo": ("packcfg.demo.commands.demo", "run the whole packed pipeline on the tiny CPU recipe"),
    "completion": ("packcfg.completion", "print a shell completion script (bash, zsh or fish)"),
}


# subcommand -> (extra, modules) it needs beyond the core, checked before any work (packcfg.core.extras)
NEEDS: dict[str, tuple[tuple[str, tuple[str, ...]], ...]] = {
    "train": (("train", ("torch", "megatron.core", "pyarrow", "tokenizers")),),
    "export-hf": (("train", ("torch", "megatron.core")), ("hf", ("transformers", "safetensors"))),
    "demo": (("train", ("torch", "megatron.core", "pyarrow", "tokenizers")),),
    "pack": (("pack", ("pyarrow", "tokenizers")),),
    "analyze": (("pack", ("pyarrow", "tokenizers")),),
    "verify": (("pack", ("pyarrow",)),),
}


def check_extras(command: str) -> str | None:
    """The one-line message when `command` lacks an optional dependency, else None."""
    from packcfg.core.extras import MissingExtra, require

    try:
        for extra, modules in NEEDS.get(command, ()):
            require(command, extra, modules)
    except MissingExtra as exc:
        return str(exc)
    return None


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The full parser, or with `only` just that subcommand (so `packcfg lint` imports only lint)."""
    parser = argparse.ArgumentParser(
        prog="packcfg",
        description="Validate, pack, launch and train packed-sequence fine-tuning on Megatron.",
    )
    parser.add_argument("--version", action="version", version=f"packcfg {__version__}")
    from packcfg.core.cli_args import (
        CommandParser,  # flags and positionals may mix (`train cfg.yaml --out D k=v`)
    )

    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=CommandParser)
    for name, (module_name, help_text) in COMMANDS.items():
        if only is not None and name != only:
            sub.add_parser(name, help=help_text)
            continue
        module = importlib.import_module(module_name)
        p = sub.add_parser(name, help=help_text, description=getattr(module, "DESCRIPTION", help_text))
        module.add_arguments(p)
        p.set_defaults(_run=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one command; Ctrl-C anywhere (imports and argument parsing included) is one line and exit 130."""
    try:
        return _main(sys.argv[1:] if argv is None else argv)
    except KeyboardInterrupt:
        print("packcfg: interrupted", file=sys.stderr)
        return 130


def _main(argv: list[str]) -> int:
    from packcfg.core.cli_args import start_invocation

    start_invocation()  # each deprecated spelling is warned once per command
    command = argv[0] if argv and argv[0] in COMMANDS else None
    parser = build_parser(only=command)
    args = parser.parse_args(argv)
    if not getattr(args, "_run", None):
        parser.print_help()
        return 2
    missing = check_extras(args.command)
    if missing:
        print(missing, file=sys.stderr)
        return 2
    try:
        return int(args._run(args) or 0)
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    raise SystemExit(main())
