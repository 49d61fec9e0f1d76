"""Resolve OmegaConf interpolations (`${a.b}`, `${.x}`, `${..x}`, "x_${a.b}") in a merged config.

Bridge resolves them once everything is merged (`OmegaConf.to_container(cfg, resolve=True)` in
`scripts/training/run_recipe.py` and `training/utils/omegaconf_utils.py`, Bridge v0.3.1 / main 067f987); the
semantics below are OmegaConf 2.3.0's:
- a value that is exactly one `${path}` takes the target's value and type (a mapping or list included);
- interpolations inside a longer string are replaced by `str(value)` (`True`, `None` as Python prints them);
- `${.x}` is relative to the mapping that holds the key, each further dot one level up; `${a.0}` / `${a[0]}`
  index lists; `\\${` is a literal `${`;
- a missing target raises `InterpolationKeyError`, a cycle `InterpolationResolutionError` (packcfg: SC002 at the
  line of the `${...}`, see `Problem`);
- `${name:args}` calls a resolver (`oc.env`, `oc.select`, ...): at lint time its value is unknown (`Unknown`),
  so rules that need it do not fire and SC002 stays quiet.

Positions are not touched: a diagnostic on an interpolated value points at the key that holds the `${...}`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from typing import Any


class Unknown:
    """A value packcfg cannot know at lint time (a resolver such as `${oc.env:VAR}`, or what depends on one)."""

    __slots__ = ("expr",)

    def __init__(self, expr: str) -> None:
        self.expr = expr

    def __repr__(self) -> str:
        return f"<unknown: {self.expr}>"

    def __str__(self) -> str:
        return self.expr


def is_unknown(value: Any) -> bool:
    return value.__class__ is Unknown


class Problem:
    """An interpolation Bridge could not resolve: `path` holds the `${...}`. (A plain class, not a dataclass:
    building dataclasses costs milliseconds at import, on every `packcfg lint`.)"""

    __slots__ = ("path", "message", "target")

    def __init__(self, path: tuple[str, ...], message: str, target: tuple[str, ...] | None = None) -> None:
        self.path = path
        self.message = message
        self.target = target  # the missing key, for a missing target

    def __repr__(self) -> str:
        return f"Problem({self.path!r}, {self.message!r})"


_INDEX = r"\[(\d+)\]"  # `${a[0]}` -> a.0 (compiled and cached by `re` on first use)


def has_interpolation(value: Any) -> bool:
    """Whether plain config data holds a `${` anywhere (cheap pre-check; escaped ones count too)."""
    if isinstance(value, str):
        return "${" in value
    if isinstance(value, dict):
        return any(has_interpolation(v) for v in value.values())
    if isinstance(value, list):
        return any(has_interpolation(v) for v in value)
    return False


# How a resolver (`${name:args}`) is read: "lint" -> Unknown, "keep" -> the text as written, "run" -> oc.env
# from the environment (what Bridge does on the node), anything else an error.
MODES = ("lint", "keep", "run")


class ResolveError(Exception):
    pass


MAX_CHAIN = 64
"""Interpolations that lead through more targets than this (`a: ${b}`, `b: ${c}`, ...) are refused: no config
chains this deep, and deeper would exhaust the recursion (OmegaConf itself fails with a RecursionError)."""

MAX_EXPANDED = 1 << 20
"""The most characters (or, for a `${}` that stands for a mapping or list, values) all interpolations of one
config may build together: a doubling chain (`b: ${a}${a}`, `c: ${b}${b}`, ...) would otherwise build
gigabytes from a few lines."""


def resolve(
    data: dict[str, Any],
    mode: str = "lint",
    missing_ok: Callable[[tuple[str, ...]], bool] | None = None,
) -> tuple[dict[str, Any], list[Problem]]:
    """A copy of `data` with every interpolation resolved, and the problems found (data unchanged if none).

    `missing_ok(target)` may say that a missing target is still fine (it names a field Bridge fills in
    with its default when no base recipe is merged): the value is then Unknown instead of a problem."""
    return _Resolver(data, mode, missing_ok).run()


class _Resolver:
    def __init__(
        self, data: dict[str, Any], mode: str, missing_ok: Callable[[tuple[str, ...]], bool] | None
    ) -> None:
        self.root = data
        self.mode = mode
        self.missing_ok = missing_ok
        self.problems: list[Problem] = []
        self.done: dict[tuple[str, ...], Any] = {}
        self.active: list[tuple[str, ...]] = []
        self.budget = MAX_EXPANDED  # characters (and container values) the interpolations may still build
        self.sizes: dict[int, int] = {}  # id(resolved container) -> its size in values (a memo)

    def charge(self, amount: int, path: tuple[str, ...], expr: str) -> None:
        """Spend `amount` of the expansion budget; a problem (and ResolveError) once it is exceeded."""
        self.budget -= amount
        if self.budget < 0:
            self.problems.append(
                Problem(
                    path,
                    f"{'.'.join(path)}: interpolation {_clip(expr)} expands past {MAX_EXPANDED:,} characters "
                    "(a doubling chain of ${...}?); refusing to build it",
                )
            )
            raise ResolveError

    def size(self, value: Any) -> int:
        """How many values (scalars and containers) a resolved value holds, shared parts counted each time."""
        if isinstance(value, str):
            return 1
        if not isinstance(value, dict | list):
            return 1
        known = self.sizes.get(id(value))
        if known is not None:
            return known
        items = value.values() if isinstance(value, dict) else value
        total = 1 + sum(self.size(v) for v in items)
        self.sizes[id(value)] = total
        return total

    def run(self) -> tuple[dict[str, Any], list[Problem]]:
        try:
            out = self.node(self.root, ())
        except RecursionError:  # belt and braces: MAX_CHAIN and the loaders' depth bounds stop us first
            chain = self.active[-1] if self.active else ()
            self.problems.append(
                Problem(chain, f"{'.'.join(chain) or 'config'}: interpolations nest too deeply to resolve")
            )
            return self.root, self.problems
        return out, self.problems

    def node(self, value: Any, path: tuple[str, ...]) -> Any:
        if isinstance(value, dict):
            return {k: self.node(v, (*path, str(k))) for k, v in value.items()}
        if isinstance(value, list):
            return [self.node(v, (*path, str(i))) for i, v in enumerate(value)]
        if isinstance(value, str) and "${" in value:
            return self.string(value, path)
        return value

    def lookup(self, path: tuple[str, ...]) -> tuple[bool, Any]:
        node: Any = self.root
        for key in path:
            if isinstance(node, Mapping) and key in node:
                node = node[key]
            elif isinstance(node, list) and key.isdigit() and int(key) < len(node):
                node = node[int(key)]
            else:
                return False, None
        return True, node

    def value_at(self, target: tuple[str, ...], holder: tuple[str, ...], expr: str) -> Any:
        """The resolved value of `target`, or raises ResolveError (problem already recorded)."""
        if target in self.done:
            return self.done[target]
        found, raw = self.lookup(target)
        if not found:
            if self.missing_ok is not None and self.missing_ok(target):
                return Unknown(expr)
            self.problems.append(
                Problem(
                    holder,
                    f"{'.'.join(holder)}: interpolation {expr} names {'.'.join(target)!r}, which is not in the "
                    "config (OmegaConf: InterpolationKeyError)",
                    target,
                )
            )
            raise ResolveError
        if len(self.active) > MAX_CHAIN:
            chain = " -> ".join(".".join(p) for p in self.active[:3])
            self.problems.append(
                Problem(
                    holder,
                    f"{'.'.join(holder)}: interpolation chain longer than {MAX_CHAIN} steps ({chain} -> ...); "
                    "refusing to follow it",
                )
            )
            raise ResolveError
        loop = next((i for i, p in enumerate(self.active) if p[: len(target)] == target), None)
        if loop is not None:
            chain = " -> ".join(".".join(p) for p in [*self.active[loop:], target])
            self.problems.append(
                Problem(
                    holder,
                    f"{'.'.join(holder)}: recursive interpolation {chain} "
                    "(OmegaConf: InterpolationResolutionError)",
                )
            )
            raise ResolveError
        value = self.node(raw, target)
        self.done[target] = value
        return value

    def substituted(self, value: Any, path: tuple[str, ...], expr: str) -> Any:
        """A target's value put in place of `${...}`: a mapping or list counts all its values."""
        if isinstance(value, dict | list):
            self.charge(self.size(value), path, expr)
        return value

    def string(self, text: str, path: tuple[str, ...]) -> Any:
        if path in self.done:
            return self.done[path]
        self.active.append(path)
        try:
            value = self._string(text, path)
        except ResolveError:
            value = Unknown(text)
        finally:
            self.active.pop()
        self.done[path] = value
        return value

    def _string(self, text: str, path: tuple[str, ...]) -> Any:
        pieces: list[Any] = []
        i = 0
        literal: list[str] = []
        while i < len(text):
            if text.startswith("\\${", i):
                literal.append("${")
                i += 3
                continue
            if text.startswith("${", i):
                end = _closing(text, i + 2)
                if end < 0:  # OmegaConf: GrammarParseError; Bridge fails on it
                    self.problems.append(
                        Problem(path, f"{'.'.join(path)}: interpolation {text!r} is not closed")
                    )
                    raise ResolveError
                if literal:
                    pieces.append("".join(literal))
                    literal = []
                pieces.append(self.interpolation(text[i : end + 1], path))
                i = end + 1
                continue
            literal.append(text[i])
            i += 1
        if literal:
            pieces.append("".join(literal))
        if len(pieces) == 1 and text.startswith("${") and text.endswith("}"):
            return self.substituted(pieces[0], path, text)  # one interpolation: the target's value and type
        if any(is_unknown(p) for p in pieces):
            return Unknown(text)
        parts = [p if isinstance(p, str) else _text_of(p, self, path, text) for p in pieces]
        self.charge(sum(len(p) for p in parts), path, text)
        return "".join(parts)

    def interpolation(self, expr: str, path: tuple[str, ...]) -> Any:
        body = expr[2:-1].strip()
        if "${" in body or ":" in body:  # a resolver, or a nested interpolation in the key
            return self.resolver(expr, body, path)
        target = self.target(body, path)
        if target is None:
            self.problems.append(
                Problem(path, f"{'.'.join(path)}: interpolation {expr} goes above the top level")
            )
            raise ResolveError
        return self.value_at(target, path, expr)

    def target(self, body: str, path: tuple[str, ...]) -> tuple[str, ...] | None:
        body = re.sub(_INDEX, r".\1", body)
        if body.startswith("."):
            dots = len(body) - len(body.lstrip("."))
            base = path[:-1]  # the mapping that holds the key
            if dots - 1 > len(base):
                return None
            base = base[: len(base) - (dots - 1)]
            rest = body[dots:]
            return (*base, *(p for p in rest.split(".") if p)) if rest else base
        return tuple(p for p in body.split(".") if p)

    def resolver(self, expr: str, body: str, path: tuple[str, ...]) -> Any:
        if self.mode == "keep":
            return Unknown(expr)
        if self.mode == "run":
            name, _, args = body.partition(":")
            if name.strip() in ("oc.env", "env") and "${" not in args:
                var, _, default = args.partition(",")
                value = os.environ.get(var.strip())
                if value is not None:
                    return value
                if _:
                    default = default.strip()
                    return None if default == "null" else default.strip("'\"")
                self.problems.append(
                    Problem(path, f"{'.'.join(path)}: environment variable {var.strip()!r} is not set")
                )
                raise ResolveError
            self.problems.append(
                Problem(path, f"{'.'.join(path)}: packcfg cannot evaluate the resolver in {expr}")
            )
            raise ResolveError
        return Unknown(expr)


def _clip(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


def _text_of(value: Any, resolver: _Resolver, path: tuple[str, ...], expr: str) -> str:
    """str(value) for a value inside a longer string; a container is charged for its size first (its text
    grows with it)."""
    if isinstance(value, dict | list):
        resolver.charge(resolver.size(value), path, expr)
    return str(value)


def _closing(text: str, start: int) -> int:
    """Index of the `}` that closes a `${` whose body starts at `start` (-1 when none)."""
    depth = 1
    i = start
    while i < len(text):
        ch = text[i]
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return i
        elif ch in "'\"":  # quoted resolver arguments may hold braces
            close = text.find(ch, i + 1)
            if close > 0:
                i = close
        i += 1
    return -1


def restore_text(value: Any) -> Any:
    """Plain data with every Unknown written back as the expression it came from (for dumps)."""
    if isinstance(value, dict):
        return {k: restore_text(v) for k, v in value.items()}
    if isinstance(value, list):
        return [restore_text(v) for v in value]
    return str(value) if is_unknown(value) else value


def has_unknown(value: Any) -> bool:
    """Whether plain config data holds an Unknown anywhere."""
    if isinstance(value, dict):
        return any(has_unknown(v) for v in value.values())
    if isinstance(value, list):
        return any(has_unknown(v) for v in value)
    return is_unknown(value)


def substitute_unknown(value: Any, stand_in: Any) -> Any:
    """A copy of `value` with every Unknown replaced by `stand_in` (the lint tries each possible reading)."""
    if isinstance(value, dict):
        return {k: substitute_unknown(v, stand_in) for k, v in value.items()}
    if isinstance(value, list):
        return [substitute_unknown(v, stand_in) for v in value]
    return stand_in if is_unknown(value) else value
