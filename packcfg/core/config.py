"""Load an experiment config as Megatron Bridge reads it: YAML files merged in order over an optional base recipe,
then Hydra overrides, then interpolation resolved, with provenance (docs/lint.md, "Merging and positions").

`load_located` is the one loader: it returns the merged mapping together with the position (file, line,
column) of every key, each pointing at the file and line that last set it, and every problem found in the
files (as findings, for the lint flow). `load_config` is the plain-data view the pack, train and launch
flows read: the same loader, raising `ConfigError` on the first problem that leaves no usable data.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from packcfg.core.diagnostics import ConfigPath, Position
from packcfg.core.inputs import check_input, describe_os_error
from packcfg.core.interpolate import Unknown, has_interpolation, is_unknown
from packcfg.core.yamlsource import LoadProblem, PosNode, YamlDocument, load_file

if TYPE_CHECKING:
    from packcfg.core.overrides import Override

# packcfg.core.overrides kinds (that module and base_recipes are imported only when a run has overrides or a base)
ADD, DELETE = "add", "delete"

_REEXPORTED = (Unknown, is_unknown)  # rules and facts may test values with `is_unknown` from here


class ConfigError(Exception):
    """A config that cannot be loaded; the message names the file, line and value."""


COMMAND_LINE = " (command line)"
"""Pseudo file name of a command-line override: the word as the user typed it, then this, e.g.
`train.micro_batch_size=4 (command line)`, line 1, column 1."""


def override_source(text: str) -> str:
    """Where an override was set, as the user typed it: a flag that stands for an override (`--recipe NAME`,
    `--bridge-version V`, `--engine E`; `packcfg.core.cli_args.TypedOverride`) keeps its own spelling."""
    return f"{getattr(text, 'typed', text)}{COMMAND_LINE}"


def is_override_source(file: str) -> bool:
    return file.endswith(COMMAND_LINE)


def override_words(file: str) -> str:
    """The override as typed, from its pseudo file name (`override_source`)."""
    return file[: -len(COMMAND_LINE)] if is_override_source(file) else file


def parse_override(text: str) -> tuple[tuple[str, ...], Any]:
    """`a.b.c=value` -> (("a", "b", "c"), value), the value in Hydra's override grammar
    (`packcfg.core.overrides`); ConfigError naming the override when it is malformed."""
    parsed = parse_override_full(text)
    return parsed.path, parsed.value


def parse_override_full(text: str) -> Override:
    """The override with its kind (`KEY=V`, `+KEY=V`, `++KEY=V`, `~KEY`); ConfigError when malformed."""
    from packcfg.core.overrides import parse_override as _parse_override

    try:
        return _parse_override(text)
    except ValueError as exc:  # OverrideError
        raise ConfigError(str(exc)) from None


def check_overrides(overrides: Sequence[str]) -> None:
    """ConfigError naming the first malformed override (before any file is read)."""
    for text in overrides:
        parse_override_full(text)


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
    # problems of the merged config itself (an interpolation Bridge could not resolve), as (file, problem)
    merge_problems: list[tuple[str, LoadProblem]] = field(default_factory=list)
    base: str | None = None  # the base recipe merged under the files (`recipe.base` / `--recipe`)

    @property
    def problems(self) -> list[tuple[str, LoadProblem]]:
        """(file, problem) for every file problem, in file order, then those of the merge."""
        return [*((doc.file, p) for doc in self.documents for p in doc.problems), *self.merge_problems]

    @property
    def ok(self) -> bool:
        """True when every file gave usable data (rules can run)."""
        return all(doc.ok for doc in self.documents)


def check_readable(path: Path) -> None:
    """Raise ConfigError for a path that is not a regular, readable file (never block on a FIFO)."""
    check_input(path, error=ConfigError)


def load_document(path: str | Path, display_name: str | None = None) -> YamlDocument:
    """One YAML file with positions; ConfigError when it cannot be read at all (exit 2 territory)."""
    p = Path(path)
    check_readable(p)
    try:
        return load_file(p, display_name)
    except OSError as exc:
        raise ConfigError(f"{p}: cannot read ({describe_os_error(exc)})") from None


BASE_KEY: ConfigPath = ("recipe", "base")


def merge_documents(
    documents: Sequence[YamlDocument],
    overrides: Sequence[str] = (),
    *,
    mode: str = "lint",
    recipe: str | None = None,
) -> LocatedConfig:
    """Merge loaded documents in order over their base recipe, apply the overrides (Hydra grammar), then
    resolve interpolations. ConfigError for a malformed or inapplicable override or an unknown base recipe.

    `mode` says how a config is read: "lint" (Bridge dumps read as Bridge reads them, a resolver's value
    Unknown), "run" (the same, `${oc.env:VAR}` from this environment: packcfg's own flows that run it) or
    "keep" (files merged as written, resolvers kept as text: a bundle handed to the job). `recipe` (the
    `--recipe` flag) names the base recipe; else the merged `recipe.base`."""
    parsed = [parse_override_full(text) for text in overrides]
    loaded = [doc for doc in documents if doc.data is not None]
    flatten = mode != "keep"
    layers = [_as_read(doc, flatten) for doc in loaded]
    if len(layers) == 1 and not parsed:
        # The common lint case, one file: nothing to merge, so no copy (lint never mutates the data).
        merged, tree = layers[0][0], dict(layers[0][1])
    else:
        merged, tree = {}, {}
        for data, positions in layers:
            merged = deep_merge(merged, data, positions=tree, update_positions=positions)
    # Bridge's order (omegaconf_utils.py `process_config_with_overrides`, v0.3.1 and main, as run_recipe.py runs
    # it): the recipe's config, `OmegaConf.merge` of the YAML file over it, then the command-line overrides.
    # The base's name may come from the files or from an override (`--recipe`).
    base = recipe if recipe is not None else _base_name(merged, parsed)
    base_doc = None
    if base is not None:
        merged, tree, base_doc = _under_base(base, merged, tree, flatten, lint=mode == "lint")
    for override in parsed:
        merged = _apply_override(merged, tree, override, flatten, strict=base_doc is not None)
    if base_doc is not None and mode == "lint":
        merged, tree = _known_only(merged, tree)
    files = [doc.file for doc in documents] or [override_source(overrides[0]) if overrides else "<string>"]
    problems: list[tuple[str, LoadProblem]] = []
    if has_interpolation(merged):
        merged, problems = _resolve(merged, tree, files[0], mode, base_doc is not None)
    located = LocatedConfig(merged, SourceMap(files, tree), list(documents), list(overrides), problems, base)
    return located


def _as_read(doc: YamlDocument, flatten: bool) -> tuple[dict[str, Any], PositionTree]:
    data, positions = doc.data or {}, doc.positions
    model = data.get("model")
    enums = "_name_" in doc.text
    builder = isinstance(model, dict) and (isinstance(model.get("transformer"), dict) or "_builder_" in model)
    if flatten and (enums or builder):
        from packcfg.core.normalize import read_dump

        data, positions = read_dump(data, positions, enums=enums)
    return data, positions


@lru_cache(maxsize=8)
def _base_document(path: Path, mtime_ns: int, name: str) -> YamlDocument:
    """A base recipe's snapshot, parsed once per process (its data is never mutated: merges copy)."""
    from packcfg.core.base_recipes import base_source

    return load_file(path, base_source(name))


def _base_name(merged: dict[str, Any], overrides: Sequence[Override] = ()) -> str | None:
    name = get_path(merged, BASE_KEY)
    for o in overrides:  # the last override that names recipe.base (or deletes it) wins
        if o.path == BASE_KEY:
            name = None if o.kind == DELETE else o.value
        elif o.path == BASE_KEY[:1] and o.kind != DELETE and isinstance(o.value, dict) and "base" in o.value:
            name = o.value["base"]
        elif o.path == BASE_KEY[:1] and o.kind == DELETE:
            name = None
    if name is None:
        return None
    if not isinstance(name, str) or not name.strip():
        raise ConfigError(f"recipe.base must be a Bridge recipe name, got {name!r}")
    return name.strip()


def _under_base(
    name: str, merged: dict[str, Any], tree: PositionTree, flatten: bool, lint: bool = False
) -> tuple[dict[str, Any], PositionTree, YamlDocument]:
    """The base recipe's values with the merged files over them."""
    from packcfg.core.base_recipes import UnknownRecipe, base_source, recipe_path

    try:
        path = recipe_path(name)
    except UnknownRecipe as exc:
        raise ConfigError(str(exc)) from None
    try:
        doc = _base_document(path, path.stat().st_mtime_ns, name)
    except OSError as exc:
        raise ConfigError(f"base recipe {name}: cannot read {path} ({exc.strerror or exc})") from None
    if doc.data is None:
        first = doc.problems[0] if doc.problems else None
        where = f" line {first.line}: {first.message}" if first else ""
        raise ConfigError(f"base recipe {name}: {path} does not load{where}")
    data, positions = _as_read(doc, flatten)
    data = {k: v for k, v in data.items() if k != "_target_"}  # ConfigContainer's own class
    base_tree = {k: v for k, v in positions.items() if k != "_target_"}
    data = _clone(data)  # overrides are applied in place next: the cached snapshot must stay as read
    out = deep_merge(data, merged, positions=base_tree, update_positions=tree)
    if get_path(out, BASE_KEY) is None:  # the merged config records its base
        set_path(out, BASE_KEY, name, positions=base_tree, position=Position(base_source(name), 1, 1))
    return out, base_tree, doc


def _known_only(data: dict[str, Any], tree: PositionTree) -> tuple[dict[str, Any], PositionTree]:
    """For lint, the merged config without the section fields that come from the base recipe and that today's
    field table does not know (fields of the Bridge release the snapshot was taken from, since removed): no rule
    reads them, and they would only be SC003 candidates the engine drops anyway (values from the base never
    draw SC003)."""
    from packcfg.core.base_recipes import is_base_source
    from packcfg.core.schema import known_fields

    known = known_fields("current")
    out: dict[str, Any] = {}
    out_tree: PositionTree = {}
    for section, value in data.items():
        fields = known.get(section)
        pos = tree.get(section)
        if fields is None or not isinstance(value, dict):
            out[section] = value
            if pos is not None:
                out_tree[section] = pos
            continue
        children_pos = pos.children if pos is not None else {}
        keep = {
            k: v
            for k, v in value.items()
            if k in fields
            or k.startswith("_")
            or k not in children_pos
            or not is_base_source(children_pos[k].file)
        }
        out[section] = keep
        if pos is not None:
            children = {k: v for k, v in pos.children.items() if k in keep}
            out_tree[section] = PosNode(pos.file, pos.line, pos.column, children)
    return out, out_tree


def _apply_override(
    merged: dict[str, Any], tree: PositionTree, override: Override, flatten: bool, strict: bool = False
) -> dict[str, Any]:
    """Hydra's `_apply_overrides_to_config` (hydra-core 1.3.2), as Bridge's `parse_hydra_overrides` runs it.

    `strict` (a base recipe is merged, so the config holds every field Bridge's does): Bridge sets the config
    to struct mode first, so `KEY=VALUE` on a key that is not there is an error, as in Bridge."""
    path = override.path
    if flatten and len(path) > 2 and path[:2] == ("model", "transformer"):
        path = ("model", *path[2:])  # a builder-backed model's nested field is the model field (read_dump)
    position = Position(override_source(override.text), 1, 1)
    key = ".".join(override.path)
    current = _lookup(merged, path)
    parent = _lookup(merged, path[:-1]) if len(path) > 1 else merged
    if isinstance(parent, list):  # `a.l.0=5`: OmegaConf.update sets a list element in place
        if override.kind == DELETE:
            raise ConfigError(
                f"override {override.text!r}: could not delete {key!r}: Hydra cannot delete a list item"
            )
        if current is _ABSENT:
            raise ConfigError(f"override {override.text!r}: {key!r} is past the end of the list")
        if override.kind == ADD and current is not None and not isinstance(override.value, dict | list):
            raise ConfigError(
                f"override {override.text!r}: could not add {key!r}: it is already set to {current!r}"
            )
        parent[int(path[-1])] = _clone(override.value)
        _set_tree(tree, path, _uniform(override.value, position))
        return merged
    if _conflict(current, override.value):
        raise ConfigError(
            f"override {override.text!r}: cannot merge a mapping into the list at {key!r} (Hydra: Error merging override)"
        )
    if strict and override.kind == "set" and current is _ABSENT and path[0] not in _OWN_SECTIONS:
        raise ConfigError(
            f"override {override.text!r}: could not override {key!r}: the config (with its base recipe) has no "
            f"such key; to add one use '+{override.text}'"
        )
    if override.kind == DELETE:
        if current is _ABSENT or current is None:
            raise ConfigError(
                f"override {override.text!r}: could not delete {key!r}: it is not in the config"
            )
        if override.has_value and override.value != current:
            raise ConfigError(
                f"override {override.text!r}: could not delete {key!r}: its value is {current!r}, "
                f"not {override.value!r}"
            )
        _delete_path(merged, tree, path)
        return merged
    if (
        override.kind == ADD
        and current is not _ABSENT
        and current is not None
        and not isinstance(override.value, dict | list)
    ):
        raise ConfigError(
            f"override {override.text!r}: could not add {key!r}: it is already set to {current!r}; "
            f"use {override.text[1:]!r} to change it or '+{override.text}' to add or replace"
        )
    value = override.value
    if isinstance(value, dict) and isinstance(current, dict):  # OmegaConf.update(merge=True)
        parent = get_path(merged, path[:-1]) if len(path) > 1 else merged
        node_tree = tree_at(tree, path)
        children = dict(node_tree.children) if node_tree is not None else {}
        parent[path[-1]] = deep_merge(
            current, value, positions=children, update_positions=_uniform(value, position).children
        )
        if node_tree is not None:
            _set_tree(tree, path, PosNode(node_tree.file, node_tree.line, node_tree.column, children))
        return merged
    set_path(merged, path, _clone(value), positions=tree, position=position)
    return merged


_ABSENT: Any = object()
_OWN_SECTIONS = ("recipe", "launch", "dpo")  # packcfg's own sections: not part of Bridge's struct config


def _lookup(config: Any, path: Sequence[str]) -> Any:
    """The value at `path` (list items by index, as OmegaConf.select reads `a.l.0`), or _ABSENT."""
    node = config
    for key in path:
        if isinstance(node, dict) and key in node:
            node = node[key]
        elif isinstance(node, list) and key.isdigit() and int(key) < len(node):
            node = node[int(key)]
        else:
            return _ABSENT
    return node


def _conflict(current: Any, value: Any) -> bool:
    """A mapping merged into a list (also deeper down) is an error in OmegaConf.update(merge=True)."""
    if isinstance(value, dict):
        if isinstance(current, list):
            return True
        if isinstance(current, dict):
            return any(k in current and _conflict(current[k], v) for k, v in value.items())
    return False


def tree_at(tree: PositionTree, path: Sequence[str]) -> PosNode | None:
    """The position node at `path` in a document's tree, or None when the path is not spelled there."""
    nodes, found = tree, None
    for key in path:
        found = nodes.get(key)
        if found is None:
            return None
        nodes = found.children
    return found


def _set_tree(tree: PositionTree, path: Sequence[str], node: PosNode) -> None:
    """Put `node` at `path`, copying the parents on the way (the documents' trees stay as read)."""
    nodes = tree
    for key in path[:-1]:
        parent = nodes.get(key)
        if parent is None:
            return
        copy = PosNode(parent.file, parent.line, parent.column, dict(parent.children))
        nodes[key] = copy
        nodes = copy.children
    nodes[path[-1]] = node


def _delete_path(merged: dict[str, Any], tree: PositionTree, path: Sequence[str]) -> None:
    parent: Any = get_path(merged, path[:-1]) if len(path) > 1 else merged
    last = path[-1]
    if isinstance(parent, dict):
        parent.pop(last, None)
    elif isinstance(parent, list) and last.isdigit() and int(last) < len(parent):
        parent.pop(int(last))
    holder = tree_at(tree, path[:-1]) if len(path) > 1 else None
    if len(path) == 1:
        tree.pop(last, None)
    elif holder is not None:
        children = dict(holder.children)
        children.pop(last, None)
        _set_tree(tree, path[:-1], PosNode(holder.file, holder.line, holder.column, children))


def _resolve(
    merged: dict[str, Any], tree: PositionTree, first_file: str, mode: str, has_base: bool
) -> tuple[dict[str, Any], list[tuple[str, LoadProblem]]]:
    """Interpolations resolved after the merge; a problem Bridge would raise is SC002 at the `${...}`."""
    from packcfg.core.interpolate import resolve

    # lint (and a bundle kept for the job) may leave a Bridge field that only Bridge's full config holds
    # unknown; packcfg's own flows that run the config need every value
    missing_ok = None if has_base or mode == "run" else _bridge_fills_in
    data, problems = resolve(merged, mode, missing_ok)
    if mode == "keep":
        from packcfg.core.interpolate import restore_text

        data = restore_text(data)
    if not problems:
        return data, []
    if mode == "run":
        p = problems[0]
        pos = SourceMap([first_file], tree).position(p.path)
        raise ConfigError(f"{pos.file}:{pos.line}:{pos.column}: {p.message}")
    out: list[tuple[str, LoadProblem]] = []
    sources = SourceMap([first_file], tree)
    for p in problems:
        pos = sources.position(p.path)
        out.append(
            (
                pos.file,
                LoadProblem(
                    "SC002",
                    p.message,
                    pos.line,
                    pos.column,
                    hint="interpolations are resolved after every file and override is merged",
                    fatal=False,
                ),
            )
        )
    return data, out


def _bridge_fills_in(target: tuple[str, ...]) -> bool:
    """Without a base recipe, a missing interpolation target that names a field of a Bridge section is filled
    in by Bridge (its config holds every field of the recipe): its value is unknown, not an error."""
    if len(target) != 2:
        return False
    from packcfg.core.schema import known_fields

    known = known_fields("legacy").get(target[0])
    return known is not None and target[1] in known


def load_located(
    paths: Sequence[str | Path],
    overrides: Sequence[str] = (),
    *,
    mode: str = "keep",
    recipe: str | None = None,
) -> LocatedConfig:
    """Merge the YAML files in order, then the overrides, keeping where every key was set."""
    return merge_documents([load_document(p) for p in paths], overrides, mode=mode, recipe=recipe)


def load_config(
    paths: Sequence[str | Path], overrides: Sequence[str] = (), *, recipe: str | None = None
) -> dict[str, Any]:
    """Merge the YAML files in order (over the base recipe, if any), then the overrides; returns the resolved
    mapping, as packcfg's own flows run it (`${oc.env:VAR}` read from this environment)."""
    if not paths:
        raise ConfigError("no config file given")
    located = load_located(paths, overrides, mode="run", recipe=recipe)
    for file, problem in located.problems:
        if problem.fatal:
            raise ConfigError(f"{file}:{problem.line}:{problem.column}: {problem.code} {problem.message}")
    return located.data
