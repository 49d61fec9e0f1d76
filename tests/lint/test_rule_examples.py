"""Every rule proves itself with its own docs: the failing example fires, the passing one is clean,
and for fixable rules the fix turns `failing` into `fixed` byte for byte (style.md: tests are data)."""

from __future__ import annotations

import pytest

from packcfg.lint.engine import lint_text
from packcfg.lint.rules import all_rules

RULES = all_rules()
# Rules that read something besides the YAML text; the examples run with it.
CONTEXT = {"PK131": {"pack_metadata": [{"packing_factor": 4.0, "max_samples_per_bin": 9, "pack_size": 4096}]}}


@pytest.mark.parametrize("code", sorted(RULES))
def test_failing_example_fires(code: str) -> None:
    rule = RULES[code]
    diagnostics = lint_text(rule.docs.failing, filename=f"{code}_failing.yaml", **CONTEXT.get(code, {}))
    assert code in {d.code for d in diagnostics}, [d.to_dict() for d in diagnostics]


@pytest.mark.parametrize("code", sorted(RULES))
def test_passing_example_is_clean(code: str) -> None:
    rule = RULES[code]
    diagnostics = lint_text(rule.docs.passing, filename=f"{code}_passing.yaml", **CONTEXT.get(code, {}))
    assert diagnostics == [], [d.to_dict() for d in diagnostics]


@pytest.mark.parametrize("code", sorted(c for c, r in RULES.items() if r.fixable))
def test_fix_turns_failing_into_fixed(code: str) -> None:
    from packcfg.lint.fix import apply_edits

    rule = RULES[code]
    diagnostics = [d for d in lint_text(rule.docs.failing, **CONTEXT.get(code, {})) if d.code == code]
    assert diagnostics and all(d.fix is not None for d in diagnostics)
    edits = [e for d in diagnostics for e in d.fix.edits]  # type: ignore[union-attr]
    fixed, problems = apply_edits(rule.docs.failing, edits)
    assert problems == []
    assert fixed == rule.docs.fixed
    assert code not in {d.code for d in lint_text(fixed)}


EXAMPLES = [(code, i) for code, r in sorted(RULES.items()) for i in range(len(r.docs.examples))]


@pytest.mark.parametrize(("code", "index"), EXAMPLES)
def test_more_examples(code: str, index: int) -> None:
    """A rule's further cases (e.g. per target Bridge version): it fires or not as the case says, at the severity
    it names, and fixes exactly to `fixed`, or offers no fix where `fixed` is None."""
    from packcfg.lint.fix import apply_edits

    rule = RULES[code]
    case = rule.docs.examples[index]
    found = [d for d in lint_text(case.yaml, filename=f"{code}_example{index}.yaml") if d.code == code]
    assert bool(found) == case.fires, (case.title, [d.to_dict() for d in found])
    if not case.fires:
        return
    assert {d.severity for d in found} == {case.severity or rule.severity}, case.title
    if case.fixed is None:
        assert all(d.fix is None for d in found), case.title
        return
    edits = [e for d in found for e in d.fix.edits]  # type: ignore[union-attr]
    fixed, problems = apply_edits(case.yaml, edits)
    assert problems == []
    assert fixed == case.fixed, case.title
    assert code not in {d.code for d in lint_text(fixed)}


def test_every_rule_has_complete_docs() -> None:
    for code, rule in RULES.items():
        assert rule.docs.what and rule.docs.why and rule.docs.source, code
        assert rule.fixable == (rule.docs.fixed is not None), code
