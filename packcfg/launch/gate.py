"""The launch gate: lint the experiment; errors block unless each one's code is `--allow`ed.

`--allow CODE` unblocks exactly the findings with that code; it is recorded (code, the findings it let
through, who, when) in the bundle's manifest. An allow that matches no finding is reported and not
recorded, so the manifest lists only rules that were actually overridden.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packcfg.core.diagnostics import Diagnostic, Severity
from packcfg.launch import LaunchError
from packcfg.launch.bundle import AllowedRule, current_user


@dataclass
class GateResult:
    diagnostics: list[Diagnostic]
    blocking: list[Diagnostic]
    allowed: list[AllowedRule]
    unused_allows: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.blocking

    def summary(self) -> dict[str, Any]:
        counts = {s.value: 0 for s in Severity}
        for d in self.diagnostics:
            counts[d.severity.value] += 1
        return {"errors": counts["error"], "warnings": counts["warning"], "infos": counts["info"]}


def normalise_codes(codes: Sequence[str]) -> list[str]:
    out: list[str] = []
    for raw in codes:
        for part in raw.split(","):
            code = part.strip().upper()
            if code and code not in out:
                out.append(code)
    return out


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
        from packcfg.lint.engine import lint_config
    except ImportError as exc:
        raise LaunchError(f"the lint gate is unavailable in this installation ({exc})") from None
    from packcfg.core.config import ConfigError

    try:
        diagnostics = lint_config(list(files), list(overrides), profile=profile)
    except ConfigError as exc:
        raise LaunchError(str(exc)) from None
    codes = normalise_codes(allow)
    errors = [d for d in diagnostics if d.severity == Severity.ERROR]
    blocking = [d for d in errors if d.code.upper() not in codes]
    user = current_user()
    allowed: list[AllowedRule] = []
    unused: list[str] = []
    for code in codes:
        hits = [d for d in errors if d.code.upper() == code]
        if not hits:
            unused.append(code)
            continue
        messages = tuple(f"{d.file}:{d.line}:{d.column}: {d.message}" for d in hits)
        allowed.append(AllowedRule(code=code, messages=messages, by=user, at=when))
    return GateResult(diagnostics, blocking, allowed, unused)


def format_diagnostics(result: GateResult, files: Sequence[str | Path]) -> str:
    """The lint text reporter's output for the gate's findings."""
    try:
        from packcfg.lint.reporters import get_reporter

        render = get_reporter("text")
        return render(result.diagnostics, [str(f) for f in files])
    except ImportError:
        lines = [f"{d.file}:{d.line}:{d.column}: {d.code} {d.message}" for d in result.diagnostics]
        return "\n".join(lines) + "\n"
