"""One JSON array; each element has version, code, severity, message, file, line, column (1-based), fix, hint,
title and path. `version` (reporters.JSON_SCHEMA_VERSION) names the schema, documented in docs/lint.md."""

from __future__ import annotations

import json
from collections.abc import Sequence

from packcfg.core.diagnostics import Diagnostic
from packcfg.lint.reporters import JSON_SCHEMA_VERSION


def render(diagnostics: Sequence[Diagnostic], files: Sequence[str], *, color: bool = False) -> str:
    # default=str: a fix may carry a YAML value JSON cannot spell (a date); never crash on output.
    rows = [{"version": JSON_SCHEMA_VERSION, **d.to_dict()} for d in diagnostics]
    return json.dumps(rows, indent=2, default=str) + "\n"
