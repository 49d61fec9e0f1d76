"""The rule registry: every rule is a small function registered with its code, severity and docs.

A rule reads a `RuleContext` and yields `Finding`s; the engine turns findings into positioned
`Diagnostic`s, applies suppressions and severity overrides, and hands them to a reporter.
Each rule's docs carry a failing and a passing YAML example (and the fixed YAML where the rule
has a fix); one generic test runs all of them, and `packcfg explain CODE` prints them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from packcfg.core.diagnostics import ConfigPath, Fix, Severity

if TYPE_CHECKING:
    from packcfg.lint.context import RuleContext


@dataclass(frozen=True)
class Example:
    """One more case of a rule, for behaviour the failing/passing pair cannot show (e.g. what changes with the
    target Bridge version). The generic test runs it like the pair; `packcfg explain` prints it."""

    title: str  # one line: what this case shows
    yaml: str  # a complete experiment YAML
    fires: bool  # whether the rule reports it
    severity: Severity | None = None  # when it fires: the severity it is reported at (None: the rule's own)
    fixed: str | None = None  # when it fires with a fix: the YAML after `--fix`; None: it offers no fix


@dataclass(frozen=True)
class RuleDocs:
    what: str
    why: str
    failing: str  # a complete experiment YAML on which the rule fires
    passing: str  # the closest YAML on which it stays quiet
    source: str
    fixed: str | None = None  # for fixable rules: `failing` after `--fix`, byte for byte
    examples: tuple[Example, ...] = ()  # more cases (fires or not, fixed or not), each checked by the tests


@dataclass(frozen=True)
class Finding:
    """What a rule reports; `at` is the config path the diagnostic points at."""

    message: str
    at: ConfigPath
    hint: str | None = None
    fix: Fix | None = None
    severity: Severity | None = None  # overrides the rule's default (e.g. SC003 in packcfg's sections)


CheckFn = Callable[["RuleContext"], Iterable[Finding]]


@dataclass(frozen=True)
class Rule:
    code: str
    severity: Severity
    title: str
    group: str  # SC, PK, CP, LS, MF, CG, PL, DS, DP
    fixable: bool
    docs: RuleDocs
    check: CheckFn


RULES: dict[str, Rule] = {}


def rule(
    code: str,
    severity: Severity | str,
    title: str,
    *,
    docs: RuleDocs,
    fixable: bool = False,
) -> Callable[[CheckFn], CheckFn]:
    """Register a rule function under `code`. Codes are stable and never reused."""

    def register(fn: CheckFn) -> CheckFn:
        if code in RULES:
            raise ValueError(f"rule {code} registered twice")
        if fixable and docs.fixed is None:
            raise ValueError(f"fixable rule {code} needs docs.fixed")
        RULES[code] = Rule(
            code=code,
            severity=Severity(severity),
            title=title,
            group=code[:2],
            fixable=fixable,
            docs=docs,
            check=fn,
        )
        return fn

    return register
