"""`packcfg schema`: the JSON Schema of the experiment config, for editors (yaml-language-server)."""

from __future__ import annotations

import argparse
import sys

DESCRIPTION = "Print the JSON Schema of the experiment config (for editor completion and checks)."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--output", metavar="FILE", help="write the schema to FILE instead of stdout")


def run(args: argparse.Namespace) -> int:
    import json

    try:
        from packcfg.core.schema import json_schema
    except ModuleNotFoundError as exc:
        if exc.name != "packcfg.core.schema":
            raise
        print("packcfg schema: the config schema is not part of this installation", file=sys.stderr)
        return 2
    text = json.dumps(json_schema(), indent=2) + "\n"
    if args.output:
        from pathlib import Path

        from packcfg.core.atomic import atomic_write_text

        try:
            atomic_write_text(Path(args.output), text)
        except OSError as exc:
            print(
                f"packcfg schema: --output {args.output}: cannot write ({exc.strerror or exc})",
                file=sys.stderr,
            )
            return 2
        return 0
    sys.stdout.write(text)
    return 0
