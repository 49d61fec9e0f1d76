"""DP: deprecated spellings (normalisation maps them; these rules tell the user and fix the file)."""

from __future__ import annotations

from collections.abc import Iterator

from packcfg.core.diagnostics import Edit, Fix, Severity
from packcfg.core.normalize import ENABLE_OFFLINE, LEGACY_SPECS, SPECS
from packcfg.lint.context import RuleContext
from packcfg.lint.registry import Finding, RuleDocs, rule
from packcfg.lint.rules._examples import BASE, edit
from packcfg.lint.rules._helpers import spec_path
from packcfg.lint.rules.ds import packed_paths
from packcfg.lint.rules.pk import IN_BATCH

LEGACY_IN_BATCH = ("dataset", "pack_sequences_in_batch")
IN_BATCH_KEY = ("dataset", "enable_in_batch_packing")


@rule(
    "DP801",
    Severity.WARNING,
    "packed_sequence_specs is deprecated",
    fixable=True,
    docs=RuleDocs(
        what="`dataset.packed_sequence_specs` is the legacy spelling of `dataset.offline_packing_specs` plus "
        "`dataset.enable_offline_packing: true`.",
        why="Current Bridge separates the switch from the specs; the legacy key is kept only for old configs.",
        failing=edit(
            ("  enable_offline_packing: true\n  offline_packing_specs:\n", "  packed_sequence_specs:\n")
        ),
        passing=BASE,
        fixed=edit(
            ("  enable_offline_packing: true\n", ""),
            (
                "    pad_to_max_length: true\n",
                "    pad_to_max_length: true\n  enable_offline_packing: true\n",
            ),
        ),
        source="Megatron Bridge training/config.py, FinetuningDatasetConfig (main 067f987)",
    ),
)
def dp801(ctx: RuleContext) -> Iterator[Finding]:
    if ctx.renamed.get(SPECS) == LEGACY_SPECS:
        edits = [Edit("rename", LEGACY_SPECS, new_path=SPECS)]
        if ctx.get(SPECS) is not None and ctx.get(ENABLE_OFFLINE) is True:
            edits.append(Edit("set", ENABLE_OFFLINE, True))  # a no-op when the file already says so
        yield Finding(
            "dataset.packed_sequence_specs is deprecated; use dataset.offline_packing_specs"
            + (" with dataset.enable_offline_packing: true" if len(edits) > 1 else ""),
            at=SPECS,
            fix=Fix(
                "rename packed_sequence_specs to offline_packing_specs (+ enable_offline_packing)",
                tuple(edits),
            ),
        )
    elif ctx.has(LEGACY_SPECS):
        yield Finding(
            "dataset.packed_sequence_specs is deprecated and ignored here: dataset.offline_packing_specs is also set",
            at=LEGACY_SPECS,
            hint="delete dataset.packed_sequence_specs",
        )


@rule(
    "DP802",
    Severity.WARNING,
    "pack_sequences_in_batch is deprecated",
    fixable=True,
    docs=RuleDocs(
        what="`dataset.pack_sequences_in_batch` is the legacy spelling of `dataset.enable_in_batch_packing`.",
        why="Current Bridge reads enable_in_batch_packing; the legacy key is kept only for old configs.",
        failing=edit(
            ("  enable_in_batch_packing: true\n", "  pack_sequences_in_batch: true\n"), base=IN_BATCH
        ),
        passing=IN_BATCH,
        fixed=IN_BATCH,
        source="Megatron Bridge training/config.py, in-batch packing fields (main 067f987)",
    ),
)
def dp802(ctx: RuleContext) -> Iterator[Finding]:
    if ctx.renamed.get(IN_BATCH_KEY) == LEGACY_IN_BATCH:
        yield Finding(
            "dataset.pack_sequences_in_batch is deprecated; use dataset.enable_in_batch_packing",
            at=IN_BATCH_KEY,
            fix=Fix(
                "rename pack_sequences_in_batch to enable_in_batch_packing",
                (Edit("rename", LEGACY_IN_BATCH, new_path=IN_BATCH_KEY),),
            ),
        )
    elif ctx.has(LEGACY_IN_BATCH):
        yield Finding(
            "dataset.pack_sequences_in_batch is deprecated and ignored here: enable_in_batch_packing is also set",
            at=LEGACY_IN_BATCH,
            hint="delete dataset.pack_sequences_in_batch",
        )


@rule(
    "DP803",
    Severity.WARNING,
    ".npy packed files are deprecated",
    docs=RuleDocs(
        what="Packed data in `.npy` files.",
        why="Bridge's packed format is Parquet now; the .npy reader is kept only for old data.",
        failing=edit(
            (
                "    packed_sequence_size: 4096\n",
                "    packed_sequence_size: 4096\n    packed_train_data_path: packed/train.npy\n",
            )
        ),
        passing=edit(
            (
                "    packed_sequence_size: 4096\n",
                "    packed_sequence_size: 4096\n    packed_train_data_path: packed/train.parquet\n",
            )
        ),
        source="Megatron Bridge data/packing/config.py (main 067f987)",
    ),
)
def dp803(ctx: RuleContext) -> Iterator[Finding]:
    for key, value in packed_paths(ctx):
        if value.lower().endswith(".npy"):
            yield Finding(
                f"offline_packing_specs.{key} {value!r} is a deprecated .npy packed file; repack to Parquet",
                at=spec_path(key),
                hint="packcfg pack writes Bridge's packed Parquet",
            )
