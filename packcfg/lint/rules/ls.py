"""LS: loss settings for fine-tuning with context parallelism."""

from __future__ import annotations

from collections.abc import Iterator

from packcfg.core.diagnostics import Fix, Severity
from packcfg.lint.context import RuleContext
from packcfg.lint.registry import Finding, RuleDocs, rule
from packcfg.lint.rules._examples import after, edit
from packcfg.lint.rules._helpers import set_edit
from packcfg.lint.rules.cp import CP2

CP2_PADDED = edit(
    ("    packed_sequence_size: 4096\n", "    packed_sequence_size: 4096\n    pad_seq_to_mult: 4\n"), base=CP2
)


@rule(
    "LS301",
    Severity.ERROR,
    "CP fine-tuning needs per-token loss",
    fixable=True,
    docs=RuleDocs(
        what="Fine-tuning with `CP > 1` requires `model.calculate_per_token_loss: true`.",
        why="Otherwise the loss is scaled wrongly across CP ranks, and ranks holding no supervised tokens "
        "produce NaN.",
        failing=edit(
            ("  calculate_per_token_loss: true\n", "  calculate_per_token_loss: false\n"), base=CP2_PADDED
        ),
        passing=CP2_PADDED,
        fixed=CP2_PADDED,
        source="Megatron Bridge training/config.py:1578-1593 (main 067f987; v0.3.1: 1550-1556)",
    ),
)
def ls301(ctx: RuleContext) -> Iterator[Finding]:
    f = ctx.facts
    if f.is_finetuning and f.cp is not None and f.cp > 1 and f.calculate_per_token_loss is False:
        shown = "false" if ctx.has(("model", "calculate_per_token_loss")) else "false (default)"
        yield Finding(
            f"fine-tuning with CP {f.cp} needs model.calculate_per_token_loss true, got {shown}",
            at=("model", "calculate_per_token_loss"),
            fix=Fix(
                "set model.calculate_per_token_loss: true",
                (set_edit(ctx, ("model", "calculate_per_token_loss"), True),),
            ),
        )


@rule(
    "LS302",
    Severity.ERROR,
    "CP fine-tuning needs average_in_collective false",
    fixable=True,
    docs=RuleDocs(
        what="Fine-tuning with `CP > 1` requires `ddp.average_in_collective: false`.",
        why="Averaging inside the collective divides by the rank count instead of the token count, which "
        "breaks per-token loss across CP ranks.",
        failing=CP2_PADDED + "ddp:\n  average_in_collective: true\n",
        passing=CP2_PADDED + "ddp:\n  average_in_collective: false\n",
        fixed=CP2_PADDED + "ddp:\n  average_in_collective: false\n",
        source="Megatron Bridge training/config.py:1594-1596 (main 067f987; v0.3.1: 1557-1559)",
    ),
)
def ls302(ctx: RuleContext) -> Iterator[Finding]:
    f = ctx.facts
    if f.is_finetuning and f.cp is not None and f.cp > 1 and f.average_in_collective is True:
        yield Finding(
            f"fine-tuning with CP {f.cp} needs ddp.average_in_collective false, got true",
            at=("ddp", "average_in_collective"),
            fix=Fix(
                "set ddp.average_in_collective: false",
                (set_edit(ctx, ("ddp", "average_in_collective"), False),),
            ),
        )


FSDP2 = after(
    "  global_batch_size: 128",
    "ddp:\n  use_megatron_fsdp: true\n  megatron_fsdp_version: 2\n",
)


@rule(
    "LS303",
    Severity.ERROR,
    "Megatron FSDP v2 has no per-token loss",
    docs=RuleDocs(
        what="Megatron FSDP v2 (`ddp.use_megatron_fsdp: true`, `ddp.megatron_fsdp_version: 2`) with "
        "`model.calculate_per_token_loss: true`.",
        why="FSDP v2 does not support per-token loss, so CP fine-tuning (which needs it) cannot use FSDP v2.",
        failing=FSDP2,
        passing=edit(("  megatron_fsdp_version: 2\n", "  megatron_fsdp_version: 1\n"), base=FSDP2),
        source="Megatron Bridge training/config.py:1183 (main 067f987)",
    ),
)
def ls303(ctx: RuleContext) -> Iterator[Finding]:
    f = ctx.facts
    if f.megatron_fsdp_v2 and f.calculate_per_token_loss is True:
        yield Finding(
            "Megatron FSDP v2 does not support model.calculate_per_token_loss: true",
            at=("model", "calculate_per_token_loss"),
            hint="use megatron_fsdp_version 1 (or the distributed optimizer) for per-token loss",
        )


@rule(
    "LS304",
    Severity.INFO,
    "cross-entropy fusion with CP in packed fine-tuning",
    docs=RuleDocs(
        what="`model.cross_entropy_loss_fusion: true` (GPTModelProvider's default) with `CP > 1` in a "
        "fine-tuning config with packing on. Never on pretraining configs.",
        why="Some of Bridge's fine-tuning recipes turn the fused cross entropy off with context parallelism; "
        "Bridge's own CP recipes elsewhere keep it on, so this is advice only.",
        failing=edit(
            ("  cross_entropy_loss_fusion: false\n", "  cross_entropy_loss_fusion: true\n"), base=CP2_PADDED
        ),
        passing=CP2_PADDED,
        source="Megatron Bridge recipes/qwen/h100/qwen3.py:706-708 (main 067f987)",
    ),
)
def ls304(ctx: RuleContext) -> Iterator[Finding]:
    f = ctx.facts
    if not f.is_finetuning or f.mode == "pretrain" or not f.packing:
        return
    if f.cp is not None and f.cp > 1 and f.cross_entropy_loss_fusion is True:
        shown = "true" if ctx.has(("model", "cross_entropy_loss_fusion")) else "true (default)"
        yield Finding(
            f"model.cross_entropy_loss_fusion is {shown} with CP {f.cp} and {f.packing_mode} packing; some Bridge "
            "fine-tuning recipes turn it off with CP",
            at=("model", "cross_entropy_loss_fusion"),
        )
