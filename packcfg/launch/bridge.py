"""`launch.engine: bridge`: the job runs Megatron Bridge's own entry point instead of packcfg's executor.

The command is the one Bridge's `scripts/training/run_recipe.py` takes (read at the tag named by
`launch.bridge.version`):

- v0.3.1 (`git show v0.3.1:scripts/training/run_recipe.py`, `parse_args`): `--recipe NAME` (required),
  `--mode {finetune,pretrain}`, `--step_func {gpt_step,llava_step,vlm_step}`, `--peft_scheme`,
  `--packed_sequence`, `--seq_length`; `parser.parse_known_args()` hands every other word to
  `process_config_with_overrides(config, cli_overrides=...)` as a Hydra-style `KEY=VALUE` override.
- HEAD (`git show HEAD:scripts/training/run_recipe.py`, `_build_parser` / `_collect_overrides`):
  `--recipe` or `--model` (one required), `--mode {pretrain,sft,lora,dora}`, `--step-func`/`--step_func`,
  convenience flags; the rest must be `KEY=VALUE` (a word starting with `-` is an error).

Neither version has a `--config-file` option, so the resolved config goes to `run_recipe.py` as
`KEY=VALUE` overrides (the overlay flattened, in file order); the overlay itself is written into the
bundle as `bridge_overlay.yaml` (OmegaConf-loadable) and handed as `--config-file` only to a user's own
`launch.bridge.entry` script (the convention of Bridge's example scripts, e.g.
`examples/models/qwen3_next/finetune_qwen3_next_80b_a3b.py` at v0.3.1).
"""

from __future__ import annotations

import json
import math
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from packcfg.core.bridge_version import LAUNCH_DEFAULT
from packcfg.launch import LaunchError

# The script's place inside NVIDIA's NeMo / Megatron Bridge containers.
DEFAULT_SCRIPT = "/opt/Megatron-Bridge/scripts/training/run_recipe.py"
OVERLAY = "bridge_overlay.yaml"
# version -> (mode choices, step-function flag), from each tag's run_recipe.py (module docstring).
VERSIONS: dict[str, tuple[tuple[str, ...], str]] = {
    "0.3.1": (("finetune", "pretrain"), "--step_func"),
    # r0.6.0 (0.6.0 to 0.6.2): the same command line as HEAD
    "0.6": (("pretrain", "sft", "lora", "dora"), "--step-func"),
    "head": (("pretrain", "sft", "lora", "dora"), "--step-func"),
}
_06 = re.compile(r"0\.6(\.(\d+|x))?\Z")
STEP_FUNCS_031 = ("gpt_step", "llava_step", "vlm_step")
KEYS = ("recipe", "entry", "version", "step_func", "mode", "script")
# packcfg's own sections: never seen by Bridge.
OWN = ("recipe", "launch")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_PATH = re.compile(r"/[A-Za-z0-9._/+-]+\Z")
# A Hydra override value that needs no quoting.
_PLAIN = re.compile(r"[A-Za-z0-9_./@+-]+\Z")


@dataclass(frozen=True)
class BridgeSpec:
    recipe: str | None
    entry: str | None
    version: str
    step_func: str | None
    mode: str | None
    script: str

    @property
    def target(self) -> str:
        return self.entry or self.script


def _fail(key: str, value: Any, why: str) -> LaunchError:
    return LaunchError(f"launch.bridge.{key} = {value!r}: {why}")


def bridge_spec(section: Any) -> BridgeSpec:
    """Check `launch.bridge` (engine: bridge); raises LaunchError naming the bad key."""
    if section is None:
        section = {}
    if not isinstance(section, Mapping):
        raise LaunchError(f"launch.bridge = {section!r}: expected a mapping (recipe: NAME or entry: PATH)")
    for key, value in section.items():
        if key not in KEYS:
            raise LaunchError(f"launch.bridge.{key}: unknown key (expected one of {', '.join(KEYS)})")
        if value is not None and not isinstance(value, str):
            raise _fail(key, value, "expected a string")
    recipe, entry = section.get("recipe"), section.get("entry")
    if bool(recipe) == bool(entry):
        raise LaunchError(
            "launch.bridge: give exactly one of recipe (a Bridge recipe function name) "
            "or entry (a script path inside the container)"
        )
    if recipe is not None and not _NAME.match(recipe):
        raise _fail("recipe", recipe, "expected a Bridge recipe function name, e.g. llama3_8b_sft_config")
    if entry is not None and not _PATH.match(entry):
        raise _fail("entry", entry, "expected an absolute script path inside the container")
    version = str(section.get("version") or LAUNCH_DEFAULT).lower().removeprefix("v")
    if version == "main":
        version = "head"
    elif _06.match(version):
        version = "0.6"
    if version not in VERSIONS:
        raise _fail("version", section.get("version"), f"expected one of {', '.join(VERSIONS)}")
    modes, _ = VERSIONS[version]
    mode = section.get("mode")
    if mode is not None and mode not in modes:
        raise _fail("mode", mode, f"run_recipe.py {version} takes --mode {', '.join(modes)}")
    step = section.get("step_func")
    if step is not None and (not _NAME.match(step) or (version == "0.3.1" and step not in STEP_FUNCS_031)):
        raise _fail("step_func", step, f"expected one of {', '.join(STEP_FUNCS_031)}")
    script = section.get("script") or DEFAULT_SCRIPT
    if not _PATH.match(script):
        raise _fail("script", script, "expected an absolute path inside the container")
    return BridgeSpec(recipe, entry, version, step, mode, script)


# Bundle-relative paths reach Bridge as OmegaConf interpolations of this variable, which the job's scripts
# export as the bundle folder: Bridge resolves them (`OmegaConf.to_container(resolve=True)` in its
# process_config_with_overrides) to absolute paths, so they survive 0.6.x run_recipe.py's
# `os.chdir(REPO_ROOT)`, and the rendered files stay the same wherever the bundle is written.
BUNDLE_ENV = "PACKCFG_BUNDLE"
BUNDLE_REF = "${oc.env:" + BUNDLE_ENV + "}"
TOKENIZER_DIR = "tokenizer"
TOKENIZER_CLASS = "megatron.bridge.training.tokenizers.config.TokenizerConfig"  # 0.3.1 and 0.6.x
LIB_DATA = "lib/packcfg/data/"
# v0.3.1 src/megatron/bridge/training/config.py: FinetuningDatasetConfig's fields (its recipes' SFT dataset is
# HFDatasetConfig, a subclass that downloads `dataset_name` from the Hub when the job starts).
FINETUNING_CLASS_031 = "megatron.bridge.training.config.FinetuningDatasetConfig"
SPECS_CLASS_031 = "megatron.bridge.data.datasets.packed_sequence.PackedSequenceSpecs"
FINETUNING_FIELDS_031 = (
    "dataloader_type",
    "num_workers",
    "data_sharding",
    "pin_memory",
    "persistent_workers",
    "trust_remote_code",
    "dataset_root",
    "seq_length",
    "seed",
    "memmap_workers",
    "max_train_samples",
    "packed_sequence_specs",
    "dataset_kwargs",
    "do_validation",
    "do_test",
)
SPECS_FIELDS_031 = (
    "packed_sequence_size",
    "tokenizer_model_name",
    "packed_train_data_path",
    "packed_val_data_path",
    "packed_metadata_path",
    "pad_cu_seqlens",
    "pad_seq_to_mult",
)
# Hugging Face sources, downloaded by rank 0 when the job starts. 0.6.x (r0.6.0 data/builders/gpt_sft.py,
# GPTSFTDatasetConfig): these with these "off" values; its validate() wants exactly one of dataset_root and
# hf_dataset, and none of the others beside dataset_root.
HF_FIELDS_06: dict[str, Any] = {
    "hf_dataset": None,
    "hf_validation_dataset": None,
    "hf_test_dataset": None,
    "hf_output_root": None,
    "hf_validation_proportion": None,
    "hf_rewrite": False,
}
# 0.3.1 (data/builders/hf_dataset.py, HFDatasetConfig's own fields).
HF_FIELDS_031 = (
    "dataset_name",
    "dataset_subset",
    "dataset_dict",
    "split",
    "download_mode",
    "val_proportion",
    "split_val_from_train",
    "delete_raw",
    "rewrite",
    "hf_kwargs",
    "hf_filter_lambda",
    "hf_filter_lambda_kwargs",
    "process_example_fn",
)
# 0.6-only dataset / packing-spec fields that 0.3.1 has no counterpart for (set: refused; null: left out).
ONLY_06 = ("preprocessing",)
SPECS_ONLY_06 = ("max_single_sequence_length", "num_tokenizer_workers")
# Recipe defaults that name folders under the working directory (`${oc.env:PWD}/nemo_experiments/...`):
# 0.6.x's runner changes into Bridge's folder first, so the bundle names them in its own output/.
OUTPUTS = (("checkpoint", "save", "output/checkpoints"), ("logger", "tensorboard_dir", "output/tb_logs"))


@dataclass(frozen=True)
class Prep:
    """One pack the job's data prep writes before Bridge starts (paths as config.yaml names them)."""

    split: str  # "train" or "validation"
    parquet: str  # packcfg's packs (`packcfg pack` writes them; `verify` checks the train ones)
    npy: str | None = None  # Bridge 0.3.1's copy of them (`pack --bridge-npy`)
    metadata: str | None = None  # the validation packs' own metadata file


@dataclass
class BridgePlan:
    """What the bundle hands Bridge: the overlay (Bridge's field names for the target version, paths
    as Bridge resolves them), files the bundle carries for it (an HF tokenizer folder), the data prep."""

    data: dict[str, Any]
    files: dict[str, bytes] = field(default_factory=dict)
    preps: list[Prep] = field(default_factory=list)
    # sections handed over whole (`KEY=null` then `KEY={...}`): 0.3.1's dataset, whose class changes,
    # and the tokenizer when the bundle carries its own
    whole: tuple[str, ...] = ()

    def prep_commands(self) -> list[str]:
        """The data prep's packcfg commands after the training pack (each one shell line, quoted)."""
        out: list[str] = []
        for prep in self.preps:
            if prep.split == "train":
                out.append("python3 -m packcfg verify config.yaml")
                if prep.npy:
                    out.append(f"python3 -m packcfg pack config.yaml -q --bridge-npy {shlex.quote(prep.npy)}")
                continue
            words = ["python3", "-m", "packcfg", "pack", "config.yaml", "-q", "--split", prep.split]
            words += ["--parquet", prep.parquet, "--metadata", prep.metadata or ""]
            if prep.npy:
                words += ["--bridge-npy", prep.npy]
            out.append(" ".join(shlex.quote(w) for w in words))
        return out


def _refuse(key: str, value: Any, why: str) -> LaunchError:
    return LaunchError(f"{key} = {value!r}: {why}")


def _recipe_values(spec: BridgeSpec) -> dict[str, Any]:
    """The Bridge 0.3.1 recipe's own values (packcfg's snapshot), {} when packcfg has none for it."""
    if not spec.recipe:
        return {}
    from packcfg.core.base_recipes import UnknownRecipe, recipe_path

    try:
        import yaml

        data = yaml.safe_load(recipe_path(spec.recipe).read_text(encoding="utf-8"))
    except (UnknownRecipe, OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _get(data: Mapping[str, Any], dotted: str, default: Any = None) -> Any:
    node: Any = data
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return default
        node = node[part]
    return node


def _from_pwd(value: Any) -> bool:
    return isinstance(value, str) and "${oc.env:PWD}" in value


def bundle_path(value: str) -> str:
    """A config path as Bridge is given it: `@packcfg/data/...` is the bundle's vendored copy, another
    relative path is relative to the bundle, both through BUNDLE_REF; absolute paths (the user's
    declared data and checkpoints, mounted into the container) and URLs stay as they are."""
    from packcfg.resources import BUNDLED_PREFIX, resolve_path

    if value.startswith(BUNDLED_PREFIX + "data/"):
        return f"{BUNDLE_REF}/{LIB_DATA}{value[len(BUNDLED_PREFIX + 'data/') :]}"
    if value.startswith(BUNDLED_PREFIX):
        return str(resolve_path(value))
    if not value or value.startswith(("/", "${")) or "://" in value:
        return value
    return f"{BUNDLE_REF}/{value.removeprefix('./')}"


# Config keys that name files or folders the job reads or writes (by the last part of the key); the job
# bundle (packcfg.launch.bundle) maps them too.
PATH_KEY = re.compile(
    r"(_path|_paths|_dir|_root|_file|^path|^dir|^save|^load|^pretrained_checkpoint|^tokenizer_model)\Z"
)


def _paths(node: Any, key: str) -> Any:
    if isinstance(node, Mapping):
        return {str(k): _paths(v, str(k)) for k, v in node.items()}
    if isinstance(node, list):
        return [_paths(v, key) for v in node]
    if isinstance(node, str) and PATH_KEY.search(key) and key != "tokenizer_model":
        return bundle_path(node)
    return node


def _tokenizer(section: dict[str, Any], files: dict[str, bytes]) -> None:
    """A `tokenizer.json` file becomes an HF tokenizer folder inside the bundle (tokenizer.json plus a
    tokenizer_config.json naming its end-of-sequence token, the one packcfg packs with): Bridge's
    HuggingFaceTokenizer loads a folder (AutoTokenizer.from_pretrained), not a file. A folder path goes
    through `bundle_path`; anything else is a Hugging Face model id, left as it is."""
    from packcfg.resources import BUNDLED_PREFIX, resolve_path

    value = section.get("tokenizer_model")
    if not isinstance(value, str) or not value:
        return
    if not value.endswith(".json"):
        if value.startswith((BUNDLED_PREFIX, "/", "./", "../")):
            section["tokenizer_model"] = bundle_path(value)
        return
    kind = section.get("tokenizer_type")
    if kind not in (None, "HuggingFaceTokenizer"):
        raise _refuse(
            "tokenizer.tokenizer_type",
            kind,
            "a tokenizer.json file is loaded by Bridge's HuggingFaceTokenizer",
        )
    path = resolve_path(value)
    if not path.is_file():
        raise _refuse(
            "tokenizer.tokenizer_model",
            value,
            "file not found where packcfg renders (it copies the tokenizer into the bundle as an HF folder)",
        )
    from packcfg.packing import PackingError
    from packcfg.packing.sources import load_tokenizer

    try:
        loaded = load_tokenizer(path)
    except PackingError as exc:
        raise _refuse("tokenizer.tokenizer_model", value, str(exc)) from None
    eos = loaded.tokenizer.id_to_token(loaded.eos_id)
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "eos_token": eos,
        "pad_token": loaded.tokenizer.id_to_token(loaded.pad_id) if loaded.pad_id is not None else eos,
        "model_max_length": 1 << 30,
        "clean_up_tokenization_spaces": False,
    }
    files[f"{TOKENIZER_DIR}/tokenizer.json"] = path.read_bytes()
    files[f"{TOKENIZER_DIR}/tokenizer_config.json"] = (json.dumps(config, indent=2) + "\n").encode()
    section["tokenizer_model"] = f"{BUNDLE_REF}/{TOKENIZER_DIR}"
    section["tokenizer_type"] = "HuggingFaceTokenizer"


def _packing(dataset: dict[str, Any], version: str) -> tuple[bool, dict[str, Any] | None]:
    """(offline packing on, its specs) from either spelling, removed from `dataset`. In 0.3.1 a
    packed_sequence_size <= 0 means packing off (its packed_sequence.py and finetuning_dataset.py)."""
    enabled = dataset.pop("enable_offline_packing", None)
    specs = dataset.pop("offline_packing_specs", None)
    old = dataset.pop("packed_sequence_specs", None)
    if specs is None and old is not None:
        specs = old
        if enabled is None:
            enabled = True
    if specs is not None and not isinstance(specs, Mapping):
        raise _refuse("dataset.offline_packing_specs", specs, "expected a mapping")
    specs = dict(specs) if specs else None
    if specs is None or enabled is False:
        return False, None
    size = specs.get("packed_sequence_size")
    if isinstance(size, int) and size <= 0:
        if version == "0.3.1" and old is not None:
            return False, None
        raise _refuse(
            "dataset.offline_packing_specs.packed_sequence_size", size, "must be > 0 with offline packing on"
        )
    return True, specs


def _sibling(path: str, name: str) -> str:
    head, sep, _ = path.rpartition("/")
    return f"{head}{sep}{name}"


def _check_06_alignment(config: Mapping[str, Any], base: Mapping[str, Any], specs: Mapping[str, Any]) -> None:
    """0.6.x's run_recipe.py (r0.6.0 scripts/training/recipe_runner.py, sync_offline_packing_alignment) sets
    packed_sequence_size to dataset.seq_length and pad_seq_to_mult to an lcm with the context- and
    sequence-parallel multiples before training: packs made with other values would not be the ones
    Bridge expects. Refused, with the values that agree."""

    def value(dotted: str, default: Any) -> Any:
        got = _get(config, dotted)
        return got if got is not None else _get(base, dotted, default)

    seq = value("dataset.seq_length", None)
    size = specs.get("packed_sequence_size")
    if seq is not None and size is not None and size != seq:
        raise _refuse(
            "dataset.offline_packing_specs.packed_sequence_size",
            size,
            f"Bridge 0.6's run_recipe.py packs at dataset.seq_length ({seq}); set both to the same value "
            f"(packed_sequence_size: {seq}, or seq_length: {size}) and repack",
        )
    pad = int(specs.get("pad_seq_to_mult") or 1)
    cps = {int(value("model.context_parallel_size", 1) or 1)}
    eval_cp = value("dist.eval_context_parallel_size", None)
    if eval_cp is not None:
        cps.add(int(eval_cp))
    tp = int(value("model.tensor_model_parallel_size", 1) or 1)
    sp = bool(value("model.sequence_parallel", False))
    want = math.lcm(
        pad, *[2 * c if c > 1 else 1 for c in cps], *[c * tp if sp and tp > 1 else 1 for c in cps]
    )
    if want != pad:
        raise _refuse(
            "dataset.offline_packing_specs.pad_seq_to_mult",
            pad,
            f"Bridge 0.6's run_recipe.py raises it to {want} (lcm with 2 x context_parallel_size and, with "
            f"sequence_parallel, context x tensor parallel size); set pad_seq_to_mult: {want} and repack",
        )


def plan(config: Mapping[str, Any], spec: BridgeSpec) -> BridgePlan:
    """The resolved config as the target Bridge version reads it (raises LaunchError, one line, on what
    the job could not run as given). See docs/launch.md, "What the bundle hands Bridge"."""
    version = spec.version
    base = _recipe_values(spec)
    data = {k: _paths(v, k) for k, v in config.items() if k not in OWN}
    files: dict[str, bytes] = {}
    tokenizer = data.get("tokenizer")
    if isinstance(tokenizer, dict):
        _tokenizer(tokenizer, files)
    for section, key, default in OUTPUTS:
        node = data.setdefault(section, {})
        if not isinstance(node, dict):
            continue
        if node.get(key) is None or _from_pwd(node.get(key)):
            node[key] = f"{BUNDLE_REF}/{default}"
    checkpoint = data["checkpoint"]
    if isinstance(checkpoint, dict) and (checkpoint.get("load") is None or _from_pwd(checkpoint.get("load"))):
        # resume from the job's own checkpoints (the recipes' default is the same folder as `save`)
        checkpoint["load"] = checkpoint["save"]
    plan_ = BridgePlan(data)
    plan_.files = files
    if files and isinstance(tokenizer, dict):
        # The bundle's tokenizer replaces the recipe's, and with it the recipe's settings for its own
        # tokenizer (e.g. Nemotron recipes' hf_tokenizer_kwargs eos_token '<SPECIAL_12>', which would add a
        # token to this one and make it the EOS Bridge pads with): the section is handed over whole, the
        # user's own tokenizer settings kept.
        data["tokenizer"] = {"_target_": TOKENIZER_CLASS, **tokenizer}
        plan_.whole += ("tokenizer",)
    dataset = data.get("dataset")
    if not isinstance(dataset, dict):
        dataset = {}
    dataset = dict(dataset)
    dataset.pop("_target_", None)
    base_dataset = base.get("dataset") if isinstance(base.get("dataset"), dict) else {}
    # Hugging Face sources: never downloaded by the job. A value equal to the base recipe's own (a
    # config merged over `recipe.base`) is the recipe's default source, which dataset_root replaces.
    for key in (*HF_FIELDS_06, *HF_FIELDS_031):
        if key not in dataset:
            continue
        value = dataset.pop(key)
        off = HF_FIELDS_06.get(key, None)
        if value in (None, False, off) or (key in base_dataset and base_dataset[key] == value):
            continue
        raise _refuse(
            f"dataset.{key}",
            value,
            "a Hugging Face source is downloaded when the job starts; packcfg launches local data only: "
            "set dataset.dataset_root to a folder holding training.jsonl (and validation.jsonl)",
        )
    if not dataset.get("dataset_root"):
        raise LaunchError(
            "dataset.dataset_root: not set; without it the recipe's own dataset is downloaded from the "
            "Hugging Face Hub when the job starts: set it to a local folder holding training.jsonl"
        )
    packing, specs = _packing(dataset, version)
    in_batch = dataset.pop("enable_in_batch_packing", None) or dataset.pop("pack_sequences_in_batch", None)
    if in_batch:
        raise _refuse(
            "dataset.enable_in_batch_packing",
            in_batch,
            "engine: bridge renders text SFT over a local dataset_root with offline packs; in-batch packing "
            "(VLM datasets) is not rendered for Bridge",
        )
    do_validation = dataset.get("do_validation", base_dataset.get("do_validation", True)) is not False
    if packing and specs is not None:
        # the same specs as config.yaml names them (packcfg's data prep reads that file, from the bundle)
        raw = dict(config.get("dataset") or {})
        _, raw_specs = _packing(raw, version)
        train = str((raw_specs or {}).get("packed_train_data_path") or "")
        if not train:
            raise LaunchError(
                "dataset.offline_packing_specs.packed_train_data_path: not set; packcfg packs into it before "
                "Bridge starts (Bridge would otherwise pack on its own, into dataset_root)"
            )
        for key in SPECS_ONLY_06:
            if version == "0.3.1" and specs.get(key) is not None:
                raise _refuse(
                    f"dataset.offline_packing_specs.{key}", specs[key], "Bridge 0.3.1 has no such field"
                )
            if version == "0.3.1":
                specs.pop(key, None)
        val = None
        if do_validation:
            val = str((raw_specs or {}).get("packed_val_data_path") or _sibling(train, "validation.parquet"))
            if val.endswith(".npy"):
                raise _refuse(
                    "dataset.offline_packing_specs.packed_val_data_path",
                    val,
                    "packcfg packs validation data as Parquet (and writes Bridge 0.3.1's .npy from it): "
                    "name the .parquet",
                )
        else:
            specs["packed_val_data_path"] = None
        val_meta = _sibling(val, "validation_metadata.json") if val else None
        if version == "0.3.1":
            specs["packed_train_data_path"] = bundle_path(bridge_npy_path(train))
            plan_.preps.append(Prep("train", train, npy=bridge_npy_path(train)))
            if val:
                specs["packed_val_data_path"] = bundle_path(bridge_npy_path(val))
                plan_.preps.append(Prep("validation", val, bridge_npy_path(val), val_meta))
        else:
            _check_06_alignment(config, base, specs)
            plan_.preps.append(Prep("train", train))
            if val:
                specs["packed_val_data_path"] = bundle_path(val)
                plan_.preps.append(Prep("validation", val, None, val_meta))
    if version == "0.3.1":
        for key in ONLY_06:
            if dataset.get(key) is not None:
                raise _refuse(f"dataset.{key}", dataset[key], "Bridge 0.3.1 has no such field")
            dataset.pop(key, None)
        # The recipe's HFDatasetConfig would download: the section is handed over whole as a
        # FinetuningDatasetConfig (local dataset_root), over the recipe's own values of that class's fields.
        whole: dict[str, Any] = {"_target_": FINETUNING_CLASS_031}
        for key in FINETUNING_FIELDS_031:
            if key in base_dataset and key != "packed_sequence_specs":
                whole[key] = base_dataset[key]
        whole.update(dataset)
        unknown = sorted(set(whole) - set(FINETUNING_FIELDS_031) - {"_target_"})
        if unknown:
            raise _refuse(
                f"dataset.{unknown[0]}",
                dataset.get(unknown[0]),
                "not a field of Bridge 0.3.1's FinetuningDatasetConfig",
            )
        whole["packed_sequence_specs"] = (
            {"_target_": SPECS_CLASS_031, **{k: v for k, v in specs.items() if k in SPECS_FIELDS_031}}
            if packing and specs is not None
            else None
        )
        data["dataset"] = whole
        plan_.whole += ("dataset",)
        _to_031_sections(data)
        if base:
            _check_known({k: v for k, v in data.items() if k != "dataset"}, base)
    else:
        new: dict[str, Any] = dict(HF_FIELDS_06)
        new.update(dataset)
        new["enable_offline_packing"] = packing
        new["offline_packing_specs"] = specs if packing else None
        data["dataset"] = new
    return plan_


# 0.6's `validation` section (r0.6.0 training/config.py ValidationConfig) was part of `train` in 0.3.1.
VALIDATION_TO_TRAIN_031 = ("eval_interval", "eval_iters", "skip_train")


def _to_031_sections(data: dict[str, Any]) -> None:
    """0.6-era sections of the overlay in 0.3.1's place (the dataset is translated by `plan`)."""
    validation = data.pop("validation", None)
    if validation is None:
        return
    if not isinstance(validation, Mapping):
        raise _refuse("validation", validation, "expected a mapping")
    train = data.setdefault("train", {})
    for key, value in validation.items():
        if key not in VALIDATION_TO_TRAIN_031:
            raise _refuse(
                f"validation.{key}", value, "Bridge 0.3.1 has no such field (its eval settings are train.*)"
            )
        if key in train and train[key] != value:
            raise _refuse(
                f"validation.{key}",
                value,
                f"train.{key} = {train[key]!r} says otherwise (0.3.1 has only that one)",
            )
        train[key] = value


def _check_known(data: Mapping[str, Any], base: Mapping[str, Any], prefix: str = "") -> None:
    """Every override key must be a field of the recipe's config (0.3.1's override parser runs in struct
    mode: an unknown key stops the job at start with "Could not override"). `base` is packcfg's snapshot of
    the 0.3.1 recipe (Bridge's own to_yaml of it)."""
    for key, value in data.items():
        if key == "_target_":
            continue
        path = f"{prefix}{key}"
        if key not in base:
            raise _refuse(
                path,
                value,
                "not a field of the Bridge 0.3.1 recipe's config (run_recipe.py would stop: "
                '"Could not override"); remove it or render for launch.bridge.version 0.6',
            )
        if isinstance(value, Mapping) and isinstance(base[key], Mapping):
            _check_known(value, base[key], path + ".")


def overlay(config: Mapping[str, Any], version: str = "0.6") -> dict[str, Any]:
    """`plan(config, ...).data` for a recipe-named bridge section of that version (kept for callers)."""
    section = dict((config.get("launch") or {}).get("bridge") or {})
    section["version"] = version
    if not section.get("recipe") and not section.get("entry"):
        section["recipe"] = "unknown_recipe"
    return plan(config, bridge_spec(section)).data


def bridge_npy_path(parquet: str) -> str:
    """Where Bridge 0.3.1 is given the packs of `parquet`: the same name with the suffix `.npy`."""
    stem, dot, suffix = parquet.rpartition(".")
    return f"{stem}.npy" if dot and suffix in ("parquet", "pq") and "/" not in suffix else f"{parquet}.npy"


def _value(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return json.dumps(value)
    if isinstance(value, str):
        if _PLAIN.match(value) and value.lower() not in ("null", "true", "false", "none"):
            return value
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    if isinstance(value, list | tuple):
        return "[" + ",".join(_value(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{" + ",".join(f"{k}:{_value(v)}" for k, v in value.items()) + "}"
    raise LaunchError(f"cannot pass {value!r} to Bridge as an override")


def overrides(data: Mapping[str, Any], whole: tuple[str, ...] = ()) -> list[str]:
    """The overlay as `KEY=VALUE` overrides, leaves in file order. `_target_` keys are left out: the
    named recipe owns the classes (an override cannot swap a dataclass's type). A section in `whole` is
    handed over as one value instead, `_target_` included: `KEY=null` then `KEY={...}`, so that nothing
    of the recipe's section is merged into it (Hydra merges a mapping into a mapping; into null it sets
    it), and Bridge's apply_overrides instantiates the mapping as the class it names. (Not `~KEY`: 0.6.x's
    run_recipe.py takes only words with `=`.)"""
    out: list[str] = []

    def walk(node: Mapping[str, Any], prefix: str) -> None:
        for key, value in node.items():
            if key == "_target_":
                continue
            path = f"{prefix}{key}"
            if not prefix and key in whole and isinstance(value, Mapping):
                out.extend([f"{path}=null", f"{path}={_value(value)}"])
            elif isinstance(value, Mapping) and value:
                walk(value, path + ".")
            else:
                out.append(f"{path}={_value(value)}")

    walk(data, "")
    return out


def command_args(
    spec: BridgeSpec, data: Mapping[str, Any], overlay_file: str | None = None, whole: tuple[str, ...] = ()
) -> list[str]:
    """The words after `torchrun <options>`: the script and its arguments, as run_recipe.py takes them.
    `overlay_file`: where an `entry` script finds the overlay (default: in its working directory)."""
    if spec.entry:
        return [spec.entry, "--config-file", overlay_file or OVERLAY]
    _, step_flag = VERSIONS[spec.version]
    args = [spec.script, "--recipe", spec.recipe or ""]
    if spec.mode:
        args += ["--mode", spec.mode]
    if spec.step_func:
        args += [step_flag, spec.step_func]
    return [*args, *overrides(data, whole)]
