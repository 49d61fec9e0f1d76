"""`packcfg rules`: every rule with its code, severity, whether it has a fix, and its title."""

from __future__ import annotations

import argparse
import sys

DESCRIPTION = "List every rule: code, severity, whether --fix can fix it, and its title."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--format", choices=("text", "json"), default="text", help="output format")


def run(args: argparse.Namespace) -> int:
    from packcfg.lint.engine import rules

    table = rules()
    if args.format == "json":
        import json

        rows = [
            {
                "code": r.code,
                "severity": r.severity.value,
                "fixable": r.fixable,
                "group": r.group,
                "title": r.title,
            }
            for r in table.values()
        ]
        sys.stdout.write(json.dumps(rows, indent=2) + "\n")
        return 0
    lines = [f"{'code':<7} {'severity':<8} {'fix':<3}  title"]
    for r in table.values():
        lines.append(f"{r.code:<7} {r.severity.value:<8} {'yes' if r.fixable else '':<3}  {r.title}")
    sys.stdout.write("\n".join(lines) + "\n")
    return 0
