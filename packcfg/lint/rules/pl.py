"""PL: parallel layout and batch geometry."""

from __future__ import annotations

from collections.abc import Iterator

from packcfg.core.diagnostics import Severity
from packcfg.lint.context import RuleContext
from packcfg.lint.registry import Finding, RuleDocs, rule
from packcfg.lint.rules._examples import BASE, after, edit
from packcfg.lint.rules._helpers import is_pos_int

LAUNCH = BASE + "launch:\n  backend: slurm\n  nodes: 2\n  gpus_per_node: 8\n"


@rule(
    "PL601",
    Severity.ERROR,
    "world size divisible by TP*PP*CP",
    docs=RuleDocs(
        what="`world % (TP*PP*CP) == 0`, where world = launch.nodes x launch.gpus_per_node.",
        why="The data-parallel size must be whole; Bridge fails at initialisation otherwise.",
        failing=edit(
            ("  nodes: 2\n  gpus_per_node: 8\n", "  nodes: 1\n  gpus_per_node: 6\n"),
            base=after("  calculate_per_token_loss: true", "  tensor_model_parallel_size: 4\n", base=LAUNCH),
        ),
        passing=LAUNCH,
        source="Megatron Bridge training/config.py:1013-1027 (main 067f987)",
    ),
)
def pl601(ctx: RuleContext) -> Iterator[Finding]:
    f = ctx.facts
    if f.world is None or None in (f.tp, f.pp, f.cp):
        return
    mp = f.tp * f.pp * f.cp  # type: ignore[operator]
    if f.world % mp:
        yield Finding(
            f"world size {f.world} (nodes x gpus_per_node) is not divisible by TP*PP*CP = "
            f"{f.tp}*{f.pp}*{f.cp} = {mp}",
            at=("launch", "gpus_per_node"),
        )


@rule(
    "PL602",
    Severity.ERROR,
    "global batch divisible by micro-batch x DP",
    docs=RuleDocs(
        what="`GBS % (MBS*DP) == 0` and `GBS >= MBS*DP` (with the configured MBS, even when PK110 fires); "
        "likewise for the evaluation sizes.",
        why="Megatron Core's micro-batch calculator needs a whole number of micro-batches per rank.",
        failing=edit(("  global_batch_size: 128\n", "  global_batch_size: 100\n"), base=LAUNCH),
        passing=LAUNCH,
        source="Megatron Core num_microbatches_calculator.py; Megatron Bridge training/config.py:1433-1478 (main 067f987)",
    ),
)
def pl602(ctx: RuleContext) -> Iterator[Finding]:
    f = ctx.facts
    if f.world is None or None in (f.tp, f.pp):
        return
    if f.dp is not None and f.mbs is not None and f.gbs is not None:
        step = f.mbs * f.dp
        if f.gbs % step or f.gbs < step:
            yield Finding(
                f"global_batch_size {f.gbs} is not a positive multiple of micro_batch_size x DP = {f.mbs} x {f.dp} = {step}",
                at=("train", "global_batch_size"),
            )
    # Evaluation: Bridge falls back to the training sizes for what is not set; check when any is set.
    if f.eval_gbs is None and f.eval_mbs is None and f.eval_cp is None:
        return
    eval_gbs, eval_mbs, eval_cp = f.eval_gbs or f.gbs, f.eval_mbs or f.mbs, f.eval_cp or f.cp
    if eval_gbs is None or eval_mbs is None or eval_cp is None:
        return
    mp = f.tp * f.pp * eval_cp  # type: ignore[operator]
    if f.world % mp:
        return  # PL601's concern (for the evaluation CP)
    eval_dp = f.world // mp
    step = eval_mbs * eval_dp
    if eval_gbs % step or eval_gbs < step:
        at = next(
            (
                p
                for p in (
                    ("validation", "eval_global_batch_size"),
                    ("validation", "eval_micro_batch_size"),
                    ("dist", "eval_context_parallel_size"),
                )
                if ctx.has(p)
            ),
            ("validation", "eval_global_batch_size"),
        )
        yield Finding(
            f"evaluation global batch size {eval_gbs} is not a positive multiple of eval micro-batch x eval DP "
            f"= {eval_mbs} x {eval_dp} = {step}",
            at=at,
        )


@rule(
    "PL603",
    Severity.INFO,
    "sequence parallel with TP 1 is turned off",
    docs=RuleDocs(
        what="`model.sequence_parallel: true` with `tensor_model_parallel_size: 1`: Bridge's "
        "`TransformerConfig.finalize()` turns sequence parallelism off, so the setting has no effect.",
        why="Sequence parallelism shards activations across the tensor-parallel group; with TP 1 there is none. "
        "Bridge (v0.4.0 on) switches it off silently and ships recipes that set it at TP 1, so this is advice: "
        "the run is fine, but the config says something it does not do (and SP terms drop out of the CP "
        "alignment multiple). Megatron Core alone, and Bridge before v0.4.0, reject the combination.",
        failing=after("  calculate_per_token_loss: true", "  sequence_parallel: true\n"),
        passing=after("  calculate_per_token_loss: true", "  sequence_parallel: false\n"),
        source="Megatron Bridge models/transformer_config.py TransformerConfig.finalize() (main 067f987, line "
        "175; since v0.4.0); Megatron Core ModelParallelConfig.__post_init__",
    ),
)
def pl603(ctx: RuleContext) -> Iterator[Finding]:
    f = ctx.facts
    if f.sp is True and f.tp == 1:
        yield Finding(
            "model.sequence_parallel is true but tensor_model_parallel_size is 1: Bridge's "
            "TransformerConfig.finalize() turns sequence parallelism off",
            at=("model", "sequence_parallel"),
            hint="set model.sequence_parallel: false (or raise tensor_model_parallel_size) to say what runs",
        )


SHAPE = after(
    "  calculate_per_token_loss: true", "  num_layers: 32\n  num_attention_heads: 32\n  num_query_groups: 8\n"
)


@rule(
    "PL604",
    Severity.ERROR,
    "attention heads divisible by TP",
    docs=RuleDocs(
        what="`num_attention_heads % TP == 0` and `num_query_groups % TP == 0` (when the model shape is known).",
        why="Tensor parallelism splits heads and query groups evenly across ranks.",
        failing=after("  num_query_groups: 8", "  tensor_model_parallel_size: 16\n", base=SHAPE),
        passing=after("  num_query_groups: 8", "  tensor_model_parallel_size: 8\n", base=SHAPE),
        source="Megatron Core attention",
    ),
)
def pl604(ctx: RuleContext) -> Iterator[Finding]:
    tp = ctx.facts.tp
    if tp is None or tp == 1:
        return
    for key in ("num_attention_heads", "num_query_groups"):
        value = ctx.get(("model", key))
        if is_pos_int(value) and value % tp:
            yield Finding(
                f"model.{key} {value} is not divisible by tensor_model_parallel_size {tp}", at=("model", key)
            )


UNEVEN_KEYS = (
    "pipeline_model_parallel_layout",
    "num_layers_in_first_pipeline_stage",
    "num_layers_in_last_pipeline_stage",
)
ACCOUNTED_KEYS = ("embedding", "loss")


@rule(
    "PL605",
    Severity.ERROR,
    "layers divisible by PP (and PP*VP)",
    docs=RuleDocs(
        what="`num_layers % PP == 0`; with virtual pipeline, `num_layers % (PP*VP) == 0`. With "
        "`account_for_embedding_in_pipeline_split` / `account_for_loss_in_pipeline_split` the embedding and the loss "
        "each count as one more layer, as megatron-core does. Skipped with an uneven pipeline layout "
        "(`pipeline_model_parallel_layout`, first/last stage layer counts).",
        why="Each pipeline stage (and virtual chunk) gets the same number of layers.",
        failing=after("  num_query_groups: 8", "  pipeline_model_parallel_size: 3\n", base=SHAPE),
        passing=after("  num_query_groups: 8", "  pipeline_model_parallel_size: 4\n", base=SHAPE),
        source="megatron-core 0.16.1 transformer/transformer_config.py `TransformerConfig.__post_init__` (pipeline "
        "split checks, incl. account_for_embedding/loss_in_pipeline_split)",
    ),
)
def pl605(ctx: RuleContext) -> Iterator[Finding]:
    f = ctx.facts
    layers = ctx.get(("model", "num_layers"))
    if not is_pos_int(layers) or f.pp is None or any(ctx.get(("model", k)) is not None for k in UNEVEN_KEYS):
        return
    # megatron-core counts the embedding and the loss as one layer each when they take part in the split.
    extra = [k for k in ACCOUNTED_KEYS if ctx.get(("model", f"account_for_{k}_in_pipeline_split")) is True]
    counted = layers + len(extra)
    what = f"model.num_layers {layers}" + (f" + {' + '.join(extra)} = {counted}" if extra else "")
    if counted % f.pp:
        yield Finding(
            f"{what} is not divisible by pipeline_model_parallel_size {f.pp}",
            at=("model", "num_layers"),
        )
    elif f.vp is not None and counted % (f.pp * f.vp):
        yield Finding(
            f"{what} is not divisible by PP*VP = {f.pp}*{f.vp} = {f.pp * f.vp}",
            at=("model", "virtual_pipeline_model_parallel_size"),
        )


@rule(
    "PL606",
    Severity.WARNING,
    "offline packing with PP or EP needs fixed width",
    docs=RuleDocs(
        what="Offline packing with `PP > 1` or `EP > 1` and no `pad_to_max_length`.",
        why="Pipeline stages and expert all-to-alls exchange fixed shapes; Bridge forces fixed width for other "
        "dataset kinds, not for GPT SFT.",
        failing=after(
            "  calculate_per_token_loss: true",
            "  pipeline_model_parallel_size: 2\n",
            base=edit(("  dataset_kwargs:\n    pad_to_max_length: true\n", "")),
        ),
        passing=after("  calculate_per_token_loss: true", "  pipeline_model_parallel_size: 2\n"),
        source="Megatron Bridge training/config.py:1347-1352 (main 067f987)",
    ),
)
def pl606(ctx: RuleContext) -> Iterator[Finding]:
    f = ctx.facts
    if "offline" not in f.packing_modes or f.pad_to_max_length:
        return
    if (f.pp or 1) > 1 or (f.ep or 1) > 1:
        yield Finding(
            f"offline packing with PP {f.pp} / EP {f.ep} and no pad_to_max_length: fixed width is required there",
            at=("dataset", "enable_offline_packing"),
            hint="set dataset.dataset_kwargs.pad_to_max_length: true",
        )
