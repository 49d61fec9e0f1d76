"""Map legacy spellings to current Megatron Bridge ones, remembering where each value was written.

`normalize` is total: any input (wrong types anywhere) returns a result and never raises, and it
never mutates its input. Rules read the normalised config; diagnostics point at `renamed` paths.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from packcfg.core.diagnostics import ConfigPath

# (legacy path, current path): a value written at the legacy path moves to the current one when the
# current one is absent. Bridge still accepts the train.* evaluation fields but reads validation.*.
LEGACY_MOVES: tuple[tuple[ConfigPath, ConfigPath], ...] = (
    (("dataset", "pack_sequences_in_batch"), ("dataset", "enable_in_batch_packing")),
    (("train", "eval_micro_batch_size"), ("validation", "eval_micro_batch_size")),
    (("train", "eval_global_batch_size"), ("validation", "eval_global_batch_size")),
    (("train", "eval_iters"), ("validation", "eval_iters")),
    (("train", "eval_interval"), ("validation", "eval_interval")),
    (("train", "skip_train"), ("validation", "skip_train")),
)

LEGACY_SPECS: ConfigPath = ("dataset", "packed_sequence_specs")
SPECS: ConfigPath = ("dataset", "offline_packing_specs")
ENABLE_OFFLINE: ConfigPath = ("dataset", "enable_offline_packing")


@dataclass
class Normalized:
    config: dict[str, Any]
    renamed: dict[ConfigPath, ConfigPath] = field(default_factory=dict)  # normalised -> as written


def _copy(value: Any) -> Any:
    """Copy mappings and lists so the caller's data is never touched; leaves scalars shared."""
    try:
        return copy.deepcopy(value)
    except Exception:  # an exotic object that cannot be copied: share it, we never mutate leaves
        return value


def _move(
    config: dict[str, Any], old: ConfigPath, new: ConfigPath, renamed: dict[ConfigPath, ConfigPath]
) -> bool:
    """Move the value at `old` to `new` (same parent section kinds) unless `new` is already set."""
    old_parent = config.get(old[0])
    if not isinstance(old_parent, dict) or old[1] not in old_parent:
        return False
    new_parent = config.get(new[0])
    if new_parent is None and new[0] not in config:
        new_parent = config[new[0]] = {}
    if not isinstance(new_parent, dict) or new[1] in new_parent:
        return False  # the current spelling wins; the legacy key stays where it is (DP rules report it)
    new_parent[new[1]] = old_parent.pop(old[1])
    renamed[new] = old
    return True


def legacy_packing_off(specs: Any) -> bool:
    """Whether `packed_sequence_specs` (the Bridge < 0.6 spelling) leaves packing off: a mapping whose
    packed_sequence_size is absent (default -1) or an integer <= 0. Any other value (a positive size, a wrong
    type, an interpolation lint cannot resolve) keeps the old reading, packing on, for the rules to judge."""
    if not isinstance(specs, dict):
        return False
    size = specs.get("packed_sequence_size", -1)
    return isinstance(size, int) and not isinstance(size, bool) and size <= 0


def normalize(raw: Any) -> Normalized:
    """The config with legacy spellings mapped to current ones (see LEGACY_MOVES and the specs rename)."""
    if not isinstance(raw, dict):
        return Normalized(config={})
    config: dict[str, Any] = {k: _copy(v) for k, v in raw.items() if isinstance(k, str)}
    renamed: dict[ConfigPath, ConfigPath] = {}

    dataset = config.get("dataset")
    if isinstance(dataset, dict) and LEGACY_SPECS[1] in dataset and SPECS[1] not in dataset:
        specs = dataset.pop(LEGACY_SPECS[1])
        dataset[SPECS[1]] = specs
        renamed[SPECS] = LEGACY_SPECS
        # Legacy meaning: non-null specs with a positive packed_sequence_size switched offline packing on;
        # there was no separate flag. A size <= 0 (or none: the default is -1) meant packing off in every
        # Bridge that reads this spelling (v0.3.1 data/datasets/packed_sequence.py:209-213, training/config.py
        # :1561-1565, data/builders/finetuning_dataset.py:77-166; likewise through v0.5.x).
        # The synthesised flag is not recorded in `renamed`: it was written nowhere, so a fix that sets it
        # must add the key (not edit the legacy one), and a diagnostic about it points at `dataset`.
        if specs is not None and ENABLE_OFFLINE[1] not in dataset and not legacy_packing_off(specs):
            dataset[ENABLE_OFFLINE[1]] = True

    for old, new in LEGACY_MOVES:
        _move(config, old, new, renamed)
    return Normalized(config=config, renamed=renamed)


# --- Bridge dumps, read as Bridge reads them (per file, before the merge) -------------------------------------

# Nested provider blocks Bridge serializes under `model`: the builder-backed model configs (Bridge main 067f987,
# `models/gpt/model_config.py` BridgeGPTModelConfig, `models/common/base.py` ModelConfig.from_dict: a `_builder_`
# key beside `_target_`) keep Megatron Core's TransformerConfig fields in `model.transformer`, and Bridge's
# `__setattr__` routes `model.<field>` to the block that declares it. So a field under `model.transformer` is the
# `model` field of that name.
NESTED_PROVIDER_BLOCKS: tuple[tuple[str, str], ...] = (("model", "transformer"),)
ENUM_KEYS = frozenset({"_target_", "_args_", "_name_", "_call_"})


def _is_enum_dump(value: dict[str, Any]) -> bool:
    """`{_target_: <Enum class>, _args_: [...], _name_: NAME}` (Megatron's yaml_utils enum representer)."""
    return isinstance(value.get("_name_"), str) and "_target_" in value and value.keys() <= ENUM_KEYS


def _enums(value: Any, pos: Any) -> tuple[Any, bool]:
    """Enum dumps replaced by their NAME (also inside lists); positions lose the enum's inner keys."""
    if isinstance(value, dict):
        if _is_enum_dump(value):
            if pos is not None:
                pos.children = {}
            return value["_name_"], True
        changed = False
        out: dict[str, Any] = {}
        for k, v in value.items():
            child = pos.children.get(k) if pos is not None else None
            out[k], c = _enums(v, child)
            changed = changed or c
        return (out if changed else value), changed
    if isinstance(value, list):
        changed = False
        items = []
        for i, v in enumerate(value):
            child = pos.children.get(str(i)) if pos is not None else None
            item, c = _enums(v, child)
            items.append(item)
            changed = changed or c
        return (items if changed else value), changed
    return value, False


def read_dump(
    data: dict[str, Any], positions: dict[str, Any], *, enums: bool = True
) -> tuple[dict[str, Any], dict[str, Any]]:
    """One loaded file as Bridge reads it: enum dumps -> NAME, `model.transformer.X` -> `model.X`
    (`model._builder_` dropped: nothing packcfg checks reads it). Returns new data and positions when
    something changed, else the inputs themselves (never mutated)."""
    from packcfg.core.yamlsource import PosNode

    out = data
    pos_out = positions
    # enums: only the sections that hold one are copied
    for key, value in data.items() if enums else ():
        if not isinstance(value, dict | list):
            continue
        pos = positions.get(key)
        pos_copy = _copy_pos(pos) if pos is not None else None
        new, changed = _enums(value, pos_copy)
        if changed:
            if out is data:
                out, pos_out = dict(data), dict(positions)
            out[key] = new
            if pos_copy is not None:
                pos_out[key] = pos_copy
    for section, block in NESTED_PROVIDER_BLOCKS:
        sec = out.get(section)
        if not isinstance(sec, dict) or not (isinstance(sec.get(block), dict) or "_builder_" in sec):
            continue
        if out is data:
            out, pos_out = dict(data), dict(positions)
        sec_pos = pos_out.get(section)
        sec_children = dict(sec_pos.children) if sec_pos is not None else {}
        block_pos = sec_children.pop(block, None)
        nested = isinstance(sec.get(block), dict)
        dropped = (block, "_builder_") if nested else ("_builder_",)
        new_sec = {k: v for k, v in sec.items() if k not in dropped}
        sec_children.pop("_builder_", None)
        if not nested and block_pos is not None:
            sec_children[block] = block_pos
        inner = sec.get(block)
        for k, v in (inner if isinstance(inner, dict) else {}).items():
            if k == "_target_" or k in new_sec:
                continue  # the block's own class; a field set at `model` level wins
            new_sec[k] = v
            if block_pos is not None and k in block_pos.children:
                sec_children[k] = block_pos.children[k]
        out[section] = new_sec
        if sec_pos is not None:
            pos_out[section] = PosNode(sec_pos.file, sec_pos.line, sec_pos.column, sec_children)
    return out, pos_out


def _copy_pos(pos: Any) -> Any:
    from packcfg.core.yamlsource import PosNode

    return PosNode(pos.file, pos.line, pos.column, {k: _copy_pos(v) for k, v in pos.children.items()})
