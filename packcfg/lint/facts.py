"""Facts derived once from a normalised config: what the rules reason about.

Every fact is defensive: a wrong-typed input (already reported as SC002) becomes None ("unknown"),
and a rule whose inputs are unknown does not fire. Absent fields take Megatron Bridge's defaults.
Definitions follow the spec's rule catalogue ("Precise definitions").
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from packcfg.core.config import get_path
from packcfg.core.families import Family, family_table

PACKING_MODES = ("offline", "in_batch", "energon_native")
SFT_DATASET_KINDS = ("gpt_sft", "hf_sft", "energon", "mock_vlm")
FINETUNING_MODES = ("sft", "peft", "dpo", "vlm_sft")


@dataclass(frozen=True)
class Facts:
    packing_mode: str  # offline | in_batch | energon_native | none (the first set, when several are)
    packing_modes: tuple[str, ...]  # every mode the config switches on (PK101 when more than one)
    specs: dict[str, Any] | None  # dataset.offline_packing_specs when a mapping
    tp: int | None = 1
    pp: int | None = 1
    cp: int | None = 1
    ep: int | None = 1
    vp: int | None = None
    sp: bool | None = False
    eval_cp: int | None = None
    world: int | None = None  # nodes x gpus_per_node, when the launch section gives them
    dp: int | None = None  # world / (TP*PP*CP), when whole
    mbs: int | None = None
    gbs: int | None = None
    eval_mbs: int | None = None
    eval_gbs: int | None = None
    model_seq_length: int | None = None
    dataset_seq_length: int | None = None
    seq_length: int | None = None  # dataset.seq_length, else model.seq_length
    packed_sequence_size: int | None = None  # only when a positive int
    pad_seq_to_mult: int | None = 1  # only when a positive int (default 1)
    max_single_sequence_length: int | None = None
    pad_cu_seqlens: bool = False
    pad_to_max_length: bool = False
    align_multiple: int | None = 1  # M
    dataset_kind: str | None = None  # gpt_sft | hf_sft | energon | mock_vlm | pretrain | None
    mode: str | None = None  # recipe.mode, else inferred
    is_finetuning: bool = False
    is_peft: bool = False
    family: Family | None = None
    family_source: str | None = None  # recipe.family | model._target_ | hf id
    transformer_impl: str | None = "transformer_engine"
    calculate_per_token_loss: bool | None = False
    average_in_collective: bool | None = False
    cross_entropy_loss_fusion: bool | None = True
    rope: bool | None = None
    apply_rope_fusion: bool | None = None
    cuda_graph_impl: str | None = "none"
    cuda_graph_modules: tuple[str, ...] = ()
    full_iteration_graph: bool = False
    training_graphs: bool = False
    attention_graphs: bool = False
    any_cuda_graph: bool = False
    megatron_fsdp_v2: bool = False
    p_tuning: bool = False
    energon_dataset: bool = False
    defer_in_batch_packing: bool = False
    vision_cuda_graph_impl: str | None = "none"
    is_moe: bool | None = None
    mtp_num_layers: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def packing(self) -> bool:
        return bool(self.packing_modes)


def _get(config: Any, *path: str) -> Any:
    return get_path(config, path)


def _section(config: dict[str, Any], name: str) -> dict[str, Any]:
    value = config.get(name)
    return value if isinstance(value, dict) else {}


def as_int(value: Any, default: int | None = None, *, minimum: int | None = 1) -> int | None:
    """`value` if it is a real int (not bool) >= minimum; `default` when absent (None); else unknown."""
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    if minimum is not None and value < minimum:
        return None
    return value


def as_bool(value: Any, default: bool | None = False) -> bool | None:
    if value is None:
        return default
    return value if isinstance(value, bool) else None


def _lcm(*values: int) -> int:
    out = 1
    for v in values:
        out = out * v // math.gcd(out, v)
    return out


def alignment_multiple(
    cp: int | None, tp: int | None, sp: bool | None, profile: str = "current"
) -> int | None:
    """M for one CP size: current lcm(2*CP if CP>1 else 1, CP*TP if SP and TP>1 else 1); legacy 2*CP*TP with SP."""
    if cp is None or tp is None or sp is None:
        return None
    cp_term = 2 * cp if cp > 1 else 1
    sp_on = sp and tp > 1
    if profile == "legacy":
        return 2 * cp * tp if sp_on else cp_term
    return _lcm(cp_term, cp * tp if sp_on else 1)


def _class_name(target: Any) -> str:
    return target.rsplit(".", 1)[-1] if isinstance(target, str) else ""


# Fields only an Energon dataset has (Bridge data/builders/energon.py EnergonDatasetConfig, v0.6.0): a dataset
# section without `_target_` that sets one of them is read as Energon.
ENERGON_ONLY_FIELDS = ("task_encoder",)


def dataset_kind(dataset: dict[str, Any]) -> str | None:
    """The dataset kind from `dataset._target_`'s class name (None when unknown).

    Energon = a class named like Bridge's Energon datasets (`EnergonDatasetConfig`, the older `EnergonProvider`);
    a module path that merely mentions energon (Bridge's diffusion `wan_energon_datamodule.WanDatasetConfig`)
    does not count. Without `_target_`, an Energon-only field (`task_encoder`) marks an Energon dataset.
    """
    cls = _class_name(dataset.get("_target_"))
    if not cls:
        if any(dataset.get(k) is not None for k in ENERGON_ONLY_FIELDS):
            return "energon"
        return None
    low = cls.lower()
    if "energon" in low:
        return "energon"
    if "mockvlm" in low or ("mock" in low and "vlm" in low):
        return "mock_vlm"
    # DirectHFSFTDatasetConfig / HF conversation providers build batches from HF rows (the "direct-HF" kind);
    # HFDatasetConfig (SQuAD and friends) is a FinetuningDatasetConfig, i.e. GPT SFT.
    if "directhf" in low or "conversation" in low:
        return "hf_sft"
    if "finetuning" in low or "sft" in low or low.startswith("hfdataset") or "packedsequence" in low:
        return "gpt_sft"
    if "gptdataset" in low or "mockgpt" in low or "pretrain" in low:
        return "pretrain"
    return None


def cuda_graph_module_list(value: Any) -> tuple[str, ...] | None:
    """`cuda_graph_modules`/`cuda_graph_scope` as a tuple of names; a comma-separated string is split."""
    if value is None:
        return ()
    if isinstance(value, str):
        return tuple(p.strip() for p in value.split(",") if p.strip())
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return tuple(v.strip() for v in value if v.strip())
    return None


NOT_MODULES = ("full", "full_iteration", "full_iteration_inference")


def _joined_modules(modules: Any, scope: Any) -> tuple[str, ...] | None:
    """`cuda_graph_modules` then `cuda_graph_scope`, duplicates dropped; None when either is wrong-typed."""
    first, second = cuda_graph_module_list(modules), cuda_graph_module_list(scope)
    if first is None or second is None:
        return None
    return tuple(dict.fromkeys((*first, *second)))


def _impl(value: Any) -> str | None:
    """A `*_cuda_graph_impl` value: absent or null is "none"; a non-string is unknown (SC002's concern)."""
    if value is None:
        return "none"
    return value if isinstance(value, str) else None


def _family(config: dict[str, Any]) -> tuple[Family | None, str | None]:
    table = family_table()
    fam_id = _get(config, "recipe", "family")
    if isinstance(fam_id, str):
        return table.get(fam_id), "recipe.family"
    target = _get(config, "model", "_target_")
    if isinstance(target, str):
        fam = table.from_provider(target)
        if fam is not None:
            return fam, "model._target_"
    for path in (("tokenizer", "tokenizer_model"), ("model", "hf_model_id"), ("model", "hf_path")):
        value = _get(config, *path)
        if isinstance(value, str):
            fam = table.from_hf_id(value)
            if fam is not None:
                return fam, ".".join(path)
    return None, None


def derive(config: dict[str, Any], profile: str = "current") -> Facts:
    """The facts of a normalised config (see the module docstring)."""
    if not isinstance(config, dict):
        config = {}
    model = _section(config, "model")
    train = _section(config, "train")
    dataset = _section(config, "dataset")
    validation = _section(config, "validation")
    ddp = _section(config, "ddp")
    launch = _section(config, "launch")
    recipe = _section(config, "recipe")
    dist = _section(config, "dist")
    peft = config.get("peft")

    # packing modes
    modes: list[str] = []
    if dataset.get("enable_offline_packing") is True:
        modes.append("offline")
    if dataset.get("enable_in_batch_packing") is True:
        modes.append("in_batch")
    kind = dataset_kind(dataset)
    # energon_native: an Energon dataset with packing_buffer_size (Bridge training/config.py, v0.6.0:
    # `isinstance(self.dataset, EnergonDatasetConfig) and packing_buffer_size is not None`); other providers
    # that take packing_buffer_size (Bridge's diffusion DatasetProviders) pack on their own.
    if kind == "energon" and dataset.get("packing_buffer_size") is not None:
        modes.append("energon_native")
    specs = dataset.get("offline_packing_specs")
    specs = specs if isinstance(specs, dict) else None
    raw_kwargs = dataset.get("dataset_kwargs")
    kwargs: dict[str, Any] = raw_kwargs if isinstance(raw_kwargs, dict) else {}

    tp = as_int(model.get("tensor_model_parallel_size"), 1)
    pp = as_int(model.get("pipeline_model_parallel_size"), 1)
    cp = as_int(model.get("context_parallel_size"), 1)
    ep = as_int(model.get("expert_model_parallel_size"), 1)
    vp = as_int(model.get("virtual_pipeline_model_parallel_size"), None)
    sp = as_bool(model.get("sequence_parallel"), False)
    eval_cp = as_int(dist.get("eval_context_parallel_size"), None)

    # A launch section that only names the target Bridge (`--bridge-version` is `++launch.bridge.version=V`)
    # describes no job: the world size stays unknown, as without a launch section.
    layout = any(key != "bridge" for key in launch)
    nodes = as_int(launch.get("nodes"), 1) if layout else None
    gpn = as_int(launch.get("gpus_per_node"), 1) if layout else None
    world = nodes * gpn if nodes is not None and gpn is not None else None
    dp = None
    if world is not None and None not in (tp, pp, cp) and world % (tp * pp * cp) == 0:  # type: ignore[operator]
        dp = world // (tp * pp * cp)  # type: ignore[operator]

    model_seq = as_int(model.get("seq_length"), None)
    data_seq = as_int(dataset.get("seq_length"), None)
    if dataset.get("seq_length") is None:
        data_seq = as_int(dataset.get("sequence_length"), None)
    seq = (
        data_seq
        if dataset.get("seq_length") is not None or dataset.get("sequence_length") is not None
        else model_seq
    )

    # M over the training CP and, when set, the evaluation CP (rules.md)
    align = alignment_multiple(cp, tp, sp, profile)
    if eval_cp is not None and align is not None:
        eval_align = alignment_multiple(eval_cp, tp, sp, profile)
        align = _lcm(align, eval_align) if eval_align is not None else None
    elif dist.get("eval_context_parallel_size") is not None:
        align = None  # a wrong-typed eval CP: M unknown

    mode = recipe.get("mode") if isinstance(recipe.get("mode"), str) else None
    if mode is None:
        if isinstance(peft, dict):
            mode = "peft"
        elif kind in ("energon", "mock_vlm"):
            mode = "vlm_sft"
        elif kind in ("gpt_sft", "hf_sft"):
            mode = "sft"
        elif kind == "pretrain":
            mode = "pretrain"
    is_finetuning = kind in SFT_DATASET_KINDS or mode in FINETUNING_MODES

    family, family_source = _family(config)

    # CUDA graphs (rules.md definitions)
    graph_impl = model.get("cuda_graph_impl", "none")
    graph_impl = graph_impl if isinstance(graph_impl, str) else None
    # Bridge reads both lists and joins them (v0.6.0 utils/cuda_graph.py:65-74 cuda_graph_module_names): a dump
    # that carries megatron-core's default `cuda_graph_modules: full` beside a user's `cuda_graph_scope:
    # [moe_router]` captures the router only.
    modules = _joined_modules(model.get("cuda_graph_modules"), model.get("cuda_graph_scope"))
    mod_list = modules or ()
    full_iteration = graph_impl == "full_iteration" or (
        graph_impl == "local" and "full_iteration" in mod_list
    )
    training_graphs = full_iteration or graph_impl == "transformer_engine"
    # "full" (and the full-iteration names) are no module: only them, or nothing, is the whole layer
    whole_layer = modules is not None and not [m for m in mod_list if m not in NOT_MODULES]
    attention_graphs = full_iteration or (
        graph_impl == "transformer_engine" and (whole_layer or any("attn" in m for m in mod_list))
    )
    any_graph = (graph_impl not in (None, "none")) or model.get("enable_cuda_graph") is True

    fsdp_v2 = ddp.get("use_megatron_fsdp") is True and ddp.get("megatron_fsdp_version") == 2
    peft_target = _class_name(peft.get("_target_")) if isinstance(peft, dict) else ""
    virtual_tokens = kwargs.get("virtual_tokens")
    p_tuning = ("ptuning" in peft_target.lower().replace("-", "").replace("_", "")) or (
        isinstance(virtual_tokens, int) and not isinstance(virtual_tokens, bool) and virtual_tokens > 0
    )

    pos_emb = model.get("position_embedding_type")
    if isinstance(pos_emb, str):
        rope: bool | None = pos_emb in ("rope", "mrope", "yarn")
    elif pos_emb is None:
        rope = True if family is not None and family.rope else None
    else:
        rope = None
    rope_fusion = model.get("apply_rope_fusion")
    apply_rope_fusion: bool | None
    if rope_fusion is None:
        # Megatron Core's default is off; the RoPE family providers turn it on.
        apply_rope_fusion = True if family is not None and family.rope else False
    else:
        apply_rope_fusion = rope_fusion if isinstance(rope_fusion, bool) else None

    num_experts = model.get("num_moe_experts")
    if isinstance(num_experts, int) and not isinstance(num_experts, bool):
        is_moe: bool | None = num_experts > 0
    else:
        is_moe = family.moe if family is not None else None

    eval_mbs = as_int(validation.get("eval_micro_batch_size"), None)
    eval_gbs = as_int(validation.get("eval_global_batch_size"), None)

    pss = as_int(specs.get("packed_sequence_size"), None) if specs else None
    mult = as_int(specs.get("pad_seq_to_mult"), 1) if specs else 1
    cap = as_int(specs.get("max_single_sequence_length"), None) if specs else None

    return Facts(
        packing_mode=modes[0] if modes else "none",
        packing_modes=tuple(modes),
        specs=specs,
        tp=tp,
        pp=pp,
        cp=cp,
        ep=ep,
        vp=vp,
        sp=sp,
        eval_cp=eval_cp,
        world=world,
        dp=dp,
        mbs=as_int(train.get("micro_batch_size"), None),
        gbs=as_int(train.get("global_batch_size"), None),
        eval_mbs=eval_mbs,
        eval_gbs=eval_gbs,
        model_seq_length=model_seq,
        dataset_seq_length=data_seq,
        seq_length=seq,
        packed_sequence_size=pss,
        pad_seq_to_mult=mult,
        max_single_sequence_length=cap,
        pad_cu_seqlens=bool(specs and specs.get("pad_cu_seqlens") is True),
        pad_to_max_length=dataset.get("pad_to_max_length") is True or kwargs.get("pad_to_max_length") is True,
        align_multiple=align,
        dataset_kind=kind,
        mode=mode,
        is_finetuning=is_finetuning,
        is_peft=isinstance(peft, dict),
        family=family,
        family_source=family_source,
        transformer_impl=model.get("transformer_impl", "transformer_engine")
        if isinstance(model.get("transformer_impl", "transformer_engine"), str)
        else None,
        calculate_per_token_loss=as_bool(model.get("calculate_per_token_loss"), False),
        average_in_collective=as_bool(ddp.get("average_in_collective"), False),
        cross_entropy_loss_fusion=as_bool(model.get("cross_entropy_loss_fusion"), True),
        rope=rope,
        apply_rope_fusion=apply_rope_fusion,
        cuda_graph_impl=graph_impl,
        cuda_graph_modules=mod_list,
        full_iteration_graph=full_iteration,
        training_graphs=training_graphs,
        attention_graphs=attention_graphs,
        any_cuda_graph=any_graph,
        megatron_fsdp_v2=fsdp_v2,
        p_tuning=p_tuning,
        energon_dataset=kind == "energon",
        defer_in_batch_packing=dataset.get("defer_in_batch_packing_to_step") is True,
        vision_cuda_graph_impl=_impl(model.get("vision_cuda_graph_impl")),
        is_moe=is_moe,
        mtp_num_layers=as_int(model.get("mtp_num_layers"), None, minimum=0),
    )
