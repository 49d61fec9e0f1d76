"""PK: packing mode and micro-batch rules."""

from __future__ import annotations

import re
from collections.abc import Iterator

from packcfg.core.diagnostics import Fix, Severity
from packcfg.core.normalize import LEGACY_SPECS
from packcfg.core.schema import value_repr
from packcfg.lint.context import RuleContext
from packcfg.lint.registry import Example, Finding, RuleDocs, rule
from packcfg.lint.rules._examples import BASE, after, bridge_target, edit
from packcfg.lint.rules._helpers import SPECS, is_pos_int, set_edit, spec_path

DISTTRAIN_KEYS = ("use_dist_train", "use_disttrain", "dist_train", "disttrain")
MODE_KEYS = {
    "offline": ("dataset", "enable_offline_packing"),
    "in_batch": ("dataset", "enable_in_batch_packing"),
    "energon_native": ("dataset", "packing_buffer_size"),
}

IN_BATCH = edit(
    ("  enable_offline_packing: true\n  offline_packing_specs:\n    packed_sequence_size: 4096\n", ""),
    ("  dataset_kwargs:\n", "  enable_in_batch_packing: true\n  dataset_kwargs:\n"),
    ("  micro_batch_size: 1\n", "  micro_batch_size: 4\n"),
)

ENERGON = """\
recipe:
  name: example
  family: qwen25_vl
  mode: vlm_sft
model:
  _target_: megatron.bridge.models.qwen_vl.qwen25_vl_provider.Qwen25VLModelProvider
  seq_length: 4096
  calculate_per_token_loss: true
dataset:
  _target_: megatron.bridge.data.builders.energon.EnergonDatasetConfig
  path: /data/energon/cord_v2
  seq_length: 4096
  micro_batch_size: 1
  packing_buffer_size: 64
  task_encoder:
    _target_: megatron.bridge.data.builders.energon.QwenVLEnergonTaskEncoderConfig
    hf_processor_path: Qwen/Qwen2.5-VL-7B-Instruct
ddp:
  average_in_collective: false
train:
  micro_batch_size: 1
  global_batch_size: 32
"""


@rule(
    "PK101",
    Severity.ERROR,
    "at most one packing mode",
    docs=RuleDocs(
        what="Offline packing, in-batch packing and Energon-native packing are mutually exclusive.",
        why="Bridge rejects a config that switches on more than one (each mode owns the batch layout).",
        failing=edit(
            (
                "  enable_offline_packing: true\n",
                "  enable_offline_packing: true\n  enable_in_batch_packing: true\n",
            )
        ),
        passing=BASE,
        source="Megatron Bridge training/config.py:1276-1277 (main 067f987; v0.6.0: 1153-1154); data/builders/energon.py EnergonDatasetConfig.validate()",
    ),
)
def pk101(ctx: RuleContext) -> Iterator[Finding]:
    modes = ctx.facts.packing_modes
    if len(modes) > 1:
        yield Finding(
            f"packing modes {' and '.join(modes)} are all on; choose one",
            at=MODE_KEYS[modes[1]],
            hint=f"keep {modes[0]} and remove {', '.join(ctx.spelled(MODE_KEYS[m]) for m in modes[1:])}",
        )


@rule(
    "PK102",
    Severity.ERROR,
    "offline packing flag and specs go together",
    docs=RuleDocs(
        what="`enable_offline_packing: true` requires `offline_packing_specs`, and specs require the flag.",
        why="Without specs Bridge has no pack size; specs without the flag are silently ignored (no packing).",
        failing=edit(("  offline_packing_specs:\n    packed_sequence_size: 4096\n", "")),
        passing=BASE,
        examples=(
            Example(
                "the Bridge < 0.6 spelling packed_sequence_specs has no switch (its size decides): no flag needed",
                edit(
                    (
                        "  enable_offline_packing: true\n  offline_packing_specs:\n",
                        "  packed_sequence_specs:\n",
                    )
                ),
                fires=False,
            ),
        ),
        source="Megatron Bridge training/config.py:1278-1281 (main 067f987; v0.6.0: 1155-1158); v0.3.1 "
        "training/config.py:541 (packed_sequence_specs, no switch)",
    ),
)
def pk102(ctx: RuleContext) -> Iterator[Finding]:
    enabled = ctx.get(("dataset", "enable_offline_packing"))
    specs = ctx.get(SPECS)
    if enabled is True and specs is None:
        yield Finding(
            "dataset.enable_offline_packing is true but dataset.offline_packing_specs is not set",
            at=("dataset", "enable_offline_packing"),
            hint="add dataset.offline_packing_specs with packed_sequence_size",
        )
    elif specs is not None and enabled in (None, False) and ctx.renamed.get(SPECS) != LEGACY_SPECS:
        # (the Bridge < 0.6 spelling packed_sequence_specs has no switch: its packed_sequence_size decides)
        yield Finding(
            f"dataset.offline_packing_specs is set but dataset.enable_offline_packing is {value_repr(enabled)}",
            at=SPECS,
            hint="set dataset.enable_offline_packing: true (or remove the specs)",
        )


@rule(
    "PK103",
    Severity.ERROR,
    "offline packed_sequence_size > 0",
    docs=RuleDocs(
        what="With offline packing, `offline_packing_specs.packed_sequence_size` must be a positive integer.",
        why="Bridge's default is -1 (no packing); a non-positive or non-integer size cannot be packed into.",
        failing=edit(("    packed_sequence_size: 4096\n", "    packed_sequence_size: 0\n")),
        passing=BASE,
        examples=(
            Example(
                "Bridge < 0.6 spelling with packed_sequence_size -1: packing is off there, nothing to report",
                edit(
                    (
                        "  enable_offline_packing: true\n  offline_packing_specs:\n    packed_sequence_size: 4096\n",
                        "  packed_sequence_specs:\n    packed_sequence_size: -1\n",
                    )
                ),
                fires=False,
            ),
            Example(
                "target Bridge 0.3.1, packing switched on with size 0: 0.3.1 would silently train unpacked",
                bridge_target(
                    edit(("    packed_sequence_size: 4096\n", "    packed_sequence_size: 0\n")), "0.3.1"
                ),
                fires=True,
            ),
        ),
        source="Megatron Bridge training/config.py:1600-1603 and data/packing/gpt_sft.py:198 (main 067f987); "
        "v0.3.1 data/datasets/packed_sequence.py:209-213 and data/builders/finetuning_dataset.py:77-166 (<= 0: off)",
    ),
)
def pk103(ctx: RuleContext) -> Iterator[Finding]:
    specs = ctx.facts.specs
    if "offline" not in ctx.facts.packing_modes or specs is None:
        return
    value = specs.get("packed_sequence_size", -1)
    if not is_pos_int(value):
        shown = value_repr(value) + (
            "" if "packed_sequence_size" in specs else " (Bridge's default; not set)"
        )
        if ctx.target.reads_current_spelling is False:
            # Bridge < 0.6 reads a size <= 0 as "packing off" (v0.3.1 data/datasets/packed_sequence.py:209-213)
            shown += f"; {ctx.target.describe()} reads it as packing off and would train unpacked"
        yield Finding(
            f"offline packing needs a positive integer packed_sequence_size, got {shown}",
            at=spec_path("packed_sequence_size"),
            hint="set it to the packed row length, usually seq_length",
        )


PACKED_PATH_KEYS = ("packed_train_data_path", "packed_val_data_path", "packed_metadata_path")


@rule(
    "PK110",
    Severity.ERROR,
    "offline packing needs micro_batch_size 1",
    fixable=True,
    docs=RuleDocs(
        what="Offline packed data is already one pack per row: `train.micro_batch_size` must be 1.",
        why=(
            "With MBS > 1 the packed rows are stacked again, which corrupts the THD layout silently or fails "
            "late. The equivalent config is MBS 1, GBS / MBS and packed_sequence_size * MBS; the fix also moves the "
            "seq_lengths that matched the pack size and the packed paths that name it, and offers nothing when GBS "
            "is not a multiple of MBS (no fraction is ever written)."
        ),
        failing=edit(("  micro_batch_size: 1\n", "  micro_batch_size: 4\n")),
        passing=BASE,
        fixed=edit(
            ("    packed_sequence_size: 4096\n", "    packed_sequence_size: 16384\n"),
            ("  global_batch_size: 128\n", "  global_batch_size: 32\n"),
            base=BASE.replace("  seq_length: 4096\n", "  seq_length: 16384\n"),  # model and dataset
        ),
        source='Megatron Bridge training/config.py:1604-1617 (main 067f987); docs/training/packed-sequences.md, "Stable Constraints"',
    ),
)
def pk110(ctx: RuleContext) -> Iterator[Finding]:
    f = ctx.facts
    if "offline" not in f.packing_modes or f.mbs is None or f.mbs <= 1:
        return
    mbs, gbs, pss = f.mbs, f.gbs, f.packed_sequence_size
    if gbs is not None and pss is not None and gbs % mbs == 0:
        new_gbs, new_pss = gbs // mbs, pss * mbs
        edits = [
            set_edit(ctx, ("train", "micro_batch_size"), 1),
            set_edit(ctx, ("train", "global_batch_size"), new_gbs),
            set_edit(ctx, spec_path("packed_sequence_size"), new_pss),
        ]
        changes = [f"micro_batch_size {mbs} -> 1", f"global_batch_size {gbs} -> {new_gbs}",
                   f"packed_sequence_size {pss} -> {new_pss}"]  # fmt: skip
        # seq_length follows the pack size where it matched it (else DS705 would follow the fix)
        for section in ("model", "dataset"):
            if ctx.get((section, "seq_length")) == pss:
                edits.append(set_edit(ctx, (section, "seq_length"), new_pss))
                changes.append(f"{section}.seq_length {pss} -> {new_pss}")
        # packed-data paths that name the old size name the new one: the data must be re-packed anyway
        renamed = []
        for key in PACKED_PATH_KEYS:
            value = ctx.get(spec_path(key))
            if isinstance(value, str) and re.search(rf"(?<!\d){pss}(?!\d)", value):
                edits.append(
                    set_edit(ctx, spec_path(key), re.sub(rf"(?<!\d){pss}(?!\d)", str(new_pss), value))
                )
                renamed.append(key)
        hint = "re-pack the data for the new pack size (packcfg pack)" + (
            f"; {', '.join(renamed)} renamed for it" if renamed else ""
        )
        yield Finding(
            f"offline packing needs train.micro_batch_size 1, got {mbs}; equivalent config: micro_batch_size 1, "
            f"global_batch_size {new_gbs} (was {gbs}), packed_sequence_size {new_pss} (was {pss})",
            at=("train", "micro_batch_size"),
            fix=Fix(", ".join(changes), tuple(edits)),
            hint=hint,
        )
    elif gbs is not None and pss is not None:
        low = gbs // mbs * mbs
        options = [n for n in (low, low + mbs) if n > 0]
        choices = " or ".join(f"{n} (packed: {n // mbs})" for n in options)
        yield Finding(
            f"offline packing needs train.micro_batch_size 1, got {mbs}; global_batch_size {gbs} is not a "
            f"multiple of {mbs}, so there is no exact packed equivalent (packed_sequence_size {pss * mbs})",
            at=("train", "micro_batch_size"),
            hint=f"no automatic fix: first choose a global_batch_size that is a multiple of {mbs}: {choices}",
        )
    else:
        yield Finding(
            f"offline packing needs train.micro_batch_size 1, got {mbs}; the equivalent config is micro_batch_size "
            f"1 with global_batch_size / {mbs} and packed_sequence_size x {mbs}",
            at=("train", "micro_batch_size"),
            hint="no automatic fix: global_batch_size or packed_sequence_size is not known",
        )


@rule(
    "PK111",
    Severity.ERROR,
    "in-batch packing needs micro_batch_size > 1",
    docs=RuleDocs(
        what="In-batch packing concatenates the sequences of one micro-batch: `train.micro_batch_size` must be > 1.",
        why="With MBS 1 there is nothing to pack; Bridge rejects the config.",
        failing=edit(("  micro_batch_size: 4\n", "  micro_batch_size: 1\n"), base=IN_BATCH),
        passing=IN_BATCH,
        source='Megatron Bridge training/config.py:1619-1624 (main 067f987); docs/training/packed-sequences.md, "Stable Constraints"',
    ),
)
def pk111(ctx: RuleContext) -> Iterator[Finding]:
    f = ctx.facts
    if "in_batch" in f.packing_modes and f.mbs is not None and f.mbs <= 1:
        yield Finding(
            f"in-batch packing needs train.micro_batch_size > 1 (at least two sequences to pack), got {f.mbs}",
            at=("train", "micro_batch_size"),
            hint="raise micro_batch_size (and divide global_batch_size accordingly), or use offline packing",
        )


@rule(
    "PK112",
    Severity.ERROR,
    "Energon micro-batch sizes",
    docs=RuleDocs(
        what="An Energon dataset's own `micro_batch_size` must equal `train.micro_batch_size`; Energon-native "
        "packing needs `train.micro_batch_size: 1`.",
        why="Energon owns its loader micro-batch: a mismatch breaks the batch geometry Bridge computes.",
        failing=edit(
            (
                "  micro_batch_size: 1\n  global_batch_size: 32\n",
                "  micro_batch_size: 2\n  global_batch_size: 32\n",
            ),
            base=ENERGON,
        ),
        passing=ENERGON,
        source="Megatron Bridge training/config.py:1319-1329 (main 067f987; v0.6.0: 1195-1201)",
    ),
)
def pk112(ctx: RuleContext) -> Iterator[Finding]:
    f = ctx.facts
    if f.energon_dataset:
        own = ctx.get(("dataset", "micro_batch_size"))
        if is_pos_int(own) and f.mbs is not None and own != f.mbs:
            yield Finding(
                f"dataset.micro_batch_size is {own} but train.micro_batch_size is {f.mbs}; Energon needs them equal",
                at=("dataset", "micro_batch_size"),
            )
    if f.packing_mode == "energon_native" and f.mbs is not None and f.mbs != 1:
        yield Finding(
            f"Energon-native packing needs train.micro_batch_size 1, got {f.mbs}",
            at=("train", "micro_batch_size"),
        )


@rule(
    "PK113",
    Severity.WARNING,
    "offline packing: evaluation micro-batch 1",
    docs=RuleDocs(
        what="With offline packing an evaluation micro-batch size > 1 fails at evaluation time.",
        why="The packed evaluation step requires one pack per micro-batch "
        "(`max_seqlen_q must contain exactly one value`); the run dies at its first evaluation.",
        failing=BASE + "validation:\n  eval_micro_batch_size: 2\n",
        passing=BASE + "validation:\n  eval_micro_batch_size: 1\n",
        source="Megatron Bridge training/gpt_step.py and training/utils/packed_seq_utils.py (main 067f987, at run time)",
    ),
)
def pk113(ctx: RuleContext) -> Iterator[Finding]:
    f = ctx.facts
    if "offline" in f.packing_modes and f.eval_mbs is not None and f.eval_mbs > 1:
        yield Finding(
            f"offline packing with evaluation micro-batch size {f.eval_mbs} fails at evaluation "
            "(max_seqlen_q must contain exactly one value); use 1",
            at=("validation", "eval_micro_batch_size"),
        )


# Bridge at main 067f987 (2026-08-22), training/config.py ConfigContainer.validate(), lines 1327-1345: the
# requirements of Energon-native packing, and data/builders/energon.py EnergonDatasetConfig.validate() for the
# task encoder and deferral. Energon-native packing is new after v0.6.0; older Bridge has no such mode.
PK120_SOURCE = (
    "Megatron Bridge training/config.py ConfigContainer.validate() (main 067f987, 2026-08-22, lines 1327-1345); "
    "data/builders/energon.py EnergonDatasetConfig.validate() (same commit)"
)


@rule(
    "PK120",
    Severity.ERROR,
    "Energon-native packing requirements",
    docs=RuleDocs(
        what="Energon-native packing (an Energon dataset, i.e. `dataset._target_` naming `EnergonDatasetConfig` or "
        "an Energon provider, or a dataset with Energon-only fields such as `task_encoder`, with "
        "`packing_buffer_size` set) requires per-token loss, `ddp.average_in_collective: false`, no CUDA graphs "
        "(`cuda_graph_impl` none), no vision CUDA graphs (`vision_cuda_graph_impl` none), no multi-token "
        "prediction (`mtp_num_layers` 0), PP 1, no Qwen3-VL DistTrain, a Qwen-VL task encoder and no deferred "
        "in-batch packing. Other dataset providers that take `packing_buffer_size` (Bridge's diffusion "
        "`DatasetProvider`s) are not Energon-native packing.",
        why="Bridge's validate() rejects each of these before training; one diagnostic per violated requirement "
        "so that every change is listed at once.",
        failing=edit(
            ("  calculate_per_token_loss: true\n", "  calculate_per_token_loss: false\n"), base=ENERGON
        ),
        passing=ENERGON,
        source=PK120_SOURCE,
    ),
)
def pk120(ctx: RuleContext) -> Iterator[Finding]:
    f = ctx.facts
    if f.packing_mode != "energon_native":
        return
    if f.calculate_per_token_loss is False:
        yield Finding(
            "Energon-native packing needs model.calculate_per_token_loss: true",
            at=("model", "calculate_per_token_loss"),
        )
    if f.average_in_collective is True:
        yield Finding(
            "Energon-native packing needs ddp.average_in_collective: false",
            at=("ddp", "average_in_collective"),
        )
    if f.mtp_num_layers is not None and f.mtp_num_layers > 0:
        yield Finding(
            f"Energon-native packing does not support multi-token prediction (model.mtp_num_layers {f.mtp_num_layers})",
            at=("model", "mtp_num_layers"),
            hint="set model.mtp_num_layers to 0 (or null), or drop dataset.packing_buffer_size",
        )
    if f.any_cuda_graph:
        yield Finding(
            f"Energon-native packing does not support CUDA graphs (cuda_graph_impl {value_repr(f.cuda_graph_impl)})",
            at=("model", "cuda_graph_impl")
            if ctx.has(("model", "cuda_graph_impl")) or not ctx.has(("model", "enable_cuda_graph"))
            else ("model", "enable_cuda_graph"),
        )
    if f.vision_cuda_graph_impl not in (None, "none"):
        yield Finding(
            "Energon-native packing does not support vision CUDA graphs "
            f"(model.vision_cuda_graph_impl {value_repr(f.vision_cuda_graph_impl)})",
            at=("model", "vision_cuda_graph_impl"),
            hint="set model.vision_cuda_graph_impl: none",
        )
    if f.pp is not None and f.pp > 1:
        yield Finding(
            f"Energon-native packing needs pipeline_model_parallel_size 1, got {f.pp}",
            at=("model", "pipeline_model_parallel_size"),
        )
    # Qwen3-VL DistTrain: Bridge reads model.dist_train.use_dist_train; older spellings are accepted too
    dist_train = ctx.get(("model", "dist_train"))
    if isinstance(dist_train, dict) and dist_train.get("use_dist_train") is True:
        yield Finding(
            "Energon-native packing does not support Qwen3-VL DistTrain (model.dist_train.use_dist_train)",
            at=("model", "dist_train", "use_dist_train"),
        )
    for key in DISTTRAIN_KEYS:
        if ctx.get(("model", key)) not in (None, False, {}):
            yield Finding(
                f"Energon-native packing does not support Qwen3-VL DistTrain (model.{key})", at=("model", key)
            )
    encoder = ctx.get(("dataset", "task_encoder"))
    target = encoder.get("_target_") if isinstance(encoder, dict) else encoder
    name = target.rsplit(".", 1)[-1] if isinstance(target, str) else ""
    if "qwen" not in name.lower():
        yield Finding(
            f"Energon-native packing needs a Qwen-VL task encoder, got {value_repr(name or target)}",
            at=("dataset", "task_encoder"),
            hint="use megatron.bridge.data.builders.energon.QwenVLEnergonTaskEncoderConfig",
        )
    if f.defer_in_batch_packing:
        yield Finding(
            "Energon-native packing cannot be combined with dataset.defer_in_batch_packing_to_step: true",
            at=("dataset", "defer_in_batch_packing_to_step"),
        )


@rule(
    "PK121",
    Severity.ERROR,
    "Energon evaluation micro-batch size",
    docs=RuleDocs(
        what="An Energon dataset whose own `dataset.micro_batch_size` differs from "
        "`validation.eval_micro_batch_size` (when that is set and the dataset validates: `do_validation` true, "
        "Bridge's default).",
        why="Energon builds the validation loader with its one micro-batch size; Bridge's validate() rejects a "
        "different evaluation micro-batch size before training starts.",
        failing=ENERGON + "validation:\n  eval_micro_batch_size: 2\n",
        passing=ENERGON + "validation:\n  eval_micro_batch_size: 1\n",
        source="Megatron Bridge training/config.py ConfigContainer.validate() (v0.6.0, lines 1298-1307; "
        "main 067f987, lines 1443-1451)",
    ),
)
def pk121(ctx: RuleContext) -> Iterator[Finding]:
    f = ctx.facts
    if not f.energon_dataset or f.eval_mbs is None:
        return
    if ctx.get(("dataset", "do_validation"), True) is False:
        return
    own = ctx.get(("dataset", "micro_batch_size"))
    if is_pos_int(own) and own != f.eval_mbs:
        eval_key = ctx.spelled(("validation", "eval_micro_batch_size"))  # or train.eval_micro_batch_size
        yield Finding(
            f"dataset.micro_batch_size is {own} but {eval_key} is {f.eval_mbs}; an Energon dataset needs them equal",
            at=("validation", "eval_micro_batch_size"),
            hint=f"set {eval_key}: {own} (or remove it: it defaults to train.micro_batch_size)",
        )


DPO = edit(
    ("  mode: sft\n", "  mode: dpo\n"),
    (
        "  _target_: megatron.bridge.training.config.FinetuningDatasetConfig\n",
        "  _target_: megatron.bridge.data.datasets.dpo.DPODatasetConfig\n",
    ),
)


@rule(
    "PK130",
    Severity.ERROR,
    "DPO packing needs Transformer Engine",
    docs=RuleDocs(
        what="DPO with packing requires `model.transformer_impl: transformer_engine`.",
        why="Packed DPO relies on TE's THD attention; its MBS 1 requirement is PK110's.",
        failing=after("  calculate_per_token_loss: true", "  transformer_impl: local\n", base=DPO),
        passing=DPO,
        source="NeMo Aligner megatron_gpt_dpo_model.py; DPO docs",
    ),
)
def pk130(ctx: RuleContext) -> Iterator[Finding]:
    f = ctx.facts
    if f.mode == "dpo" and f.packing and f.transformer_impl not in (None, "transformer_engine"):
        yield Finding(
            f"DPO with packing needs model.transformer_impl transformer_engine, got {f.transformer_impl!r}",
            at=("model", "transformer_impl"),
        )


@rule(
    "PK131",
    Severity.INFO,
    "packed global batch size advice",
    docs=RuleDocs(
        what="A packed global batch holds packs, not samples: a packed GBS should be about "
        "`unpacked GBS / average sequences per pack`. Shown when the average is known (pack metadata).",
        why="Keeping the unpacked GBS after packing multiplies the samples per step by the packing factor, "
        "which changes the optimisation (fewer, larger steps).",
        failing=edit(
            (
                "    packed_sequence_size: 4096\n",
                "    packed_sequence_size: 4096\n    packed_metadata_path: packed/metadata.json\n",
            )
        ),
        passing=edit(
            ("  enable_offline_packing: true\n  offline_packing_specs:\n    packed_sequence_size: 4096\n", "")
        ),
        source="NeMo Aligner DPO docs (packed sequence GBS)",
    ),
)
def pk131(ctx: RuleContext) -> Iterator[Finding]:
    f = ctx.facts
    meta = ctx.pack_metadata
    if not f.packing or not meta or f.gbs is None:
        return
    first = meta[0] if isinstance(meta, list) and meta and isinstance(meta[0], dict) else None
    factor = first.get("packing_factor") if first else None
    if isinstance(factor, bool) or not isinstance(factor, int | float) or not factor > 1:
        return
    # round to a whole number of micro-batches per data-parallel rank when the layout is known (PL602)
    step = (f.mbs or 1) * (f.dp or 1)
    # DPO counts pairs, and a pack of DPO data holds whole pairs (2 sequences each): NeMo Aligner's
    # packed DPO rescales the GBS in pairs by pairs per pack (packcfg.train.dpo)
    unit, per_pack = ("pairs", factor / 2) if f.mode == "dpo" else ("samples", factor)
    suggested = max(1, round(f.gbs / per_pack / step)) * step
    yield Finding(
        f"packs hold {factor:.2f} sequences on average: global_batch_size {f.gbs} packs is about "
        f"{f.gbs * per_pack:.0f} {unit} per step; to keep {f.gbs} {unit} per step use global_batch_size ~{suggested}",
        at=("train", "global_batch_size"),
    )


GEMMA2 = edit(
    ("  family: llama\n", "  family: gemma2\n"),
    (
        "  _target_: megatron.bridge.models.llama.llama_provider.Llama3ModelProvider8B\n",
        "  _target_: megatron.bridge.models.gemma.gemma2_provider.Gemma2ModelProvider9B\n",
    ),
)


@rule(
    "PK140",
    Severity.ERROR,
    "packing needs THD-capable attention",
    docs=RuleDocs(
        what="Packed (THD) attention needs Transformer Engine attention: `transformer_impl: local`, or a family "
        "whose provider forces local attention (Gemma2), cannot run any packing mode.",
        why="Megatron Core's local DotProductAttention rejects qkv_format=thd.",
        failing=after("  calculate_per_token_loss: true", "  transformer_impl: local\n"),
        passing=BASE,
        source="Megatron Core transformer/dot_product_attention.py DotProductAttention; Megatron Bridge "
        "models/gemma/gemma2_provider.py:185-189 (main 067f987)",
    ),
)
def pk140(ctx: RuleContext) -> Iterator[Finding]:
    f = ctx.facts
    if not f.packing:
        return
    if f.transformer_impl == "local":
        yield Finding(
            f"{f.packing_mode} packing needs Transformer Engine attention (THD); model.transformer_impl is 'local'",
            at=("model", "transformer_impl"),
        )
    elif f.family is not None and f.family.forces_local_attention:
        yield Finding(
            f"{f.family.name} forces local attention, which cannot run packed (THD) sequences; turn packing off",
            at=MODE_KEYS[f.packing_mode],
        )


@rule(
    "PK150",
    Severity.WARNING,
    "packing with unfused RoPE is slow",
    fixable=True,
    docs=RuleDocs(
        what="Packing with RoPE and `model.apply_rope_fusion: false`. Not for YaRN RoPE "
        "(`position_embedding_type: yarn`): Bridge's GPT-OSS recipes keep fusion off there on purpose "
        "(megatron-bridge main 067f987 perf_recipes/gpt_oss/common.py).",
        why="The unfused THD RoPE path loops over sequences in Python; it made packed training ~25% slower "
        "than padded in practice.",
        failing=after("  calculate_per_token_loss: true", "  apply_rope_fusion: false\n"),
        passing=after("  calculate_per_token_loss: true", "  apply_rope_fusion: true\n"),
        fixed=after("  calculate_per_token_loss: true", "  apply_rope_fusion: true\n"),
        source="SkyRL PR 274; TransformerEngine PR 3057",
    ),
)
def pk150(ctx: RuleContext) -> Iterator[Finding]:
    f = ctx.facts
    if ctx.get(("model", "position_embedding_type")) == "yarn":
        return
    if f.packing and f.rope is True and f.apply_rope_fusion is False:
        yield Finding(
            "packing with RoPE and apply_rope_fusion false: the unfused THD RoPE loops over sequences (~25% slower)",
            at=("model", "apply_rope_fusion"),
            fix=Fix(
                "set model.apply_rope_fusion: true", (set_edit(ctx, ("model", "apply_rope_fusion"), True),)
            ),
        )
