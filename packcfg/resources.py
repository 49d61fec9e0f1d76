"""Locate what ships with packcfg: recipes, templates, launchers and the sample data.

In a wheel they live under `packcfg/_bundled/`; in a source checkout (editable install) they are
the top-level folders of the repository. One lookup serves both.
"""

from __future__ import annotations

from pathlib import Path

_PACKAGE_DIR = Path(__file__).resolve().parent
_REPO_ROOT = _PACKAGE_DIR.parent

BUNDLED_PREFIX = "@packcfg/"
"""Config values starting with this name a bundled file, e.g. `@packcfg/data/sample_sft/train.jsonl`."""


def bundled_dir(name: str) -> Path:
    """`recipes`, `templates` or `launchers`: the folder shipped with this installation."""
    for candidate in (_PACKAGE_DIR / "_bundled" / name, _REPO_ROOT / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"packcfg: bundled folder {name!r} not found in this installation")


def data_dir() -> Path:
    """The sample data shipped inside the package (`packcfg/data`)."""
    return _PACKAGE_DIR / "data"


def resolve_path(value: str | Path, base: Path | None = None) -> Path:
    """Resolve a config path: `@packcfg/data/...` and `@packcfg/recipes/...` name bundled files;
    other relative paths are relative to `base` (the config file's folder) when given, else the CWD."""
    text = str(value)
    if text.startswith(BUNDLED_PREFIX):
        rest = text[len(BUNDLED_PREFIX) :]
        head, _, tail = rest.partition("/")
        root = data_dir() if head == "data" else bundled_dir(head)
        return root / tail if tail else root
    path = Path(text).expanduser()
    if not path.is_absolute() and base is not None:
        path = base / path
    return path


def tiny_recipe() -> Path:
    """The embedded default: the tiny CPU recipe every flow can run anywhere."""
    return bundled_dir("recipes") / "tiny_cpu_sft.yaml"
