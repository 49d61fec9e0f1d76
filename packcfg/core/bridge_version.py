"""Which Megatron Bridge release a config targets, and what that release reads.

Lint's advice depends on it: a rename to `offline_packing_specs` or a repack to Parquet is only advice when the
target Bridge reads the result. The target is, in this order (the first that says something wins):

1. `launch.bridge.version` in the merged config; `--bridge-version V` on any config command is the override
   `++launch.bridge.version=V`, so the command line wins over the files;
2. `launch.engine: bridge` without a version: the launcher's default Bridge version (`LAUNCH_DEFAULT`);
3. the field spelling of the user's own files (a base recipe's snapshot does not count): a field only Bridge
   0.6+ has (`offline_packing_specs`, `enable_offline_packing`, `enable_in_batch_packing`, `hf_dataset`, ...)
   means 0.6 or later; otherwise a field only Bridge < 0.6 reads (`packed_sequence_specs`,
   `pack_sequences_in_batch`) means before 0.6;
4. otherwise unknown: rules follow current Bridge, as they always did.

What each release reads, from Bridge's source (`git show TAG:PATH` in github.com/NVIDIA-NeMo/Megatron-Bridge):
- Offline packing specs are `dataset.packed_sequence_specs`, class
  `megatron.bridge.data.datasets.packed_sequence.PackedSequenceSpecs`, through v0.5.x (v0.3.1:
  src/megatron/bridge/training/config.py:541, FinetuningDatasetConfig; v0.3.1:
  src/megatron/bridge/data/datasets/packed_sequence.py:201). From v0.6.0 (tag v0.6.0 and branch r0.6.0, 0.6.1)
  they are `dataset.offline_packing_specs` switched on by `dataset.enable_offline_packing`
  (src/megatron/bridge/data/builders/gpt_sft.py:127-128, GPTSFTDatasetConfig), class
  `megatron.bridge.data.packing.config.PackedSequenceSpecs` (src/megatron/bridge/data/packing/config.py:27); the
  module `megatron.bridge.data.datasets.packed_sequence` no longer exists there.
- `packed_sequence_size <= 0` (default -1) means "packing off" through v0.5.x: v0.3.1 packed_sequence.py:209-213
  ("If less than or equal to 0, sequence packing is disabled"), config.py:1561-1565 (the micro-batch check only
  for `> 0`), data/builders/finetuning_dataset.py:77-166 (the unpacked JSONL paths when `<= 0`). v0.6.0's
  GPTSFTDatasetConfig.validate() rejects it ("offline_packing_specs.packed_sequence_size must be greater than 0").
- Packed files: v0.3.x reads `.npy` only (v0.3.1 packed_sequence.py:255 and 268 assert the suffix); Parquet from
  v0.4.0 (data/datasets/packed_parquet.py, data/builders/finetuning_dataset.py:180); v0.6.0 warns that `.npy` is
  deprecated (data/packing/config.py, PackedSequenceSpecs._validate_packed_path).
- In-batch packing is `dataset.pack_sequences_in_batch` through v0.5.x (v0.3.1
  data/vlm_datasets/hf_provider.py:71, training/config.py:1581) and `dataset.enable_in_batch_packing` from v0.6.0
  (data/builders/direct_hf_sft.py:72, energon.py:141, mock_vlm_sft.py:55); the v0.3.1 module
  `megatron.bridge.data.vlm_datasets` (its conversation providers) is gone in v0.6.0.

Standard library only: the CLI imports this to check `--bridge-version`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

Release = tuple[int, int]  # (major, minor): every difference lint knows of is between minor releases

# `launch.bridge.version` when `launch.engine: bridge` names none (packcfg/launch/bridge.py, bridge_spec).
LAUNCH_DEFAULT = "0.3.1"
HEAD: Release = (10**6, 0)  # "head"/"main": newer than every release
RENAMED_IN: Release = (0, 6)  # packed_sequence_specs -> offline_packing_specs (+ enable_offline_packing), and
# pack_sequences_in_batch -> enable_in_batch_packing
PARQUET_READ: Release = (0, 4)  # first release that reads packed Parquet

LEGACY_SPECS_CLASS = "megatron.bridge.data.datasets.packed_sequence.PackedSequenceSpecs"  # v0.3.0 .. v0.5.x
SPECS_CLASS = "megatron.bridge.data.packing.config.PackedSequenceSpecs"  # v0.6.0 ..
LEGACY_VLM_DATASET_MODULE = "megatron.bridge.data.vlm_datasets."  # v0.3.1 .. v0.5.x; gone in v0.6.0

# Dataset fields that exist from Bridge 0.6.0 on and in no earlier release (grep of tags v0.3.1, v0.4.0, v0.5.0
# and v0.6.0 under src/megatron/bridge): a user file that sets one targets 0.6 or later.
NEW_FIELDS: tuple[tuple[str, ...], ...] = tuple(
    ("dataset", name)
    for name in (
        "offline_packing_specs",
        "enable_offline_packing",
        "enable_in_batch_packing",
        "defer_in_batch_packing_to_step",
        "in_batch_packing_pad_to_multiple_of",
        "hf_dataset",
        "hf_validation_dataset",
        "hf_test_dataset",
        "hf_output_root",
        "hf_validation_proportion",
        "hf_rewrite",
    )
) + (("dataset", "packed_sequence_specs", "max_single_sequence_length"),)
# Fields only Bridge < 0.6 reads.
OLD_FIELDS: tuple[tuple[str, ...], ...] = (
    ("dataset", "packed_sequence_specs"),
    ("dataset", "pack_sequences_in_batch"),
)

_VERSION = re.compile(r"v?(\d+)\.(\d+)(?:\.(\d+))?(?:[.+-]?[A-Za-z0-9.+-]*)?\Z")


def parse_release(value: Any) -> tuple[Release, str] | None:
    """`"0.3.1"`, `"v0.6.2"`, `"0.6"`, `"0.6.0rc1"`, `0.6` (a YAML float), `"head"`/`"main"` -> (release, label);
    None when the value is not a version."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, float | int):
        value = str(value)
    if not isinstance(value, str):
        return None
    text = value.strip().lower()
    if text in ("head", "main"):
        return HEAD, "head"
    match = _VERSION.match(text)
    if match is None:
        return None
    major, minor = int(match.group(1)), int(match.group(2))
    return (major, minor), text.removeprefix("v")


@dataclass(frozen=True)
class BridgeTarget:
    """The Bridge releases a config may target: `low` <= release < `high` (None: no bound)."""

    low: Release | None = None
    high: Release | None = None
    label: str = ""  # "0.3.1", "head", ">= 0.6", "< 0.6"; empty when unknown
    source: str = ""  # what decided it, for messages: "--bridge-version", "launch.bridge.version", ...
    explicit: bool = False  # named by the user (flag, launch.bridge.version, engine: bridge's default)

    @property
    def known(self) -> bool:
        return self.low is not None or self.high is not None

    def at_least(self, release: Release) -> bool | None:
        """Whether the target is `release` or newer: True, False, or None when it may be either."""
        if self.low is not None and self.low >= release:
            return True
        if self.high is not None and self.high <= release:
            return False
        return None

    @property
    def reads_current_spelling(self) -> bool | None:
        """Whether the target reads `offline_packing_specs`/`enable_in_batch_packing` (0.6+) rather than
        `packed_sequence_specs`/`pack_sequences_in_batch` (< 0.6)."""
        return self.at_least(RENAMED_IN)

    @property
    def reads_parquet(self) -> bool | None:
        return self.at_least(PARQUET_READ)

    def describe(self) -> str:
        """`Bridge 0.3.1 (launch.bridge.version)`; `Bridge < 0.6 (from the spelling dataset.packed_sequence_specs)`."""
        if not self.known:
            return "Bridge (version unknown)"
        return f"Bridge {self.label} ({self.source})" if self.source else f"Bridge {self.label}"


UNKNOWN = BridgeTarget()


_ABSENT = object()


def _get(config: Mapping[str, Any], path: tuple[str, ...], default: Any = None) -> Any:
    node: Any = config
    for key in path:
        if not isinstance(node, Mapping) or key not in node:
            return default
        node = node[key]
    return node


def _has(config: Mapping[str, Any], path: tuple[str, ...]) -> bool:
    return _get(config, path, _ABSENT) is not _ABSENT


def explicit_target(config: Mapping[str, Any], from_command_line: bool = False) -> BridgeTarget | None:
    """The target the config names: `launch.bridge.version`, else `launch.engine: bridge`'s default."""
    version = _get(config, ("launch", "bridge", "version"))
    parsed = parse_release(version)
    if parsed is not None:
        release, label = parsed
        high = None if release == HEAD else (release[0], release[1] + 1)
        source = "--bridge-version" if from_command_line else "launch.bridge.version"
        return BridgeTarget(release, high, label, source, explicit=True)
    if _get(config, ("launch", "engine")) == "bridge" and version is None:
        release, label = parse_release(LAUNCH_DEFAULT)  # type: ignore[misc]
        return BridgeTarget(
            release, (release[0], release[1] + 1), label, "launch.engine: bridge's default", explicit=True
        )
    return None


def target_of(
    config: Mapping[str, Any],
    user_written: Callable[[tuple[str, ...]], bool] = lambda path: True,
    from_command_line: bool = False,
) -> BridgeTarget:
    """The target of a merged (not yet normalised) config; see the module docstring for the order.
    `user_written(path)`: whether the key at `path` comes from the user's files or command line (not from a
    base recipe's snapshot, which carries its own release's spelling)."""
    if not isinstance(config, Mapping):
        return UNKNOWN
    explicit = explicit_target(config, from_command_line)
    if explicit is not None:
        return explicit
    for path in NEW_FIELDS:
        if _has(config, path) and user_written(path):
            return BridgeTarget(RENAMED_IN, None, ">= 0.6", f"from the spelling {'.'.join(path)}")
    specs_class = _get(config, ("dataset", "packed_sequence_specs", "_target_"))
    if specs_class == SPECS_CLASS and user_written(("dataset", "packed_sequence_specs", "_target_")):
        return BridgeTarget(RENAMED_IN, None, ">= 0.6", f"from the class {SPECS_CLASS}")
    for path in OLD_FIELDS:
        if _has(config, path) and user_written(path):
            return BridgeTarget(None, RENAMED_IN, "< 0.6", f"from the spelling {'.'.join(path)}")
    return UNKNOWN


def check_version_text(text: str) -> str:
    """`--bridge-version`'s value, checked; ValueError with one line naming it when it is not a version."""
    if parse_release(text) is None:
        raise ValueError(
            f"--bridge-version {text!r}: expected a Megatron Bridge release such as 0.3.1 or 0.6.2 (or head)"
        )
    return text.strip()
