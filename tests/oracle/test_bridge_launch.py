"""`launch.engine: bridge` against Megatron Bridge 0.3.1 itself (issue 13).

The bundle packcfg renders for the shipped recipe recipes/tiny_cpu_sft_bridge.yaml is run the way Bridge's
scripts/training/run_recipe.py (v0.3.1) runs it, up to the point where training would start:
- the words torchrun hands the script parse with that script's own `parse_args` (its source is read from
  the Megatron Bridge mirror at test time; the wheel does not ship scripts/);
- the recipe it names is built, the trailing KEY=VALUE words go through
  `process_config_with_overrides(config, cli_overrides=...)` exactly as its main() does, none of them is
  silently skipped by Bridge, and the result passes Bridge's own validation (runtime_config_update).
"""

from __future__ import annotations

import argparse
import ast
import os
import shlex
import subprocess
from pathlib import Path

import pytest
import yaml

MIRROR = Path("/work/.mirror/NVIDIA-NeMo+Megatron-Bridge/repo")
RECIPE = Path(__file__).resolve().parents[2] / "recipes" / "tiny_cpu_sft_bridge.yaml"


def _script_source(tag: str) -> str:
    try:
        return subprocess.run(
            ["git", "-C", str(MIRROR), "show", f"{tag}:scripts/training/run_recipe.py"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip(f"Megatron Bridge mirror with {tag} not available at {MIRROR}")


def _parse_args_031(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    """run_recipe.py v0.3.1's own `parse_args`, executed from its source; the two registries it reads
    (STEP_FUNCTIONS, TRAIN_MODES) keep their keys (their values are Bridge functions the parser never calls)."""
    tree = ast.parse(_script_source("v0.3.1"))
    namespace: dict = {"argparse": argparse}
    body = []
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
        names = [t.id for t in targets if isinstance(t, ast.Name)]
        if isinstance(node, ast.Assign | ast.AnnAssign) and set(names) & {"STEP_FUNCTIONS", "TRAIN_MODES"}:
            assert isinstance(node.value, ast.Dict)
            keys = [ast.literal_eval(k) for k in node.value.keys]
            namespace[names[0]] = dict.fromkeys(keys)
        elif isinstance(node, ast.FunctionDef) and node.name == "parse_args":
            body.append(node)
    assert body, "run_recipe.py v0.3.1 has no parse_args"
    exec(compile(ast.Module(body=body, type_ignores=[]), "run_recipe.py@v0.3.1", "exec"), namespace)
    import sys

    saved = sys.argv
    sys.argv = ["run_recipe.py", *argv]
    try:
        return namespace["parse_args"]()
    finally:
        sys.argv = saved


def _render(tmp_path: Path) -> Path:
    out = tmp_path / "bundle"
    run = subprocess.run(
        [
            os.environ.get("PACKCFG_MAIN_PYTHON", "python3"),
            "-m",
            "packcfg",
            "render",
            str(RECIPE),
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        cwd=RECIPE.parents[1],
    )
    if run.returncode != 0:
        # The oracle venv has packcfg's source on its path (repo root) but maybe not jinja2: render here.
        import sys

        run = subprocess.run(
            [sys.executable, "-m", "packcfg", "render", str(RECIPE), "--out", str(out)],
            capture_output=True,
            text=True,
            cwd=RECIPE.parents[1],
        )
    assert run.returncode == 0, run.stderr
    return out


def _script_words(bundle: Path) -> list[str]:
    """The words after `torchrun <options>` in the bundle's torchrun.sh."""
    text = (bundle / "torchrun.sh").read_text()
    command = text[text.index("exec torchrun") :].replace("\\\n", " ")
    words = shlex.split(command.replace('"${rdzv[@]}"', ""))
    assert words[:2] == ["exec", "torchrun"]
    words = words[2:]
    while words and words[0].startswith("--"):
        words.pop(0)
    return words


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    return _render(tmp_path_factory.mktemp("bridge"))


def test_command_parses_with_run_recipe_031(bundle: Path) -> None:
    words = _script_words(bundle)
    assert words[0].endswith("scripts/training/run_recipe.py")
    args, overrides = _parse_args_031(words[1:])
    assert args.recipe == "llama32_1b_sft_config"
    assert args.step_func == "gpt_step"
    # Every other word is a KEY=VALUE override for process_config_with_overrides.
    assert overrides and all("=" in o and not o.startswith("-") for o in overrides)
    assert "train.global_batch_size=8" in overrides


def test_overlay_loads_with_omegaconf(bundle: Path) -> None:
    from omegaconf import OmegaConf

    overlay = OmegaConf.load(bundle / "bridge_overlay.yaml")
    assert "recipe" not in overlay and "launch" not in overlay
    parquet = yaml.safe_load((bundle / "config.yaml").read_text())["dataset"]["offline_packing_specs"][
        "packed_train_data_path"
    ]
    # Bridge 0.3.1 reads packs only as .npy (tests/oracle/test_bridge_packed_data.py): the Parquet's sibling
    assert parquet.endswith("/train.parquet")
    assert overlay.dataset.packed_sequence_specs.packed_train_data_path == parquet[: -len("parquet")] + "npy"


def test_overrides_over_the_recipe_validate(bundle: Path, bridge) -> None:
    """As run_recipe.py's main(): recipe(), then process_config_with_overrides(cli_overrides=...), then
    Bridge's own validation at the world size the bundle starts (1 node x 2)."""
    import logging

    from bridge_side import _Skipped

    words = _script_words(bundle)
    args, overrides = _parse_args_031(words[1:])
    cfg = bridge.gen.build(bridge.gen.resolve(bridge.index[args.recipe]["function"]))
    handler = _Skipped()
    log = logging.getLogger("megatron.bridge.training.utils.omegaconf_utils")
    log.addHandler(handler)
    try:
        cfg = bridge._process(cfg, cli_overrides=overrides)
    finally:
        log.removeHandler(handler)
    assert handler.keys == [], f"Bridge skipped overrides it does not know: {handler.keys}"
    assert cfg.train.global_batch_size == 8
    assert cfg.dataset.packed_sequence_specs.packed_train_data_path.endswith("train.npy")
    old = os.environ.get("WORLD_SIZE")
    os.environ["WORLD_SIZE"] = "2"
    try:
        bridge._update(cfg)
    finally:
        os.environ["WORLD_SIZE"] = old if old is not None else "1"
