"""The command-line arguments every config-reading command shares, spelled the same everywhere.

- `-c FILE` / `--config FILE`: an extra YAML merged over the config (repeatable).
- `KEY=VALUE`, `+KEY=VALUE`, `++KEY=VALUE`, `~KEY` after the config: overrides in Hydra's grammar, as Megatron
  Bridge's scripts take them (`packcfg.core.overrides`); `-o KEY=VALUE` / `--set KEY=VALUE` (and `--override`)
  are aliases for one override.
- `--recipe NAME`: merge the files over a Bridge base recipe (`recipe.base`; `packcfg.core.base_recipes`).
- `--bridge-version V`: the Megatron Bridge release the config targets: the override `++launch.bridge.version=V`
  (lint's advice follows it, `packcfg.core.bridge_version`; so does `launch.engine: bridge`).
- `--out DIR`: an output folder, wherever a command writes one. `-o` is never an output folder (`render -o DIR`
  still works for one release, with a deprecation line on stderr).

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
        print(
            f"packcfg: warning: `{option_string} DIR` for the output folder is deprecated and will be removed in "
            f"the next release; use `--out {values}` (-o means an override, KEY=VALUE, in every command)",
            file=sys.stderr,
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
    config_flags: tuple[str, ...] = ("-c", "--config"),
    positional: bool = True,
    short_override: bool = True,
) -> None:
    """`-c FILE` (args.config_files), overrides (args.overrides: positional `KEY=VALUE`s after the config,
    and `-o`/`--set`/`--override KEY=VALUE`), `--recipe NAME` and `--bridge-version V`, merged in that order over the main config,
    as `packcfg.core.config.load_config` does. `short_override=False` leaves `-o` to the caller (render)."""
    parser.add_argument(
        *config_flags,
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
    flags = ("-o", "--set", "--override") if short_override else ("--set", "--override")
    parser.add_argument(
        *flags,
        dest="overrides",
        action=_AppendOverrides,
        metavar="KEY=VALUE",
        help="one override (same grammar as the positional ones; repeatable)",
    )
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
    *aliases: str,
    dest: str = "out_dir",
    help: str = "output folder",  # noqa: A002
    **kwargs: Any,
) -> None:
    """`--out DIR`, the one spelling of an output folder (older spellings kept as aliases)."""
    parser.add_argument("--out", *aliases, dest=dest, metavar="DIR", help=help, **kwargs)


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
