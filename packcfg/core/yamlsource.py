"""Load an experiment YAML as plain data plus the 1-based line/column of every key, with OmegaConf's scalars.

Why libyaml and not ruamel.yaml here: the issue asked for ruamel.yaml round-trip, but measured on the 2-core
dev machine (2026-11-22, `recipes/tiny_cpu_sft.yaml`), ruamel's pure-Python round-trip load takes 20-70 ms per
recipe, 20-40x the 1-3 ms of this loader, so 1,000 files would take 20 s or more against a 3 s budget.
PyYAML's C parser (`yaml.compose_all` with a `CSafeLoader` subclass) builds the node tree, whose nodes carry
`start_mark` line/column, and `_Converter` turns it into plain data plus key positions in one walk.
ruamel.yaml round-trip is used only by `packcfg lint --fix` (`packcfg.lint.fix`), where keeping comments and
layout is the point and speed is not.

Every problem with the file itself is returned as a finding, never raised:
- SC001: YAML syntax, invalid UTF-8, duplicate keys, tab indentation, several documents, a top level that
  is not a mapping, keys that are not scalars.
- SC004: python and other non-standard tags, aliases that expand past a size bound (alias bombs), recursive
  aliases, documents over `MAX_BYTES`, nesting deeper than `MAX_DEPTH`.
- SC002: integers too large to be any config value (more digits than Python converts to text); the value is
  kept as a signed infinity so nothing downstream chokes on it.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from packcfg.core.diagnostics import ConfigPath, Position

MAX_BYTES = 10 * 1024 * 1024
"""Documents larger than this are SC004: no experiment config is this big, and parsing one costs memory."""

MAX_DEPTH = 100
"""Deeper nesting is SC004. libyaml itself recurses in C and crashes the process near 10^5 levels."""

MAX_ALIAS_EXPANSION = 10_000
"""Aliases may add at most this many nodes beyond the document's own (alias bombs stay cheap to detect)."""

_FLOW_SCAN_THRESHOLD = 256  # below this many `[`/`{`, flow nesting cannot reach a dangerous depth
_MAX_INT_DIGITS = 4300  # Python's default int<->str conversion limit; beyond it str(value) raises

_STANDARD_TAGS = frozenset(
    "tag:yaml.org,2002:" + name for name in ("str", "int", "float", "bool", "null", "seq", "map", "timestamp")
)
_MERGE_TAG = "tag:yaml.org,2002:merge"
_STR_TAG = "tag:yaml.org,2002:str"


@dataclass(frozen=True)
class LoadProblem:
    """A finding about the file itself; the engine turns it into a Diagnostic with the rule's title."""

    code: str  # SC001, SC002 or SC004
    message: str
    line: int
    column: int
    hint: str | None = None
    fatal: bool = True  # True: no usable data came out of the file


class PosNode:
    """Where a key was set, and the positions of the keys below it.

    A slotted class, not a dataclass: one is built per key of every file, on the lint hot path.
    """

    __slots__ = ("file", "line", "column", "children")

    def __init__(self, file: str, line: int, column: int, children: dict[str, PosNode] | None = None) -> None:
        self.file = file
        self.line = line
        self.column = column
        self.children: dict[str, PosNode] = {} if children is None else children

    @classmethod
    def at(cls, position: Position, children: dict[str, PosNode] | None = None) -> PosNode:
        return cls(position.file, position.line, position.column, children)

    @property
    def position(self) -> Position:
        return Position(self.file, self.line, self.column)

    def __repr__(self) -> str:
        return f"PosNode({self.file}:{self.line}:{self.column}, {len(self.children)} children)"


@dataclass
class YamlDocument:
    """One loaded file: `data` is None when a fatal problem stopped the load."""

    file: str
    data: dict[str, Any] | None
    positions: dict[str, PosNode]
    problems: list[LoadProblem]
    text: str = ""

    @property
    def ok(self) -> bool:
        return self.data is not None

    def lines(self) -> list[str]:
        return self.text.splitlines()


_RESOLVE_CACHE_MAX = 4096


class _Loader(yaml.CSafeLoader):  # type: ignore[misc,name-defined]
    """libyaml's parser with a memo in front of PyYAML's (pure Python) implicit tag resolver.

    Resolution depends only on (kind, value, implicit) here (no path resolvers), and config files repeat
    the same few scalars (true, 1, 512, ...): the memo took ~30% off composing a recipe.
    """

    _resolved: dict[tuple[Any, str, Any], str] = {}

    def resolve(self, kind: Any, value: Any, implicit: Any) -> str:
        if value.__class__ is not str or len(value) > 64:
            return super().resolve(kind, value, implicit)  # type: ignore[no-any-return]
        key = (kind, value, implicit)
        tag = self._resolved.get(key)
        if tag is None:
            if len(self._resolved) >= _RESOLVE_CACHE_MAX:
                self._resolved.clear()
            tag = self._resolved[key] = super().resolve(kind, value, implicit)
        return tag


# OmegaConf 2.3.0 `omegaconf/_utils.py` `get_yaml_loader()` (how Bridge's `OmegaConf.load` reads a file): YAML 1.1's
# implicit float resolver needs a dot, so OmegaConf adds one that also takes `1e-5`, `1E4`, `5.0e-6` (same regex,
# same first characters), and it drops the timestamp resolver (`2024-01-01` stays a string). Booleans stay
# PyYAML's YAML 1.1 set (true/false/yes/no/on/off in their three casings), as in OmegaConf.
OMEGACONF_FLOAT = re.compile(
    r"""^(?:
     [-+]?[0-9]+(?:_[0-9]+)*\.[0-9_]*(?:[eE][-+]?[0-9]+)?
    |[-+]?[0-9]+(?:_[0-9]+)*(?:[eE][-+]?[0-9]+)
    |\.[0-9]+(?:_[0-9]+)*(?:[eE][-+][0-9]+)?
    |[-+]?[0-9]+(?:_[0-9]+)*(?::[0-5]?[0-9])+\.[0-9_]*
    |[-+]?\.(?:inf|Inf|INF)
    |\.(?:nan|NaN|NAN))$""",
    re.X,
)
_Loader.add_implicit_resolver("tag:yaml.org,2002:float", OMEGACONF_FLOAT, list("-+0123456789."))
_Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in _Loader.yaml_implicit_resolvers.items()
}


class _Stop(Exception):
    """Abort the conversion with a fatal problem."""

    def __init__(self, problem: LoadProblem) -> None:
        super().__init__(problem.message)
        self.problem = problem


def read_source(path: str | Path) -> bytes:
    """The file's bytes, at most MAX_BYTES + 1 of them (so a huge file costs no more than the bound).

    Raises OSError (and subclasses) for paths that cannot be read; callers turn it into exit 2.
    """
    with open(path, "rb") as fh:
        return fh.read(MAX_BYTES + 1)


def load_file(path: str | Path, display_name: str | None = None) -> YamlDocument:
    """Load one YAML file (it must be a regular, readable file; OSError otherwise)."""
    raw = read_source(path)
    return load_bytes(raw, display_name or str(path))


def load_text(text: str, filename: str = "<string>") -> YamlDocument:
    return load_bytes(text.encode("utf-8", errors="surrogatepass"), filename)


def load_bytes(raw: bytes, filename: str) -> YamlDocument:
    """Parse `raw` into data + key positions; all problems become LoadProblems."""
    if len(raw) > MAX_BYTES:
        return _failed(
            filename,
            "",
            LoadProblem(
                "SC004",
                f"document is larger than {MAX_BYTES // (1024 * 1024)} MB; no experiment config is this big",
                1,
                1,
            ),
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line, col = _byte_position(raw, exc.start)
        bad = raw[exc.start : exc.start + 1].hex()
        return _failed(
            filename,
            "",
            LoadProblem("SC001", f"invalid UTF-8 (byte 0x{bad}); save the file as UTF-8", line, col),
        )
    if text.startswith("\ufeff"):
        text = text[1:]
    problem = check_flow_depth(text)
    if problem:
        return _failed(filename, text, problem)
    try:
        nodes = yaml.compose_all(text, Loader=_Loader)
        root = next(nodes, None)
        extra = next(nodes, None)
    except yaml.MarkedYAMLError as exc:
        return _failed(filename, text, _syntax_problem(exc, text))
    except yaml.reader.ReaderError as exc:
        line, col = _char_position(text, exc.position)
        return _failed(
            filename,
            text,
            LoadProblem(
                "SC001", f"invalid character U+{_codepoint(exc.character):04X}: {exc.reason}", line, col
            ),
        )
    except yaml.YAMLError as exc:  # any other libyaml complaint; still a finding, never a traceback
        return _failed(filename, text, LoadProblem("SC001", f"invalid YAML: {exc}", 1, 1))
    if extra is not None:
        mark = extra.start_mark
        return _failed(
            filename,
            text,
            LoadProblem(
                "SC001",
                "more than one YAML document (`---`); an experiment config is one mapping",
                mark.line + 1,
                mark.column + 1,
            ),
        )
    if root is None:  # empty, or only comments: no data, no problem; the engine decides what that means
        return YamlDocument(filename, {}, {}, [], text)
    if not isinstance(root, yaml.MappingNode):
        kind = "a list" if isinstance(root, yaml.SequenceNode) else f"a scalar ({root.value!r:.40})"
        return _failed(
            filename,
            text,
            LoadProblem(
                "SC001",
                f"top level must be a mapping of sections (model:, train:, ...), got {kind}",
                root.start_mark.line + 1,
                root.start_mark.column + 1,
            ),
        )
    converter = _Converter(filename, root, has_anchors="&" in text)
    try:
        data = converter.mapping(root, (), 0)
    except _Stop as stop:
        return _failed(filename, text, stop.problem, converter.problems)
    except RecursionError:  # belt and braces: MAX_DEPTH should stop us first
        return _failed(filename, text, LoadProblem("SC004", "nesting too deep", 1, 1), converter.problems)
    return YamlDocument(filename, data, converter.positions, converter.problems, text)


def _failed(filename: str, text: str, problem: LoadProblem, earlier: list[LoadProblem] = ()) -> YamlDocument:  # type: ignore[assignment]
    return YamlDocument(filename, None, {}, [*earlier, problem], text)


def _codepoint(character: int | str) -> int:
    return character if isinstance(character, int) else ord(character[:1] or "\0")


def _byte_position(raw: bytes, offset: int) -> tuple[int, int]:
    line_start = raw.rfind(b"\n", 0, offset) + 1
    line = raw.count(b"\n", 0, offset) + 1
    column = len(raw[line_start:offset].decode("utf-8", errors="replace")) + 1
    return line, column


def _char_position(text: str, offset: int) -> tuple[int, int]:
    line_start = text.rfind("\n", 0, offset) + 1
    return text.count("\n", 0, offset) + 1, offset - line_start + 1


def _syntax_problem(exc: yaml.MarkedYAMLError, text: str) -> LoadProblem:
    mark = exc.problem_mark or exc.context_mark
    line, col = (mark.line + 1, mark.column + 1) if mark else (1, 1)
    lines = text.splitlines()
    if line > len(lines):  # libyaml points past the end at EOF; point at the end of the last line
        line = max(len(lines), 1)
        col = len(lines[-1]) + 1 if lines else 1
    here = lines[line - 1] if 0 < line <= len(lines) else ""
    if "\t" in here[: len(here) - len(here.lstrip(" \t"))] or (
        col <= len(here) and here[col - 1 : col] == "\t"
    ):
        return LoadProblem(
            "SC001",
            "tab character used for indentation; YAML indents with spaces only",
            line,
            col,
            hint="replace the tabs at the start of this line with spaces",
        )
    problem = exc.problem or "invalid YAML"
    context = f" ({exc.context})" if exc.context else ""
    return LoadProblem("SC001", f"invalid YAML: {problem}{context}", line, col)


# Quoted strings and comments are skipped so that brackets inside them do not count. Compiled (and cached by
# `re`) on first use only: most files never need it, and compiling costs start-up time.
_FLOW_TOKEN = r"(?m)\"(?:[^\"\\\n]|\\.)*\"|'(?:[^'\n]|'')*'|(?:^|(?<=\s))#[^\n]*|[\[\]{}]"


def check_flow_depth(text: str) -> LoadProblem | None:
    """Refuse flow nesting deep enough to crash libyaml before handing it the text."""
    if text.count("[") + text.count("{") < _FLOW_SCAN_THRESHOLD:
        return None
    depth = 0
    for match in re.finditer(_FLOW_TOKEN, text):
        token = match.group()
        if token in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                line, col = _char_position(text, match.start())
                return LoadProblem("SC004", f"nesting deeper than {MAX_DEPTH} levels", line, col)
        elif token in "]}":
            depth = max(depth - 1, 0)
    return None


class _Converter:
    """Node tree -> plain Python data, recording key positions and checking tags, duplicates and size."""

    def __init__(self, filename: str, root: yaml.Node, has_anchors: bool = True) -> None:
        self.filename = filename
        self.positions: dict[str, PosNode] = {}
        self.problems: list[LoadProblem] = []
        self._constructor = yaml.constructor.SafeConstructor()
        self._active: set[int] = set()  # node ids on the current path: a revisit is a recursive alias
        # Without anchors there are no aliases to expand, and counting the nodes is skipped (hot path).
        self._budget = _count_nodes(root) + MAX_ALIAS_EXPANSION if has_anchors else 1 << 62
        self._seen_tags: set[int] = set()

    def _pos(self, node: yaml.Node) -> PosNode:
        mark = node.start_mark
        return PosNode(self.filename, mark.line + 1, mark.column + 1)

    def _problem(
        self, code: str, message: str, node: yaml.Node, hint: str | None = None, fatal: bool = True
    ) -> LoadProblem:
        return LoadProblem(code, message, node.start_mark.line + 1, node.start_mark.column + 1, hint, fatal)

    def value(self, node: yaml.Node, path: ConfigPath, depth: int, into: dict[str, PosNode]) -> Any:
        self._budget -= 1
        if self._budget < 0:
            # Point at the top-level key whose value blew up: the deep path inside the bomb means nothing.
            top = self.positions.get(path[0]) if path else None
            line, col = (top.line, top.column) if top else (1, 1)
            raise _Stop(
                LoadProblem(
                    "SC004",
                    f"aliases under {path[0] if path else 'the top level'!r} expand past "
                    f"{MAX_ALIAS_EXPANSION} extra nodes (alias bomb)",
                    line,
                    col,
                    hint="write the values out, or use fewer nested aliases",
                )
            )
        if depth > MAX_DEPTH:
            raise _Stop(self._problem("SC004", f"nesting deeper than {MAX_DEPTH} levels", node))
        if node.tag not in _STANDARD_TAGS:
            self._check_tag(node, path)
        if node.__class__ is yaml.ScalarNode:
            return self.scalar(node, path)
        if id(node) in self._active:
            raise _Stop(self._problem("SC004", f"recursive alias at {'.'.join(path)}", node))
        self._active.add(id(node))
        try:
            if isinstance(node, yaml.MappingNode):
                return self.mapping(node, path, depth, into)
            out = []
            for i, item in enumerate(node.value):
                key = str(i)
                into[key] = self._pos(item)
                out.append(self.value(item, (*path, key), depth + 1, into[key].children))
            return out
        finally:
            self._active.discard(id(node))

    def mapping(
        self, node: yaml.MappingNode, path: ConfigPath, depth: int, into: dict[str, PosNode] | None = None
    ) -> dict[str, Any]:
        into = self.positions if into is None else into
        out: dict[str, Any] = {}
        explicit: set[str] = set()
        filename = self.filename
        scalar_node = yaml.ScalarNode
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE_TAG:
                self._merge(value_node, path, depth, out, into)
                continue
            if key_node.__class__ is not scalar_node:
                raise _Stop(
                    self._problem(
                        "SC001", "a mapping key must be a plain name, not a list or mapping", key_node
                    )
                )
            if key_node.tag not in _STANDARD_TAGS:
                self._check_tag(key_node, path)
            # Keys are config names: keep the text as written (`on:` stays "on", not True).
            key = key_node.value
            mark = key_node.start_mark
            if key in explicit:
                self.problems.append(
                    LoadProblem(
                        "SC001",
                        f"duplicate key {'.'.join((*path, key))!r} (first set on line {into[key].line}); "
                        "the last one wins",
                        mark.line + 1,
                        mark.column + 1,
                        hint="delete one of the two",
                        fatal=False,
                    )
                )
            explicit.add(key)
            entry = into[key] = PosNode(filename, mark.line + 1, mark.column + 1)
            # Hot path: a plain string scalar needs no budget, depth or tag bookkeeping beyond this.
            if value_node.__class__ is scalar_node and value_node.tag == _STR_TAG:
                self._budget -= 1
                out[key] = value_node.value
            else:
                out[key] = self.value(value_node, (*path, key), depth + 1, entry.children)
        return out

    def _merge(
        self, node: yaml.Node, path: ConfigPath, depth: int, out: dict[str, Any], into: dict[str, PosNode]
    ) -> None:
        """`<<: *base` / `<<: [*a, *b]`: keys not set in this mapping come from the merged ones."""
        sources = node.value if isinstance(node, yaml.SequenceNode) else [node]
        for source in sources:
            if not isinstance(source, yaml.MappingNode):
                raise _Stop(self._problem("SC001", "`<<` merges only mappings", source))
            positions: dict[str, PosNode] = {}
            merged = self.value(source, path, depth, positions)
            for key, value in merged.items():
                if key not in out:  # explicit keys win over merged ones, earlier merges over later
                    out[key] = value
                    into[key] = positions[key]

    def _check_tag(self, node: yaml.Node, path: ConfigPath) -> None:
        tag = node.tag
        if tag in _STANDARD_TAGS or tag == _MERGE_TAG or id(node) in self._seen_tags:
            return
        self._seen_tags.add(id(node))
        where = ".".join(path) or "top level"
        if tag.startswith("tag:yaml.org,2002:python/"):
            message = (
                f"python tag !!{tag[len('tag:yaml.org,2002:') :]} at {where}: configs must be plain data"
            )
        else:
            shown = "!!" + tag[len("tag:yaml.org,2002:") :] if tag.startswith("tag:yaml.org,2002:") else tag
            message = f"non-standard YAML tag {shown} at {where}: configs must be plain data"
        raise _Stop(self._problem("SC004", message, node, hint="remove the tag and write the plain value"))

    def scalar(self, node: yaml.ScalarNode, path: ConfigPath) -> Any:
        if node.tag == "tag:yaml.org,2002:int":
            digits = sum(ch.isdigit() for ch in node.value)
            if digits > _MAX_INT_DIGITS:
                sign = -1.0 if node.value.lstrip().startswith("-") else 1.0
                self.problems.append(
                    self._problem(
                        "SC002",
                        f"integer with {digits} digits at {'.'.join(path)} is out of range for any config value",
                        node,
                        fatal=False,
                    )
                )
                return math.copysign(math.inf, sign)
        tag = node.tag
        if tag == _STR_TAG:
            return node.value
        try:
            # The tag's constructor directly: construct_object's bookkeeping is for recursive structures,
            # which scalars are not, and it dominated the per-file cost.
            return self._constructor.yaml_constructors[tag](self._constructor, node)
        except (yaml.YAMLError, ValueError, OverflowError, KeyError) as exc:
            raise _Stop(
                self._problem("SC001", f"bad {tag.rsplit(':', 1)[-1]} value {node.value!r:.60}: {exc}", node)
            ) from None


def _count_nodes(root: yaml.Node) -> int:
    """Distinct nodes in the tree (an aliased node counts once)."""
    seen: set[int] = set()
    stack = [root]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                stack.append(k)
                stack.append(v)
        elif isinstance(node, yaml.SequenceNode):
            stack.extend(node.value)
    return len(seen)
