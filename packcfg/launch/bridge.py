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
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from packcfg.launch import LaunchError

# The script's place inside NVIDIA's NeMo / Megatron Bridge containers.
DEFAULT_SCRIPT = "/opt/Megatron-Bridge/scripts/training/run_recipe.py"
OVERLAY = "bridge_overlay.yaml"
# version -> (mode choices, step-function flag), from each tag's run_recipe.py (module docstring).
VERSIONS: dict[str, tuple[tuple[str, ...], str]] = {
    "0.3.1": (("finetune", "pretrain"), "--step_func"),
    "head": (("pretrain", "sft", "lora", "dora"), "--step-func"),
}
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
    version = str(section.get("version") or "0.3.1").lower().removeprefix("v")
    if version == "main":
        version = "head"
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


def overlay(config: Mapping[str, Any], version: str = "head") -> dict[str, Any]:
    """The resolved config as Bridge reads it: packcfg's own sections left out; `@packcfg/...` paths
    made absolute (the bundle's vendored copy is not where Bridge runs). For Bridge 0.3.1 the packing
    specs take that version's spelling: `dataset.packed_sequence_specs` (a PackedSequenceSpecs,
    v0.3.1:src/megatron/bridge/data/datasets/packed_sequence.py), and `enable_offline_packing`, which
    0.3.1's FinetuningDatasetConfig does not have, is left out (packs are used when the specs name them).
    0.3.1 reads packed data only as `.npy` (its PackedSequenceSpecs asserts the suffix; a `.parquet` path
    reaches its unpacked JSONL reader), so its training path is the Parquet's `.npy` sibling
    (`bridge_npy_path`), which the job's data prep writes with `packcfg pack --bridge-npy`."""
    from packcfg.resources import BUNDLED_PREFIX, resolve_path

    def walk(node: Any) -> Any:
        if isinstance(node, Mapping):
            return {str(k): walk(v) for k, v in node.items()}
        if isinstance(node, list | tuple):
            return [walk(v) for v in node]
        if isinstance(node, str) and node.startswith(BUNDLED_PREFIX):
            return str(resolve_path(node))
        return node

    out = {k: walk(v) for k, v in config.items() if k not in OWN}
    dataset = out.get("dataset")
    if version == "0.3.1" and isinstance(dataset, dict):
        enabled = dataset.pop("enable_offline_packing", None)
        specs = dataset.pop("offline_packing_specs", None)
        if specs is not None and enabled is not False:
            renamed: dict[str, Any] = {}
            for key, value in dataset.items():
                renamed[key] = value
            if isinstance(specs, dict) and specs.get("packed_train_data_path"):
                specs = {
                    **specs,
                    "packed_train_data_path": bridge_npy_path(str(specs["packed_train_data_path"])),
                }
            renamed["packed_sequence_specs"] = specs
            dataset.clear()
            dataset.update(renamed)
    return out


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


def overrides(data: Mapping[str, Any]) -> list[str]:
    """The overlay as `KEY=VALUE` overrides, leaves in file order. `_target_` keys are left out: the
    named recipe owns the classes (an override cannot swap a dataclass's type)."""
    out: list[str] = []

    def walk(node: Mapping[str, Any], prefix: str) -> None:
        for key, value in node.items():
            if key == "_target_":
                continue
            path = f"{prefix}{key}"
            if isinstance(value, Mapping) and value:
                walk(value, path + ".")
            else:
                out.append(f"{path}={_value(value)}")

    walk(data, "")
    return out


def command_args(spec: BridgeSpec, data: Mapping[str, Any], overlay_file: str | None = None) -> list[str]:
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
    return [*args, *overrides(data)]
