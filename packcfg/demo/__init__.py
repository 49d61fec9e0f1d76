"""packcfg.demo: the whole packed pipeline in one command, on the embedded tiny CPU recipe.

lint -> analyze -> pack -> train packed -> train the same samples padded -> summary + PNG, all in one output
directory that is replaced only when the run completes. Entry point: `run_demo(DemoOptions(...))`.
Heavy imports (torch, megatron-core, pyarrow, matplotlib) happen inside the stages that need them.
"""

from __future__ import annotations

from packcfg.demo.pipeline import DemoError, DemoOptions, DemoResult, LintBlocked, run_demo

__all__ = ["DemoError", "DemoOptions", "DemoResult", "LintBlocked", "run_demo"]
