"""`packcfg lint` never imports the heavy flows: torch, megatron, nemo_run, matplotlib.

Nor what only some lint features need: pydantic (`packcfg schema`), ruamel.yaml (`--fix`), jsonschema.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

HEAVY = (
    "torch",
    "megatron",
    "nemo_run",
    "matplotlib",
    "pydantic",
    "ruamel",
    "jsonschema",
    "numba",
    "pyarrow",
)

RUNNER = """
import json, sys
from packcfg.cli import main
code = main(sys.argv[1:])
sys.stdout.flush()
print("\\n@@MODULES@@" + json.dumps(sorted(sys.modules)), file=sys.stderr)
raise SystemExit(code)
"""


def _modules(*argv: str) -> tuple[int, set[str]]:
    proc = subprocess.run([sys.executable, "-c", RUNNER, *argv], capture_output=True, text=True, timeout=120)
    _, _, tail = proc.stderr.partition("@@MODULES@@")
    return proc.returncode, set(json.loads(tail))


def test_lint_recipes_imports_nothing_heavy(repo_root: Path) -> None:
    code, modules = _modules("lint", str(repo_root / "recipes"))
    assert code == 0
    loaded = sorted({m.split(".")[0] for m in modules} & set(HEAVY))
    assert loaded == []


def test_every_output_format_stays_light(repo_root: Path, tmp_path: Path) -> None:
    for fmt in ("json", "sarif", "github", "junit"):
        code, modules = _modules("lint", str(repo_root / "recipes"), "--format", fmt)
        assert code == 0
        assert not {m.split(".")[0] for m in modules} & {"torch", "megatron", "nemo_run", "matplotlib"}
