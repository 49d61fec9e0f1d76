"""`packcfg lint` never imports the heavy flows: torch, megatron, nemo_run.

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
        assert not {m.split(".")[0] for m in modules} & {"torch", "megatron", "nemo_run"}


# what one-file `packcfg lint` (stdout report) needs none of: the report-file writer and its temp names
# (core.atomic: secrets, hashlib), ruamel (--fix only), numpy (packing), the heavy flows (issue 23)
ONE_FILE_UNNEEDED = (*HEAVY, "numpy", "secrets", "hashlib", "packcfg.core.atomic", "packcfg.lint.fix")


def test_one_file_lint_imports_every_rule_and_nothing_it_does_not_need(repo_root: Path) -> None:
    code, modules = _modules("lint", str(repo_root / "recipes" / "tiny_cpu_sft.yaml"))
    assert code == 0
    assert sorted(m for m in modules if m in ONE_FILE_UNNEEDED or m.split(".")[0] in ONE_FILE_UNNEEDED) == []
    rule_modules = {
        f"packcfg.lint.rules.{p.stem}"
        for p in (repo_root / "packcfg" / "lint" / "rules").glob("*.py")
        if not p.stem.startswith("_")
    }
    assert rule_modules and rule_modules <= modules  # every rule module is loaded: every rule still runs


def test_report_file_loads_the_atomic_writer(repo_root: Path, tmp_path: Path) -> None:
    out = tmp_path / "report.txt"
    code, modules = _modules("lint", str(repo_root / "recipes" / "tiny_cpu_sft.yaml"), "--output", str(out))
    assert code == 0 and out.exists()
    assert "packcfg.core.atomic" in modules
