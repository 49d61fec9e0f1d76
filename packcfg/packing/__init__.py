"""packcfg.packing: plan packs, write Megatron Bridge's packed Parquet, verify it, report what packing buys.

Public API (stable; the trainer and the demo call it):

- `plan(lengths, capacity, algorithm="bfd", align=1, max_per_pack=None, seed=0, oversize=None,
  pairs=None, *, secondary=None, secondary_capacity=None, buffer_size=64,
  unpacked_global_batch_size=None) -> PackPlan`
  Lengths are runtime lengths (`len(input_ids) - 1` for Bridge SFT samples). `PackPlan.bins` is a
  sequence of int64 index arrays (items; items are samples unless `oversize="split"` cut some),
  `PackPlan.stats` a dict: packs, lower_bound, efficiency, bin_waste_tokens, alignment_waste_tokens,
  packing_factor, max_samples_per_pack, oversize counts and `advice` (packed global batch size,
  whether packing is worth it). Algorithms: bfd (default), ffd, first_fit_shuffle, histogram,
  sequential, greedy_buffer. Raises `PlanError` (a ValueError) on bad input.
- `ensure_packed(config, *, force=False, progress=True, base_dir=None) -> PackedData`
  Packs the experiment config's training data (dataset.dataset_root/training.jsonl, tokenized with
  tokenizer.tokenizer_model when it is SFT text) unless an up-to-date packed file exists.
  `PackedData` has `.train_path`, `.metadata_path`, `.metadata` (this split's metadata dict) and
  `.created` (False when the existing file was reused). Raises `PackingError` (one-line message).
- `plan_for_config(config, *, split="train", base_dir=None) -> PackPlan`: the plan `ensure_packed` writes,
  with packed batch-size advice from `train.global_batch_size`.
- `tokenized_samples(config, *, split="train", base_dir=None) -> list[(input_ids, loss_mask)]`
  (alias `load_samples`): the same samples the packer packs, unpacked, in source order; int32 ids and an
  int8 label-aligned loss mask (0 at each sample's last position), as they appear in the packed rows.
  `samples_of(settings)` is the same from parsed `PackSettings` (`settings_from_config(config)`).
- `read_packed(path) -> iterator of dict rows` (`input_ids` int32, `loss_mask` int8, `seq_start_id`),
  streamed row group by row group; `unpack_row(row)` splits a row back into its samples.

Import cost: this package imports numpy only; pyarrow and tokenizers load when used.
"""

from __future__ import annotations

from packcfg.packing.api import (
    PackedData,
    PackSettings,
    ensure_packed,
    load_samples,
    pack_dataset,
    plan_for_config,
    read_packed,
    samples_of,
    settings_from_config,
    tokenized_samples,
    unpack_row,
)
from packcfg.packing.errors import PackingError
from packcfg.packing.planner import ALGORITHMS, OVERSIZE_POLICIES, PackPlan, PlanError, plan

__all__ = [
    "ALGORITHMS",
    "OVERSIZE_POLICIES",
    "PackPlan",
    "PackSettings",
    "PackedData",
    "PackingError",
    "PlanError",
    "ensure_packed",
    "load_samples",
    "pack_dataset",
    "plan",
    "plan_for_config",
    "read_packed",
    "samples_of",
    "settings_from_config",
    "tokenized_samples",
    "unpack_row",
]
