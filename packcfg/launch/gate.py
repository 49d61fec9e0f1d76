"""The launch gate: the shared lint gate (`packcfg.lint.gate`), plus what launch records of it.

`--allow CODE` unblocks exactly the findings with that code; it is recorded (code, the findings it let
through, who, when) in the bundle's manifest. An allow that matches no finding is reported and not
recorded, so the manifest lists only rules that were actually overridden.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packcfg.core.diagnostics import Diagnostic
from packcfg.launch import LaunchError
from packcfg.launch.bundle import AllowedRule, current_user


@dataclass
class GateResult:
    diagnostics: list[Diagnostic]
    blocking: list[Diagnostic]
    allowed: list[AllowedRule]
    unused_allows: list[str] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return not self.blocking

    def summary(self) -> dict[str, Any]:
        return dict(self.counts)


def run_gate(
    files: Sequence[str | Path],
    overrides: Sequence[str] = (),
    *,
    allow: Sequence[str] = (),
    when: str | None = None,
    profile: str | None = None,
) -> GateResult:
    """Lint the merged config; findings at error severity block unless their code is allowed."""
    try:
        from packcfg.core.config import ConfigError
        from packcfg.lint import gate
    except ImportError as exc:
        raise LaunchError(f"the lint gate is unavailable in this installation ({exc})") from None
    try:
        result = gate.run_gate(files, overrides, allow=allow, profile=profile)
    except ConfigError as exc:
        raise LaunchError(str(exc)) from None
    user = current_user()
    allowed = [
        AllowedRule(
            code=code,
            messages=tuple(f"{d.file}:{d.line}:{d.column}: {d.message}" for d in hits),
            by=user,
            at=when,
        )
        for code, hits in result.allowed.items()
    ]
    return GateResult(result.diagnostics, result.blocking, allowed, result.unused_allows, result.summary())


def format_diagnostics(result: GateResult, files: Sequence[str | Path]) -> str:
    """The lint text reporter's output for the gate's findings."""
    try:
        from packcfg.lint.reporters import get_reporter

        render = get_reporter("text")
        return render(result.diagnostics, [str(f) for f in files])
    except ImportError:
        lines = [f"{d.file}:{d.line}:{d.column}: {d.code} {d.message}" for d in result.diagnostics]
        return "\n".join(lines) + "\n"
