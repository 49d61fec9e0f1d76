"""packcfg.plan: which config should I run? A packing-aware parallelism and batch planner.

`plan_config(files, overrides, Request(...)) -> PlanResult` estimates every TP x CP x PP x pack size x
recomputation layout for the config's model (parameter, memory and FLOP model by formula from the model's
shape, `packcfg.plan.shape` and `packcfg.plan.estimate`), the packing efficiency of each pack size from the
data's real lengths (the packing planner's `plan()`), ranks by real tokens/s and keeps the layouts that
`packcfg lint` passes. No torch: the parameter count is a formula, checked against the executor's model
in tests/plan. docs/plan.md describes the model, its sources and its limits.
"""

from __future__ import annotations

import importlib
from typing import Any

# name -> module, imported on first use (PEP 562): `packcfg plan --help` imports no numpy
_LAZY = {
    "Estimate": "estimate",
    "Hardware": "estimate",
    "Layout": "estimate",
    "PackProfile": "estimate",
    "Precision": "estimate",
    "estimate": "estimate",
    "PlanResult": "search",
    "Proposal": "search",
    "Request": "search",
    "plan_config": "search",
    "ModelShape": "shape",
    "PlanError": "shape",
    "shape_from_config": "shape",
}
__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'packcfg.plan' has no attribute {name!r}")
    return getattr(importlib.import_module(f"packcfg.plan.{module}"), name)
