"""Output formats for lint diagnostics: one module per format, imported only when chosen.

Each module defines `render(diagnostics, files, *, color=False) -> str`.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Sequence
from typing import Protocol

from packcfg.core.diagnostics import Diagnostic

FORMATS = ("text", "json", "sarif", "github", "junit")

JSON_SCHEMA_VERSION = 1
"""The `version` of every element of `--format json` (and `--statistics --format json`): the stable schema.
Fields are only ever added under one version; a change to an existing field's meaning bumps it."""

# C0 and C1 control characters, DEL, and Unicode bidirectional overrides/isolates (they reorder what a
# terminal shows): none of them may reach the terminal from a file name or a config value.
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _escape_char(match: re.Match[str]) -> str:
    char = match.group(0)
    named = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}.get(char)
    if named:
        return named
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def escape_text(text: str) -> str:
    """`text` with every control character (newline, ESC, ...) and bidi override written as an escape
    (`\\n`, `\\x1b`, `\\u202e`), so one diagnostic is one line and a file name cannot move the cursor,
    colour the terminal, or start a `::warning` workflow command on a line of its own."""
    return _UNSAFE.sub(_escape_char, text) if _UNSAFE.search(text) else text


class Render(Protocol):
    def __call__(
        self, diagnostics: Sequence[Diagnostic], files: Sequence[str], *, color: bool = False
    ) -> str: ...


def get_reporter(name: str) -> Callable[..., str]:
    """The `render` function of format `name` (ValueError for an unknown format)."""
    if name not in FORMATS:
        raise ValueError(f"unknown output format {name!r} (choose from {', '.join(FORMATS)})")
    return importlib.import_module(f"packcfg.lint.reporters.{name}").render  # type: ignore[no-any-return]


def summary(diagnostics: Sequence[Diagnostic], files: Sequence[str]) -> str:
    """`N errors, M warnings in K files` (infos added when there are any)."""
    counts = {"error": 0, "warning": 0, "info": 0}
    for d in diagnostics:
        counts[d.severity.value] += 1

    def n(count: int, word: str) -> str:
        return f"{count} {word}{'' if count == 1 else 's'}"

    parts = [n(counts["error"], "error"), n(counts["warning"], "warning")]
    if counts["info"]:
        parts.append(f"{counts['info']} info")
    return f"{', '.join(parts)} in {n(len(files), 'file')}"


def statistics(diagnostics: Sequence[Diagnostic], files: Sequence[str], *, fmt: str = "text") -> str:
    """`--statistics`: the number of findings per code, most frequent first (text), or a JSON array of
    `{version, code, severity, title, count, fixable}`."""
    by_code: dict[str, list[Diagnostic]] = {}
    for d in diagnostics:
        by_code.setdefault(d.code, []).append(d)
    rows = sorted(by_code.items(), key=lambda item: (-len(item[1]), item[0]))
    if fmt == "json":
        import json

        out = [
            {
                "version": JSON_SCHEMA_VERSION,
                "code": code,
                "severity": found[0].severity.value,
                "title": found[0].title,
                "count": len(found),
                "fixable": any(d.fix is not None for d in found),
            }
            for code, found in rows
        ]
        return json.dumps(out, indent=2) + "\n"
    lines = []
    for code, found in rows:
        fix = "[*]" if any(d.fix is not None for d in found) else "   "
        lines.append(
            f"{len(found):>5}  {code:<6} {fix} {found[0].severity.value:<7}  {escape_text(found[0].title or '')}"
        )
    lines.append(summary(diagnostics, files))
    return "\n".join(lines) + "\n"
