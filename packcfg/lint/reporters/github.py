"""GitHub Actions workflow commands: `::error file=F,line=L,col=C,title=CODE::message`."""

from __future__ import annotations

from collections.abc import Sequence

from packcfg.core.config import is_override_source, override_words
from packcfg.core.diagnostics import Diagnostic
from packcfg.lint.reporters import escape_text

_LEVEL = {"error": "error", "warning": "warning", "info": "notice"}


def escape_data(text: str) -> str:
    """Escape a workflow-command message (the part after `::`): `%`, CR and LF as GitHub decodes them, every
    other control character as a visible escape (a message is one command line)."""
    text = text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    return escape_text(text)


def escape_property(text: str) -> str:
    """Escape a workflow-command property value (file, title): also `:` and `,`."""
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def render(diagnostics: Sequence[Diagnostic], files: Sequence[str], *, color: bool = False) -> str:
    lines = []
    for d in diagnostics:
        title = f"title={escape_property(f'{d.code} {d.title}' if d.title else d.code)}"
        message = f"{d.code} {d.message}"
        if is_override_source(d.file):  # no file to annotate: the override as typed goes in the message
            props = title
            message += f" (set on the command line: {override_words(d.file)})"
        else:
            props = f"file={escape_property(d.file)},line={d.line},col={d.column},{title}"
        if d.fix is not None:
            message += f"\nfix: {d.fix.description}"
        elif d.hint:
            message += f"\nhint: {d.hint}"
        lines.append(f"::{_LEVEL[d.severity.value]} {props}::{escape_data(message)}")
    return "".join(line + "\n" for line in lines)
