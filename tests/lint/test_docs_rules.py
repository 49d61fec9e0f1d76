"""docs/lint.md carries the rule catalogue as the registry has it, in the project's own terms, and links only
to files that ship in the repository."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from packcfg.lint.commands.rules import markdown
from packcfg.lint.rules import all_rules

ROOT = Path(__file__).resolve().parents[2]
LINT_MD = ROOT / "docs" / "lint.md"
BEGIN, END = "<!-- rules:begin -->\n", "<!-- rules:end -->"


def test_catalogue_in_docs_is_the_registry() -> None:
    text = LINT_MD.read_text(encoding="utf-8")
    block = text[text.index(BEGIN) + len(BEGIN) : text.index(END)]
    assert block == markdown(), "regenerate: packcfg rules --format markdown (between the rules markers)"


def test_every_rule_has_an_anchor_for_sarif_help_links() -> None:
    text = LINT_MD.read_text(encoding="utf-8")
    for code in all_rules():
        assert f"\n### {code}\n" in text, code


@pytest.mark.parametrize(
    "doc", [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))], ids=lambda p: p.name
)
def test_relative_links_point_into_the_repository(doc: Path) -> None:
    text = doc.read_text(encoding="utf-8")
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
        if re.match(r"[a-z]+://", target) or target.startswith("mailto:"):
            continue
        assert (doc.parent / target).exists(), f"{doc.name} links to {target}, which is not in the repository"


def test_lint_docs_speak_in_the_projects_terms() -> None:
    text = LINT_MD.read_text(encoding="utf-8").lower()
    for word in ("seed pitfall", "seed '", "rules.md", "architecture.md"):
        assert word not in text, word
