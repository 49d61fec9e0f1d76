"""The base experiment every rule's docs example starts from, and a helper to vary it.

BASE lints clean; each rule's failing/passing/fixed examples are BASE with a few lines changed,
so an example shows exactly the lines that matter.
"""

from __future__ import annotations

BASE = """\
recipe:
  name: example
  family: llama
  mode: sft
model:
  _target_: megatron.bridge.models.llama.llama_provider.Llama3ModelProvider8B
  seq_length: 4096
  calculate_per_token_loss: true
dataset:
  _target_: megatron.bridge.training.config.FinetuningDatasetConfig
  seq_length: 4096
  enable_offline_packing: true
  offline_packing_specs:
    packed_sequence_size: 4096
  dataset_kwargs:
    pad_to_max_length: true
train:
  micro_batch_size: 1
  global_batch_size: 128
"""


def edit(*pairs: tuple[str, str], base: str = BASE) -> str:
    """`base` with each (old, new) text pair replaced exactly once; fails loudly on a miss."""
    out = base
    for old, new in pairs:
        if out.count(old) != 1:
            raise ValueError(f"example edit: {old!r} occurs {out.count(old)} times")
        out = out.replace(old, new)
    return out


def after(anchor: str, lines: str, base: str = BASE) -> str:
    """`base` with `lines` inserted after the line `anchor` (matched exactly once)."""
    return edit((anchor + "\n", anchor + "\n" + lines), base=base)


def bridge_target(yaml: str, version: str) -> str:
    """`yaml` with a `launch` section that names the target Megatron Bridge release (as --bridge-version does)."""
    return yaml + f"launch:\n  bridge:\n    version: {version}\n"
