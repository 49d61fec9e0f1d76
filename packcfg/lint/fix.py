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

from packcfg.core.atomic import atomic_write_text
from packcfg.core.base_recipes import is_base_source
from packcfg.core.config import ConfigError, is_override_source, load_document, merge_documents
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
    """`text` with `edits` applied (sets and deletes first, then renames); returns (new text, problems)."""
    try:
        yaml, root = _yaml(text)
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


# ---- provenance: which file each edit belongs to -----------------------------------------------------


def _contains(doc: YamlDocument, path: Sequence[str]) -> bool:
    nodes = doc.positions
    for key in path:
        entry = nodes.get(key)
        if entry is None:
            return False
        nodes = entry.children
    return True


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
            atomic_write_text(Path(name), texts[name])
    return outcome


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
    for _ in range(MAX_PASSES):
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
        per_file: dict[str, list[Edit]] = {}
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
            for edit, target in placed:
                edits = per_file.setdefault(target, [])
                if edit not in edits:
                    edits.append(edit)
        if not per_file:
            return
        changed = False
        for target, edits in per_file.items():
            try:
                new_text, problems = apply_edits(texts[target], edits)
            except FixError as exc:
                outcome.messages.append(f"{target}: {exc}")
                continue
            outcome.messages.extend(f"{target}: {p}" for p in problems)
            if new_text != texts[target]:
                texts[target] = new_text
                outcome.applied += len(edits)
                outcome.edits_per_file[target] = outcome.edits_per_file.get(target, 0) + len(edits)
                changed = True
        if not changed:
            return


def _refusal(d: Diagnostic, blocked: str, placed: Sequence[tuple[Edit, str]], sources: Any) -> str:
    """What would have to change, and where: the fix is left to the user as a whole."""
    assert d.fix is not None
    if is_override_source(blocked):
        why = f"part of it is on the command line ({blocked[1:-1]})"
    else:
        why = f"part of it is in {blocked}, which other experiments in this run share"
    where = []
    for edit, target in placed:
        at = sources.exact(tuple(edit.path))
        spot = f"{at.file}:{at.line}" if at is not None and not is_override_source(at.file) else target
        where.append(f"{'.'.join(edit.path)} ({spot})")
    return f"{d.code}: not fixed: {why}; change all of it together: {d.fix.description} [{', '.join(where)}]"


def _quiet(message: str) -> None:
    """Internal errors are reported by the lint that follows the fix, once."""
