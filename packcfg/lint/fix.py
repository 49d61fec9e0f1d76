"""`packcfg lint --fix` / `--diff`: apply the rules' exact edits with ruamel.yaml round-trip.

ruamel.yaml keeps comments, key order, quoting and layout, so only the edited lines change; it is imported
here and only here (the lint path reads YAML with libyaml, see `packcfg.core.yamlsource`). Every edit goes
to the file that set the value (provenance): a value that came from a `-c` file is fixed in that file, a
value that came from an `-o` override is refused with a message (the command line is not a file). Files are
written atomically: a temporary file in the same folder, then `os.replace`.
"""

from __future__ import annotations

import difflib
import io
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packcfg.core.atomic import OutputRefused, atomic_path
from packcfg.core.base_recipes import is_base_source
from packcfg.core.config import (
    ConfigError,
    is_override_source,
    load_document,
    merge_documents,
    override_words,
    tree_at,
)
from packcfg.core.diagnostics import Diagnostic, Edit
from packcfg.core.yamlsource import YamlDocument, load_bytes
from packcfg.lint.settings import Settings

MAX_PASSES = 3  # a fix can enable another (a rename, then a value under the new name); never loop forever


class FixError(Exception):
    """A fix that cannot be applied at all (e.g. a file ruamel.yaml cannot round-trip)."""


@dataclass
class FixOutcome:
    diff: str = ""  # unified diff of every changed file
    messages: list[str] = field(default_factory=list)  # one line per refused or skipped edit
    changed: list[str] = field(default_factory=list)  # files whose text changed
    applied: int = 0  # edits applied
    refused: int = 0  # fixes not applied because part of them cannot be written (command line, shared file)
    edits_per_file: dict[str, int] = field(default_factory=dict)
    unwritten: list[str] = field(default_factory=list)  # files with fixes that could not be written
    write_failed: list[str] = field(default_factory=list)  # of those, the ones the OS refused (exit 2)


# ---- editing one YAML text with ruamel.yaml ---------------------------------------------------------


def _yaml(text: str) -> tuple[Any, Any]:
    from ruamel.yaml import YAML
    from ruamel.yaml.util import load_yaml_guess_indent

    _, indent, block_seq_indent = load_yaml_guess_indent(text)
    yaml = YAML()
    yaml.preserve_quotes = True
    yaml.width = 4096  # never re-wrap the user's long lines
    offset = block_seq_indent or 0
    yaml.indent(mapping=indent or 2, sequence=(indent or 2) + offset, offset=offset)
    return yaml, yaml.load(text)


def _last_key_chain(mapping: Any) -> tuple[Any, Any] | None:
    """The deepest (mapping, key) at the end of `mapping`: where ruamel keeps trailing blank lines."""
    from ruamel.yaml.comments import CommentedMap

    if not isinstance(mapping, CommentedMap) or not mapping:
        return None
    key = list(mapping.keys())[-1]
    deeper = _last_key_chain(mapping[key])
    return deeper if deeper is not None else (mapping, key)


def _append(mapping: Any, key: str, value: Any) -> None:
    """Add `key` at the end of `mapping`, moving the blank lines/comments that followed the old last key
    (they separate this section from the next) after the new one."""
    from ruamel.yaml.comments import CommentedMap
    from ruamel.yaml.error import CommentMark
    from ruamel.yaml.tokens import CommentToken

    chain = _last_key_chain(mapping)
    trailing = None
    if chain is not None:
        owner, last = chain
        item = owner.ca.items.get(last)
        token = item[2] if item and len(item) > 2 else None
        if isinstance(token, CommentToken) and "\n" in token.value:
            head, _, rest = token.value.partition("\n")
            if rest:
                token.value = head + "\n"
                trailing = rest
    mapping[key] = value
    if trailing is not None:
        target = mapping
        target_key = key
        if isinstance(value, CommentedMap) and value:
            chain = _last_key_chain(value)
            if chain is not None:
                target, target_key = chain
        target.ca.items[target_key] = [None, None, CommentToken("\n" + trailing, CommentMark(0), None), None]


def _delete(mapping: Any, key: str) -> None:
    """Delete `key`; when it was the last key, the blank lines after it stay (on the new last key)."""
    keys = list(mapping.keys())
    item = mapping.ca.items.get(key)
    token = item[2] if item and len(item) > 2 else None
    del mapping[key]
    if keys[-1] != key or len(keys) < 2 or token is None or "\n" not in token.value:
        return
    _, _, rest = token.value.partition("\n")
    chain = _last_key_chain(mapping)
    if rest and chain is not None:
        from ruamel.yaml.error import CommentMark
        from ruamel.yaml.tokens import CommentToken

        owner, last = chain
        current = owner.ca.items.get(last)
        if current and len(current) > 2 and current[2] is not None:
            current[2].value += rest
        else:
            owner.ca.items[last] = [None, None, CommentToken("\n" + rest, CommentMark(0), None), None]


def _plain(value: Any) -> Any:
    """Fix values come as plain Python; dicts become block mappings in the output."""
    from ruamel.yaml.comments import CommentedMap, CommentedSeq

    if isinstance(value, dict):
        out = CommentedMap()
        for k, v in value.items():
            out[k] = _plain(v)
        return out
    if isinstance(value, list):
        return CommentedSeq(_plain(v) for v in value)
    return value


def _walk(root: Any, path: Sequence[str], create: bool) -> Any | None:
    """The mapping that holds `path[-1]`; sections are created (at the end of their parent) when asked."""
    from ruamel.yaml.comments import CommentedMap

    node = root
    for key in path[:-1]:
        child = node.get(key) if isinstance(node, dict) else None
        if not isinstance(child, dict):
            if not create:
                return None
            child = CommentedMap()
            _append(node, key, child)
            child = node[key]
        node = child
    return node


def _apply_edit(root: Any, edit: Edit) -> str | None:
    """Apply one edit in place; returns why it could not be applied, or None."""
    path = tuple(edit.path)
    if edit.action == "set":
        parent = _walk(root, path, create=True)
        if parent is None:
            return f"cannot set {'.'.join(path)}: a parent is not a mapping"
        if path[-1] in parent:
            parent[path[-1]] = _plain(edit.value)  # keeps the key's place and its end-of-line comment
        else:
            _append(parent, path[-1], _plain(edit.value))
        return None
    if edit.action == "delete":
        parent = _walk(root, path, create=False)
        if parent is not None and path[-1] in parent:
            _delete(parent, path[-1])
        return None
    if edit.action == "rename":
        new_path = tuple(edit.new_path or ())
        if not new_path:
            return f"rename of {'.'.join(path)} has no new name"
        parent = _walk(root, path, create=False)
        if parent is None or path[-1] not in parent:
            return None  # already renamed (e.g. by an earlier pass)
        if new_path[:-1] != path[:-1]:
            value = parent.pop(path[-1])
            target = _walk(root, new_path, create=True)
            if target is None or new_path[-1] in target:
                parent[path[-1]] = value
                return f"cannot rename {'.'.join(path)}: {'.'.join(new_path)} exists"
            _append(target, new_path[-1], value)
            return None
        if new_path[-1] in parent:
            return f"cannot rename {'.'.join(path)}: {'.'.join(new_path)} is already set"
        # Keep the key where it was in its mapping, with its comments.
        keys = list(parent.keys())
        index = keys.index(path[-1])
        comments = parent.ca.items.pop(path[-1], None)
        value = parent[path[-1]]
        del parent[path[-1]]
        parent.insert(index, new_path[-1], value)
        if comments is not None:
            parent.ca.items[new_path[-1]] = comments
        return None
    return f"unknown edit action {edit.action!r}"


def apply_edits(text: str, edits: Sequence[Edit]) -> tuple[str, list[str]]:
    """`text` with `edits` applied; returns (new text, problems). Every byte outside the edited values stays:
    a set of an existing scalar is a splice of that scalar's characters; anything else goes through ruamel.yaml
    and only the lines it had to change are taken from its output (line endings, flow style, indentation and
    anchors of the other lines are the file's own)."""
    spliced = _splice_sets(text, edits)
    if spliced is not None:
        return spliced, []
    new_text, problems = _round_trip(text, edits)
    return _keep_layout(text, new_text), problems


def _round_trip(text: str, edits: Sequence[Edit]) -> tuple[str, list[str]]:
    try:
        yaml, root = _yaml(text.replace("\r\n", "\n"))
    except Exception as exc:  # ruamel has many error types; any of them means "cannot round-trip"
        raise FixError(
            f"cannot rewrite this YAML while keeping its layout ({exc.__class__.__name__})"
        ) from None
    problems = []
    ordered = [e for e in edits if e.action != "rename"] + [e for e in edits if e.action == "rename"]
    for edit in ordered:
        why = _apply_edit(root, edit)
        if why:
            problems.append(why)
    out = io.StringIO()
    yaml.dump(root, out)
    return out.getvalue(), problems


def _scalar_text(value: Any, style: str | None) -> str | None:
    """`value` written as a YAML scalar in the style the old value had (None: not a plain scalar)."""
    import json

    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        if style == "'" and "\n" not in value:
            return "'" + value.replace("'", "''") + "'"
        if (
            style == '"'
            or not value
            or value != value.strip()
            or any(c in value for c in ":#{}[],&*!|>'\"%@`\n")
        ):
            return json.dumps(value)
        return value
    return None


def _splice_sets(text: str, edits: Sequence[Edit]) -> str | None:
    """Each edit is a `set` of a scalar that exists in `text`: replace exactly its characters. None otherwise."""
    import yaml

    if not edits or any(e.action != "set" for e in edits):
        return None
    try:
        root = yaml.compose(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError:
        return None
    spans: list[tuple[int, int, str]] = []
    for edit in edits:
        node = root
        for key in edit.path:
            if not isinstance(node, yaml.MappingNode):
                return None
            found = [v for k, v in node.value if isinstance(k, yaml.ScalarNode) and k.value == key]
            if len(found) != 1:
                return None
            node = found[0]
        if not isinstance(node, yaml.ScalarNode) or node.style in ("|", ">"):
            return None
        start, end = node.start_mark.index, node.end_mark.index
        if end <= start or "\n" in text[start:end] or "*" in text[start : start + 1]:
            return None  # multi-line scalar, or an alias: the round trip decides
        new = _scalar_text(edit.value, node.style)
        if new is None:
            return None
        spans.append((start, end, new))
    spans.sort(reverse=True)
    for (start, _, _), (_, prev_end, _) in zip(spans, spans[1:], strict=False):
        if prev_end > start:
            return None  # overlapping spans: not independent edits
    out = text
    for start, end, new in spans:
        out = out[:start] + new + out[end:]
    return out


def _keep_layout(old: str, new: str) -> str:
    """`new` (ruamel's LF output) with every line it did not change taken byte for byte from `old`, and new
    lines ending as the file's lines do (CRLF stays CRLF)."""
    old_lines = old.splitlines(keepends=True)
    crlf = sum(line.endswith("\r\n") for line in old_lines) > len(old_lines) // 2
    new_lines = new.splitlines(keepends=True)
    bare_old = [line.rstrip("\r\n") for line in old_lines]
    bare_new = [line.rstrip("\r\n") for line in new_lines]
    out: list[str] = []
    ending = "\r\n" if crlf else "\n"
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(a=bare_old, b=bare_new, autojunk=False).get_opcodes():
        if tag == "equal":
            out.extend(old_lines[i1:i2])
        else:
            out.extend(line + ending for line in bare_new[j1:j2])
    if out and not new.endswith("\n") and not old.endswith(("\n", "\r")):
        out[-1] = out[-1].rstrip("\r\n")
    return "".join(out)


# ---- YAML anchors, aliases and merge keys ------------------------------------------------------------

_MERGE_TAG = "tag:yaml.org,2002:merge"
_MAX_VISITS = 200_000  # paths walked per file (aliases expanded); the loader bounds alias bombs far lower


class _Sharing:
    """Which config paths of one file reach each YAML node. A node reached by several paths is shared through
    an anchor (`&a` ... `*a`) or a merge key (`<<: *a`): an edit of it changes every one of those paths."""

    def __init__(self, text: str) -> None:
        import yaml

        self.reach: dict[int, list[tuple[str, ...]]] = {}
        self.at: dict[tuple[str, ...], Any] = {}
        self.merged: set[tuple[str, ...]] = set()  # paths whose key comes from a `<<` merge
        self.ok = True
        self.trivial = "&" not in text and "<<" not in text  # no anchor, no merge: nothing is shared
        if self.trivial:
            return
        self._visits = 0
        try:
            root = yaml.compose(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
            if root is not None:
                self._visit(root, (), False)
        except (yaml.YAMLError, RecursionError, _TooBig):
            self.ok = False

    def _visit(self, node: Any, path: tuple[str, ...], merged: bool) -> None:
        import yaml

        self._visits += 1
        if self._visits > _MAX_VISITS:
            raise _TooBig
        self.at[path] = node
        self.reach.setdefault(id(node), []).append(path)
        if merged:
            self.merged.add(path)
        if isinstance(node, yaml.MappingNode):
            for key, value, via_merge in _entries(node):
                self._visit(value, (*path, key), via_merge)
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                self._visit(item, (*path, str(i)), False)

    def users(self, path: tuple[str, ...]) -> list[tuple[str, ...]]:
        node = self.at.get(path)
        return self.reach.get(id(node), [path]) if node is not None else [path]

    def shared_above(self, path: tuple[str, ...]) -> tuple[str, ...] | None:
        """The first prefix of `path` (itself included, when it exists) whose node is shared or merged in."""
        for n in range(1, len(path) + 1):
            prefix = path[:n]
            if prefix not in self.at:
                return None
            if prefix in self.merged or len(self.users(prefix)) > 1:
                return prefix
        return None

    def _shared_message(self, path: tuple[str, ...], above: tuple[str, ...]) -> str:
        """Why an edit of `path` would change other paths: `above` (path itself or a parent) is shared."""
        others = [".".join(u) for u in self.users(above) if u != above]
        if others:
            more = " ..." if len(others) > 3 else ""
            shared = f"shared through a YAML anchor with {', '.join(others[:3])}{more}"
        else:
            shared = "taken from a YAML merge key (<<)"
        inside = "" if above == path else f" is inside {'.'.join(above)}, which"
        return f"{'.'.join(path)}{inside} is {shared}; the fix would change those too"

    def used_outside(self, path: tuple[str, ...]) -> tuple[str, ...] | None:
        """A path outside `path`'s subtree that reaches a node inside it (an anchor defined under `path` and
        aliased elsewhere), or None."""
        n = len(path)
        for p, node in self.at.items():
            if p[:n] != path:
                continue
            for user in self.reach.get(id(node), ()):
                if user[:n] != path:
                    return user
        return None

    def verdict(self, edit: Edit, edits: Sequence[Edit]) -> str:
        """ "plain" (no anchor involved), "anchor" (a shared scalar that every path sharing it sets to the
        same value: edited once, at the anchor), or why the edit cannot be written correctly."""
        if self.trivial:
            return "plain"
        if not self.ok:
            return "the file's anchors and aliases could not be analysed"
        import yaml

        path = tuple(edit.path)
        node = self.at.get(path)
        shown = ".".join(path)
        if edit.action == "set" and isinstance(node, yaml.ScalarNode):
            users = self.users(path)
            above = self.shared_above(path[:-1])
            if above is None and len(users) == 1 and path not in self.merged:
                return "plain"
            wanted = all(
                any(o.action == "set" and tuple(o.path) == u and _same(o.value, edit.value) for o in edits)
                for u in users
            )
            if wanted:
                return "anchor"
            if above is None and path in self.merged:
                return "plain"  # the merging mapping gets its own key: only this path changes
            return self._shared_message(path, above or path)
        above = self.shared_above(path if node is not None else path[:-1])
        if above is not None:
            return self._shared_message(path, above)
        if node is not None and edit.action in ("set", "delete", "rename"):
            outside = self.used_outside(path)
            if outside is not None:
                return f"{shown} holds a YAML anchor that {'.'.join(outside)} refers to"
        return "plain"


class _TooBig(Exception):
    pass


def _entries(mapping: Any) -> list[tuple[str, Any, bool]]:
    """(key, value node, from a merge) of a mapping node as YAML reads it: explicit keys win over merged ones,
    earlier merges over later ones."""
    import yaml

    out: list[tuple[str, Any, bool]] = []
    seen: set[str] = set()
    merges: list[Any] = []
    for key, value in mapping.value:
        if key.tag == _MERGE_TAG:
            merges.extend(value.value if isinstance(value, yaml.SequenceNode) else [value])
        elif isinstance(key, yaml.ScalarNode):
            out.append((key.value, value, False))
            seen.add(key.value)
    for source in merges:
        if isinstance(source, yaml.MappingNode):
            for key, value, _ in _entries(source):
                if key not in seen:
                    seen.add(key)
                    out.append((key, value, True))
    return out


def _same(a: Any, b: Any) -> bool:
    return type(a) is type(b) and a == b


def _splice_anchored(text: str, sharing: _Sharing, edits: Sequence[Edit]) -> str | None:
    """`text` with each shared scalar that the edits set (every path sharing it the same way) replaced once,
    at its anchor, keeping the anchor name; None when a scalar cannot be spliced."""
    import yaml

    spans: dict[int, tuple[int, int, str]] = {}
    for edit in edits:
        node = sharing.at.get(tuple(edit.path))
        if not isinstance(node, yaml.ScalarNode) or node.style in ("|", ">"):
            return None
        start, end = node.start_mark.index, node.end_mark.index
        if end <= start or "\n" in text[start:end]:
            return None
        anchors: list[str] = []
        rest = text[start:end]
        while rest[:1] in ("&", "!"):  # node properties: the anchor is kept, a tag is dropped
            token, _, rest = rest.partition(" ")
            if token.startswith("&"):
                anchors.append(token)
            rest = rest.lstrip(" ")
        style = node.style if rest[:1] in ("'", '"') else None
        new = _scalar_text(edit.value, style)
        if new is None:
            return None
        spans[id(node)] = (start, end, " ".join([*anchors, new]))
    out = text
    for start, end, new in sorted(spans.values(), reverse=True):
        out = out[:start] + new + out[end:]
    return out


# ---- checking what was written ------------------------------------------------------------------------


def _expected(data: dict[str, Any], edits: Sequence[Edit]) -> dict[str, Any]:
    """What the file should read as once `edits` are applied: the same rules as `_apply_edit`, on plain data."""
    import copy

    out = copy.deepcopy(data)
    ordered = [e for e in edits if e.action != "rename"] + [e for e in edits if e.action == "rename"]
    for edit in ordered:
        path = tuple(edit.path)
        if edit.action == "set":
            node = out
            for key in path[:-1]:
                if not isinstance(node.get(key), dict):
                    node[key] = {}
                node = node[key]
            node[path[-1]] = copy.deepcopy(edit.value)
            continue
        parent = out
        for key in path[:-1]:
            parent = parent.get(key) if isinstance(parent, dict) else None
        if not isinstance(parent, dict) or path[-1] not in parent:
            continue
        if edit.action == "delete":
            del parent[path[-1]]
            continue
        new_path = tuple(edit.new_path or ())
        if not new_path:
            continue
        target = parent
        if new_path[:-1] != path[:-1]:
            target = out
            for key in new_path[:-1]:
                if not isinstance(target.get(key), dict):
                    target[key] = {}
                target = target[key]
        if new_path[-1] in target:
            continue
        target[new_path[-1]] = parent.pop(path[-1])
    return out


def _first_difference(a: Any, b: Any, path: tuple[str, ...] = ()) -> str:
    if isinstance(a, dict) and isinstance(b, dict):
        for key in [*a, *(k for k in b if k not in a)]:
            if key not in a or key not in b:
                return ".".join((*path, str(key))) + (" is missing" if key not in b else " appeared")
            if a[key] != b[key]:
                return _first_difference(a[key], b[key], (*path, str(key)))
    return f"{'.'.join(path) or 'the top level'} would read {_short(b)} instead of {_short(a)}"


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _check_result(old_text: str, new_text: str, edits: Sequence[Edit], name: str) -> str | None:
    """Why `new_text` is not `old_text` with `edits` applied as YAML reads both (None: it is)."""
    old = load_bytes(old_text.encode("utf-8"), name)
    new = load_bytes(new_text.encode("utf-8"), name)
    if new.data is None:
        first = new.problems[0] if new.problems else None
        return f"it would not parse{f' (line {first.line}: {first.message})' if first else ''}"
    if old.data is not None and new.data != _expected(old.data, edits):
        return _first_difference(_expected(old.data, edits), new.data)
    codes = [p.code for p in old.problems]
    for problem in new.problems:
        if problem.code in codes:
            codes.remove(problem.code)
        else:
            return f"line {problem.line}: {problem.message}"
    return None


# ---- provenance: which file each edit belongs to -----------------------------------------------------


def _contains(doc: YamlDocument, path: Sequence[str]) -> bool:
    return tree_at(doc.positions, path) is not None


def _targets(edit: Edit, documents: Sequence[YamlDocument], sources: Any) -> list[str]:
    """Files an edit must be applied to. A set goes where the value was last set (or, for a new key, the
    experiment's own first file); a rename or delete goes to every file that spells the key."""
    if edit.action in ("rename", "delete"):
        return [doc.file for doc in documents if _contains(doc, edit.path)]
    where = sources.exact(tuple(edit.path))
    if where is not None and not is_base_source(where.file):
        return [where.file]
    return [documents[0].file]  # a new key, or one the base recipe set: the user's file sets it over the base


def fix_paths(
    paths: Sequence[str | Path],
    *,
    config_files: Sequence[str | Path] = (),
    overrides: Sequence[str] = (),
    write: bool = True,
    settings: Settings | None = None,
    pack_metadata: list[dict[str, Any]] | None = None,
    check_paths: bool = False,
) -> FixOutcome:
    """Fix every experiment under `paths` (each with `config_files`/`overrides` on top), or, with no paths,
    the one experiment merged from `config_files`. With `write=False`, only the diff is computed."""
    from packcfg.lint.engine import expand_paths

    if paths:
        files, errors = expand_paths(paths)
        if errors:
            raise FixError(errors[0])
        experiments = [[str(f), *map(str, config_files)] for f in files]
    else:
        experiments = [list(map(str, config_files))]
    texts: dict[str, str] = {}  # current text of every file touched or read
    originals: dict[str, str] = {}
    outcome = FixOutcome()
    shared = {str(f) for f in config_files} if len(experiments) > 1 else set()
    for names in experiments:
        _fix_experiment(
            names, overrides, texts, originals, outcome, settings, pack_metadata, check_paths, shared
        )
    for name, original in originals.items():
        if texts[name] == original:
            continue
        outcome.changed.append(name)
        outcome.diff += "".join(
            difflib.unified_diff(
                original.splitlines(keepends=True),
                texts[name].splitlines(keepends=True),
                fromfile=f"a/{name}",
                tofile=f"b/{name}",
            )
        )
        if write:
            problem = _write_kept(Path(name), texts[name])
            if problem:
                outcome.messages.append(problem)
                outcome.changed.remove(name)
                outcome.unwritten.append(name)
                if "hard links" not in problem:  # a refusal by design is a finding (exit 1), not a failure
                    outcome.write_failed.append(name)
    return outcome


def _write_kept(path: Path, text: str) -> str | None:
    """Write the fixed text over the file, keeping what the file is: its BOM, its mode and owner, a symlink
    stays a link (its target is written). A hard-linked file is not replaced (that would split the links).
    Returns why the file was not written, or None."""
    import os

    try:
        target = path.resolve(strict=True)
        st = os.stat(target)
        bom = target.read_bytes().startswith(b"\xef\xbb\xbf")
    except OSError as exc:
        return f"{path}: not fixed: cannot read it back ({exc.strerror or exc})"
    if st.st_nlink > 1:
        return f"{path}: not fixed: it has {st.st_nlink} hard links and a rewrite would split them; apply the fix by hand"
    data = (("\ufeff" if bom else "") + text).encode("utf-8")
    try:
        with atomic_path(target, st.st_mode & 0o7777) as tmp:
            with open(tmp, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            # read the temporary back before it replaces the file: the bytes, and that they parse
            written = tmp.read_bytes()
            doc = load_bytes(written, str(path))
            if written != data or doc.data is None:
                raise _NotWritten
        if (st.st_uid, st.st_gid) != (os.stat(target).st_uid, os.stat(target).st_gid):
            os.chown(target, st.st_uid, st.st_gid)
    except _NotWritten:
        return f"{path}: not fixed: the written file did not read back as written; the original is kept"
    except OutputRefused as exc:
        return f"{path}: not fixed: {exc}"
    except OSError as exc:
        return f"{path}: not fixed: cannot write it ({exc.strerror or exc})"
    return None


class _NotWritten(Exception):
    """The temporary file did not read back as the text meant for it."""


def _fix_experiment(
    names: list[str],
    overrides: Sequence[str],
    texts: dict[str, str],
    originals: dict[str, str],
    outcome: FixOutcome,
    settings: Settings | None,
    pack_metadata: list[dict[str, Any]] | None,
    check_paths: bool,
    shared: set[str] = frozenset(),  # type: ignore[assignment]
) -> None:
    from packcfg.lint.engine import lint_located

    refused: set[tuple[str, str]] = set()
    unsafe: set[tuple[str, str, str]] = set()  # (code, file, why): fixes refused because of YAML anchors
    broken: set[str] = set()  # files whose edited text did not read back as intended (left as they are)
    applied: set[tuple[str, str]] = set()  # (code, repr of its edits) of every fix written so far
    for pass_no in range(MAX_PASSES + 1):
        documents = []
        for name in names:
            if name not in texts:
                doc = load_document(name)
                texts[name] = originals[name] = doc.text
            documents.append(load_bytes(texts[name].encode("utf-8"), name))
        try:
            located = merge_documents(documents, overrides)
        except ConfigError as exc:
            raise FixError(str(exc)) from None
        diagnostics = lint_located(
            located,
            settings=settings,
            pack_metadata=pack_metadata,
            check_paths=check_paths,
            on_internal_error=_quiet,
        )
        # the lint of the edited texts: a finding whose fix was written must be gone
        remains = next((d for d in diagnostics if d.fix and (d.code, repr(d.fix.edits)) in applied), None)
        if remains is not None:
            for name in names:
                texts[name] = originals[name]
                outcome.edits_per_file.pop(name, None)
            outcome.messages.append(
                f"{remains.code}: not fixed: after its fix the finding remains ({remains.message}); "
                f"{', '.join(names)} left unchanged"
            )
            outcome.refused += 1
            return
        if pass_no == MAX_PASSES:
            return
        candidates: list[tuple[Diagnostic, list[tuple[Edit, str]]]] = []
        for d in diagnostics:
            if d.fix is None:
                continue
            # A fix is one equivalent change: applied whole, or not at all (a part on the command line or in
            # a file other experiments share would leave some experiment half-changed).
            placed = [
                (edit, target)
                for edit in d.fix.edits
                for target in _targets(edit, documents, located.sources)
            ]
            blocked = [t for _, t in placed if is_override_source(t) or t in shared]
            if blocked:
                key = (d.code, blocked[0])
                if key not in refused:
                    refused.add(key)
                    outcome.messages.append(_refusal(d, blocked[0], placed, located.sources))
                    outcome.refused += 1
                continue
            if any(t in broken for _, t in placed):
                continue
            candidates.append((d, placed))
        results = _pass_results(candidates, texts, outcome, unsafe, broken)
        if not results:
            return
        # written cleanly (no edit of its files reported a problem): its finding must be gone next pass
        clean = {t for t, (new_text, problems, _) in results.items() if not problems and new_text != texts[t]}
        applied.update(
            (d.code, repr(d.fix.edits))
            for d, placed in candidates
            if d.fix and all(t in clean for _, t in placed)
        )
        changed = False
        for target, (new_text, problems, count) in results.items():
            outcome.messages.extend(f"{target}: {p}" for p in problems)
            if new_text != texts[target]:
                texts[target] = new_text
                outcome.applied += count
                outcome.edits_per_file[target] = outcome.edits_per_file.get(target, 0) + count
                changed = True
        if not changed:
            return


def _pass_results(
    candidates: list[tuple[Diagnostic, list[tuple[Edit, str]]]],
    texts: dict[str, str],
    outcome: FixOutcome,
    unsafe: set[tuple[str, str, str]],
    broken: set[str],
) -> dict[str, tuple[str, list[str], int]]:
    """The new text of every file one pass edits, each checked to read back as its old text with the edits
    applied. A file that does not (or cannot be rewritten) is left as it is, and every fix with a part in it
    is dropped from the pass (in all its files: a fix is applied whole or not at all)."""
    while True:
        per_file, sharing = _drop_unsafe(candidates, texts, outcome, unsafe)
        results: dict[str, tuple[str, list[str], int]] = {}
        failed: tuple[str, str] | None = None
        for target, edits in per_file.items():
            try:
                new_text, problems = _apply_file(texts[target], edits, sharing[target])
            except FixError as exc:
                failed = (target, str(exc))
                break
            if new_text != texts[target]:
                why = _check_result(texts[target], new_text, edits, target)
                if why is not None:
                    failed = (
                        target,
                        f"not fixed: the edited file would not read back as intended ({why}); left unchanged, "
                        "apply the fixes by hand",
                    )
                    break
            results[target] = (new_text, problems, len(edits))
        if failed is None:
            return results
        target, message = failed
        broken.add(target)
        outcome.messages.append(f"{target}: {message}")
        outcome.refused += 1
        candidates[:] = [c for c in candidates if all(t != target for _, t in c[1])]


def _drop_unsafe(
    candidates: list[tuple[Diagnostic, list[tuple[Edit, str]]]],
    texts: dict[str, str],
    outcome: FixOutcome,
    unsafe: set[tuple[str, str, str]],
) -> tuple[dict[str, list[Edit]], dict[str, _Sharing]]:
    """The edits per file of the fixes that can be written correctly. A fix with an edit that goes through a
    YAML anchor, alias or merge key in a way that would change other paths too is refused whole (one line
    naming the key and what shares it); the others stay. Refusing one can make another unsafe (it no
    longer sets every path of a shared anchor), so this repeats until nothing changes."""
    sharing: dict[str, _Sharing] = {}
    while True:
        per_file: dict[str, list[Edit]] = {}
        for _, placed in candidates:
            for edit, target in placed:
                edits = per_file.setdefault(target, [])
                if edit not in edits:
                    edits.append(edit)
        bad = None
        for index, (d, placed) in enumerate(candidates):
            for edit, target in placed:
                if target not in sharing:
                    sharing[target] = _Sharing(texts[target])
                why = sharing[target].verdict(edit, per_file[target])
                if why not in ("plain", "anchor"):
                    bad = (index, d, target, why)
                    break
            if bad:
                break
        if bad is None:
            return per_file, sharing
        index, d, target, why = bad
        del candidates[index]
        assert d.fix is not None
        key = (d.code, target, why)
        if key not in unsafe:
            unsafe.add(key)
            outcome.messages.append(
                f"{target}: {d.code}: not fixed: {why}; change it by hand: {d.fix.description}"
            )
            outcome.refused += 1


def _apply_file(text: str, edits: Sequence[Edit], sharing: _Sharing) -> tuple[str, list[str]]:
    """`apply_edits`, with each scalar shared through an anchor (and set the same way on every path that
    shares it) replaced once, at its anchor, first."""
    anchored = [e for e in edits if sharing.verdict(e, edits) == "anchor"]
    if not anchored:
        return apply_edits(text, edits)
    spliced = _splice_anchored(text, sharing, anchored)
    if spliced is None:
        raise FixError("cannot rewrite a value shared through a YAML anchor in place; apply the fix by hand")
    rest = [e for e in edits if e not in anchored]
    if not rest:
        return spliced, []
    return apply_edits(spliced, rest)


def _refusal(d: Diagnostic, blocked: str, placed: Sequence[tuple[Edit, str]], sources: Any) -> str:
    """What would have to change, and where: the fix is left to the user as a whole."""
    assert d.fix is not None
    if is_override_source(blocked):
        why = f"part of it is on the command line ({override_words(blocked)})"
    else:
        why = f"part of it is in {blocked}, which other experiments in this run share"
    where = []
    for edit, target in placed:
        at = sources.exact(tuple(edit.path))
        if at is not None and not is_override_source(at.file):
            spot = f"{at.file}:{at.line}"
        else:
            spot = f"command line: {override_words(target)}" if is_override_source(target) else target
        where.append(f"{'.'.join(edit.path)} ({spot})")
    return f"{d.code}: not fixed: {why}; change all of it together: {d.fix.description} [{', '.join(where)}]"


def _quiet(message: str) -> None:
    """Internal errors are reported by the lint that follows the fix, once."""
