"""Command-line overrides in Hydra's grammar, as Megatron Bridge's scripts take them.

Bridge applies overrides with Hydra: `parse_hydra_overrides` in
`src/megatron/bridge/training/utils/omegaconf_utils.py` (Bridge v0.3.1 and main 067f987) runs Hydra's
`OverridesParser` and `ConfigLoaderImpl._apply_overrides_to_config` (hydra-core 1.3.2,
`hydra/_internal/config_loader_impl.py`) on the recipe's config after the YAML file is merged
(`process_config_with_overrides`, same file). `scripts/training/run_recipe.py` hands it the command line's
trailing words (v0.3.1: `parse_known_args` leftovers; main: `KEY=VALUE` words via `recipe_runner.py`
`apply_cli_overrides`). The forms, and what they do there:

- `KEY=VALUE`   change: `OmegaConf.update(cfg, key, value, merge=True)` (a mapping merges into a mapping).
- `+KEY=VALUE`  add: an error when a non-null value is already at KEY (unless VALUE is a list or mapping).
- `++KEY=VALUE` add or replace.
- `~KEY`, `~KEY=VALUE`  delete: an error when KEY is absent (or, with VALUE, holds another value).

Values follow Hydra's override grammar (`hydra/grammar/OverrideLexer.g4`): `null`, `true`/`false` (any case),
integers, floats (`1e-4`, `.5`, `inf`, `nan`), quoted strings, lists `[1,2]`, dicts `{a:1,b:x}`, interpolations
`${a.b}` (kept as text, resolved after the merge) and otherwise unquoted strings. Sweeps (`a=1,2`,
`choice(...)`) are multirun-only in Hydra and refused here.
"""

from __future__ import annotations

import re
from typing import Any

SET, ADD, FORCE_ADD, DELETE = "set", "add", "force_add", "delete"

MAX_DEPTH = 100
"""Key levels (`a.b.c`) and value nesting (`[[...]]`, `{a: {...}}`) an override may have: the YAML loader's
bound (packcfg.core.yamlsource.MAX_DEPTH); deeper would only exhaust the merge's recursion."""


class OverrideError(ValueError):
    """A malformed override; the message names it."""


class Override:
    """One parsed override. A plain class, not a dataclass: dataclasses cost milliseconds at import."""

    __slots__ = ("text", "kind", "path", "value", "has_value")

    def __init__(
        self, text: str, kind: str, path: tuple[str, ...], value: Any = None, has_value: bool = True
    ) -> None:
        self.text = text  # as the user wrote it
        self.kind = kind  # set | add | force_add | delete
        self.path = path
        self.value = value
        self.has_value = has_value  # False only for `~KEY`

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Override) and all(
            getattr(self, k) == getattr(other, k) for k in self.__slots__
        )

    def __hash__(self) -> int:
        return hash((self.text, self.kind, self.path))

    def __repr__(self) -> str:
        return f"Override({self.text!r}, {self.kind}, {self.path!r}, {self.value!r})"


# Patterns, compiled (and cached) by `re` on first use: most lint runs have no override.
# Hydra's key: dotted ids (`a.b.c`, list indices `a.0`); `@package` is a config-group feature Bridge has no use for.
_KEY = r"[A-Za-z0-9_$\-/]+(?:\.[A-Za-z0-9_$\-/]+)*"
_INT = r"[+-]?(?:0|[1-9](?:_?[0-9])*)"
_DIGITS = r"[0-9](?:_?[0-9])*"
_POINT = rf"(?:(?:{_DIGITS})?\.{_DIGITS}|{_DIGITS}\.)"
_FLOAT = rf"[+-]?(?:{_POINT}|(?:{_DIGITS}|{_POINT})[eE][+-]?[0-9]+|[Ii][Nn][Ff]|[Nn][Aa][Nn])"
_OVERRIDE_SHAPE = r"(?s:(?:~|\+\+?)?[A-Za-z0-9_$\-/]+(?:\.[A-Za-z0-9_$\-/]+)*(?:=.*)?)"
_ESCAPABLE = "\\()[]{}:=, \t"
_SWEEP_FUNCS = ("choice(", "range(", "interval(", "glob(", "sort(", "shuffle(", "tag(", "extend_list(")


def looks_like_override(text: str) -> bool:
    """Whether a command-line word is meant as an override: `KEY=VALUE`, `+KEY=VALUE`, `++KEY=VALUE`, `~KEY`."""
    if not re.fullmatch(_OVERRIDE_SHAPE, text):
        return False
    return "=" in text or text.startswith("~")


def parse_override(text: str) -> Override:
    """One override word; OverrideError names it when it is malformed."""
    raw = text
    if text.startswith("++"):
        kind, text = FORCE_ADD, text[2:]
    elif text.startswith("+"):
        kind, text = ADD, text[1:]
    elif text.startswith("~"):
        kind, text = DELETE, text[1:]
    else:
        kind = SET
    key, sep, value_text = text.partition("=")
    key = key.strip()
    if not key:
        raise OverrideError(f"override {_short(raw)}: expected KEY=VALUE (or +KEY=VALUE, ++KEY=VALUE, ~KEY)")
    if not re.fullmatch(_KEY, key):
        raise OverrideError(
            f"override {_short(raw)}: {_short(key)} is not a dotted key like train.micro_batch_size"
        )
    path = tuple(key.split("."))
    if len(path) > MAX_DEPTH:
        raise OverrideError(
            f"override {_short(raw)}: key has {len(path)} levels; at most {MAX_DEPTH} (no config nests deeper)"
        )
    if not sep:
        if kind != DELETE:
            raise OverrideError(f"override {_short(raw)}: expected KEY=VALUE (only ~KEY may omit the value)")
        return Override(raw, kind, path, None, has_value=False)
    try:
        value = parse_value(value_text)
    except OverrideError as exc:
        raise OverrideError(f"override {_short(raw)}: {exc}") from None
    if kind == DELETE and value_text.strip() == "":
        return Override(raw, kind, path, None, has_value=False)
    return Override(raw, kind, path, value)


def _short(text: str, limit: int = 80) -> str:
    """An override as the messages quote it: long ones cut (a 100 kB word is not one line)."""
    return repr(text) if len(text) <= limit else repr(text[:limit]) + f"... ({len(text):,} characters)"


def parse_value(text: str) -> Any:
    """A Hydra override value (see the module docstring)."""
    parser = _ValueParser(text)
    value = parser.element(top=True)
    parser.skip_ws()
    if parser.i != len(text):
        if text[parser.i] == ",":
            raise OverrideError("a sweep (a,b,...) runs several jobs in Hydra; write a list as [a,b]")
        raise OverrideError(f"unexpected {text[parser.i]!r} at position {parser.i + 1}")
    return value


class _ValueParser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.i = 0
        self.depth = 0

    def _enter(self) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise OverrideError(f"value nests deeper than {MAX_DEPTH} levels of [ ] and {{ }}")

    def skip_ws(self) -> None:
        while self.i < len(self.text) and self.text[self.i] in " \t":
            self.i += 1

    def element(self, top: bool = False) -> Any:
        self.skip_ws()
        if self.i >= len(self.text):
            return "" if not top else ""  # Hydra: `key=` is the empty string
        ch = self.text[self.i]
        if ch == "[":
            return self.sequence()
        if ch == "{":
            return self.mapping()
        if ch in "'\"":
            value = self.quoted()
            self.skip_ws()
            if self.i < len(self.text) and self.text[self.i] not in ",]}":
                raise OverrideError("text after a quoted string; quote the whole value")
            return value
        return self.primitive()

    def quoted(self) -> str:
        quote = self.text[self.i]
        self.i += 1
        out: list[str] = []
        while self.i < len(self.text):
            ch = self.text[self.i]
            if ch == "\\" and self.i + 1 < len(self.text) and self.text[self.i + 1] in (quote, "\\"):
                out.append(self.text[self.i + 1])
                self.i += 2
                continue
            if ch == quote:
                self.i += 1
                return "".join(out)
            out.append(ch)
            self.i += 1
        raise OverrideError(f"unterminated {quote}...{quote} string")

    def sequence(self) -> list[Any]:
        self._enter()
        self.i += 1  # [
        out: list[Any] = []
        self.skip_ws()
        if self._peek() == "]":
            self.i += 1
            self.depth -= 1
            return out
        while True:
            out.append(self.element())
            self.skip_ws()
            ch = self._peek()
            if ch == ",":
                self.i += 1
                continue
            if ch == "]":
                self.i += 1
                self.depth -= 1
                return out
            raise OverrideError("a list [a,b,...] is not closed with ]")

    def mapping(self) -> dict[str, Any]:
        self._enter()
        self.i += 1  # {
        out: dict[str, Any] = {}
        self.skip_ws()
        if self._peek() == "}":
            self.i += 1
            self.depth -= 1
            return out
        while True:
            self.skip_ws()
            start = self.i
            while self.i < len(self.text) and self.text[self.i] not in ":,}":
                self.i += 1
            key = self.text[start : self.i].strip()
            if self._peek() != ":" or not key:
                raise OverrideError("a dict {key: value, ...} needs key: value pairs")
            self.i += 1
            out[key] = self.element()
            self.skip_ws()
            ch = self._peek()
            if ch == ",":
                self.i += 1
                continue
            if ch == "}":
                self.i += 1
                self.depth -= 1
                return out
            raise OverrideError("a dict {key: value, ...} is not closed with }")

    def primitive(self) -> Any:
        start = self.i
        depth = 0  # inside ${...}: commas, colons and braces belong to the interpolation
        while self.i < len(self.text):
            ch = self.text[self.i]
            if ch == "$" and self.text.startswith("${", self.i):
                depth += 1
                self.i += 2
                continue
            if depth:
                if ch == "{":
                    depth += 1
                elif ch == "}":
                    depth -= 1
                self.i += 1
                continue
            if ch == "\\" and self.i + 1 < len(self.text) and self.text[self.i + 1] in _ESCAPABLE:
                self.i += 2  # Hydra's ESC: `\,` is a literal comma (unescaped below)
                continue
            if ch in ",]}[{":
                break
            if ch in "'\"":
                raise OverrideError("a quote inside an unquoted value; quote the whole value")
            self.i += 1
        if depth:
            raise OverrideError("an interpolation ${...} is not closed")
        if self.i < len(self.text) and self.text[self.i] in "[{":
            raise OverrideError(f"unexpected {self.text[self.i]!r} at position {self.i + 1}")
        word = self.text[start : self.i].strip()
        if "\\" in word:
            word = re.sub(r"\\([\\()\[\]{}:=, \t])", r"\1", word)
            return word
        if "=" in word:  # Hydra's grammar has no unquoted `=` in a value
            raise OverrideError("'=' inside a value; quote the value")
        if word.startswith(_SWEEP_FUNCS):
            raise OverrideError("sweeps (choice, range, ...) run several jobs in Hydra; give one value")
        return _typed(word)

    def _peek(self) -> str:
        return self.text[self.i] if self.i < len(self.text) else ""


def _typed(word: str) -> Any:
    low = word.lower()
    if low == "null":
        return None
    if low == "true":
        return True
    if low == "false":
        return False
    if re.fullmatch(_INT, word):
        try:
            return int(word.replace("_", ""))
        except ValueError:  # more digits than Python converts
            raise OverrideError(f"integer with {len(word)} digits is out of range") from None
    if re.fullmatch(_FLOAT, word):
        return float(word.replace("_", ""))
    return word
