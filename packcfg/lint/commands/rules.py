"""`packcfg rules`: every rule with its code, severity, whether it has a fix, and its title."""

from __future__ import annotations

import argparse
import sys

DESCRIPTION = "List every rule: code, severity, whether --fix can fix it, and its title."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--format",
        choices=("text", "json", "markdown"),
        default="text",
        help="output format (markdown: the rule catalogue of docs/lint.md)",
    )


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def markdown() -> str:
    """The rule catalogue as docs/lint.md carries it (a test keeps the two equal): a table, then one section
    per rule (the anchor SARIF's helpUri points at) with what it checks, why, and where it comes from."""
    from packcfg.lint.engine import rules

    table = rules()
    out = ["| code | severity | fix | rule |", "|---|---|---|---|"]
    for r in table.values():
        out.append(
            f"| [{r.code}](#{r.code.lower()}) | {r.severity.value} | {'yes' if r.fixable else ''} | {_cell(r.title)} |"
        )
    for r in table.values():
        d = r.docs
        out += [
            "",
            f"### {r.code}",
            f"**{_cell(r.title)}** ({r.severity.value}{', fixable with `--fix`' if r.fixable else ''}). "
            f"Examples: `packcfg explain {r.code}`.",
            "",
            f"- What: {' '.join(d.what.split())}",
            f"- Why: {' '.join(d.why.split())}",
            f"- Source: {' '.join(d.source.split())}",
        ]
    return "\n".join(out) + "\n"


def run(args: argparse.Namespace) -> int:
    from packcfg.lint.engine import rules

    table = rules()
    if args.format == "markdown":
        sys.stdout.write(markdown())
        return 0
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
