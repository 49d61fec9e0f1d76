"""Base recipes: a Bridge recipe's effective values, that a user's override file is merged onto.

`recipe.base: NAME` in a config, or `--recipe NAME` on any config command, puts the snapshot
`packcfg/data/bridge_recipes/NAME.yaml` (what Bridge's `ConfigContainer.to_yaml()` prints for that recipe
function; written by `scripts/gen_bridge_recipes.py`) under the user's files before they are merged, as
Bridge's `scripts/training/run_recipe.py` merges a YAML override file over the recipe's config. Folders named
in `$PACKCFG_RECIPE_PATH` (`:`-separated) are searched first, for recipes of your own.

Values that come from the base point at the pseudo file `<bridge recipe NAME>` (with the snapshot's line);
they are Bridge's own, so they never draw SC003 (the engine drops those).
"""

from __future__ import annotations

import os
from pathlib import Path

BASE_PREFIX = "<bridge recipe "
DATA_DIR = Path(__file__).resolve().parent.parent / "data" / "bridge_recipes"
ENV_PATH = "PACKCFG_RECIPE_PATH"


class UnknownRecipe(LookupError):
    pass


def base_source(name: str) -> str:
    return f"{BASE_PREFIX}{name}>"


def is_base_source(file: str) -> bool:
    return file.startswith(BASE_PREFIX) and file.endswith(">")


def recipe_dirs() -> list[Path]:
    extra = [Path(p) for p in os.environ.get(ENV_PATH, "").split(os.pathsep) if p]
    return [*extra, DATA_DIR]


def recipe_names() -> list[str]:
    """Every base recipe name, sorted (the snapshot files' stems)."""
    names: set[str] = set()
    for folder in recipe_dirs():
        try:
            names.update(p.stem for p in folder.glob("*.yaml"))
        except OSError:
            continue
    return sorted(names)


def recipe_path(name: str) -> Path:
    """The snapshot of `name`; UnknownRecipe (naming close matches) when there is none."""
    if name and "/" not in name and "\\" not in name and not name.startswith("."):
        for folder in recipe_dirs():
            path = folder / f"{name}.yaml"
            if path.is_file():
                return path
    import difflib

    names = recipe_names()
    close = difflib.get_close_matches(name, names, n=3, cutoff=0.6)
    hint = f"; did you mean {', '.join(close)}?" if close else "; `packcfg lint --list-recipes` lists them"
    raise UnknownRecipe(f"unknown base recipe {name!r}{hint}")
