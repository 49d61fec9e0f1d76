"""One JSON array; each element has code, severity, message, file, line, column (1-based) and fix."""

from __future__ import annotations

import json
from collections.abc import Sequence

from packcfg.core.diagnostics import Diagnostic


def render(diagnostics: Sequence[Diagnostic], files: Sequence[str], *, color: bool = False) -> str:
    # default=str: a fix may carry a YAML value JSON cannot spell (a date); never crash on output.
    return json.dumps([d.to_dict() for d in diagnostics], indent=2, default=str) + "\n"
