"""One check of optional dependencies per command, before any work: a missing one is a single line naming the
extra that provides it (and, for torch, the CPU-only pin), never a ModuleNotFoundError halfway through.

`importlib.util.find_spec` looks a module up without importing it, so the check costs milliseconds.
"""

from __future__ import annotations

import importlib.util

# extra -> what it provides, as module names (the import name, not the distribution name)
EXTRAS: dict[str, tuple[str, ...]] = {
    "pack": ("pyarrow", "tokenizers"),
    "train": ("torch", "megatron.core", "pyarrow", "tokenizers"),
    "hf": ("transformers", "safetensors"),
    "nemo-run": ("nemo_run",),
    # loggers the config turns on (logger.tensorboard_dir, logger.wandb_project); checked by train's preflight
    "tensorboard": ("tensorboard",),
    "wandb": ("wandb",),
}
TORCH_HINT = " (CPU only: pip install torch==2.13.0 first, or pip pulls a multi-GB CUDA build)"


class MissingExtra(RuntimeError):
    """A command needs an optional dependency that is not installed; the message is one line."""


def missing_modules(modules: tuple[str, ...] | list[str]) -> list[str]:
    out = []
    for name in modules:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):  # a parent package missing, or a module set to None
            found = False
        if not found:
            out.append(name)
    return out


def require(command: str, extra: str, modules: tuple[str, ...] | list[str] | None = None) -> None:
    """Raise MissingExtra naming `pip install 'packcfg[extra]'` when any of `modules` (default: the extra's
    own list) is missing."""
    missing = missing_modules(list(modules) if modules is not None else list(EXTRAS[extra]))
    if missing:
        hint = TORCH_HINT if "torch" in missing or "megatron.core" in missing else ""
        raise MissingExtra(
            f"packcfg {command} needs {', '.join(missing)}: pip install 'packcfg[{extra}]'{hint}"
        )
