"""packcfg.demo: the whole packed pipeline in one command, on the embedded tiny CPU recipe.

lint -> analyze -> pack -> train packed -> train the same samples padded -> summary + PNG, all in one output
directory that is replaced only when the run completes. Entry point: `run_demo(DemoOptions(...))`.
Heavy imports (torch, megatron-core, pyarrow) happen inside the stages that need them, and this
package imports its own modules lazily too: `packcfg --help` imports `packcfg.demo.commands` and nothing else.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from packcfg.demo.pipeline import DemoError, DemoOptions, DemoResult, LintBlocked, run_demo

__all__ = ["DemoError", "DemoOptions", "DemoResult", "LintBlocked", "run_demo"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from packcfg.demo import pipeline

        return getattr(pipeline, name)
    raise AttributeError(f"module 'packcfg.demo' has no attribute {name!r}")
