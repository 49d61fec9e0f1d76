"""The command-line arguments every config-reading command shares, spelled the same everywhere.

- `-c FILE` / `--config FILE`: an extra YAML merged over the config (repeatable).
- `KEY=VALUE`, `+KEY=VALUE`, `++KEY=VALUE`, `~KEY` after the config: overrides in Hydra's grammar, as Megatron
  Bridge's scripts take them (`packcfg.core.overrides`); `-o KEY=VALUE` / `--set KEY=VALUE` (and `--override`)
  are aliases for one override.
- `--recipe NAME`: merge the files over a Bridge base recipe (`recipe.base`; `packcfg.core.base_recipes`).
- `--bridge-version V`: the Megatron Bridge release the config targets: the override `++launch.bridge.version=V`
  (lint's advice follows it, `packcfg.core.bridge_version`; so does `launch.engine: bridge`).
- `--out DIR`: an output folder, wherever a command writes one (`render`, `launch`, `train`, `pack`, `demo`,
  `export-hf`); `--output FILE`: a report file (`lint`, `schema`). `-o` is never an output folder.
- Deprecated spellings keep working for one release; each is warned once per invocation, one line on stderr
  naming the new spelling (`warn_deprecated`), and listed in CHANGELOG.md.

Standard library only: the CLI imports every command module to build its parser.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import Any

RECIPE_OVERRIDE = "++recipe.base="
BRIDGE_VERSION_OVERRIDE = "++launch.bridge.version="

_warned: set[str] = set()


def start_invocation() -> None:
    """A new command: deprecation lines may be shown again (`packcfg.cli.main` calls this first)."""
    _warned.clear()


def warn_deprecated(old: str, new: str) -> None:
    """One line on stderr naming the new spelling, once per invocation. The ranks a command starts itself
    (`train` under torchrun: RANK is set) do not repeat what the user's own process already said."""
    if old in _warned or "RANK" in os.environ:
        return
    _warned.add(old)
    print(f"packcfg: warning: {old} is deprecated, use {new} (see CHANGELOG.md)", file=sys.stderr)


class _DeprecatedAlias(argparse.Action):
    """An old spelling of an option: stores (or appends) like the new one, after `warn_deprecated`."""

    def __init__(self, option_strings: Sequence[str], dest: str, new: str = "", append: bool = False, **kwargs: Any) -> None:  # fmt: skip
        self.new, self.append = new, append
        super().__init__(option_strings, dest, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any, option_string: str | None = None) -> None:  # fmt: skip
        warn_deprecated(str(option_string), self.new)
        if self.append:
            items = list(getattr(namespace, self.dest, None) or [])
            items.append(values)
            values = items
        setattr(namespace, self.dest, values)


def add_deprecated_alias(
    parser: argparse.ArgumentParser, old: str, *, dest: str, new: str, append: bool = False, **kwargs: Any
) -> None:
    """`old` still works as `new` (hidden from --help; warned once per invocation)."""
    parser.add_argument(
        old, dest=dest, action=_DeprecatedAlias, new=new, append=append, default=argparse.SUPPRESS,
        help=argparse.SUPPRESS, **kwargs,
    )  # fmt: skip


class TypedOverride(str):
    """An override a flag stands for (`--recipe NAME` is `++recipe.base=NAME`), remembering what the user typed,
    so that a finding on it is labelled `--recipe NAME (command line)` (`packcfg.core.config.override_source`)."""

    typed: str

    def __new__(cls, text: str, typed: str) -> TypedOverride:
        word = super().__new__(cls, text)
        word.typed = typed
        return word


class _AppendOverrides(argparse.Action):
    """Adds to `args.overrides` (the positional KEY=VALUE words and -o/--set share that list)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any, option_string: str | None = None) -> None:  # fmt: skip
        items = list(getattr(namespace, "overrides", None) or [])
        items.extend([values] if isinstance(values, str) else values)
        namespace.overrides = items


class _Recipe(argparse.Action):
    """`--recipe NAME` is the override `++recipe.base=NAME`: every loader then merges over that base."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any, option_string: str | None = None) -> None:  # fmt: skip
        items = list(getattr(namespace, "overrides", None) or [])
        items.append(TypedOverride(f"{RECIPE_OVERRIDE}{values}", f"{option_string} {values}"))
        namespace.overrides = items


class _OverrideOrDeprecatedOut(argparse.Action):
    """`render -o`: KEY=VALUE is an override (as everywhere); a folder is the old spelling of `--out DIR`."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any, option_string: str | None = None) -> None:  # fmt: skip
        from packcfg.core.overrides import looks_like_override

        if looks_like_override(values):
            items = list(getattr(namespace, "overrides", None) or [])
            items.append(values)
            namespace.overrides = items
            return
        warn_deprecated(
            f"`{option_string} DIR` for the output folder", "`--out DIR` (-o is an override, KEY=VALUE)"
        )
        setattr(namespace, self.dest, values)


class _BridgeVersion(argparse.Action):
    """`--bridge-version V` is the override `++launch.bridge.version=V`; a value that is no version is a usage
    error (exit 2, one line)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any, option_string: str | None = None) -> None:  # fmt: skip
        from packcfg.core.bridge_version import check_version_text

        try:
            version = check_version_text(str(values))
        except ValueError as exc:
            parser.error(str(exc))
        items = list(getattr(namespace, "overrides", None) or [])
        items.append(TypedOverride(f"{BRIDGE_VERSION_OVERRIDE}{version}", f"{option_string} {values}"))
        namespace.overrides = items


def add_merge_arguments(
    parser: argparse.ArgumentParser,
    *,
    positional: bool = True,
    short_override: bool = True,
    legacy_config_file: bool = False,
) -> None:
    """`-c FILE` (args.config_files), overrides (args.overrides: positional `KEY=VALUE`s after the config,
    and `-o`/`--set KEY=VALUE`), `--recipe NAME` and `--bridge-version V`, merged in that order over the main config,
    as `packcfg.core.config.load_config` does. `short_override=False` leaves `-o` to the caller (render);
    `legacy_config_file` keeps `--config-file FILE` (train, export-hf) as a deprecated spelling of `-c FILE`."""
    parser.add_argument(
        "-c",
        "--config",
        dest="config_files",
        action="append",
        default=[],
        metavar="FILE",
        help="extra YAML merged over the config, in order (repeatable)",
    )
    if positional:
        parser.add_argument(
            "override_words",  # its own dest: intermixed parsing drops an empty positional's dest
            nargs="*",
            action=_AppendOverrides,
            default=argparse.SUPPRESS,
            metavar="KEY=VALUE",
            help="overrides in Hydra's grammar, applied last: KEY=VALUE, +KEY=VALUE (add), ++KEY=VALUE "
            "(add or replace), ~KEY (delete); values like 1e-4, [1,2], {a: 1}, null",
        )
    flags = ("-o", "--set") if short_override else ("--set",)
    parser.add_argument(
        *flags,
        dest="overrides",
        action=_AppendOverrides,
        metavar="KEY=VALUE",
        help="one override (same grammar as the positional ones; repeatable)",
    )
    add_deprecated_alias(parser, "--override", dest="overrides", new="--set KEY=VALUE", append=True)
    if legacy_config_file:  # Megatron Bridge's scripts spell the config --config-file
        add_deprecated_alias(parser, "--config-file", dest="config_files", new="-c FILE", append=True)
    parser.add_argument(
        "--recipe",
        action=_Recipe,
        metavar="NAME",
        help="merge the config over this Megatron Bridge recipe's values (as recipe.base: NAME); "
        "`packcfg lint --list-recipes` lists them",
    )
    parser.add_argument(
        "--bridge-version",
        action=_BridgeVersion,
        metavar="VERSION",
        help="the Megatron Bridge release the config targets, e.g. 0.3.1 or 0.6.2 (as ++launch.bridge.version=V): "
        "lint never advises a rename or a repack that release cannot read",
    )
    parser.set_defaults(overrides=[])


def add_deprecated_out(parser: argparse.ArgumentParser, dest: str) -> None:
    """`-o`: an override when it looks like one, else the deprecated spelling of `--out DIR` (render)."""
    parser.add_argument(
        "-o",
        dest=dest,
        action=_OverrideOrDeprecatedOut,
        metavar="KEY=VALUE",
        help="one override, as --set (`-o DIR` is the deprecated spelling of --out DIR)",
    )


def add_out_argument(
    parser: argparse.ArgumentParser,
    *deprecated: str,
    dest: str = "out_dir",
    help: str = "output folder",  # noqa: A002
    **kwargs: Any,
) -> None:
    """`--out DIR`, the one spelling of an output folder; older spellings work, warned (`add_deprecated_alias`)."""
    parser.add_argument("--out", dest=dest, metavar="DIR", help=help, **kwargs)
    for old in deprecated:
        add_deprecated_alias(parser, old, dest=dest, new="--out DIR", type=kwargs.get("type"), metavar="DIR")


def split_paths_and_overrides(words: Sequence[str]) -> tuple[list[str], list[str]]:
    """`lint PATHS...`: a word that is an existing path is a path; else one in the override grammar is an
    override (applied to every file); anything else stays a path (reported as missing)."""
    paths: list[str] = []
    overrides: list[str] = []
    for word in words:
        if os.path.lexists(word):
            paths.append(word)
            continue
        from packcfg.core.overrides import looks_like_override  # only when a word is not a path

        (overrides if looks_like_override(word) else paths).append(word)
    return paths, overrides


class CommandParser(argparse.ArgumentParser):
    """A subcommand parser that lets optional flags and positionals mix (`lint a.yaml --format json b.yaml`,
    `train cfg.yaml --out runs/x train.micro_batch_size=2`), via argparse's intermixed parsing."""

    _intermixing = False

    def parse_known_args(self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None) -> tuple[argparse.Namespace, list[str]]:  # type: ignore[override]  # fmt: skip
        if self._intermixing:
            return super().parse_known_args(args, namespace)
        self._intermixing = True
        try:
            return self.parse_known_intermixed_args(args, namespace)
        except TypeError:  # a parser shape intermixed parsing does not support: plain parsing
            return super().parse_known_args(args, namespace)
        finally:
            self._intermixing = False
