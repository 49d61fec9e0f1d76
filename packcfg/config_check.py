"""`packcfg.check()`, exported by `packcfg`: lint a config built in Python (a Megatron Bridge `ConfigContainer`,
an OmegaConf config, a dict) or a YAML path, with the same rule engine and diagnostics as `packcfg lint`.

How each input is read (docs/python.md):
- a path: exactly as `packcfg lint PATH` reads it (settings from the nearest settings file above it);
- a Bridge `ConfigContainer` (0.3.x and 0.6.x): through Bridge's own serialisation, `cfg.to_yaml(path)` into a
  temporary folder (Python sets written as sorted lists: OmegaConf cannot load the `!!set` PyYAML writes), then
  linted as that file; line and column point into that YAML (`cfg.to_yaml()`), `path` names the key;
- an OmegaConf `DictConfig`: `OmegaConf.to_yaml(cfg)` (interpolations kept; lint resolves them, as Bridge does);
- a mapping: its values as Python holds them (no YAML round trip); it has no lines, so a diagnostic's `path` is
  its location (`file` is `<dict>`, line and column 1).
Nothing here imports Pydantic, torch or megatron; OmegaConf only when the object is already one.
"""

from __future__ import annotations

import enum
import os
import tempfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path, PurePath
from typing import Any

from packcfg.core.config import ConfigError, LocatedConfig, check_overrides, merge_documents
from packcfg.core.diagnostics import ConfigPath, Diagnostic, Severity
from packcfg.core.yamlsource import MAX_DEPTH, PosNode, YamlDocument, load_text
from packcfg.lint.settings import Settings

DICT_SOURCE = "<dict>"
CONTAINER_SOURCE = "<ConfigContainer>"
OMEGACONF_SOURCE = "<DictConfig>"

__all__ = ["CheckError", "check", "lint_object", "written_path_of"]


class CheckError(Exception):
    """`check(..., raise_on=...)` found diagnostics at or above that severity that are not allowed.

    `diagnostics` holds them; the message lists each one on its own line (code, key path, message)."""

    def __init__(self, diagnostics: Sequence[Diagnostic], source: str) -> None:
        self.diagnostics = list(diagnostics)
        self.source = source
        n = len(self.diagnostics)
        lines = [f"packcfg: {n} finding{'s' if n != 1 else ''} block{'s' if n == 1 else ''} {source}:"]
        lines.extend(f"  {describe(d)}" for d in self.diagnostics)
        super().__init__("\n".join(lines))


def describe(d: Diagnostic) -> str:
    """One line for a finding: `PK110 error at train.micro_batch_size: <message>` (the position when no key)."""
    where = d.path or f"{d.file}:{d.line}:{d.column}"
    return f"{d.code} {d.severity.value} at {where}: {d.message}"


def check(
    obj: Any,
    *,
    recipe: str | None = None,
    overrides: Sequence[str] = (),
    allow: Iterable[str] = (),
    raise_on: str | Severity | None = None,
    profile: str | None = None,
    select: Iterable[str] | None = None,
    ignore: Iterable[str] | None = None,
) -> list[Diagnostic]:
    """Lint `obj` (a Bridge ConfigContainer, an OmegaConf DictConfig, a mapping, or a YAML path) merged over the
    Bridge base recipe `recipe` (as `--recipe`) with Hydra `overrides` on top; returns every diagnostic, as
    `packcfg lint` reports them for the equivalent YAML.

    `raise_on="error"` (or "warning", "info") raises `CheckError` listing the diagnostics at or above that
    severity whose code is not in `allow` (as `packcfg launch --allow CODE`). A config that cannot be read at all
    (unreadable path, malformed override, unknown base recipe, a value that is not config data) raises
    `ConfigError` with one line naming it; an unknown code in `allow`, `select` or `ignore` raises ValueError.
    """
    from packcfg.lint import engine
    from packcfg.lint.gate import normalise_codes
    from packcfg.lint.settings import load_settings

    threshold = _severity(raise_on)
    codes = normalise_codes(list(allow))
    known = engine.rules()
    unknown = [c for c in codes if c not in known]
    if unknown:
        raise ValueError(f"allow: unknown rule code {', '.join(unknown)} (`packcfg rules` lists them)")
    runs = [*overrides, *((f"++recipe.base={recipe}",) if recipe is not None else ())]
    check_overrides(runs)  # one line naming a malformed override, before anything is read
    path = _as_path(obj)
    settings = load_settings(path, known_codes=known).with_cli(
        select=select, ignore=ignore, profile=profile, known_codes=known
    )
    if path is not None:
        source = str(path)
        diagnostics = engine.lint_config([path], runs, settings=settings)
    else:
        document = read_object(obj)
        source = document.file
        diagnostics = engine.lint_located(merge_documents([document], runs), settings=settings)
    if threshold is not None:
        blocking = [
            d for d in diagnostics if d.severity.rank >= threshold.rank and d.code.upper() not in codes
        ]
        if blocking:
            raise CheckError(blocking, source)
    return diagnostics


def _severity(value: str | Severity | None) -> Severity | None:
    if value is None:
        return None
    try:
        return Severity(str(value).lower())
    except ValueError:
        raise ValueError(f"raise_on must be 'error', 'warning', 'info' or None, not {value!r}") from None


def _as_path(obj: Any) -> Path | None:
    if isinstance(obj, str | PurePath):
        return Path(obj)
    if isinstance(obj, os.PathLike):
        return Path(os.fspath(obj))
    return None


def lint_object(
    obj: Any,
    *,
    recipe: str | None = None,
    overrides: Sequence[str] = (),
    settings: Settings | None = None,
) -> tuple[list[Diagnostic], LocatedConfig]:
    """Lint an in-memory config with the given settings (defaults: none read from disk); the diagnostics and the
    merged config the rules saw (its data is what `written_path_of` maps paths against)."""
    from packcfg.lint.engine import lint_located

    runs = [*overrides, *((f"++recipe.base={recipe}",) if recipe is not None else ())]
    located = merge_documents([read_object(obj)], runs)
    return lint_located(located, settings=settings or Settings()), located


def written_path_of(diagnostic: Diagnostic, located: LocatedConfig) -> ConfigPath:
    """The key path of a diagnostic as the user spelled it (a legacy key where one was written); () when the
    finding is about the config as a whole or its source (SC001, an unresolvable interpolation)."""
    if not diagnostic.path:
        return ()
    from packcfg.core.normalize import normalize
    from packcfg.lint.context import written_path

    path = tuple(diagnostic.path.split("."))
    return written_path(path, dict(normalize(located.data).renamed))


def read_object(obj: Any) -> YamlDocument:
    """An in-memory config as one loaded document (what the merge takes); ConfigError when it is not one."""
    if isinstance(obj, YamlDocument):
        return obj
    module = type(obj).__module__ or ""
    if module.startswith("omegaconf"):
        return load_text(_omegaconf_yaml(obj), OMEGACONF_SOURCE)
    if module.startswith("megatron.") and callable(getattr(obj, "to_yaml", None)):
        return load_text(container_yaml(obj), CONTAINER_SOURCE)
    if isinstance(obj, Mapping):
        return mapping_document(obj)
    raise ConfigError(
        f"cannot check a {type(obj).__module__}.{type(obj).__qualname__}: give a Megatron Bridge ConfigContainer, "
        "an OmegaConf DictConfig, a mapping, or the path of a YAML file"
    )


def _omegaconf_yaml(cfg: Any) -> str:
    from omegaconf import DictConfig, OmegaConf

    if not isinstance(cfg, DictConfig):
        raise ConfigError(f"cannot check an OmegaConf {type(cfg).__name__}: the config must be a DictConfig")
    return OmegaConf.to_yaml(cfg)  # interpolations kept: lint resolves them after the merge, as Bridge does


@contextmanager
def _sets_as_sorted_lists() -> Iterator[None]:
    """PyYAML writes a Python set (LoRA's `target_modules` in some releases) as `!!set`, which OmegaConf (and so
    Bridge's own YAML loading) cannot read; write it as a sorted list for as long as Bridge dumps. Like Bridge's
    own `safe_yaml_representers`, this changes PyYAML's SafeDumper for that time (not thread-safe)."""
    import yaml

    saved = yaml.SafeDumper.yaml_representers.get(set)
    yaml.SafeDumper.add_representer(set, lambda d, v: d.represent_list(sorted(v, key=str)))
    try:
        yield
    finally:
        if saved is None:
            yaml.SafeDumper.yaml_representers.pop(set, None)
        else:
            yaml.SafeDumper.yaml_representers[set] = saved


def container_yaml(cfg: Any) -> str:
    """A Bridge ConfigContainer as Bridge serialises it: `cfg.to_yaml(path)` (0.3.x and 0.6.x both write a file
    through `to_dict()` and `yaml.safe_dump` with Bridge's own representers), read back as text."""
    with tempfile.TemporaryDirectory(prefix="packcfg-check-") as folder:
        target = Path(folder) / "config.yaml"
        try:
            with _sets_as_sorted_lists():
                cfg.to_yaml(str(target))
            return target.read_text(encoding="utf-8")
        except Exception as exc:  # Bridge could not write its own config out: one line, not its traceback
            first = (str(exc).strip().splitlines() or [""])[0]
            raise ConfigError(
                f"{CONTAINER_SOURCE}: Bridge's to_yaml() failed: {type(exc).__name__}: {first}"
            ) from None


_SCALARS = (str, int, float, bool, type(None))


def mapping_document(data: Mapping[Any, Any], source: str = DICT_SOURCE) -> YamlDocument:
    """A mapping as a loaded document: values as Python holds them (an Enum member as its name, as lint reads
    Bridge's enum dumps; a tuple or set as a list; a path as text). ConfigError naming the key for anything else
    (an object, a non-text key, nesting deeper than a YAML file may have, a cycle).

    Every key is placed at line 1, column 1 of `source`: a mapping has no lines, but its keys must still say that
    they were set here and not by a base recipe merged under them (rules skip what a base recipe set)."""
    enum_dump = False

    def plain(value: Any, path: tuple[str, ...], depth: int) -> tuple[Any, dict[str, PosNode]]:
        nonlocal enum_dump
        if depth > MAX_DEPTH:
            raise ConfigError(
                f"{source}: {_dotted(path)}: nested deeper than {MAX_DEPTH} levels (or a cycle)"
            )
        if isinstance(value, enum.Enum):  # before the scalars: an IntEnum is an int too
            return value.name, {}
        if isinstance(value, bool | int | float | str) or value is None:
            return (value if type(value) in _SCALARS else _SCALAR_BASE[_scalar_kind(value)](value)), {}
        if isinstance(value, PurePath):
            return str(value), {}
        items: list[tuple[str, Any]]
        if isinstance(value, Mapping):
            items = []
            for key, item in value.items():
                if not isinstance(key, str):
                    raise ConfigError(
                        f"{source}: {_dotted(path)}: key {key!r} is not text (config keys are strings)"
                    )
                enum_dump = enum_dump or key == "_name_"
                items.append((key, item))
        elif isinstance(value, list | tuple | set | frozenset):
            ordered = sorted(value, key=str) if isinstance(value, set | frozenset) else value
            items = [(str(i), item) for i, item in enumerate(ordered)]
        else:
            raise ConfigError(
                f"{source}: {_dotted(path)}: a value of type {type(value).__qualname__} is not config data "
                "(mappings, lists, text, numbers, booleans, None)"
            )
        out: dict[str, Any] = {}
        tree: dict[str, PosNode] = {}
        for key, item in items:
            out[key], children = plain(item, (*path, key), depth + 1)
            tree[key] = PosNode(source, 1, 1, children)
        return (out if isinstance(value, Mapping) else list(out.values())), tree

    converted, positions = plain(data, (), 0)
    # `_name_` in the text is what tells the loader to read Bridge's enum dumps (config._as_read); a mapping has
    # no text, so it carries that word alone when such a dump is in it
    return YamlDocument(source, converted, positions, [], "_name_" if enum_dump else "")


_SCALAR_BASE: dict[str, type] = {"bool": bool, "int": int, "float": float, "str": str}


def _scalar_kind(value: Any) -> str:
    """The base type of a subclass of a scalar type (a str subclass becomes a plain str)."""
    for name, kind in (("bool", bool), ("int", int), ("float", float), ("str", str)):
        if isinstance(value, kind):
            return name
    return "str"


def _dotted(path: tuple[str, ...]) -> str:
    return ".".join(path) if path else "(top level)"
