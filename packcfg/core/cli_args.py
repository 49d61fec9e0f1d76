"""The command-line arguments every config-reading command shares: `-c FILE` and `-o KEY=VALUE`.

Standard library only: the CLI imports every command module to build its parser.
"""

from __future__ import annotations

import argparse


def add_merge_arguments(
    parser: argparse.ArgumentParser,
    *,
    config_flags: tuple[str, ...] = ("-c", "--config"),
    override_flags: tuple[str, ...] = ("-o", "--override"),
) -> None:
    """`-c FILE` (args.config_files) and `-o KEY=VALUE` (args.overrides), merged in that order over the
    main config, as `packcfg.core.config.load_config` does."""
    parser.add_argument(
        *config_flags,
        dest="config_files",
        action="append",
        default=[],
        metavar="FILE",
        help="extra YAML merged over the config, in order (repeatable)",
    )
    parser.add_argument(
        *override_flags,
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="dotted override applied last, e.g. train.micro_batch_size=1 (repeatable)",
    )
