"""MF: model families and features (the family table is data: packcfg/core/families.yaml)."""

from __future__ import annotations

from collections.abc import Iterator

from packcfg.core.diagnostics import Severity
from packcfg.lint.context import RuleContext
from packcfg.lint.registry import Finding, RuleDocs, rule
from packcfg.lint.rules._examples import BASE, after, edit
from packcfg.lint.rules.pk import MODE_KEYS

NO_FAMILY = edit(
    ("  family: llama\n", ""),
    (
        "  _target_: megatron.bridge.models.llama.llama_provider.Llama3ModelProvider8B\n",
        "  _target_: megatron.bridge.models.gpt_provider.GPTModelProvider\n"
        "  position_embedding_type: rope\n  apply_rope_fusion: true\n",
    ),
)


@rule(
    "MF400",
    Severity.INFO,
    "model family unknown",
    docs=RuleDocs(
        what="Packing is on and no model family could be determined (recipe.family, the provider class in "
        "model._target_, or an HF model id).",
        why="Family rules (MF401-MF404, PK140) cannot apply to an unknown family.",
        failing=NO_FAMILY,
        passing=edit(("  name: example\n", "  name: example\n  family: llama\n"), base=NO_FAMILY),
        source="packcfg family table (packcfg/core/families.yaml)",
    ),
)
def mf400(ctx: RuleContext) -> Iterator[Finding]:
    f = ctx.facts
    if f.packing and f.family is None:
        fam = ctx.get(("recipe", "family"))
        if isinstance(fam, str):
            return  # an unknown id is SC002 already
        yield Finding(
            "model family unknown; set recipe.family so family rules can apply",
            at=("recipe", "family"),
        )


QWEN3_NEXT = """\
recipe:
  name: example
  mode: sft
model:
  _target_: megatron.bridge.models.qwen.qwen_provider.Qwen3NextModelProvider80B_A3B
  seq_length: 4096
  calculate_per_token_loss: true
dataset:
  _target_: megatron.bridge.training.config.FinetuningDatasetConfig
  seq_length: 4096
  enable_offline_packing: false
  dataset_kwargs:
    pad_to_max_length: true
train:
  micro_batch_size: 1
  global_batch_size: 128
"""


@rule(
    "MF401",
    Severity.ERROR,
    "family does not support offline packing",
    docs=RuleDocs(
        what="The family does not support offline packing: Qwen3-Next, GLM-4.5 (SFT and PEFT, incl. Air), DeepSeek-V4.",
        why="Their recipes refuse packed sequences (hybrid attention / MoE paths without THD support).",
        failing=edit(
            (
                "  enable_offline_packing: false\n",
                "  enable_offline_packing: true\n  offline_packing_specs:\n    packed_sequence_size: 4096\n",
            ),
            base=QWEN3_NEXT,
        ),
        passing=QWEN3_NEXT,
        source="Megatron Bridge recipes qwen3_next.py:150, glm45.py:289, deepseek_v4.py:301 (main 067f987)",
    ),
)
def mf401(ctx: RuleContext) -> Iterator[Finding]:
    f = ctx.facts
    if "offline" in f.packing_modes and f.family is not None and not f.family.offline_packing:
        yield Finding(
            f"{f.family.name} does not support offline packing (family from {f.family_source})",
            at=MODE_KEYS["offline"],
        )


def _vlm(family: str, target: str, extra: str = "") -> str:
    return (
        "recipe:\n  name: example\n  mode: vlm_sft\n"
        f"model:\n  _target_: {target}\n  seq_length: 4096\n  calculate_per_token_loss: true\n"
        "dataset:\n  _target_: megatron.bridge.data.builders.direct_hf_sft.DirectHFSFTDatasetConfig\n"
        f"  seq_length: 4096\n{extra}"
        "train:\n  micro_batch_size: 2\n  global_batch_size: 32\n"
    )


OMNI = "megatron.bridge.models.qwen_omni.qwen3_omni_provider.Qwen3OmniMoeModelProvider"
GEMMA3_VL = "megatron.bridge.models.gemma_vl.gemma3_vl_provider.Gemma3VLModelProvider"
QWEN3_VL = "megatron.bridge.models.qwen_vl.qwen3_vl_provider.Qwen3VLModelProvider"


@rule(
    "MF402",
    Severity.ERROR,
    "family rejects in-batch packing",
    docs=RuleDocs(
        what="The family rejects in-batch packing at run time: Qwen3-Omni, Nemotron-VL (Nano V2 VL).",
        why="Their collate functions raise when asked to pack.",
        failing=_vlm("qwen3_omni", OMNI, "  enable_in_batch_packing: true\n"),
        passing=_vlm("qwen3_omni", OMNI, "  enable_in_batch_packing: false\n"),
        source="Megatron Bridge collate_fn.py of the Qwen3-Omni and Nemotron-VL models (main 067f987)",
    ),
)
def mf402(ctx: RuleContext) -> Iterator[Finding]:
    f = ctx.facts
    if "in_batch" in f.packing_modes and f.family is not None and f.family.in_batch == "rejected":
        yield Finding(f"{f.family.name} rejects in-batch packing at run time", at=MODE_KEYS["in_batch"])


@rule(
    "MF403",
    Severity.WARNING,
    "family's recipes turn in-batch packing off",
    docs=RuleDocs(
        what="The family's recipes turn in-batch packing off (not known to work): Gemma3-VL, Gemma4-VL, GLM-4.5V, "
        "Kimi-K2.5-VL, Ministral3, EXAONE-4.5, Qwen3.5-VL (except Qwen3.5-VL with CP > 1 and deferral on).",
        why="Nobody has shown packed training to be correct for them; expect wrong masks or position ids.",
        failing=_vlm("gemma3_vl", GEMMA3_VL, "  enable_in_batch_packing: true\n"),
        passing=_vlm("gemma3_vl", GEMMA3_VL, "  enable_in_batch_packing: false\n"),
        source="the Megatron Bridge recipes of those families (main 067f987)",
    ),
)
def mf403(ctx: RuleContext) -> Iterator[Finding]:
    f = ctx.facts
    fam = f.family
    if "in_batch" not in f.packing_modes or fam is None or fam.in_batch != "not_known_to_work":
        return
    if fam.in_batch_ok_with_cp_deferral and f.cp is not None and f.cp > 1 and f.defer_in_batch_packing:
        return  # the long-context recipe's opt-in path
    yield Finding(
        f"{fam.name}'s recipes turn in-batch packing off (not known to work)",
        at=MODE_KEYS["in_batch"],
        hint="Qwen3.5-VL: only with CP > 1 and defer_in_batch_packing_to_step: true"
        if fam.in_batch_ok_with_cp_deferral
        else None,
    )


@rule(
    "MF404",
    Severity.ERROR,
    "in-batch packing deferral must match the family",
    docs=RuleDocs(
        what="Families that pack in their own step (Qwen3-VL, Qwen3.5-VL, Qwen2-Audio) need "
        "`dataset.defer_in_batch_packing_to_step: true` with in-batch packing; every other family must not set it.",
        why="Those steps pack after their own CP/SP padding and need unpacked batches; the generic VLM step "
        "rejects deferral.",
        failing=_vlm("qwen3_vl", QWEN3_VL, "  enable_in_batch_packing: true\n"),
        passing=_vlm(
            "qwen3_vl", QWEN3_VL, "  enable_in_batch_packing: true\n  defer_in_batch_packing_to_step: true\n"
        ),
        source="Megatron Bridge models/qwen_vl/qwen3_vl_step.py and training/vlm_step.py:223-226 (main 067f987)",
    ),
)
def mf404(ctx: RuleContext) -> Iterator[Finding]:
    f = ctx.facts
    if "in_batch" not in f.packing_modes or f.family is None:
        return
    if f.family.packs_in_own_step and not f.defer_in_batch_packing:
        yield Finding(
            f"{f.family.name} packs in its own step: set dataset.defer_in_batch_packing_to_step: true",
            at=("dataset", "defer_in_batch_packing_to_step"),
        )
    elif not f.family.packs_in_own_step and f.defer_in_batch_packing:
        yield Finding(
            f"{f.family.name} uses the generic VLM step, which rejects defer_in_batch_packing_to_step: true",
            at=("dataset", "defer_in_batch_packing_to_step"),
        )


@rule(
    "MF410",
    Severity.WARNING,
    "multi-token prediction with packing",
    docs=RuleDocs(
        what="Multi-token prediction (`model.mtp_num_layers > 0`) with fine-tuning packing (offline or in-batch). "
        "An error under the legacy profile.",
        why="Documented as unsupported, though Bridge's recent recipes combine them; older megatron-core leaked "
        "tokens across packed sequences in the MTP roll under THD + CP.",
        failing=after("  calculate_per_token_loss: true", "  mtp_num_layers: 1\n"),
        passing=after("  calculate_per_token_loss: true", "  mtp_num_layers: 0\n"),
        source="Megatron Bridge docs/training/multi-token-prediction.md (main 067f987); Megatron-LM PR 4494",
    ),
)
def mf410(ctx: RuleContext) -> Iterator[Finding]:
    f = ctx.facts
    if not f.mtp_num_layers or not ({"offline", "in_batch"} & set(f.packing_modes)):
        return
    if f.cp is not None and f.cp > 1:
        why = (
            f"with CP {f.cp}, megatron-core before Megatron-LM PR 4494 leaked tokens across packed sequences in the "
            "MTP roll (THD + CP); make sure your megatron-core has the fix"
        )
    else:
        why = "documented as unsupported by Bridge (its recent recipes combine them; verify your versions)"
    yield Finding(
        f"mtp_num_layers {f.mtp_num_layers} with {f.packing_mode} packing: {why}",
        at=("model", "mtp_num_layers"),
        severity=Severity.ERROR if ctx.profile == "legacy" else None,
    )


@rule(
    "MF420",
    Severity.ERROR,
    "P-Tuning with packing",
    docs=RuleDocs(
        what="P-Tuning (a P-Tuning `peft`, or `dataset.dataset_kwargs.virtual_tokens > 0`) with packing.",
        why="The packed SFT dataset cannot place virtual tokens per sequence; Bridge does not support it.",
        failing=edit(
            ("    pad_to_max_length: true\n", "    pad_to_max_length: true\n    virtual_tokens: 10\n")
        ),
        passing=BASE,
        source="Megatron Bridge data/packing/gpt_sft.py:70 (main 067f987)",
    ),
)
def mf420(ctx: RuleContext) -> Iterator[Finding]:
    f = ctx.facts
    if f.p_tuning and f.packing:
        at: tuple[str, ...] = ("dataset", "dataset_kwargs", "virtual_tokens")
        if not ctx.has(at):
            at = ("peft", "_target_")
        yield Finding(f"P-Tuning (virtual tokens) is not supported with {f.packing_mode} packing", at=at)


PEFT = edit(("  mode: sft\n", "  mode: peft\n")) + (
    "peft:\n  _target_: megatron.bridge.peft.lora.LoRA\n  dim: 16\n  alpha: 32\n"
)


@rule(
    "MF430",
    Severity.ERROR,
    "PEFT needs a pretrained checkpoint",
    docs=RuleDocs(
        what="A `peft` section requires `checkpoint.pretrained_checkpoint`.",
        why="Adapters are trained on top of frozen base weights; Bridge asserts the base checkpoint is given.",
        failing=PEFT,
        passing=PEFT + "checkpoint:\n  pretrained_checkpoint: /checkpoints/llama3_8b\n",
        source="Megatron Bridge training/config.py:1626 (main 067f987)",
    ),
)
def mf430(ctx: RuleContext) -> Iterator[Finding]:
    if ctx.facts.is_peft and ctx.get(("checkpoint", "pretrained_checkpoint")) in (None, ""):
        yield Finding(
            "a peft section needs checkpoint.pretrained_checkpoint (the base weights)",
            at=("checkpoint", "pretrained_checkpoint"),
        )
