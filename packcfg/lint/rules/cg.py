"""CG: CUDA graphs with packing (definitions of full-iteration / training / attention graphs: facts.py)."""

from __future__ import annotations

from collections.abc import Iterator

from packcfg.core.diagnostics import Severity
from packcfg.lint.context import RuleContext
from packcfg.lint.facts import cuda_graph_module_list
from packcfg.lint.registry import Finding, RuleDocs, rule
from packcfg.lint.rules._examples import after, edit
from packcfg.lint.rules._helpers import is_pos_int, spec_name, spec_path

UNPADDED = edit(("  dataset_kwargs:\n    pad_to_max_length: true\n", ""))
PADDED_CU = edit(
    (
        "    packed_sequence_size: 4096\n",
        "    packed_sequence_size: 4096\n    pad_cu_seqlens: true\n    packed_metadata_path: packed/metadata.json\n",
    )
)
TE_GRAPHS = after(
    "  calculate_per_token_loss: true",
    "  cuda_graph_impl: transformer_engine\n  cuda_graph_scope:\n  - attn\n",
)


@rule(
    "CG501",
    Severity.ERROR,
    "pad_cu_seqlens needs pad_to_max_length",
    docs=RuleDocs(
        what="`offline_packing_specs.pad_cu_seqlens: true` requires `pad_to_max_length`.",
        why="Padded cu_seqlens describe a fixed-width row; without fixed width they point past the data.",
        failing=edit(("  dataset_kwargs:\n    pad_to_max_length: true\n", ""), base=PADDED_CU),
        passing=PADDED_CU,
        source="Megatron Bridge training/config.py:1283-1291 (main 067f987)",
    ),
)
def cg501(ctx: RuleContext) -> Iterator[Finding]:
    f = ctx.facts
    if f.pad_cu_seqlens and not f.pad_to_max_length:
        yield Finding(
            f"{spec_name(ctx, 'pad_cu_seqlens')} is true but pad_to_max_length is not set",
            at=spec_path("pad_cu_seqlens"),
            hint="set dataset.dataset_kwargs.pad_to_max_length: true",
        )


@rule(
    "CG502",
    Severity.ERROR,
    "offline packing + training CUDA graphs need pad_to_max_length",
    docs=RuleDocs(
        what="Offline packing with any training CUDA graph (TE-scoped or full-iteration) requires `pad_to_max_length`.",
        why="A captured graph replays fixed shapes; variable-width packs break the replay.",
        failing=after(
            "  calculate_per_token_loss: true",
            "  cuda_graph_impl: transformer_engine\n  cuda_graph_scope:\n  - mlp\n",
            base=UNPADDED,
        ),
        passing=after(
            "  calculate_per_token_loss: true",
            "  cuda_graph_impl: transformer_engine\n  cuda_graph_scope:\n  - mlp\n",
        ),
        source="Megatron Bridge training/config.py:1293-1300 (main 067f987)",
    ),
)
def cg502(ctx: RuleContext) -> Iterator[Finding]:
    f = ctx.facts
    if "offline" in f.packing_modes and f.training_graphs and not f.pad_to_max_length:
        yield Finding(
            f"offline packing with CUDA graphs (cuda_graph_impl {f.cuda_graph_impl!r}) needs pad_to_max_length",
            at=("model", "cuda_graph_impl"),
            hint="set dataset.dataset_kwargs.pad_to_max_length: true",
        )


@rule(
    "CG503",
    Severity.ERROR,
    "attention-capturing graphs need pad_cu_seqlens",
    docs=RuleDocs(
        what="CUDA graphs that capture attention (full-iteration; TE whole-layer, empty scope, or a scope with "
        "`attn`) with packing require `offline_packing_specs.pad_cu_seqlens: true`.",
        why="The captured attention kernel has a fixed cu_seqlens length; unpadded cu_seqlens vary per pack.",
        failing=TE_GRAPHS,
        passing=after(
            "  calculate_per_token_loss: true",
            "  cuda_graph_impl: transformer_engine\n  cuda_graph_scope:\n  - attn\n",
            base=PADDED_CU,
        ),
        source="Megatron Bridge training/config.py:1302-1309 (main 067f987)",
    ),
)
def cg503(ctx: RuleContext) -> Iterator[Finding]:
    f = ctx.facts
    if "offline" in f.packing_modes and f.attention_graphs and not f.pad_cu_seqlens:
        yield Finding(
            f"CUDA graphs capturing attention (cuda_graph_impl {f.cuda_graph_impl!r}, modules "
            f"{list(f.cuda_graph_modules) or 'whole layer'}) need {spec_name(ctx, 'pad_cu_seqlens')}: true",
            at=spec_path("pad_cu_seqlens"),
        )


@rule(
    "CG504",
    Severity.ERROR,
    "pad_cu_seqlens needs pack metadata",
    docs=RuleDocs(
        what="`pad_cu_seqlens` needs a packing metadata file: an explicit `packed_metadata_path`, or builder-managed "
        "paths (no explicit packed data path).",
        why="The padded cu_seqlens length comes from max_samples_per_bin in the metadata.",
        failing=edit(
            (
                "    packed_metadata_path: packed/metadata.json\n",
                "    packed_train_data_path: packed/train.parquet\n",
            ),
            base=PADDED_CU,
        ),
        passing=PADDED_CU,
        source="Megatron Bridge data/packing/gpt_sft.py:75-81 (main 067f987)",
    ),
)
def cg504(ctx: RuleContext) -> Iterator[Finding]:
    f = ctx.facts
    specs = f.specs or {}
    if not f.pad_cu_seqlens or specs.get("packed_metadata_path"):
        return
    if specs.get("packed_train_data_path"):  # user-managed data: the builder writes no metadata
        yield Finding(
            f"pad_cu_seqlens needs {spec_name(ctx, 'packed_metadata_path')} when packed_train_data_path is given",
            at=spec_path("pad_cu_seqlens"),
        )


MOE = edit(
    ("  family: llama\n", "  family: qwen3_moe\n"),
    (
        "  _target_: megatron.bridge.models.llama.llama_provider.Llama3ModelProvider8B\n",
        "  _target_: megatron.bridge.models.qwen.qwen_provider.Qwen3MoEModelProvider30B_A3B\n",
    ),
)
# Module names whose TE graph captures the MoE router (Bridge training/gpt_step.py _validate_packed_moe_cuda_graph)
ROUTER_MODULES = frozenset({"moe", "moe_router", "moe_preprocess"})


@rule(
    "CG505",
    Severity.ERROR,
    "MoE + packed padding mask + router CUDA graphs",
    docs=RuleDocs(
        what="An MoE model with offline packing (every offline packed batch carries a padding mask, whatever "
        "`pad_seq_to_mult` is; in-batch packing carries one when `in_batch_packing_pad_to_multiple_of > 1`) "
        "and Transformer Engine CUDA graphs that capture the router: a whole-layer scope (empty or `full`) or "
        "one naming `moe`, `moe_router` or `moe_preprocess`.",
        why="The captured router graph cannot consume the packed padding mask; Bridge's packed forward step "
        'raises at the first step ("Packed MoE padding masks do not support router-scoped Transformer Engine '
        'CUDA graphs").',
        failing=after(
            "  calculate_per_token_loss: true",
            "  cuda_graph_impl: transformer_engine\n  cuda_graph_scope:\n  - moe_router\n",
            base=MOE,
        ),
        passing=after(
            "  calculate_per_token_loss: true",
            "  cuda_graph_impl: transformer_engine\n  cuda_graph_scope:\n  - mlp\n",
            base=MOE,
        ),
        source="Megatron Bridge training/gpt_step.py:184-198 _validate_packed_moe_cuda_graph, called at 584-585 "
        "(main 067f987); data/packing/gpt_sft.py:296 (offline packed batches always carry padding_mask)",
    ),
)
def cg505(ctx: RuleContext) -> Iterator[Finding]:
    f = ctx.facts
    if not f.packing or f.is_moe is not True or f.cuda_graph_impl != "transformer_engine":
        return
    raw = ctx.get(("model", "cuda_graph_modules"), ctx.get(("model", "cuda_graph_scope")))
    if cuda_graph_module_list(raw) is None:
        return  # wrong-typed scope: SC002's concern
    modules = {
        m for m in f.cuda_graph_modules if m not in ("full", "full_iteration", "full_iteration_inference")
    }
    captures_router = not modules or bool(modules & ROUTER_MODULES)
    if not captures_router:
        return
    if "offline" in f.packing_modes:
        why = "offline packed batches always carry a padding mask"
    else:
        mult = ctx.get(("dataset", "in_batch_packing_pad_to_multiple_of"), 1)
        if not (is_pos_int(mult) and mult > 1):
            return
        why = f"in_batch_packing_pad_to_multiple_of {mult} gives every packed batch a padding mask"
    scope = sorted(modules) if modules else "whole layer"
    yield Finding(
        f"MoE with {f.packing_mode} packing and Transformer Engine CUDA graphs capturing the router (scope "
        f"{scope}) fails at the first step: {why}",
        at=("model", "cuda_graph_modules")
        if ctx.has(("model", "cuda_graph_modules"))
        else ("model", "cuda_graph_scope")
        if ctx.has(("model", "cuda_graph_scope"))
        else ("model", "cuda_graph_impl"),
        hint="use an attention-only scope (cuda_graph_scope: [attn]) or turn CUDA graphs off",
    )


FULL_ITER = after(
    "  calculate_per_token_loss: true",
    "  cuda_graph_impl: local\n  cuda_graph_scope:\n  - full_iteration\n",
    base=PADDED_CU,
)


@rule(
    "CG506",
    Severity.ERROR,
    "full-iteration graphs need check_for_nan_in_loss false",
    docs=RuleDocs(
        what="A full-iteration CUDA graph requires `rerun_state_machine.check_for_nan_in_loss: false` "
        "(Bridge's default is true).",
        why="The NaN check reads the loss on the host inside the captured iteration.",
        failing=FULL_ITER,
        passing=FULL_ITER + "rerun_state_machine:\n  check_for_nan_in_loss: false\n",
        source="Megatron Bridge training/config.py:1508-1513 (main 067f987; v0.6.0: 1364-1369)",
    ),
)
def cg506(ctx: RuleContext) -> Iterator[Finding]:
    key = ("rerun_state_machine", "check_for_nan_in_loss")
    if ctx.facts.full_iteration_graph and ctx.get(key, True) is True:
        # the check is on by default: when it is not written, point at the graph setting that needs it off
        yield Finding(
            "a full-iteration CUDA graph needs rerun_state_machine.check_for_nan_in_loss: false"
            + ("" if ctx.has(key) else " (Bridge's default is true)"),
            at=key if ctx.has(key) else ("model", "cuda_graph_impl"),
        )


LOCAL_SCOPED = after(
    "  calculate_per_token_loss: true",
    "  cuda_graph_impl: local\n  cuda_graph_scope:\n  - attn\n",
)


@rule(
    "CG507",
    Severity.ERROR,
    "local CUDA graphs only for full iteration",
    docs=RuleDocs(
        what="`model.cuda_graph_impl: local` without `full_iteration` in `cuda_graph_modules`/`cuda_graph_scope`. "
        "(A local graph with no training scope and an `inference_cuda_graph_scope` of `layer` or `block` is "
        "an inference graph and is allowed.)",
        why="Megatron Bridge supports the local CUDA graph implementation only for full-iteration capture; "
        "scoped capture such as `attn` or `mlp` goes through Transformer Engine. Bridge's "
        "validate_cuda_graph_configuration() raises before training.",
        failing=LOCAL_SCOPED,
        passing=after(
            "  calculate_per_token_loss: true",
            "  cuda_graph_impl: transformer_engine\n  cuda_graph_scope:\n  - attn\n",
            base=PADDED_CU,
        ),
        source="Megatron Bridge utils/cuda_graph.py:134-153 validate_cuda_graph_configuration (v0.6.0 and "
        "main 067f987), called from training/config.py:1399 and 1514 and models/gpt_provider.py:233 "
        "(main 067f987)",
    ),
)
def cg507(ctx: RuleContext) -> Iterator[Finding]:
    f = ctx.facts
    if f.cuda_graph_impl != "local" or f.full_iteration_graph:
        return
    raw = ctx.get(("model", "cuda_graph_modules"), ctx.get(("model", "cuda_graph_scope")))
    if cuda_graph_module_list(raw) is None:
        return  # wrong-typed scope: SC002's concern
    modules = [m for m in f.cuda_graph_modules if m not in ("full", "full_iteration_inference")]
    inference = cuda_graph_module_list(ctx.get(("model", "inference_cuda_graph_scope"))) or ()
    if not modules and {"layer", "block"} & set(inference):
        return  # a local inference graph (Bridge allows it)
    shown = f" with scope {modules}" if modules else ""
    yield Finding(
        f"cuda_graph_impl 'local'{shown} is supported by Megatron Bridge only for full-iteration CUDA graphs",
        at=("model", "cuda_graph_impl"),
        hint="use cuda_graph_impl: transformer_engine for scoped capture (attn, mlp, ...), or "
        "cuda_graph_impl: full_iteration",
    )
