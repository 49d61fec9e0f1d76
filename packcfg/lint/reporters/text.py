"""Human output: `file:line:col: CODE message` (`KEY=VALUE (command line): CODE message` for an override), an indented fix or hint line, then a summary line."""

from __future__ import annotations

from collections.abc import Sequence

from packcfg.core.config import is_override_source
from packcfg.core.diagnostics import Diagnostic
from packcfg.lint.reporters import escape_text, summary

_COLORS = {"error": "\033[31m", "warning": "\033[33m", "info": "\033[36m"}
_BOLD, _DIM, _RESET = "\033[1m", "\033[2m", "\033[0m"


def render(diagnostics: Sequence[Diagnostic], files: Sequence[str], *, color: bool = False) -> str:
    lines: list[str] = []
    for d in diagnostics:
        # file names and values come from the user's files: control characters are escaped (reporters.escape_text)
        # an override is named as typed, `train.micro_batch_size=4 (command line):`, with no line to point at
        where = (
            f"{escape_text(d.file)}:"
            if is_override_source(d.file)
            else f"{escape_text(d.file)}:{d.line}:{d.column}:"
        )
        message = escape_text(d.message)
        level = d.severity.value
        # Severity is spelled out for warnings and info: without colour an error must still look different.
        tag = "" if level == "error" else f" [{level}]"
        if color:
            lines.append(
                f"{_BOLD}{where}{_RESET} {_COLORS[level]}{d.code}{_RESET} {message}{_DIM}{tag}{_RESET}"
            )
        else:
            lines.append(f"{where} {d.code} {message}{tag}")
        if d.fix is not None:
            lines.append(f"    fix: {escape_text(d.fix.description)}")
        elif d.hint:
            lines.append(f"    hint: {escape_text(d.hint)}")
    lines.append(summary(diagnostics, files))
    return "\n".join(lines) + "\n"
