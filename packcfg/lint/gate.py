"""The lint gate every flow that starts work shares (`launch`, `train`): lint the merged config; findings
at error severity block unless their code is `--allow`ed.

`--allow CODE` unblocks exactly the findings with that code. An allow that matches no finding is returned
as unused, so callers record only rules that were actually overridden.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from packcfg.core.diagnostics import Diagnostic, Severity


@dataclass
class GateResult:
    diagnostics: list[Diagnostic]
    blocking: list[Diagnostic]
    allowed: dict[str, list[Diagnostic]] = field(default_factory=dict)
    unused_allows: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.blocking

    def summary(self) -> dict[str, int]:
        counts = {s.value: 0 for s in Severity}
        for d in self.diagnostics:
            counts[d.severity.value] += 1
        return {"errors": counts["error"], "warnings": counts["warning"], "infos": counts["info"]}


def normalise_codes(codes: Sequence[str]) -> list[str]:
    """`["pk110,CP203", " ls301 "]` -> `["PK110", "CP203", "LS301"]`, order kept, duplicates dropped."""
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
    profile: str | None = None,
) -> GateResult:
    """Lint the merged config. Raises `packcfg.core.config.ConfigError` when the config cannot be read."""
    from packcfg.lint.engine import lint_config

    diagnostics = lint_config(list(files), list(overrides), profile=profile)
    codes = normalise_codes(allow)
    errors = [d for d in diagnostics if d.severity == Severity.ERROR]
    blocking = [d for d in errors if d.code.upper() not in codes]
    allowed: dict[str, list[Diagnostic]] = {}
    unused: list[str] = []
    for code in codes:
        hits = [d for d in errors if d.code.upper() == code]
        if hits:
            allowed[code] = hits
        else:
            unused.append(code)
    return GateResult(diagnostics, blocking, allowed, unused)


def format_diagnostics(result: GateResult, files: Sequence[str | Path]) -> str:
    """The lint text reporter's output for the gate's findings."""
    from packcfg.lint.reporters import get_reporter

    return get_reporter("text")(result.diagnostics, [str(f) for f in files])
