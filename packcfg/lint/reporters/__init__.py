"""Output formats for lint diagnostics: one module per format, imported only when chosen.

Each module defines `render(diagnostics, files, *, color=False) -> str`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from typing import Protocol

from packcfg.core.diagnostics import Diagnostic

FORMATS = ("text", "json", "sarif", "github", "junit")


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
