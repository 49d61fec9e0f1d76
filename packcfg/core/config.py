"""Load an experiment config: YAML files merged in order, then dotted overrides, with provenance.

`load_located` is the one loader: it returns the merged mapping together with the position (file, line,
column) of every key, each pointing at the file and line that last set it, and every problem found in the
files (as findings, for the lint flow). `load_config` is the plain-data view the pack, train and launch
flows read: the same loader, raising `ConfigError` on the first problem that leaves no usable data.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from packcfg.core.diagnostics import ConfigPath, Position
from packcfg.core.yamlsource import LoadProblem, PosNode, YamlDocument, load_file


class ConfigError(Exception):
    """A config that cannot be loaded; the message names the file, line and value."""


OVERRIDE_PREFIX = "<-o "
"""Pseudo file name of an `-o` override: `<-o train.micro_batch_size=1>` line 1, column 1."""


def override_source(text: str) -> str:
    return f"{OVERRIDE_PREFIX}{text}>"


def is_override_source(file: str) -> bool:
    return file.startswith(OVERRIDE_PREFIX) and file.endswith(">")


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
    except (yaml.YAMLError, ValueError) as exc:  # ValueError: an integer too long to convert
        raise ConfigError(f"override {text!r}: value is not valid YAML ({exc.__class__.__name__})") from None
    return path, value


PositionTree = dict[str, PosNode]


def deep_merge(
    base: dict[str, Any],
    update: dict[str, Any],
    *,
    positions: PositionTree | None = None,
    update_positions: PositionTree | None = None,
) -> dict[str, Any]:
    """Mappings merge key by key; any other value (lists included) replaces.

    With `positions` (the tree of `base`, updated in place) and `update_positions` (that of `update`), the
    key positions follow the values: a merged section points at the last file that named it, a replaced
    value at the file that replaced it. This is the only merge; plain loading just passes no positions.
    """
    out = dict(base)
    for key, value in update.items():
        new_pos = update_positions.get(key) if update_positions is not None else None
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            if positions is None:
                out[key] = deep_merge(out[key], value)
                continue
            old_pos = positions.get(key)
            children = dict(old_pos.children) if old_pos else {}
            out[key] = deep_merge(
                out[key],
                value,
                positions=children,
                update_positions=new_pos.children if new_pos else {},
            )
            where = new_pos or old_pos
            if where is not None:
                positions[key] = PosNode(where.file, where.line, where.column, children)
        else:
            out[key] = _clone(value)
            if positions is not None:
                if new_pos is not None:
                    positions[key] = new_pos
                else:
                    positions.pop(key, None)
    return out


def _clone(value: Any) -> Any:
    """A copy of plain config data (dicts, lists, scalars): much cheaper than copy.deepcopy's memo walk."""
    if isinstance(value, dict):
        return {k: _clone(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_clone(v) for v in value]
    return value


def get_path(config: Any, path: Sequence[str], default: Any = None) -> Any:
    """The value at `a.b.c` in a plain config mapping; `default` when any step is missing or not a mapping."""
    node = config
    for key in path:
        if not isinstance(node, Mapping) or key not in node:
            return default
        node = node[key]
    return node


def set_path(
    config: dict[str, Any],
    path: Sequence[str],
    value: Any,
    *,
    positions: PositionTree | None = None,
    position: Position | None = None,
) -> None:
    """Set `a.b.c` in `config`, creating sections; with `positions`, the new keys point at `position`."""
    node = config
    pos_node = positions
    for key in path[:-1]:
        child = node.get(key)
        if not isinstance(child, dict):
            child = {}
            node[key] = child
            if pos_node is not None and position is not None:
                pos_node[key] = PosNode.at(position)
        node = child
        if pos_node is not None:
            entry = pos_node.get(key)
            if entry is None and position is not None:
                entry = PosNode.at(position)
            elif entry is not None:  # copy on write: the loaded documents' trees stay as they were read
                entry = PosNode(entry.file, entry.line, entry.column, dict(entry.children))
            if entry is not None:
                pos_node[key] = entry
            pos_node = entry.children if entry is not None else None
    node[path[-1]] = value
    if pos_node is not None and position is not None:
        pos_node[path[-1]] = _uniform(value, position)


def _uniform(value: Any, position: Position) -> PosNode:
    """Positions for a value set by an override: everything inside it was set there too."""
    entry = PosNode.at(position)
    if isinstance(value, dict):
        entry.children = {str(k): _uniform(v, position) for k, v in value.items()}
    elif isinstance(value, list):
        entry.children = {str(i): _uniform(v, position) for i, v in enumerate(value)}
    return entry


class SourceMap:
    """Where each key of a merged config was set (implements `packcfg.lint.context.SourceMap`)."""

    def __init__(self, files: Sequence[str], tree: PositionTree) -> None:
        self.files = list(files)
        self.tree = tree

    def exact(self, path: ConfigPath) -> Position | None:
        """The position of `path` itself, or None when it is not in the config."""
        nodes = self.tree
        found: PosNode | None = None
        for key in path:
            found = nodes.get(key)
            if found is None:
                return None
            nodes = found.children
        return found.position if found else None

    def position(self, path: ConfigPath) -> Position:
        """Where `path` was set; a missing key points at its nearest present parent section, and a key
        with no present parent at line 1, column 1 of the first file."""
        nodes = self.tree
        best = Position(self.files[0] if self.files else "<string>", 1, 1)
        for key in path:
            found = nodes.get(key)
            if found is None:
                break
            best = found.position
            nodes = found.children
        return best


@dataclass
class LocatedConfig:
    """A merged config with its provenance and the problems found in its files."""

    data: dict[str, Any]
    sources: SourceMap
    documents: list[YamlDocument] = field(default_factory=list)
    overrides: list[str] = field(default_factory=list)

    @property
    def problems(self) -> list[tuple[str, LoadProblem]]:
        """(file, problem) for every file problem, in file order."""
        return [(doc.file, p) for doc in self.documents for p in doc.problems]

    @property
    def ok(self) -> bool:
        """True when every file gave usable data (rules can run)."""
        return all(doc.ok for doc in self.documents)


def check_readable(path: Path) -> None:
    """Raise ConfigError for a path that is not a regular, readable file (never block on a FIFO)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such file") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read ({exc.strerror or exc})") from None
    if stat.S_ISDIR(st.st_mode):
        raise ConfigError(f"{path}: is a directory, not a YAML file")
    if not stat.S_ISREG(st.st_mode):
        raise ConfigError(f"{path}: not a regular file")


def load_document(path: str | Path, display_name: str | None = None) -> YamlDocument:
    """One YAML file with positions; ConfigError when it cannot be read at all (exit 2 territory)."""
    p = Path(path)
    check_readable(p)
    try:
        return load_file(p, display_name)
    except OSError as exc:
        raise ConfigError(f"{p}: cannot read ({exc.strerror or exc})") from None


def merge_documents(documents: Sequence[YamlDocument], overrides: Sequence[str] = ()) -> LocatedConfig:
    """Merge loaded documents in order, then apply `-o` overrides (ConfigError for a malformed one)."""
    loaded = [doc for doc in documents if doc.data is not None]
    if len(loaded) == 1 and not overrides:
        # The common lint case, one file: nothing to merge, so no copy (lint never mutates the data).
        merged, tree = loaded[0].data or {}, dict(loaded[0].positions)
    else:
        merged, tree = {}, {}
        for doc in loaded:
            merged = deep_merge(merged, doc.data or {}, positions=tree, update_positions=doc.positions)
    for text in overrides:
        key, value = parse_override(text)
        set_path(merged, key, value, positions=tree, position=Position(override_source(text), 1, 1))
    files = [doc.file for doc in documents] or [override_source(overrides[0]) if overrides else "<string>"]
    return LocatedConfig(merged, SourceMap(files, tree), list(documents), list(overrides))


def load_located(paths: Sequence[str | Path], overrides: Sequence[str] = ()) -> LocatedConfig:
    """Merge the YAML files in order, then `-o` overrides, keeping where every key was set."""
    return merge_documents([load_document(p) for p in paths], overrides)


def load_config(paths: Sequence[str | Path], overrides: Sequence[str] = ()) -> dict[str, Any]:
    """Merge the YAML files in order, then apply `-o` overrides; returns the resolved mapping."""
    if not paths:
        raise ConfigError("no config file given")
    located = load_located(paths, overrides)
    for file, problem in located.problems:
        if problem.fatal:
            raise ConfigError(f"{file}:{problem.line}:{problem.column}: {problem.code} {problem.message}")
    return located.data
