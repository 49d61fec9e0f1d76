"""Small helpers the rule modules share: fix edits at the path as written, value checks."""

from __future__ import annotations

from typing import Any

from packcfg.core.diagnostics import ConfigPath, Edit
from packcfg.lint.context import RuleContext

SPECS: ConfigPath = ("dataset", "offline_packing_specs")


def spec_path(key: str) -> ConfigPath:
    return (*SPECS, key)


def spec_name(ctx: RuleContext, key: str | None = None) -> str:
    """The specs section, or one of its keys, as the file spells it, without `dataset.`:
    `offline_packing_specs.pad_seq_to_mult`, or `packed_sequence_specs.pad_seq_to_mult` (Bridge < 0.6)."""
    return ctx.spelled(spec_path(key) if key else SPECS, skip=1)


def set_edit(ctx: RuleContext, path: ConfigPath, value: Any) -> Edit:
    """Set `path` (normalised) to `value`; the engine maps it to the path as the user wrote it."""
    return Edit("set", path, value)


def is_pos_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0
