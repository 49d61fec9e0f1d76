"""Lint settings: `[tool.packcfg]` in the nearest `pyproject.toml`, or a `packcfg.toml`, plus CLI flags.

Searched upward from the linted path (or the CWD); in one folder `packcfg.toml` wins over `pyproject.toml`,
and a `pyproject.toml` without a `[tool.packcfg]` table does not stop the search. Keys:
`select` and `ignore` (codes or prefixes such as "DS"), `severity` ({CODE: "error"|"warning"|"info"}) and
`profile` ("current"|"legacy"). CLI flags replace the file's values.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from packcfg.core.config import ConfigError
from packcfg.core.diagnostics import Severity
from packcfg.core.inputs import check_input, describe_os_error

PROFILES = ("current", "legacy")
MAX_SETTINGS_BYTES = 16 * 1024 * 1024  # a pyproject.toml is kilobytes; a bigger one is not read into memory
_KEYS = {"select", "ignore", "severity", "profile"}


class SettingsError(ConfigError):
    """Bad settings: the message is one line naming the file and the value.

    A ConfigError, so callers of `lint_config` (the launch gate) that handle unloadable configs handle it too.
    """


@dataclass(frozen=True)
class Settings:
    select: tuple[str, ...] | None = None  # None: every rule
    ignore: tuple[str, ...] = ()
    severity: Mapping[str, Severity] = field(default_factory=dict)
    profile: str = "current"
    source: Path | None = None  # the file the settings came from

    def enabled(self, code: str) -> bool:
        """Whether diagnostics with `code` are reported: the longest matching prefix decides, and on a tie
        between `select` and `ignore`, ignore wins (as in ruff)."""
        if self.select is None:
            sel = 0
        else:
            sel = max((len(p) for p in self.select if code.startswith(p)), default=-1)
        ign = max((len(p) for p in self.ignore if code.startswith(p)), default=-1)
        return sel >= 0 and sel > ign

    def severity_of(self, code: str, default: Severity) -> Severity:
        return self.severity.get(code, default)

    def with_cli(
        self,
        *,
        select: Iterable[str] | None = None,
        ignore: Iterable[str] | None = None,
        profile: str | None = None,
        known_codes: Iterable[str] | None = None,
    ) -> Settings:
        """These settings with CLI flags applied (flags win); validates the codes when `known_codes`."""
        out = self
        if select is not None:
            out = replace(out, select=_codes(select, "--select", known_codes, allow_empty=False))
        if ignore is not None:
            out = replace(out, ignore=_codes(ignore, "--ignore", known_codes))
        if profile is not None:
            out = replace(out, profile=_profile(profile, "--profile"))
        return out


def split_codes(text: str | Iterable[str]) -> list[str]:
    """`"PK110,DS"` or ["PK110", "DS"] -> ["PK110", "DS"] (upper-cased, blanks dropped)."""
    parts = text.split(",") if isinstance(text, str) else [p for item in text for p in str(item).split(",")]
    return [p.strip().upper() for p in parts if p.strip()]


def _codes(
    value: Any, where: str, known: Iterable[str] | None, *, allow_empty: bool = True
) -> tuple[str, ...]:
    if not isinstance(value, str | list | tuple):
        raise SettingsError(f"{where}: expected a list of rule codes, got {value!r}")
    codes = split_codes(value)
    if not codes and not allow_empty:
        # an empty select would silently turn every rule off: a lint that checks nothing must not pass
        raise SettingsError(
            f"{where}: no codes selected (give codes or prefixes such as PK110,DS, or ALL; leave it out for "
            "every rule)"
        )
    if known is not None:
        known = list(known)
        for code in codes:
            if code != "ALL" and not any(k.startswith(code) for k in known):
                raise SettingsError(f"{where}: unknown rule code or prefix {code!r} (see `packcfg rules`)")
    return tuple("" if c == "ALL" else c for c in codes)


def _profile(value: Any, where: str) -> str:
    if value not in PROFILES:
        raise SettingsError(f"{where}: profile must be one of {', '.join(PROFILES)}, got {value!r}")
    return str(value)


def parse_settings(
    table: Mapping[str, Any], where: str, known_codes: Iterable[str] | None = None
) -> Settings:
    """Validate a `[tool.packcfg]` table; SettingsError names `where` and the bad value."""
    known = list(known_codes) if known_codes is not None else None
    unknown = sorted(set(table) - _KEYS)
    if unknown:
        raise SettingsError(f"{where}: unknown setting {unknown[0]!r} (allowed: {', '.join(sorted(_KEYS))})")
    severity_table = table.get("severity", {})
    if not isinstance(severity_table, Mapping):
        raise SettingsError(f'{where}: severity must be a table {{CODE = "warning"}}, got {severity_table!r}')
    severity: dict[str, Severity] = {}
    for code, level in severity_table.items():
        code_u = str(code).upper()
        if known is not None and code_u not in known:
            raise SettingsError(f"{where}: severity: unknown rule code {code!r}")
        try:
            severity[code_u] = Severity(level)
        except ValueError:
            raise SettingsError(
                f'{where}: severity.{code}: expected "error", "warning" or "info", got {level!r}'
            ) from None
    return Settings(
        select=_codes(table["select"], f"{where}: select", known, allow_empty=False)
        if "select" in table
        else None,
        ignore=_codes(table["ignore"], f"{where}: ignore", known) if "ignore" in table else (),
        severity=severity,
        profile=_profile(table.get("profile", "current"), f"{where}: profile"),
    )


def find_settings_file(start: Path) -> tuple[Path, Mapping[str, Any]] | None:
    """The nearest settings file above `start` and its packcfg table.

    A settings name that exists but is not a readable regular file (a symlink loop or a dangling link, a
    FIFO, a device, a folder) is an error naming it, never skipped: the lint would run with other settings."""
    try:
        here = start.resolve()
    except (OSError, RuntimeError):  # a symlink loop on the way (pathlib raises RuntimeError for it)
        here = Path(os.path.abspath(start))
    try:
        is_dir = here.is_dir()
    except OSError:
        is_dir = False
    if not is_dir:
        here = here.parent
    for folder in (here, *here.parents):
        for name in ("packcfg.toml", "pyproject.toml"):
            candidate = folder / name
            try:
                if not os.path.lexists(candidate):
                    continue
            except (OSError, ValueError):
                continue
            check_input(candidate, what="settings file", error=SettingsError, max_bytes=MAX_SETTINGS_BYTES)
            try:
                with open(candidate, "rb") as fh:
                    doc = tomllib.load(fh)
            except OSError as exc:
                raise SettingsError(f"{candidate}: cannot read settings ({describe_os_error(exc)})") from None
            except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
                raise SettingsError(f"{candidate}: cannot read settings ({exc})") from None
            except RecursionError:
                raise SettingsError(f"{candidate}: cannot read settings (nested too deeply)") from None
            if name == "packcfg.toml":
                # Either top-level keys (like ruff.toml) or the same [tool.packcfg] table as pyproject.
                table = doc.get("tool", {}).get("packcfg", doc) if "tool" in doc else doc
                return candidate, table
            table = doc.get("tool", {}).get("packcfg")
            if isinstance(table, Mapping):
                return candidate, table
    return None


def load_settings(start: Path | None = None, known_codes: Iterable[str] | None = None) -> Settings:
    """Settings from the nearest settings file above `start` (default: the CWD); defaults when none."""
    found = find_settings_file(start or Path.cwd())
    if found is None:
        return Settings()
    path, table = found
    return replace(parse_settings(table, str(path), known_codes), source=path)
