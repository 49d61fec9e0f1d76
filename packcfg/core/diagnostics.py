"""Diagnostics: what a rule found, where, and the exact edit that fixes it."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Literal


class Severity(StrEnum):
    ERROR = "error"
    WARNING = "warning"
    INFO = "info"

    @property
    def rank(self) -> int:
        return {"error": 2, "warning": 1, "info": 0}[self.value]


ConfigPath = tuple[str, ...]
"""A dotted config path split into keys, e.g. ("train", "micro_batch_size")."""


@dataclass(frozen=True)
class Position:
    """1-based line and column of a key (or of its section when the key is missing)."""

    file: str
    line: int
    column: int


@dataclass(frozen=True)
class Edit:
    """One change to the config: set a value, delete a key, or rename a key (keeping its value)."""

    action: Literal["set", "delete", "rename"]
    path: ConfigPath
    value: Any = None
    new_path: ConfigPath | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"action": self.action, "path": ".".join(self.path)}
        if self.action == "set":
            out["value"] = self.value
        if self.new_path is not None:
            out["new_path"] = ".".join(self.new_path)
        return out


@dataclass(frozen=True)
class Fix:
    """The exact edit `packcfg lint --fix` applies; `description` is one line for humans."""

    description: str
    edits: tuple[Edit, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"description": self.description, "edits": [e.to_dict() for e in self.edits]}


@dataclass
class Diagnostic:
    """One finding. Field names are the JSON output contract (see architecture.md)."""

    code: str
    severity: Severity
    message: str
    file: str
    line: int
    column: int
    fix: Fix | None = None
    hint: str | None = None
    title: str | None = None
    path: str | None = None  # the dotted config path the finding is about
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "code": self.code,
            "severity": self.severity.value,
            "message": self.message,
            "file": self.file,
            "line": self.line,
            "column": self.column,
            "fix": self.fix.to_dict() if self.fix else None,
            "hint": self.hint,
            "title": self.title,
            "path": self.path,
        }

    def sort_key(self) -> tuple[str, int, int, str]:
        return (self.file, self.line, self.column, self.code)
