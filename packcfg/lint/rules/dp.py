"""DP: deprecated spellings (normalisation maps them; these rules tell the user and fix the file)."""

from __future__ import annotations

from collections.abc import Iterator

from packcfg.core.bridge_version import LEGACY_SPECS_CLASS, LEGACY_VLM_DATASET_MODULE, SPECS_CLASS
from packcfg.core.diagnostics import Edit, Fix, Severity
from packcfg.core.normalize import ENABLE_OFFLINE, LEGACY_SPECS, SPECS, legacy_packing_off
from packcfg.core.schema import value_repr
from packcfg.lint.context import RuleContext
from packcfg.lint.registry import Example, Finding, RuleDocs, rule
from packcfg.lint.rules._examples import BASE, bridge_target, edit
from packcfg.lint.rules._helpers import spec_name, spec_path
from packcfg.lint.rules.ds import packed_paths
from packcfg.lint.rules.pk import IN_BATCH

LEGACY_IN_BATCH = ("dataset", "pack_sequences_in_batch")
IN_BATCH_KEY = ("dataset", "enable_in_batch_packing")


LEGACY_OFFLINE = edit(
    (
        "  enable_offline_packing: true\n  offline_packing_specs:\n    packed_sequence_size: 4096\n",
        f"  packed_sequence_specs:\n    _target_: {LEGACY_SPECS_CLASS}\n    packed_sequence_size: 4096\n",
    )
)
LEGACY_IN_BATCH_YAML = edit(
    ("  enable_in_batch_packing: true\n", "  pack_sequences_in_batch: true\n"), base=IN_BATCH
)
NO_RENAME = (
    "for Bridge 0.6 or later, lint with --bridge-version 0.6 (or set launch.bridge.version) to get the rename"
)


def _inferred_old(ctx: RuleContext, legacy: str, current: str) -> Finding:
    """A legacy spelling and no target named: lint takes the spelling's release as the target, so it reports
    the rename as information only, without a fix (Bridge < 0.6 cannot read the new name)."""
    return Finding(
        f"dataset.{legacy} is the Bridge < 0.6 spelling, so lint targets {ctx.target.describe()}; "
        f"Bridge 0.6 and later read {current} instead",
        at=("dataset", legacy),
        severity=Severity.INFO,
        hint=NO_RENAME,
    )


@rule(
    "DP801",
    Severity.WARNING,
    "packed_sequence_specs is deprecated",
    fixable=True,
    docs=RuleDocs(
        what="`dataset.packed_sequence_specs` is the Bridge < 0.6 spelling of `dataset.offline_packing_specs` plus "
        "`dataset.enable_offline_packing: true`. Reported when the target Bridge is 0.6 or later (see docs/lint.md, "
        "target Bridge version); the fix renames the section, sets the flag and moves the section's `_target_` to "
        "0.6's class. A size <= 0 meant no packing there: the fix then deletes the section.",
        why="Bridge 0.6 reads only the new names (and its PackedSequenceSpecs moved to "
        "megatron.bridge.data.packing.config); Bridge 0.3 to 0.5 read only the old one, so for them the rename "
        "would break the config and lint does not offer it.",
        failing=bridge_target(LEGACY_OFFLINE, "0.6.2"),
        passing=bridge_target(BASE, "0.6.2"),
        fixed=bridge_target(
            edit(
                ("  enable_offline_packing: true\n", ""),
                (
                    "    pad_to_max_length: true\n",
                    "    pad_to_max_length: true\n  enable_offline_packing: true\n",
                ),
                (
                    "    packed_sequence_size: 4096\n",
                    f"    _target_: {SPECS_CLASS}\n    packed_sequence_size: 4096\n",
                ),
            ),
            "0.6.2",
        ),
        examples=(
            Example(
                "target Bridge 0.3.1 (launch.bridge.version or --bridge-version): it reads packed_sequence_specs",
                bridge_target(LEGACY_OFFLINE, "0.3.1"),
                fires=False,
            ),
            Example(
                "no target named: the spelling makes lint target Bridge < 0.6; information, and no rename fix",
                LEGACY_OFFLINE,
                fires=True,
                severity=Severity.INFO,
            ),
            Example(
                "target Bridge 0.6.2 and packed_sequence_size -1 (no packing in Bridge < 0.6): the fix deletes it",
                bridge_target(
                    edit(
                        ("    packed_sequence_size: 4096\n", "    packed_sequence_size: -1\n"),
                        base=LEGACY_OFFLINE,
                    ),
                    "0.6.2",
                ),
                fires=True,
                fixed=bridge_target(
                    edit(
                        (
                            "  enable_offline_packing: true\n  offline_packing_specs:\n    packed_sequence_size: 4096\n",
                            "",
                        )
                    ),
                    "0.6.2",
                ),
            ),
        ),
        source="Megatron Bridge v0.3.1 src/megatron/bridge/training/config.py:541 (FinetuningDatasetConfig."
        "packed_sequence_specs) and data/datasets/packed_sequence.py:201-213; v0.6.0 (r0.6.0) "
        "data/builders/gpt_sft.py:127-128 and data/packing/config.py:27",
    ),
)
def dp801(ctx: RuleContext) -> Iterator[Finding]:
    target = ctx.target
    if ctx.renamed.get(SPECS) == LEGACY_SPECS:
        reads_new = target.reads_current_spelling
        if reads_new is False and target.explicit:
            return  # the target reads this spelling, and only this one
        if reads_new is not True:
            yield _inferred_old(
                ctx, LEGACY_SPECS[1], "offline_packing_specs with enable_offline_packing: true"
            )
            return
        specs = ctx.get(SPECS)
        if legacy_packing_off(specs):
            size = value_repr(specs.get("packed_sequence_size", -1))
            yield Finding(
                f"dataset.packed_sequence_specs with packed_sequence_size {size} means no packing in Bridge < 0.6; "
                f"{target.describe()} has no such field and needs a positive offline_packing_specs.packed_sequence_size: "
                "delete it",
                at=SPECS,
                fix=Fix(
                    "delete dataset.packed_sequence_specs (packing stays off)",
                    (Edit("delete", LEGACY_SPECS),),
                ),
            )
            return
        edits = [Edit("rename", LEGACY_SPECS, new_path=SPECS)]
        changes = ["rename packed_sequence_specs to offline_packing_specs"]
        hint = None
        specs_class = specs.get("_target_") if isinstance(specs, dict) else None
        if specs_class == LEGACY_SPECS_CLASS:
            edits.insert(0, Edit("set", (*SPECS, "_target_"), SPECS_CLASS))
            changes.append(f"_target_ {SPECS_CLASS}")
        elif specs_class is not None:
            hint = f"check that _target_ {specs_class!r} is a class {target.describe()} has"
        if ctx.get(SPECS) is not None and ctx.get(ENABLE_OFFLINE) is True:
            edits.append(Edit("set", ENABLE_OFFLINE, True))  # a no-op when the file already says so
            changes.append("enable_offline_packing: true")
        yield Finding(
            f"dataset.packed_sequence_specs is not read by {target.describe()}; use dataset.offline_packing_specs"
            + (
                " with dataset.enable_offline_packing: true"
                if ENABLE_OFFLINE in [e.path for e in edits]
                else ""
            ),
            at=SPECS,
            fix=Fix(", ".join(changes), tuple(edits)),
            hint=hint,
        )
    elif ctx.has(LEGACY_SPECS):
        if target.reads_current_spelling is False:
            yield Finding(
                f"dataset.packed_sequence_specs and dataset.offline_packing_specs are both set; {target.describe()} "
                "reads only packed_sequence_specs",
                at=LEGACY_SPECS,
                hint="keep one spelling",
            )
            return
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
        what="`dataset.pack_sequences_in_batch` is the Bridge < 0.6 spelling of `dataset.enable_in_batch_packing`. "
        "Reported when the target Bridge is 0.6 or later; the rename is a fix unless the dataset's `_target_` is a "
        "Bridge < 0.6 class that 0.6 no longer has.",
        why="Bridge 0.6 reads enable_in_batch_packing; Bridge 0.3 to 0.5 read only pack_sequences_in_batch, so for "
        "them the rename would break the config and lint does not offer it.",
        failing=bridge_target(LEGACY_IN_BATCH_YAML, "0.6.2"),
        passing=bridge_target(IN_BATCH, "0.6.2"),
        fixed=bridge_target(IN_BATCH, "0.6.2"),
        examples=(
            Example(
                "target Bridge 0.3.1: it reads pack_sequences_in_batch",
                bridge_target(LEGACY_IN_BATCH_YAML, "0.3.1"),
                fires=False,
            ),
            Example(
                "no target named: the spelling makes lint target Bridge < 0.6; information, and no rename fix",
                LEGACY_IN_BATCH_YAML,
                fires=True,
                severity=Severity.INFO,
            ),
            Example(
                "target Bridge 0.6.2 with a Bridge 0.3 VLM dataset class (gone in 0.6): reported, no rename fix",
                bridge_target(
                    edit(
                        (
                            "  _target_: megatron.bridge.training.config.FinetuningDatasetConfig\n",
                            f"  _target_: {LEGACY_VLM_DATASET_MODULE}mock_provider.MockVLMConversationProvider\n",
                        ),
                        base=LEGACY_IN_BATCH_YAML,
                    ),
                    "0.6.2",
                ),
                fires=True,
            ),
        ),
        source="Megatron Bridge v0.3.1 src/megatron/bridge/data/vlm_datasets/hf_provider.py:71 and "
        "training/config.py:1581; v0.6.0 (r0.6.0) data/builders/direct_hf_sft.py:72, energon.py:141, "
        "mock_vlm_sft.py:55",
    ),
)
def dp802(ctx: RuleContext) -> Iterator[Finding]:
    target = ctx.target
    if ctx.renamed.get(IN_BATCH_KEY) == LEGACY_IN_BATCH:
        reads_new = target.reads_current_spelling
        if reads_new is False and target.explicit:
            return
        if reads_new is not True:
            yield _inferred_old(ctx, LEGACY_IN_BATCH[1], "enable_in_batch_packing")
            return
        dataset_class = ctx.get(("dataset", "_target_"))
        if isinstance(dataset_class, str) and dataset_class.startswith(LEGACY_VLM_DATASET_MODULE):
            yield Finding(
                f"dataset.pack_sequences_in_batch is not read by {target.describe()}, and dataset._target_ "
                f"{dataset_class} is a Bridge < 0.6 class it does not have",
                at=IN_BATCH_KEY,
                hint="move to a Bridge 0.6 dataset config (megatron.bridge.data.builders: DirectHFSFTDatasetConfig, "
                "MockVLMSFTDatasetConfig, EnergonDatasetConfig) with enable_in_batch_packing: true",
            )
            return
        yield Finding(
            f"dataset.pack_sequences_in_batch is not read by {target.describe()}; use dataset.enable_in_batch_packing",
            at=IN_BATCH_KEY,
            fix=Fix(
                "rename pack_sequences_in_batch to enable_in_batch_packing",
                (Edit("rename", LEGACY_IN_BATCH, new_path=IN_BATCH_KEY),),
            ),
        )
    elif ctx.has(LEGACY_IN_BATCH):
        if target.reads_current_spelling is False:
            yield Finding(
                f"dataset.pack_sequences_in_batch and dataset.enable_in_batch_packing are both set; "
                f"{target.describe()} reads only pack_sequences_in_batch",
                at=LEGACY_IN_BATCH,
                hint="keep one spelling",
            )
            return
        yield Finding(
            "dataset.pack_sequences_in_batch is deprecated and ignored here: enable_in_batch_packing is also set",
            at=LEGACY_IN_BATCH,
            hint="delete dataset.pack_sequences_in_batch",
        )


def _npy_example(specs_key: str, path: str) -> str:
    base = LEGACY_OFFLINE if specs_key == "packed_sequence_specs" else BASE
    return edit(
        (
            "    packed_sequence_size: 4096\n",
            f"    packed_sequence_size: 4096\n    packed_train_data_path: {path}\n",
        ),
        base=base,
    )


@rule(
    "DP803",
    Severity.WARNING,
    ".npy packed files are deprecated",
    docs=RuleDocs(
        what="Packed data in `.npy` files, when the target Bridge reads Parquet (0.4 and later; 0.6 deprecates .npy).",
        why="Bridge's packed format is Parquet now; the .npy reader is kept only for old data. Bridge 0.3.x reads "
        "only .npy, so for it lint never advises a repack.",
        failing=_npy_example("offline_packing_specs", "packed/train.npy"),
        passing=_npy_example("offline_packing_specs", "packed/train.parquet"),
        examples=(
            Example(
                "target Bridge 0.3.1: .npy is the only packed format it reads",
                bridge_target(_npy_example("packed_sequence_specs", "packed/train.npy"), "0.3.1"),
                fires=False,
            ),
            Example(
                "no target named, Bridge < 0.6 spelling: 0.3.x reads only .npy, 0.4 and 0.5 read both; information",
                _npy_example("packed_sequence_specs", "packed/train.npy"),
                fires=True,
                severity=Severity.INFO,
            ),
            Example(
                "target Bridge 0.5.0: it reads Parquet",
                bridge_target(_npy_example("packed_sequence_specs", "packed/train.npy"), "0.5.0"),
                fires=True,
            ),
        ),
        source="Megatron Bridge v0.6.0 src/megatron/bridge/data/packing/config.py (PackedSequenceSpecs."
        "_validate_packed_path: .npy deprecated); v0.4.0 data/datasets/packed_parquet.py; v0.3.1 "
        "data/datasets/packed_sequence.py:255,268 (.npy only)",
    ),
)
def dp803(ctx: RuleContext) -> Iterator[Finding]:
    reads_parquet = ctx.target.reads_parquet
    if reads_parquet is False:
        return  # Bridge 0.3.x: .npy is the only packed format it reads
    for key, value in packed_paths(ctx):
        if not value.lower().endswith(".npy"):
            continue
        if reads_parquet:
            yield Finding(
                f"{spec_name(ctx, key)} {value!r} is a deprecated .npy packed file; repack to Parquet",
                at=spec_path(key),
                hint="packcfg pack writes Bridge's packed Parquet",
            )
        else:
            yield Finding(
                f"{spec_name(ctx, key)} {value!r} is a .npy packed file: Bridge 0.4 and later read Parquet (0.6 "
                f"deprecates .npy), 0.3.x reads only .npy; lint targets {ctx.target.describe()}",
                at=spec_path(key),
                severity=Severity.INFO,
                hint="name the target with --bridge-version; for 0.4 or later, packcfg pack writes Bridge's packed Parquet",
            )
