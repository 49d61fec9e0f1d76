"""Snapshot Megatron Bridge's fine-tuning recipe functions as packcfg base recipes.

Run inside the oracle venv (megatron-bridge 0.3.1 + megatron-core 0.16.1 on CPU; .ci/oracle.sh builds it):

    .venv-oracle/bin/python scripts/gen_bridge_recipes.py [--out packcfg/data/bridge_recipes] [--only NAME ...]

For every SFT / PEFT / finetune recipe function of the families in FAMILIES that `megatron.bridge.recipes`
exports, it builds the config exactly as Bridge's `scripts/training/run_recipe.py --recipe NAME` does
(v0.3.1 `load_recipe`: the function called with `peft=None` where it takes `peft` or **kwargs, nothing else)
and writes `ConfigContainer.to_yaml()` of it, unvalidated (what a user's override file is merged over), to
`<out>/<function name>.yaml` under a comment header naming this script, the Bridge and Core versions and the
function's import path. `<out>/index.json` maps each name to its file, function, family, model id and
whether the recipe itself passes Bridge's `runtime_config_update` (validate) at its smallest world size
(TP*PP*CP*EP-compatible), with Bridge's message where it does not.

Names: Bridge's `run_recipe.py --recipe` takes the full function name at v0.3.1 and at HEAD (HEAD also takes
`--model STEM --mode sft|peft`, which it turns into `STEM_sft_config` / `STEM_peft_config`); the index key
is that full name, and each entry also records `model` (the stem), `task`, and `exported` (false where
0.3.1's `megatron.bridge.recipes` does not export the function, so run_recipe.py cannot name it).

The offline HF cache and the two CPU stand-ins come from cpu_env.py (see its docstring).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import inspect
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
DEFAULT_OUT = REPO / "packcfg" / "data" / "bridge_recipes"

# Bridge recipe module (under megatron.bridge.recipes) -> packcfg family id (packcfg/core/families.yaml).
FAMILIES: dict[str, str] = {
    "llama.llama3": "llama",
    "qwen.qwen2": "qwen2",
    "qwen.qwen3": "qwen3",
    "qwen.qwen3_moe": "qwen3_moe",
    "qwen.qwen3_next": "qwen3_next",
    "qwen_vl.qwen25_vl": "qwen25_vl",
    "qwen_vl.qwen3_vl": "qwen3_vl",
    "nemotronh.nemotronh": "nemotron",
    "nemotronh.nemotron_nano_v2": "nemotron",
    "nemotronh.nemotron_3_nano": "nemotron",
    "gpt_oss.gpt_oss": "gpt_oss",
}
# Within qwen.qwen2 only the Qwen 2.5 recipes are snapshotted.
NAME_FILTER: dict[str, str] = {"qwen.qwen2": r"^qwen25_"}
TASK = re.compile(r"^(?P<model>.+)_(?P<task>sft|peft|finetune)_config$")
# Not snapshotted, and why (shown in index.json under "skipped").
SKIP: dict[str, str] = {
    "nemotron_nano_v2_vl_12b_finetune_config": "its HF config needs trust_remote_code model code from the Hub",
}


def _recipe_kwargs(fn) -> dict:
    """The arguments run_recipe.py v0.3.1 `load_recipe(name, peft_scheme=None)` passes."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return {"peft": None}
    var_kw = any(p.kind == inspect.Parameter.VAR_KEYWORD for p in params.values())
    return {"peft": None} if ("peft" in params or var_kw) else {}


def build(fn):
    """Call a recipe function as run_recipe.py does (with its TypeError fallback)."""
    try:
        return fn(**_recipe_kwargs(fn))
    except TypeError:
        return fn()


def resolve(function: str):
    """The recipe function at a dotted import path (index.json's "function")."""
    import importlib

    module, _, name = function.rpartition(".")
    return getattr(importlib.import_module(module), name)


def min_world(cfg) -> int:
    m = cfg.model
    base = m.tensor_model_parallel_size * m.pipeline_model_parallel_size * m.context_parallel_size
    ep = getattr(m, "expert_model_parallel_size", 1) or 1
    etp = getattr(m, "expert_tensor_parallel_size", None) or m.tensor_model_parallel_size
    world = base
    while world % (ep * etp * m.pipeline_model_parallel_size) != 0:
        world += base
    return world


def validate_at(cfg, world: int) -> str | None:
    """Bridge's runtime_config_update (-> validate) on a copy at WORLD_SIZE=world; None or Bridge's message."""
    from megatron.bridge.training.config import runtime_config_update

    old = os.environ.get("WORLD_SIZE")
    os.environ["WORLD_SIZE"] = str(world)
    try:
        runtime_config_update(copy.deepcopy(cfg))
        return None
    except Exception as e:  # Bridge raises ValueError, AssertionError, TypeError...
        return f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"[:300]
    finally:
        if old is None:
            os.environ.pop("WORLD_SIZE", None)
        else:
            os.environ["WORLD_SIZE"] = old


def discover() -> list[tuple[str, str, str]]:
    """(function name, module, family) for every snapshotted recipe, in a stable order.

    Includes recipes their module defines but `megatron.bridge.recipes` does not export (0.3.1's Qwen2.5-VL):
    run_recipe.py cannot name those (it resolves getattr(megatron.bridge.recipes, name)); the index marks them
    `"exported": false` and they are called by import path.
    """
    import importlib

    out = []
    for mod_name, family in FAMILIES.items():
        mod = importlib.import_module(f"megatron.bridge.recipes.{mod_name}")
        for name, obj in vars(mod).items():
            if not callable(obj) or getattr(obj, "__module__", None) != mod.__name__:
                continue
            if not TASK.match(name):
                continue
            if mod_name in NAME_FILTER and not re.match(NAME_FILTER[mod_name], name):
                continue
            out.append((name, mod.__name__, family))
    return sorted(out)


@contextlib.contextmanager
def _sets_as_lists():
    """Write Python sets (LoRA's `params_to_save`) as sorted lists, not `!!set`, which OmegaConf cannot load."""
    import yaml

    saved = yaml.SafeDumper.yaml_representers.get(set)
    yaml.SafeDumper.add_representer(set, lambda dumper, value: dumper.represent_list(sorted(value)))
    try:
        yield
    finally:
        yaml.SafeDumper.yaml_representers[set] = saved


def header(name: str, module: str) -> str:
    from importlib.metadata import version

    return (
        f"# Generated by scripts/gen_bridge_recipes.py (scripts/bridge_data/recipes.py); do not edit.\n"
        f"# megatron-bridge {version('megatron-bridge')}, megatron-core {version('megatron-core')}\n"
        f"# recipe: {module}.{name}() as run_recipe.py --recipe {name} builds it; ConfigContainer.to_yaml()\n"
        f"# (Python sets are written as sorted lists: OmegaConf cannot load !!set)\n"
    )


def generate(out: Path, only: list[str] | None = None) -> dict:
    from importlib.metadata import version

    import megatron.bridge.recipes as recipes

    out.mkdir(parents=True, exist_ok=True)
    index_path = out / "index.json"
    old = json.loads(index_path.read_text()) if index_path.exists() and only else {}
    entries = dict(old.get("recipes", {}))
    skipped = dict(SKIP)
    for name, module, family in discover():
        if only and name not in only:
            continue
        if name in SKIP:
            continue
        t0 = time.time()
        try:
            cfg = build(resolve(f"{module}.{name}"))
        except Exception as e:
            skipped[name] = f"the recipe function raised {type(e).__name__}: {str(e).splitlines()[0][:200]}"
            print(f"skip {name}: {skipped[name]}", file=sys.stderr)
            continue
        world = min_world(cfg)
        problem = validate_at(cfg, world)
        with tempfile.TemporaryDirectory() as tmp, _sets_as_lists():
            dump = Path(tmp) / "r.yaml"
            cfg.to_yaml(str(dump))
            body = dump.read_text()
        # Bridge's recipes default their run folders to os.getcwd()/nemo_experiments: keep that meaning
        # ("the folder the job starts in") instead of the generating machine's checkout path, so the
        # snapshots do not depend on where they were generated.
        body = body.replace(os.getcwd(), "${oc.env:PWD}")
        target = out / f"{name}.yaml"
        tmp_target = target.with_suffix(".yaml.tmp")
        tmp_target.write_text(header(name, module) + body)
        os.replace(tmp_target, target)
        m = TASK.match(name)
        entries[name] = {
            "file": target.name,
            "function": f"{module}.{name}",
            "family": family,
            "model": m["model"],
            "task": m["task"],
            "hf_model_id": getattr(cfg.tokenizer, "tokenizer_model", None),
            "exported": hasattr(recipes, name),
            "min_world_size": world,
            "validates": problem is None,
            "validate_error": problem,
        }
        print(
            f"{name}: {len(body)} bytes, world {world}, validate {'ok' if problem is None else problem}"
            f" ({time.time() - t0:.1f}s)",
            file=sys.stderr,
        )
    index = {
        "generator": "scripts/gen_bridge_recipes.py",
        "megatron_bridge": version("megatron-bridge"),
        "megatron_core": version("megatron-core"),
        "name": "the recipe function name, as Bridge's run_recipe.py --recipe takes it",
        "recipes": dict(sorted(entries.items())),
        "skipped": dict(sorted(skipped.items())),
    }
    tmp_index = index_path.with_suffix(".json.tmp")
    tmp_index.write_text(json.dumps(index, indent=1) + "\n")
    os.replace(tmp_index, index_path)
    return index


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument(
        "--only", nargs="*", help="regenerate only these recipe names (keeps the rest of the index)"
    )
    args = ap.parse_args(argv)
    sys.path.insert(0, str(HERE))
    import cpu_env

    with tempfile.TemporaryDirectory(prefix="packcfg-hf-") as hf_home:
        cpu_env.setup(Path(hf_home))
        index = generate(args.out, args.only)
    print(f"{len(index['recipes'])} recipes written to {args.out}, {len(index['skipped'])} skipped")
    return 0
