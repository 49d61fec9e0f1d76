"""packcfg: validate, pack, launch and train packed-sequence fine-tuning on Megatron.

The top-level package stays import-light: `packcfg lint` must not pull torch, megatron,
nemo_run or matplotlib, so every flow is imported lazily.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from packcfg.core.diagnostics import Diagnostic

__all__ = ["__version__", "lint_file"]


def lint_file(path: Any, **kwargs: Any) -> list[Diagnostic]:
    """Lint one experiment YAML and return its diagnostics (same fields as the JSON output)."""
    from packcfg.lint.engine import lint_file as _lint_file

    return _lint_file(path, **kwargs)
