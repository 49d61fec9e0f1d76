"""Regenerate packcfg/core/bridge_fields.json from the pinned Megatron Bridge + Megatron Core wheels.

Thin entry point for scripts/bridge_data/fields.py (see its docstring):
    python scripts/gen_bridge_fields.py --download-only   # fetch the pinned wheels into the cache
    python scripts/gen_bridge_fields.py                   # regenerate the table
    python scripts/gen_bridge_fields.py --check           # exit 1 when the committed table is stale
"""

import importlib.util
import sys
from pathlib import Path

_PATH = Path(__file__).resolve().parent / "bridge_data" / "fields.py"
_SPEC = importlib.util.spec_from_file_location("packcfg_gen_bridge_fields", _PATH)
assert _SPEC and _SPEC.loader
_MODULE = importlib.util.module_from_spec(_SPEC)
sys.modules[_SPEC.name] = _MODULE  # dataclasses look their module up
_SPEC.loader.exec_module(_MODULE)

if __name__ == "__main__":
    raise SystemExit(_MODULE.main())
