"""packcfg: validate, pack, launch and train packed-sequence fine-tuning on Megatron.

The top-level package stays import-light: `packcfg lint` must not pull torch, megatron,
nemo_run or pydantic, so every flow (and the Python API below) is imported lazily.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from packcfg.config_check import CheckError, check
    from packcfg.core.diagnostics import Diagnostic
    from packcfg.experiment import Experiment

__all__ = ["CheckError", "Experiment", "__version__", "check", "lint_file"]

# name -> module that defines it, imported on first access (PEP 562)
_LAZY = {
    "check": "packcfg.config_check",
    "CheckError": "packcfg.config_check",
    "Experiment": "packcfg.experiment",
}


def lint_file(path: Any, **kwargs: Any) -> list[Diagnostic]:
    """Lint one experiment YAML and return its diagnostics (same fields as the JSON output)."""
    from packcfg.lint.engine import lint_file as _lint_file

    return _lint_file(path, **kwargs)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'packcfg' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
