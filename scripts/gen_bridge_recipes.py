"""Regenerate packcfg/data/bridge_recipes/ (base recipes for `recipe.base` / `lint --recipe`) from Bridge 0.3.1.

Thin entry point for scripts/bridge_data/recipes.py (see its docstring). Run it with the oracle venv's
Python (.ci/oracle.sh builds .venv-oracle): `.venv-oracle/bin/python scripts/gen_bridge_recipes.py`.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "bridge_data"))

from recipes import main  # noqa: E402

if __name__ == "__main__":
    raise SystemExit(main())
