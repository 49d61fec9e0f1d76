"""The Bridge side of the oracle: a Bridge recipe function + a case as an override file + validate().

Two Bridge lines, one per oracle venv (the installed `megatron-bridge` decides, `LINE`): 0.3.1 (with
megatron-core 0.16.1) and 0.6.x (0.6.2 with megatron-core 0.19.2, forced onto Python 3.11, see
/work/shared/spec/environment.md). What differs on 0.6 is at the end of this docstring.

Runs only in the oracle venv (see conftest.py). The merge is Bridge's own:
`megatron.bridge.training.utils.omegaconf_utils.process_config_with_overrides(cfg, config_filepath=FILE)`
(create_omegaconf_dict_config -> OmegaConf.load + OmegaConf.merge -> to_container(resolve=True) ->
apply_overrides), as scripts/training/run_recipe.py and the examples' finetune scripts do, then
`runtime_config_update(cfg)` (which calls `cfg.validate()`) with WORLD_SIZE set from the case's `launch`
section (nodes x gpus_per_node), else the smallest world the merged parallel layout fits.

Case files use current Bridge's field names; Bridge 0.3.1 has older ones for the same settings. `to_031()`
rewrites them (and nothing else) before the merge, and the packcfg side lints the same rewritten file:
- `dataset.offline_packing_specs` + `dataset.enable_offline_packing: true` -> `dataset.packed_sequence_specs`
  (0.3.1 has no flag: specs present means offline packing on).
- no offline packing in the case -> `dataset.packed_sequence_specs: null`, so the recipe's own default packing
  (0.3.1 SFT recipes pack by default) does not leak into a case that does not pack.
- `dataset.enable_in_batch_packing` -> `dataset.pack_sequences_in_batch`.
- the specs carry `_target_: ...PackedSequenceSpecs` (0.3.1's apply_overrides sets a plain dict, which
  validate() cannot read, when the recipe's specs are None and the override names no class).
- `model.cuda_graph_impl: full_iteration` -> `local` with `full_iteration` in `cuda_graph_scope` (0.3.1's
  spelling of a full-iteration graph; rules.md counts both as full-iteration).
- packcfg's own sections (`recipe`, `launch`) are dropped: Bridge has no such sections.
- `_target_` keys are dropped: the recipe supplies the classes. (With `dataset._target_` in an override file,
  Bridge 0.3.1's apply_overrides re-instantiates the dataset config from the merged dict and leaves the nested
  packed_sequence_specs a plain dict, so validate() fails with AttributeError whatever the values: a 0.3.1
  quirk of override files that name classes, not a packing check.)

On Bridge 0.6.x (`to_06`) the cases keep their (current) field names; the rewrite is the other way round and
only what makes the case replace the recipe's own data settings, as a user's override file means them:
- legacy spellings become 0.6's: `packed_sequence_specs` -> `offline_packing_specs` (+ `enable_offline_packing:
  true` when its size is positive, the < 0.6 meaning), `pack_sequences_in_batch` -> `enable_in_batch_packing`;
- the case's offline packing replaces the recipe's: `enable_offline_packing: false` and `offline_packing_specs:
  null` unless the case sets them (0.6's GPT SFT recipes pack by default); specs get 0.6's class;
- a case with `dataset.dataset_root` replaces the recipe's Hugging Face source (`hf_dataset` and its split and
  output settings null, `hf_rewrite: false`): 0.6 wants exactly one source (GPTSFTDatasetConfig.validate(),
  data/builders/gpt_sft.py);
- `checkpoint.pretrained_checkpoint` points at an existing temporary folder: 0.6 checks that it exists, and a
  case means "the checkpoint is there";
- packcfg's own sections and `_target_` keys are dropped, as for 0.3.1.
Recipes are looked up by name in 0.6's `megatron.bridge.recipes` (VLM recipes are `*_sft_config` /
`*_peft_config` there, `*_finetune_config` in 0.3.1), built with their defaults, and packcfg lints the same merge
over the recipe's own `to_yaml()` written on the fly (`Bridge.snapshot`): packcfg's shipped snapshots are 0.3.1's.
Recipes that pin a Hugging Face revision (0.6's Qwen3 recipes) find their config under that revision in the
offline cache (`Bridge._pin_revisions`).
"""

from __future__ import annotations

import copy
import json
import logging
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PACKCFG_SECTIONS = ("recipe", "launch", "dpo")
SPECS_CLASS = "megatron.bridge.data.datasets.packed_sequence.PackedSequenceSpecs"  # v0.3.1
SPECS_CLASS_06 = (
    "megatron.bridge.data.packing.config.PackedSequenceSpecs"  # v0.6.0: data/packing/config.py:27
)


def installed_version() -> str:
    """The installed megatron-bridge version ("0.3.1", "0.6.2"); "" without one."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("megatron-bridge")
    except PackageNotFoundError:
        return ""


def line_of(version: str) -> str:
    """The line: 0.6 for Bridge 0.6 and later (the renamed packing fields, GPTSFTDatasetConfig), else 0.3."""
    m = re.match(r"(\d+)\.(\d+)", version)
    return "0.6" if m and (int(m[1]), int(m[2])) >= (0, 6) else "0.3"


VERSION = installed_version()
LINE = line_of(VERSION)

# model._target_ class name (current and 0.3.1 spellings) -> Bridge 0.3.1 recipe stem.
MODEL_RECIPES: list[tuple[str, str]] = [
    (r"^Llama3ModelProvider70B$|^LlamaModelProvider70B$", "llama3_70b"),
    (r"^Llama3ModelProvider8B$|^LlamaModelProvider8B$", "llama3_8b"),
    (r"^Llama31ModelProvider8B$", "llama31_8b"),
    (r"^Qwen3ModelProvider8B$", "qwen3_8b"),
    (r"^Qwen3MoEModelProvider30B_A3B$", "qwen3_30b_a3b"),
    (r"^Qwen3NextModelProvider80B_A3B$", "qwen3_next_80b_a3b"),
    (r"^Qwen25VLModelProvider$", "qwen25_vl_7b"),
    (r"^Qwen3VLModelProvider$", "qwen3_vl_8b"),
]
# HF model ids (tokenizer.tokenizer_model / model.hf_model_id) -> recipe stem, when the class is generic.
HF_RECIPES: list[tuple[str, str]] = [
    (r"Meta-Llama-3-70B", "llama3_70b"),
    (r"Meta-Llama-3-8B", "llama3_8b"),
    (r"Llama-3\.2-1B", "llama32_1b"),
    (r"Qwen3-8B", "qwen3_8b"),
    (r"Qwen2\.5-VL-7B", "qwen25_vl_7b"),
    (r"Qwen3-VL-8B", "qwen3_vl_8b"),
    (r"Qwen3-Next-80B-A3B", "qwen3_next_80b_a3b"),
]
VLM_STEMS = ("qwen25_vl_", "qwen3_vl_")


@dataclass
class Verdict:
    recipe: str
    world: int
    rejected: bool
    message: str = ""
    ignored_keys: list[str] = field(
        default_factory=list
    )  # case keys Bridge 0.3.1 skipped (not a field there)


def recipe_for(case: dict[str, Any], line: str = "0.3") -> tuple[str | None, str]:
    """The Bridge recipe function (of `line`) a case is merged over, or (None, why not)."""
    model = case.get("model") or {}
    recipe = case.get("recipe") or {}
    target = str(model.get("_target_", "")) if isinstance(model, dict) else ""
    cls = target.rsplit(".", 1)[-1]
    stem = next((s for pat, s in MODEL_RECIPES if re.search(pat, cls)), None)
    if stem is None:
        ids = " ".join(
            str(x)
            for x in (
                (case.get("tokenizer") or {}).get("tokenizer_model")
                if isinstance(case.get("tokenizer"), dict)
                else None,
                model.get("hf_model_id") if isinstance(model, dict) else None,
            )
            if x
        )
        if cls in ("", "GPTModelProvider"):
            stem = next((s for pat, s in HF_RECIPES if re.search(pat, ids)), None)
    if stem is None:
        return None, f"no Bridge {line} recipe mapped for model {cls or '?'}"
    mode = recipe.get("mode") if isinstance(recipe, dict) else None
    if stem.startswith(VLM_STEMS) and line == "0.3":
        task = "finetune"
    elif mode == "peft" or case.get("peft"):
        task = "peft"
    else:
        task = "sft"
    return f"{stem}_{task}_config", ""


def _drop_targets(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: _drop_targets(v) for k, v in node.items() if k != "_target_"}
    if isinstance(node, list):
        return [_drop_targets(v) for v in node]
    return node


def to_031(case: dict[str, Any]) -> dict[str, Any]:
    """The case with current Bridge field names rewritten to 0.3.1's (see the module docstring)."""
    out = {k: _drop_targets(copy.deepcopy(v)) for k, v in case.items() if k not in PACKCFG_SECTIONS}
    model = out.get("model")
    if isinstance(model, dict) and model.get("cuda_graph_impl") == "full_iteration":
        model["cuda_graph_impl"] = "local"
        scope = model.get("cuda_graph_scope") or []
        scope = [s.strip() for s in scope.split(",")] if isinstance(scope, str) else list(scope)
        model["cuda_graph_scope"] = [s for s in scope if s and s != "full"] + ["full_iteration"]
    ds = out.get("dataset")
    if isinstance(ds, dict):
        flag = ds.pop("enable_offline_packing", None)
        specs = ds.pop("offline_packing_specs", None)
        if "packed_sequence_specs" not in ds:
            ds["packed_sequence_specs"] = specs if (flag is True and specs is not None) else None
        if isinstance(ds.get("packed_sequence_specs"), dict):
            # Over a recipe whose specs are None, apply_overrides would set a plain dict: name the class.
            ds["packed_sequence_specs"] = {"_target_": SPECS_CLASS, **ds["packed_sequence_specs"]}
        if "enable_in_batch_packing" in ds:
            ds["pack_sequences_in_batch"] = ds.pop("enable_in_batch_packing")
    elif ds is None and "dataset" not in out:
        out["dataset"] = {"packed_sequence_specs": None}
    return out


# The recipe's Hugging Face source fields (r0.6.0 data/builders/gpt_sft.py, GPTSFTDatasetConfig): a case that
# names `dataset_root` replaces them, as 0.6 allows exactly one source.
HF_SOURCE_FIELDS = (
    "hf_dataset",
    "hf_validation_dataset",
    "hf_test_dataset",
    "hf_output_root",
    "hf_validation_proportion",
)


def to_06(case: dict[str, Any], pretrained_dir: Path | None = None) -> dict[str, Any]:
    """The case as an override file for a Bridge 0.6.x recipe (see the module docstring)."""
    out = {k: _drop_targets(copy.deepcopy(v)) for k, v in case.items() if k not in PACKCFG_SECTIONS}
    ds = out.get("dataset")
    if ds is None and "dataset" not in out:
        ds = out["dataset"] = {}
    if isinstance(ds, dict):
        if "packed_sequence_specs" in ds and "offline_packing_specs" not in ds:
            legacy = ds.pop("packed_sequence_specs")
            ds["offline_packing_specs"] = legacy
            size = legacy.get("packed_sequence_size", -1) if isinstance(legacy, dict) else None
            on = legacy is not None and not (
                isinstance(size, int) and not isinstance(size, bool) and size <= 0
            )
            ds.setdefault("enable_offline_packing", on)
            if not on:
                ds["offline_packing_specs"] = None  # packing off in the < 0.6 meaning
        if "pack_sequences_in_batch" in ds and "enable_in_batch_packing" not in ds:
            ds["enable_in_batch_packing"] = ds.pop("pack_sequences_in_batch")
        ds.setdefault("enable_offline_packing", False)
        ds.setdefault("offline_packing_specs", None)
        if isinstance(ds.get("offline_packing_specs"), dict):
            # Over a recipe whose specs are None, apply_overrides would set a plain dict: name the class.
            ds["offline_packing_specs"] = {"_target_": SPECS_CLASS_06, **ds["offline_packing_specs"]}
        if ds.get("dataset_root") is not None:
            for key in HF_SOURCE_FIELDS:
                ds.setdefault(key, None)
            ds.setdefault("hf_rewrite", False)
    ckpt = out.get("checkpoint")
    if isinstance(ckpt, dict) and ckpt.get("pretrained_checkpoint") and pretrained_dir is not None:
        # 0.6's CheckpointConfig checks that the folder exists (0.3.1 does not); the case means "one exists".
        ckpt["pretrained_checkpoint"] = str(pretrained_dir)
    return out


def to_bridge(case: dict[str, Any], line: str = LINE, pretrained_dir: Path | None = None) -> dict[str, Any]:
    """The case as an override file for the installed Bridge line (`pretrained_dir`: an existing folder that
    stands for the case's `checkpoint.pretrained_checkpoint` on 0.6, which checks that it exists)."""
    return to_06(case, pretrained_dir) if line == "0.6" else to_031(case)


def world_size(case: dict[str, Any], cfg) -> int:
    launch = case.get("launch") or {}
    if isinstance(launch, dict) and launch.get("nodes") and launch.get("gpus_per_node"):
        return int(launch["nodes"]) * int(launch["gpus_per_node"])
    m = cfg.model
    base = m.tensor_model_parallel_size * m.pipeline_model_parallel_size * m.context_parallel_size
    ep = getattr(m, "expert_model_parallel_size", 1) or 1
    etp = getattr(m, "expert_tensor_parallel_size", None) or m.tensor_model_parallel_size
    return math.lcm(base, ep * etp * m.pipeline_model_parallel_size)


SCRIPTS = Path(__file__).resolve().parents[2] / "scripts" / "bridge_data"


def load_script(name: str):
    """Import scripts/bridge_data/<name>.py under a private module name (no clash with the recipes/ folder)."""
    import importlib.util
    import sys

    mod_name = f"_packcfg_bridge_data_{name}"
    if mod_name in sys.modules:
        return sys.modules[mod_name]
    spec = importlib.util.spec_from_file_location(mod_name, SCRIPTS / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[mod_name] = mod
    spec.loader.exec_module(mod)
    return mod


class _Skipped(logging.Handler):
    PAT = re.compile(r"Key '([^']+)' in overrides not found in config object (\w+)")

    def __init__(self):
        super().__init__(logging.WARNING)
        self.keys: list[str] = []

    def emit(self, record):
        m = self.PAT.search(record.getMessage())
        if m:
            self.keys.append(f"{m[2]}.{m[1]}")


class Bridge:
    """One import of the installed Bridge (with the CPU stand-ins) shared by the whole session."""

    def __init__(self, hf_home: Path):
        cpu_env = load_script("cpu_env")
        gen = load_script("recipes")
        cpu_env.setup(hf_home)
        self.version, self.line = VERSION, LINE
        if self.line == "0.6":
            self._pin_revisions(Path(os.environ["HF_HUB_CACHE"]))
        import megatron.bridge.recipes as bridge_recipes
        from megatron.bridge.training.config import runtime_config_update
        from megatron.bridge.training.utils.omegaconf_utils import process_config_with_overrides

        self.recipes = bridge_recipes
        self.cpu_env = cpu_env
        index = Path(__file__).resolve().parents[2] / "packcfg" / "data" / "bridge_recipes" / "index.json"
        self.index = json.loads(index.read_text())["recipes"]
        self.gen = gen
        self._update = runtime_config_update
        self._process = process_config_with_overrides
        self._snapshots = Path(hf_home) / "snapshots"
        self._snapshots.mkdir(exist_ok=True)

    @staticmethod
    def _pin_revisions(hub: Path) -> None:
        """Bridge 0.6's Qwen3 recipes load their HF config at a pinned revision
        (`AutoBridge.from_hf_pretrained(_QWEN3_8B_MODEL_ID, revision=_QWEN3_8B_MODEL_REVISION)`,
        recipes/qwen/h100/qwen3.py): give the offline cache's config.json under those revisions too. The
        constants are read from the recipe modules' source (importing them needs the cache already)."""
        import importlib.util

        spec = importlib.util.find_spec("megatron.bridge.recipes")
        if spec is None or not spec.submodule_search_locations:
            return
        for folder in spec.submodule_search_locations:
            for path in Path(folder).rglob("*.py"):
                text = path.read_text(encoding="utf-8", errors="replace")
                consts = dict(re.findall(r"^(_[A-Z0-9_]+)\s*=\s*[\"']([^\"']+)[\"']", text, re.MULTILINE))
                for name, revision in consts.items():
                    model_id = consts.get(name.removesuffix("_REVISION") + "_ID")
                    if not name.endswith("_MODEL_REVISION") or model_id is None:
                        continue
                    repo = hub / ("models--" + model_id.replace("/", "--"))
                    main = repo / "snapshots" / ("0" * 40) / "config.json"
                    pinned = repo / "snapshots" / revision / "config.json"
                    if main.exists() and not pinned.exists():
                        pinned.parent.mkdir(parents=True, exist_ok=True)
                        pinned.write_bytes(main.read_bytes())

    def has(self, name: str) -> bool:
        if self.line == "0.6":
            return callable(getattr(self.recipes, name, None))
        return name in self.index

    def build(self, recipe: str):
        """The recipe's config as run_recipe.py loads it (0.3.1: `load_recipe(name, peft_scheme=None)`; 0.6:
        the function with its defaults, as `load_recipe` calls it without a PEFT scheme or sequence length)."""
        if self.line == "0.6":
            return getattr(self.recipes, recipe)()
        return self.gen.build(self.gen.resolve(self.index[recipe]["function"]))

    def snapshot(self, recipe: str) -> Path:
        """The recipe's `ConfigContainer.to_yaml()` (what packcfg merges the case over), written once."""
        path = self._snapshots / f"{recipe}.yaml"
        if not path.exists():
            import tempfile

            cfg = self.build(recipe)
            with tempfile.TemporaryDirectory() as tmp, self.gen._sets_as_lists():
                dump = Path(tmp) / "r.yaml"
                cfg.to_yaml(str(dump))
                body = dump.read_text().replace(os.getcwd(), "${oc.env:PWD}")
            part = path.with_suffix(".part")
            part.write_text(body)
            os.replace(part, path)
        return path

    def validate_recipe(self, recipe: str) -> tuple[int, str | None]:
        """(smallest world, Bridge's message or None) for the recipe itself."""
        cfg = self.build(recipe)
        world = self.gen.min_world(cfg)
        return world, self.gen.validate_at(cfg, world)

    def verdict(self, recipe: str, override_file: Path | None, case: dict[str, Any]) -> Verdict:
        cfg = self.build(recipe)
        handler = _Skipped()
        log = logging.getLogger("megatron.bridge.training.utils.omegaconf_utils")
        log.addHandler(handler)
        world = 0
        try:
            if override_file is not None:
                cfg = self._process(cfg, config_filepath=str(override_file))
            world = world_size(case, cfg)
            old = os.environ.get("WORLD_SIZE")
            os.environ["WORLD_SIZE"] = str(world)
            try:
                self._update(cfg)
            finally:
                os.environ["WORLD_SIZE"] = old if old is not None else "1"
        except (
            Exception
        ) as e:  # Bridge rejects with ValueError, AssertionError, TypeError, OmegaConf errors...
            text = str(e).strip().splitlines()
            return Verdict(
                recipe, world, True, f"{type(e).__name__}: {text[0] if text else ''}", handler.keys
            )
        finally:
            log.removeHandler(handler)
        return Verdict(recipe, world, False, "", handler.keys)
