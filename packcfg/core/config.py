"""Load an experiment config as plain data: YAML files merged in order, then dotted overrides.

This is what the pack, train and launch flows read. The lint flow loads the same files with source
positions (see `packcfg.core.yamlsource`); both share the merge and override semantics defined here.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml


class ConfigError(Exception):
    """A config that cannot be loaded; the message names the file, line and value."""


def parse_override(text: str) -> tuple[tuple[str, ...], Any]:
    """`a.b.c=value` -> (("a", "b", "c"), value), the value parsed as a YAML scalar/flow."""
    key, sep, raw = text.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"override {text!r}: expected KEY.PATH=VALUE")
    path = tuple(part for part in key.strip().split("."))
    if any(not part for part in path):
        raise ConfigError(f"override {text!r}: empty key in {key!r}")
    try:
        value = yaml.safe_load(raw) if raw.strip() else None
    except yaml.YAMLError as exc:
        raise ConfigError(f"override {text!r}: value is not valid YAML ({exc.__class__.__name__})") from None
    return path, value


def deep_merge(base: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    """Mappings merge key by key; any other value (lists included) replaces."""
    out = dict(base)
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def set_path(config: dict[str, Any], path: Sequence[str], value: Any) -> None:
    node = config
    for key in path[:-1]:
        child = node.get(key)
        if not isinstance(child, dict):
            child = {}
            node[key] = child
        node = child
    node[path[-1]] = value


def load_config(paths: Sequence[str | Path], overrides: Sequence[str] = ()) -> dict[str, Any]:
    """Merge the YAML files in order, then apply `-o` overrides; returns the resolved mapping."""
    if not paths:
        raise ConfigError("no config file given")
    merged: dict[str, Any] = {}
    for p in paths:
        path = Path(p)
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{path}: cannot read ({exc.__class__.__name__}: {exc})") from None
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
            raise ConfigError(f"{where}: invalid YAML ({getattr(exc, 'problem', exc)})") from None
        if data is None:
            data = {}
        if not isinstance(data, dict):
            raise ConfigError(f"{path}:1:1: top level must be a mapping, got {type(data).__name__}")
        merged = deep_merge(merged, data)
    for text in overrides:
        key, value = parse_override(text)
        set_path(merged, key, value)
    return merged
