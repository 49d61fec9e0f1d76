"""Real Megatron Bridge configs lint without false errors, and Bridge's own rejections are reported.

tests/bridge_corpus/verbatim/: override / conf files copied unchanged from Bridge's repository (examples, tutorials),
each with a header naming the repository path, the commit and the sha256 of the unchanged part.
tests/bridge_corpus/recipes/: faithful YAML translations of Bridge recipe functions (Bridge 0.6.2, the pinned
snapshot of the field table), each citing the function and its lines.

1. Every corpus file lints with no error-severity finding (Bridge loads and validates all of them).
2. MUTATIONS: single changes Bridge's `ConfigContainer.validate()` rejects (Bridge 0.6.2,
   megatron/bridge/training/config.py unless noted), each reported with the code given.
3. ACCEPTED: changes Bridge accepts; they must not draw an error either.
A mutation is a small YAML merged over the corpus file (`lint_file(..., config_files=[...])`).
"""

from __future__ import annotations

import hashlib
import re
import textwrap
from pathlib import Path

import pytest

from packcfg import lint_file

CORPUS = Path(__file__).resolve().parents[1] / "bridge_corpus"
VERBATIM = sorted((CORPUS / "verbatim").glob("*.yaml"))
RECIPES = sorted((CORPUS / "recipes").glob("*.yaml"))
ALL = VERBATIM + RECIPES


def _errors(diags: list) -> list[str]:
    return [
        f"{d.code} {Path(d.file).name}:{d.line} {d.message}"
        for d in diags
        if str(getattr(d.severity, "value", d.severity)) == "error"
    ]


def test_corpus_is_there() -> None:
    assert len(VERBATIM) >= 10 and len(RECIPES) >= 6


@pytest.mark.parametrize("path", ALL, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_real_bridge_config_lints_without_errors(path: Path) -> None:
    assert _errors(lint_file(path)) == []


@pytest.mark.parametrize("path", VERBATIM, ids=lambda p: p.name)
def test_verbatim_files_are_unchanged(path: Path) -> None:
    raw = path.read_bytes()
    lines = raw.split(b"\n", 3)
    assert lines[0].startswith(b"# Verbatim from github.com/NVIDIA-NeMo/Megatron-Bridge ")
    assert re.match(rb"# at commit [0-9a-f]{40} \(", lines[1])
    digest = re.match(rb"# sha256 of everything below this header: ([0-9a-f]{64})$", lines[2])
    assert digest, "third header line names the sha256 of the unchanged part"
    assert hashlib.sha256(lines[3]).hexdigest() == digest.group(1).decode()


@pytest.mark.parametrize("path", RECIPES, ids=lambda p: p.name)
def test_translations_cite_their_recipe_function(path: Path) -> None:
    head = path.read_text(encoding="utf-8").split("\n", 2)
    assert re.match(r"# Translation of megatron\.bridge\.recipes\.[\w.]+_config$", head[0])
    assert re.search(r"Megatron Bridge \d+\.\d+\.\d+ wheel, recipes/[\w/]+\.py:\d+-\d+", head[1] + head[2])


# (corpus file, mutation merged on top, code expected, where Bridge rejects it)
MUTATIONS: list[tuple[str, str, str, str]] = [
    # offline packed SFT (_sft_common + default_squad_config)
    (
        "recipes/llama3_8b_sft_2gpu_h100_bf16.yaml",
        "train: {micro_batch_size: 2}",
        "PK110",
        "config.py:1466-1477",
    ),
    (
        "recipes/llama3_8b_sft_2gpu_h100_bf16.yaml",
        "dataset: {enable_in_batch_packing: true}",
        "PK101",
        "config.py:1155-1156",
    ),
    (
        "recipes/llama3_8b_sft_2gpu_h100_bf16.yaml",
        "dataset: {offline_packing_specs: {packed_sequence_size: 0}}",
        "PK103",
        "config.py:1463-1464",
    ),
    (
        "recipes/llama3_8b_sft_2gpu_h100_bf16.yaml",
        "dataset: {enable_offline_packing: false}",
        "PK102",
        "config.py:1159-1160",
    ),
    (
        "recipes/llama3_8b_sft_2gpu_h100_bf16.yaml",
        "dataset: {seq_length: 2048}",
        "DS701",
        "config.py:1505-1509",
    ),
    (
        "recipes/llama3_8b_sft_2gpu_h100_bf16.yaml",
        "model: {cuda_graph_impl: transformer_engine}",
        "CG503",
        "config.py:1181-1188 (scope full = whole layer)",
    ),
    (
        "recipes/llama3_8b_sft_2gpu_h100_bf16.yaml",
        "dataset: {dataset_kwargs: {pad_to_max_length: false}}\nmodel: {cuda_graph_impl: transformer_engine, cuda_graph_scope: [mlp]}",
        "CG502",
        "config.py:1176-1179",
    ),
    (
        "recipes/llama32_1b_sft_1gpu_h100_bf16.yaml",
        "dataset: {offline_packing_specs: {pad_cu_seqlens: true}, dataset_kwargs: {pad_to_max_length: false}}",
        "CG501",
        "config.py:1169-1170",
    ),
    (
        "recipes/llama32_1b_sft_1gpu_h100_bf16.yaml",
        "model: {cuda_graph_impl: local}",
        "CG507",
        "utils/cuda_graph.py:146-149 (validate_cuda_graph_configuration, config.py:1374)",
    ),
    (
        "recipes/llama32_1b_sft_1gpu_h100_bf16.yaml",
        "model: {cuda_graph_impl: local, cuda_graph_scope: full_iteration}\ndataset: {offline_packing_specs: {pad_cu_seqlens: true, packed_metadata_path: /d/m.json}}",
        "CG506",
        "config.py:1369-1373",
    ),
    (
        "recipes/gpt_oss_20b_sft_8gpu_h100_bf16.yaml",
        "train: {micro_batch_size: 4}",
        "PK110",
        "config.py:1466-1477",
    ),
    # CP fine-tuning (Qwen3 8B 32k: CP 2, SP, TP 4)
    (
        "recipes/qwen3_8b_sft_8gpu_h100_bf16_32k.yaml",
        "model: {calculate_per_token_loss: false}",
        "LS301",
        "config.py:1452-1454",
    ),
    (
        "recipes/qwen3_8b_sft_8gpu_h100_bf16_32k.yaml",
        "ddp: {average_in_collective: true}",
        "LS302",
        "config.py:1455-1457",
    ),
    (
        "recipes/qwen3_8b_sft_8gpu_h100_bf16_32k.yaml",
        "model: {num_layers: 36, cp_comm_type: [a2a, p2p]}",
        "CP205",
        "config.py:1532-1536",
    ),
    (
        "recipes/qwen3_8b_sft_8gpu_h100_bf16_32k.yaml",
        "model: {cp_comm_type: a2a+p2p}",
        "CP205",
        "config.py:1543-1546",
    ),
    (
        "recipes/nemotron_nano_9b_v2_sft_2gpu_h100_bf16.yaml",
        "model: {context_parallel_size: 2}",
        "LS301",
        "config.py:1452-1454",
    ),
    # CP pretraining (Llama 3 8B 16k: TP 4, PP 2, CP 2)
    (
        "recipes/llama3_8b_pretrain_16gpu_h100_bf16_16k.yaml",
        "model: {seq_length: 16386}\ndataset: {seq_length: 16386}",
        "CP201",
        "config.py:1435-1438",
    ),
    (
        "recipes/llama3_8b_pretrain_16gpu_h100_bf16_16k.yaml",
        "dataset: {seq_length: 8192}",
        "DS701",
        "config.py:1505-1509",
    ),
    # in-batch VLM SFT (direct HF)
    (
        "recipes/qwen25_vl_3b_sft_1gpu_h100_bf16.yaml",
        "train: {micro_batch_size: 1}",
        "PK111",
        "config.py:1480-1482",
    ),
    (
        "recipes/qwen25_vl_3b_sft_1gpu_h100_bf16.yaml",
        "model: {context_parallel_size: 2, calculate_per_token_loss: true, seq_length: 4094}\n"
        "dataset: {seq_length: 4094}\nddp: {average_in_collective: false}",
        "CP202",
        "config.py:1216-1231",
    ),
    # Energon VLM PEFT
    (
        "recipes/qwen3_vl_8b_peft_1gpu_h100_bf16_energon.yaml",
        "dataset: {micro_batch_size: 1}",
        "PK112",
        "config.py:1198-1204",
    ),
    (
        "recipes/qwen3_vl_8b_peft_1gpu_h100_bf16_energon.yaml",
        "validation: {eval_micro_batch_size: 4}",
        "PK121",
        "config.py:1305-1312",
    ),
    (
        "recipes/qwen3_vl_8b_peft_1gpu_h100_bf16_energon.yaml",
        "checkpoint: {pretrained_checkpoint: null}",
        "MF430",
        "config.py:1487-1488",
    ),
    # verbatim override files, standalone
    (
        "verbatim/qwen25_vl_pretrain_override_example__main.yaml",
        "model: {seq_length: 8192}",
        "DS701",
        "config.py:1505-1509",
    ),
    (
        "verbatim/llama32_1b_pretrain__main.yaml",
        "dataset: {seq_length: 2048}",
        "DS701",
        "config.py:1505-1509",
    ),
    (
        "verbatim/quantized_llama3_8b_pretrain_override_example__main.yaml",
        "model: {context_parallel_size: 2, seq_length: 4098}\ndataset: {seq_length: 4098}",
        "CP201",
        "config.py:1435-1438",
    ),
    (
        "verbatim/qwen3_vl_pretrain_override_example__main.yaml",
        "model: {context_parallel_size: 2, cp_comm_type: a2a+p2p}",
        "CP205",
        "config.py:1543-1546",
    ),
    (
        "verbatim/wan_gb200_perf_pretrain_mock__v040.yaml",
        "model: {seq_length: 2050}",
        "DS701",
        "config.py:1505-1509",
    ),
]

# Changes Bridge accepts (and the reason): no error may be reported.
ACCEPTED: list[tuple[str, str, str]] = [
    (
        "recipes/llama3_8b_sft_2gpu_h100_bf16.yaml",
        "validation: {eval_interval: 0}",
        "0 disables periodic evaluation",
    ),
    (
        "recipes/llama3_8b_sft_2gpu_h100_bf16.yaml",
        "checkpoint: {save_interval: 0}",
        "0 disables periodic saves",
    ),
    (
        "recipes/llama32_1b_sft_1gpu_h100_bf16.yaml",
        "model: {sequence_parallel: true}",
        "TransformerConfig turns SP off at TP 1",
    ),
    (
        "recipes/llama32_1b_sft_1gpu_h100_bf16.yaml",
        "optimizer: {lr: 1e-5, min_lr: 5e-7}",
        "OmegaConf reads 1e-5 as a float",
    ),
    (
        "recipes/llama3_8b_pretrain_16gpu_h100_bf16_16k.yaml",
        "train: {num_epochs: null}",
        "a current TrainingConfig field",
    ),
    ("verbatim/llama32_1b_finetune__main.yaml", "", "an empty override file is a no-op"),
    (
        "verbatim/llama32_1b_finetune__main.yaml",
        "# only a comment\n",
        "a comment-only override file is a no-op",
    ),
]


def _merge(tmp_path: Path, rel: str, mutation: str) -> list:
    extra = tmp_path / "mutation.yaml"
    extra.write_text(textwrap.dedent(mutation), encoding="utf-8")
    return lint_file(CORPUS / rel, config_files=[extra])


@pytest.mark.parametrize(("rel", "mutation", "code", "source"), MUTATIONS, ids=lambda v: str(v)[:60])
def test_mutation_bridge_rejects_is_reported(
    tmp_path: Path, rel: str, mutation: str, code: str, source: str
) -> None:
    diags = _merge(tmp_path, rel, mutation)
    found = {d.code for d in diags if str(getattr(d.severity, "value", d.severity)) == "error"}
    assert code in found, f"Bridge rejects this ({source}); packcfg reported errors {sorted(found)}"


@pytest.mark.parametrize(("rel", "mutation", "why"), ACCEPTED, ids=lambda v: str(v)[:60])
def test_change_bridge_accepts_draws_no_error(tmp_path: Path, rel: str, mutation: str, why: str) -> None:
    assert _errors(_merge(tmp_path, rel, mutation)) == [], why
