"""SARIF 2.1.0 for code scanning (e.g. github/codeql-action/upload-sarif).

tool.driver lists every rule with its docs; each result has ruleId, level and a physical location whose
artifact URI is relative to the current directory (the repository root in CI). A value set by an `-o`
override has no file: its result carries the override in the message and no location.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from packcfg import __version__
from packcfg.core.base_recipes import is_base_source
from packcfg.core.config import is_override_source, override_words
from packcfg.core.diagnostics import Diagnostic

SCHEMA_URI = "https://json.schemastore.org/sarif-2.1.0.json"
# Placeholders until the project has a public home: SARIF wants absolute URIs for the tool and its rules.
INFORMATION_URI = "https://github.com/packcfg/packcfg"
HELP_URI = INFORMATION_URI + "/blob/main/docs/lint.md#{code}"
_LEVEL = {"error": "error", "warning": "warning", "info": "note"}


def _uri(file: str) -> str:
    path = Path(file)
    if path.is_absolute():
        try:
            path = path.relative_to(Path.cwd())
        except ValueError:
            return path.as_uri()
    return Path(os.path.normpath(path)).as_posix()


def _rules() -> list[dict[str, Any]]:
    from packcfg.lint.engine import rules

    out = []
    for code, rule in rules().items():
        out.append(
            {
                "id": code,
                "name": rule.title,
                "shortDescription": {"text": rule.title},
                "fullDescription": {"text": rule.docs.what},
                "help": {
                    "text": f"{rule.docs.what}\n\nWhy: {rule.docs.why}\n\nSource: {rule.docs.source}",
                    "markdown": (
                        f"{rule.docs.what}\n\n**Why:** {rule.docs.why}\n\n"
                        f"Fails:\n```yaml\n{rule.docs.failing}```\n\nPasses:\n```yaml\n{rule.docs.passing}```\n\n"
                        f"Source: {rule.docs.source}"
                    ),
                },
                "helpUri": HELP_URI.format(code=code.lower()),
                "defaultConfiguration": {"level": _LEVEL[rule.severity.value]},
                "properties": {"tags": [rule.group], "fixable": rule.fixable},
            }
        )
    return out


def render(diagnostics: Sequence[Diagnostic], files: Sequence[str], *, color: bool = False) -> str:
    rules = _rules()
    index = {r["id"]: i for i, r in enumerate(rules)}
    results = []
    for d in diagnostics:
        result: dict[str, Any] = {
            "ruleId": d.code,
            "level": _LEVEL[d.severity.value],
            "message": {"text": d.message},
        }
        if d.code in index:
            result["ruleIndex"] = index[d.code]
        if is_override_source(d.file):  # no file to point at: say where it came from, as typed
            result["message"]["text"] = f"{d.message} (set on the command line: {override_words(d.file)})"
        elif is_base_source(d.file):
            result["message"]["text"] = f"{d.message} (set by {d.file[1:-1]})"
        else:
            result["locations"] = [
                {
                    "physicalLocation": {
                        "artifactLocation": {"uri": _uri(d.file)},
                        "region": {"startLine": d.line, "startColumn": d.column},
                    }
                }
            ]
        props: dict[str, Any] = {}
        if d.path:
            props["configPath"] = d.path
        if d.fix is not None:
            props["fix"] = d.fix.to_dict()
        elif d.hint:
            props["hint"] = d.hint
        if props:
            result["properties"] = props
        results.append(result)
    log = {
        "$schema": SCHEMA_URI,
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "packcfg",
                        "version": __version__,
                        "informationUri": INFORMATION_URI,
                        "rules": rules,
                    }
                },
                "columnKind": "unicodeCodePoints",
                "results": results,
            }
        ],
    }
    return json.dumps(log, indent=2, default=str) + "\n"
