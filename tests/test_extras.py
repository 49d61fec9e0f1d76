"""A missing optional dependency is one line naming the extra, before any work (issue 16)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from packcfg.core.extras import EXTRAS, MissingExtra, missing_modules, require


def run_without(module: str, *argv: str, cwd) -> subprocess.CompletedProcess:
    """`packcfg ARGV` in a fresh interpreter where importing `module` fails as if it were not installed."""
    code = (
        f"import sys; sys.modules[{module!r}] = None\n"
        "from packcfg.cli import main\n"
        f"raise SystemExit(main({list(argv)!r}))\n"
    )
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=cwd, timeout=120)


@pytest.mark.parametrize(
    ("module", "argv", "extra"),
    [
        ("torch", ["train", "recipes/tiny_cpu_sft.yaml"], "train"),
        ("torch", ["demo"], "train"),
        ("pyarrow", ["verify", "x.parquet"], "pack"),
        ("pyarrow", ["analyze"], "pack"),
        ("tokenizers", ["pack"], "pack"),
    ],
)
def test_missing_dependency_is_one_line_before_any_work(tmp_path, module, argv, extra):
    import shutil
    from pathlib import Path

    shutil.copytree(Path(__file__).parents[1] / "recipes", tmp_path / "recipes")
    proc = run_without(module, *argv, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and f"pip install 'packcfg[{extra}]'" in lines[0]
    assert module in lines[0]
    if module == "torch":
        assert "torch==2.13.0" in lines[0]  # the CPU-only pin, not a multi-GB CUDA build
    assert not (tmp_path / "runs").exists()  # nothing started


def test_require_and_missing_modules():
    assert missing_modules(["json", "packcfg_no_such_module", "no_such_parent.child"]) == [
        "packcfg_no_such_module",
        "no_such_parent.child",
    ]
    require("lint", "pack", ["json"])
    with pytest.raises(MissingExtra, match=r"pip install 'packcfg\[hf\]'"):
        require("export-hf", "hf", ["packcfg_no_such_module"])


def test_train_extra_can_train_every_shipped_recipe():
    """`[train]` alone must carry what the executor imports for the bundled recipes (tokenizers included)."""
    import tomllib
    from pathlib import Path

    data = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())
    train = " ".join(data["project"]["optional-dependencies"]["train"])
    for module in EXTRAS["train"]:
        distribution = {"megatron.core": "megatron-core"}.get(module, module)
        assert distribution in train
