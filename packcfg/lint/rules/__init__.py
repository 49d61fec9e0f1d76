"""Every lint rule, one module per rule family; importing this package registers them all.

The rule modules import the registry (`packcfg.lint.registry.rule`) and the registry imports no rule module,
so `all_rules` lives here, above both."""

from __future__ import annotations

from packcfg.lint.registry import RULES, Rule
from packcfg.lint.rules import (  # noqa: F401  (registers on import)
    cg,
    cp,
    dp,
    ds,
    ls,
    mf,
    pk,
    pl,
    sc_file,
    sc_schema,
)


def all_rules() -> dict[str, Rule]:
    """Every registered rule, by code."""
    return dict(sorted(RULES.items()))
