"""docs/python.md: every `python` block runs, in order, in one namespace, from the repository root (their
asserts are the docs' claims), and the `text` block after a block is what that block prints. A block after a
`<!-- needs: MODULE ... -->` line runs only where MODULE imports (the Bridge one runs in the oracle suite)."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "python.md"
BLOCK = re.compile(r"(?:<!-- needs: ([\w.]+)[^>]*-->\n)?```(\w+)\n(.*?)```", re.S)
RUNNER = """
import io, json, sys, contextlib
blocks = json.loads(sys.stdin.read())
namespace = {"__name__": "docs_python"}
for i, code in enumerate(blocks):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, f"docs/python.md block {i}", "exec"), namespace)
    print(json.dumps(out.getvalue()))
"""


def _blocks() -> list[tuple[str, str, str | None]]:
    return [(lang, code, needs or None) for needs, lang, code in BLOCK.findall(DOC.read_text())]


def _available(module: str | None) -> bool:
    if module is None:
        return True
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def test_every_python_block_runs_and_prints_what_the_docs_show(tmp_path: Path) -> None:
    import json

    blocks = _blocks()
    runnable = [
        (i, code) for i, (lang, code, needs) in enumerate(blocks) if lang == "python" and _available(needs)
    ]
    assert len(runnable) >= 5
    env = {**os.environ, "NEMORUN_HOME": str(tmp_path / "nemorun")}
    proc = subprocess.run(
        [sys.executable, "-c", RUNNER],
        input=json.dumps([code for _, code in runnable]),
        capture_output=True,
        text=True,
        cwd=DOC.parents[1],
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    printed = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith('"')]
    assert len(printed) == len(runnable)
    for (index, _), output in zip(runnable, printed, strict=True):
        following = blocks[index + 1] if index + 1 < len(blocks) else None
        if following is not None and following[0] == "text":
            shown = following[1].strip()
            # FILE in the docs stands for a temporary path
            pattern = re.escape(shown).replace("FILE", ".+")
            # NeMo-Run's own banner lines (rich rules: "──── Entering Experiment ...") are not the example's output
            lines = [line for line in output.strip().splitlines() if not line.startswith("─")]
            assert re.fullmatch(pattern, "\n".join(lines)), f"block {index} printed:\n{output}"


def test_the_bridge_example_is_marked_and_docs_are_linked_from_the_readme() -> None:
    needs = [needs for _, _, needs in _blocks() if needs]
    assert needs == ["megatron.bridge", "megatron.bridge"]
    assert "docs/python.md" in (DOC.parents[1] / "README.md").read_text()
