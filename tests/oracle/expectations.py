"""Data for the oracle suite (tests/oracle/test_oracle.py): Bridge's rejections mapped to packcfg codes,
the checks packcfg makes that Bridge's validate() does not, and the known disagreements, per Bridge line:
the names without a suffix are Bridge 0.3.1's; the `_06` ones Bridge 0.6.x's (0.6.2 installed; messages from
r0.6.0 src/megatron/bridge/training/config.py, data/builders/gpt_sft.py, data/packing/config.py).
`for_line(line)` picks one set.

Sources: megatron-bridge v0.3.1 src/megatron/bridge/training/config.py (`ConfigContainer.validate`,
`runtime_config_update`), megatron-core 0.16.1 `ModelParallelConfig`/`TransformerConfig.__post_init__`; "HEAD"
is Bridge main as mirrored (rules.md rev 3 follows it).
"""

from dataclasses import dataclass

# Bridge 0.3.1 message (regex over "ExceptionType: first line") -> packcfg code for the same problem.
# None: packcfg has no rule for it (a gap; listed in MISSING_RULES and reported to the lead).
BRIDGE_CODES: list[tuple[str, str | None]] = [
    (r"Micro batch size should be 1 when training with packed sequence", "PK110"),
    (r"micro_batch_size should be greater than 1 when using pack_sequences_in_batch", "PK111"),
    (r"Sequence length must be divisible by 2 \* context parallel size", "CP201"),
    (r"When finetuning with CP>1, calculate_per_token_loss must be True", "LS301"),
    (r"When finetuning with CP>1, average_in_collective must be False", "LS302"),
    (r"ensure sequence length configuration in model config and\s*dataset config match", "DS701"),
    (r"world size \(\d+\) is not divisible by total_model_size", "PL601"),
    (r"Cannot use sequence parallelism without tensor parallelism", "PL603"),
    (r"PEFT requires a pretrained checkpoint path", "MF430"),
    (r"check_for_nan_in_loss must be disabled when using full_iteration CUDA graph", "CG506"),
    (r"Megatron FSDP only supports fsdp_dtensor checkpoint format", None),
]

# Bridge rejections packcfg has no rule for (also checked by Bridge at HEAD). Reported to the lead.
MISSING_RULES: dict[str, str] = {
    r"Megatron FSDP only supports fsdp_dtensor checkpoint format": (
        "Megatron FSDP (ddp/dist.use_megatron_fsdp) with checkpoint.save or .load set needs "
        "checkpoint.ckpt_format: fsdp_dtensor (0.3.1 config.py validate(); HEAD config.py ~1105 asserts the same)"
    ),
}

# packcfg error codes for checks Bridge 0.3.1's validate() does not make, with the reason each is still right.
EXTRAS: dict[str, str] = {
    "SC002": "Bridge does no type/range checks in validate(); a negative or non-integer value fails later",
    "SC003": "unknown keys of packcfg's own sections (launch, recipe): Bridge never sees them",
    "SC004": "YAML features that must not reach a job; Bridge's OmegaConf load may still accept some",
    "PK101": "two packing modes at once: HEAD validate() rejects it (config.py ~1276); 0.3.1 has no flag fields",
    "PK102": "enable_offline_packing without specs: HEAD rejects (config.py ~1278); 0.3.1 has no flag",
    "PK103": "packed_sequence_size 0 with packing on: 0.3.1 skips its MBS check instead; packing then fails in data prep",
    "PK112": "Energon micro-batch checks are HEAD-only (config.py ~1319)",
    "PK120": "Energon-native requirements are HEAD-only (config.py ~1330, energon.py)",
    "PK121": "Energon eval micro-batch check is HEAD-only",
    "PK130": "DPO packing needs TE (NeMo Aligner); Bridge's validate() has no DPO mode",
    "PK140": "THD needs TE attention: megatron-core's local DotProductAttention rejects packed batches at the first step",
    "CP202": "in-batch/HF-direct sequence alignment is HEAD-only (config.py ~1354)",
    "CP203": "Bridge never checks pad_seq_to_mult against CP/TP; a misaligned multiple truncates in the THD CP split",
    "CP205": "cp_comm_type consistency is checked at HEAD (config.py ~1665); 0.3.1 fails at model build",
    "DS702": "packing data prep: a sample cap above the pack size fails when packing",
    "DS703": "packing data prep: a non-integer pad_seq_to_mult fails when packing",
    "DS704": "packed data paths must be Parquet/npy: the packed dataset loader fails on JSONL",
    "DS705": "packing data prep",
    "DS706": "packing data prep: samples longer than a pack are dropped or fail",
    "LS303": "Megatron FSDP v2 with per-token loss: not checked by validate(); fails in training",
    "LS304": "Bridge does not check CE fusion under CP",
    "MF401": "model-family opt-outs are not in validate(): the family's step or dataset fails at run time",
    "MF402": "model-family opt-out, see MF401",
    "MF403": "model-family opt-out, see MF401",
    "MF404": "Qwen3-VL packs in its own step (defer_in_batch_packing_to_step, HEAD); not in validate()",
    "MF420": "P-Tuning with packing is unsupported in the dataset code, not checked by validate()",
    "CG501": "CUDA-graph padding rules: TE fails at capture or replay, validate() does not check",
    "CG502": "see CG501",
    "CG503": "see CG501",
    "CG504": "see CG501",
    "CG505": "see CG501 (MoE router capture with a padding mask)",
    "CG507": "cuda_graph_impl local with a partial scope: HEAD only supports it for full-iteration graphs",
    "PL602": "GBS divisibility: megatron's microbatch calculator asserts at start-up, not validate()",
    "PL604": "heads/query groups vs TP: megatron-core asserts when the attention layer is built",
    "PL605": "layers vs PP*VP: megatron-core asserts when the model is built",
    "PL606": "PP with variable-width packs fails in the pipeline schedule, not in validate()",
}

# (file, code) -> reason, for a code Bridge checks in general but not in this config's shape.
CASE_EXTRAS: dict[tuple[str, str], str] = {}

# Disagreements where Bridge 0.3.1 rejects and packcfg (following HEAD, rules.md rev 3) rightly does not.
VERSION_DIFFERENCES: dict[str, str] = {
    "PL603_sp_without_tp.yaml": (
        "megatron-core 0.16.1 rejects SP at TP 1; Bridge >= 0.4 turns SP off at TP 1 and ships such a recipe, "
        "so rules.md rev 3 made PL603 a warning"
    ),
}

# Known packcfg bugs the oracle found: strict xfail, so a fix makes the test fail until the entry is removed.
# (PL605 with account_for_embedding/loss_in_pipeline_split, found on llama31_405b and qwen3_235b_a22b, is fixed.)
PACKCFG_BUGS: dict[str, str] = {}

# (file, Bridge's code) -> reason, where packcfg reports the same rejection under another code (the root cause).
SAME_REJECTION: dict[tuple[str, str], str] = {
    ("SC002_bool_tp.yaml", "PL603"): (
        "tensor_model_parallel_size: true is SC002; Bridge reads it as TP 1 and then rejects SP at TP 1"
    ),
}

# case file -> why Bridge 0.3.1 cannot model it (the oracle skips it, saying so).
NOT_MODELLED: dict[str, str] = {
    "tiny_cpu_sft.yaml": "packcfg's own tiny CPU model: no Bridge recipe has its shape",
}


# --- Bridge 0.6.x ------------------------------------------------------------------------------------------
# Sources: r0.6.0 (0.6.1; the PyPI 0.6.2 wheel has the same checks) src/megatron/bridge/training/config.py
# ConfigContainer.validate() / _validate_packing_* (line numbers ~1150-1230), data/builders/gpt_sft.py
# GPTSFTDatasetConfig.validate() (~line 135), data/packing/config.py PackedSequenceSpecs.__post_init__.
BRIDGE_CODES_06: list[tuple[str, str | None]] = [
    (r"Micro batch size should be 1 when training with packed sequence", "PK110"),
    (r"micro_batch_size should be greater than 1 when using enable_in_batch_packing", "PK111"),
    (r"Sequence length must be divisible by 2 \* context parallel size", "CP201"),
    (r"When finetuning with CP>1, calculate_per_token_loss must be True", "LS301"),
    (r"When finetuning with CP>1, average_in_collective must be False", "LS302"),
    (r"ensure sequence length configuration in model config and\s*dataset config match", "DS701"),
    (r"world size \(\d+\) is not divisible by total_model_size", "PL601"),
    (r"PEFT requires a pretrained checkpoint path", "MF430"),
    (r"check_for_nan_in_loss must be disabled when using full_iteration CUDA graph", "CG506"),
    # checks 0.3.1 does not have
    (r"enable_offline_packing and enable_in_batch_packing are mutually exclusive", "PK101"),
    (r"offline_packing_specs must be set when enable_offline_packing=True", "PK102"),
    (r"enable_offline_packing must be True when offline_packing_specs is set", "PK102"),
    (r"offline_packing_specs\.packed_sequence_size must be greater than 0", "PK103"),
    (r"offline_packing_specs\.pad_cu_seqlens=True requires dataset pad_to_max_length=True", "CG501"),
    (r"Offline packing with CUDA graphs requires dataset pad_to_max_length=True", "CG502"),
    (r"Packed attention CUDA graphs require offline_packing_specs\.pad_cu_seqlens=True", "CG503"),
    (r"EnergonDatasetConfig\.micro_batch_size must match train\.micro_batch_size", "PK112"),
    (r"EnergonDatasetConfig\.micro_batch_size must match validation\.eval_micro_batch_size", "PK121"),
    (r"seq_length must be divisible by the CP/SP collate padding multiple", "CP202"),
    (r"Length of cp_comm_type \(\d+\) must equal num_layers", "CP205"),
    (r"max_single_sequence_length cannot exceed packed_sequence_size", "DS702"),
    (r"max_single_sequence_length must be a positive integer", "DS702"),
    (r"pad_seq_to_mult must be a positive integer", "DS703"),
    (
        r"eval_global_batch_size \(\d+\) must be divisible by\s*eval_micro_batch_size \* eval_data_parallel_size",
        "PL602",
    ),
    (r"hierarchical_context_parallel_sizes must be set when cp_comm_type contains 'a2a\+p2p'", "CP205"),
    (r'supports model\.cuda_graph_impl="local" only for full-iteration CUDA graphs', "CG507"),
    (r"Megatron-FSDP requires the fsdp_dtensor checkpointing format", None),
    (r"Exactly one text-only SFT source must be set: dataset_root or hf_dataset", None),
    (r"Hugging Face split and materialization settings require hf_dataset, not dataset_root", None),
]

MISSING_RULES_06: dict[str, str] = {
    r"Megatron-FSDP requires the fsdp_dtensor checkpointing format": MISSING_RULES[
        r"Megatron FSDP only supports fsdp_dtensor checkpoint format"
    ],
    # GPTSFTDatasetConfig.validate() (r0.6.0 data/builders/gpt_sft.py ~135): exactly one of dataset_root and
    # hf_dataset, and hf_validation_dataset/hf_test_dataset/hf_output_root/hf_validation_proportion/hf_rewrite
    # only with hf_dataset. An override file that sets dataset_root over a 0.6 recipe (which names an HF source)
    # fails with these; rules.md has no code for it. bridge_side.to_06 makes a case's dataset_root replace the
    # recipe's source, as the bridge engine's render must (issue 21, item 2).
    r"Exactly one text-only SFT source must be set: dataset_root or hf_dataset": (
        "dataset: both dataset_root and hf_dataset set (Bridge 0.6 GPTSFTDatasetConfig wants exactly one)"
    ),
    r"Hugging Face split and materialization settings require hf_dataset, not dataset_root": (
        "dataset: hf_validation_proportion/hf_*_dataset/hf_output_root/hf_rewrite set with dataset_root"
    ),
}

# The 0.3.1 extras, less the checks 0.6's validate() makes itself (those must agree with Bridge now), with the
# reasons that changed. Measured on 0.6.2 (tests/oracle, 2026-11-26): an override merged onto a recipe's
# PackedSequenceSpecs sets its fields with setattr, so PackedSequenceSpecs.__post_init__'s checks
# (max_single_sequence_length <= packed_sequence_size, pad_seq_to_mult > 0) do not run on it: Bridge kept
# `pad_seq_to_mult: '2'` (a string) and a max_single_sequence_length of 8192 over a 4096 pack.
CHECKED_BY_06 = {
    "PK101", "PK102", "PK103", "PK112", "PK121", "CP202", "CP205", "CG501", "CG502", "CG503", "CG507",
}  # fmt: skip
EXTRAS_06: dict[str, str] = {code: why for code, why in EXTRAS.items() if code not in CHECKED_BY_06}
EXTRAS_06.update(
    {
        "PK120": "Energon-native requirements: in Bridge main (067f987), not in 0.6's validate() or "
        "EnergonDatasetConfig.validate()",
        "PL603": "SP with TP 1: Bridge >= 0.4 turns SP off (TransformerConfig.finalize); rules.md rev 3 PL603",
        "DS702": "PackedSequenceSpecs.__post_init__ rejects a cap above the pack size when the specs are built, "
        "but not when an override sets the field on the recipe's specs (measured: validate() accepts 8192 over "
        "4096); packing then cannot place the longer samples",
        "DS703": "as DS702: an override sets pad_seq_to_mult without __post_init__ (measured: Bridge keeps the "
        "string '2'), and the packing arithmetic fails on it",
    }
)
CASE_EXTRAS_06: dict[tuple[str, str], str] = {
    ("PK101_offline_and_in_batch.yaml", "PK101"): (
        "over a GPT SFT recipe, Bridge 0.6 drops enable_in_batch_packing (GPTSFTDatasetConfig has no such field: "
        "process_config_with_overrides skips the key), so its validate() sees offline packing only; the config "
        "still asks for both modes, which 0.6 rejects wherever the dataset has the field (config.py ~1153)"
    ),
}
VERSION_DIFFERENCES_06: dict[str, str] = {}
PACKCFG_BUGS_06: dict[str, str] = {}
SAME_REJECTION_06: dict[tuple[str, str], str] = {}
NOT_MODELLED_06: dict[str, str] = dict(NOT_MODELLED)
# 0.6 recipe functions the oracle does not build, and why.
NOT_MODELLED_RECIPES_06: dict[str, str] = {
    "qwen3_next_80b_a3b_peft_config": "Bridge 0.6 raises NotImplementedError: PEFT is not supported for Qwen3-Next",
}


@dataclass(frozen=True)
class Expectations:
    bridge_codes: list[tuple[str, str | None]]
    missing_rules: dict[str, str]
    extras: dict[str, str]
    case_extras: dict[tuple[str, str], str]
    version_differences: dict[str, str]
    packcfg_bugs: dict[str, str]
    same_rejection: dict[tuple[str, str], str]
    not_modelled: dict[str, str]
    not_modelled_recipes: dict[str, str]


def for_line(line: str) -> Expectations:
    """The expectations for Bridge `line` ("0.3" for 0.3.1, "0.6" for 0.6.x)."""
    if line == "0.6":
        return Expectations(
            BRIDGE_CODES_06, MISSING_RULES_06, EXTRAS_06, CASE_EXTRAS_06, VERSION_DIFFERENCES_06,
            PACKCFG_BUGS_06, SAME_REJECTION_06, NOT_MODELLED_06, NOT_MODELLED_RECIPES_06,
        )  # fmt: skip
    return Expectations(
        BRIDGE_CODES, MISSING_RULES, EXTRAS, CASE_EXTRAS, VERSION_DIFFERENCES,
        PACKCFG_BUGS, SAME_REJECTION, NOT_MODELLED, {},
    )  # fmt: skip
