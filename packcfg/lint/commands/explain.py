"""`packcfg explain CODE|TERM`: what a rule checks, why, a failing and a passing example, the fix, the source;
or what a term of the glossary (THD, MBS, M, ...) means."""

from __future__ import annotations

import argparse
import sys

DESCRIPTION = (
    "Explain a rule (what it checks, why, a failing and a passing example, and its source), or a term the "
    "messages use (THD, MBS, GBS, pack size, cu_seqlens, M, per-token loss, ...). With no argument, the glossary."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "code", nargs="?", metavar="CODE|TERM", help="a rule code, e.g. PK110, or a glossary term, e.g. THD"
    )


def _indent(text: str) -> str:
    return "".join(f"    {line}\n" if line else "\n" for line in text.rstrip("\n").split("\n"))


def render(code: str) -> str | None:
    """The explanation of `code`, or None when no rule has that code."""
    from packcfg.lint.engine import rules

    rule = rules().get(code.strip().upper())
    if rule is None:
        return None
    d = rule.docs
    parts = [
        f"{rule.code} ({rule.severity.value}{', fixable' if rule.fixable else ''}): {rule.title}",
        "",
        "What it checks:",
        _indent(d.what),
        "Why:",
        _indent(d.why),
        "Fails:",
        _indent(d.failing),
        "Passes:",
        _indent(d.passing),
    ]
    if d.fixed is not None:
        parts += ["After `packcfg lint --fix`:", _indent(d.fixed)]
    for example in d.examples:
        outcome = "fires" if example.fires else "passes"
        if example.fires and example.severity is not None:
            outcome += f" ({example.severity.value})"
        if example.fires and rule.fixable:
            outcome += ", fixed as below" if example.fixed is not None else ", no fix offered"
        parts += [f"Also: {example.title} ({outcome}):", _indent(example.yaml)]
        if example.fixed is not None:
            parts += ["  After `packcfg lint --fix`:", _indent(example.fixed)]
    parts += ["Source:", _indent(d.source)]
    return "\n".join(parts)


def run(args: argparse.Namespace) -> int:
    from packcfg.lint import glossary

    if args.code is None:
        sys.stdout.write("".join(glossary.format_term(t) for t in glossary.terms()))
        return 0
    text = render(args.code)
    if text is None:
        term = glossary.lookup(args.code)
        text = glossary.format_term(term) if term is not None else None
    if text is None:
        names = ", ".join(t.name for t in glossary.terms())
        print(
            f"packcfg explain: {args.code!r} is no rule code and no glossary term; `packcfg rules` lists every "
            f"code; terms: {names}",
            file=sys.stderr,
        )
        return 2
    sys.stdout.write(text)
    return 0
