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
        # Legacy meaning: non-null specs switched offline packing on; there was no separate flag.
        # The synthesised flag is not recorded in `renamed`: it was written nowhere, so a fix that sets it
        # must add the key (not edit the legacy one), and a diagnostic about it points at `dataset`.
        if specs is not None and ENABLE_OFFLINE[1] not in dataset:
            dataset[ENABLE_OFFLINE[1]] = True

    for old, new in LEGACY_MOVES:
        _move(config, old, new, renamed)
    return Normalized(config=config, renamed=renamed)
