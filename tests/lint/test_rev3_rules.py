"""Rule catalogue revision 3: the rules that changed (SC002, PL603, LS304, CG505, PK120) and the new ones
(PK121, CG507), each checked against what Megatron Bridge itself accepts or rejects."""

from __future__ import annotations

import re

import pytest

from packcfg.core.diagnostics import Severity
from packcfg.lint.commands.explain import render as explain
from packcfg.lint.engine import lint_text
from packcfg.lint.rules import all_rules
from packcfg.lint.rules._examples import BASE, after, edit
from packcfg.lint.rules.cp import CP2
from packcfg.lint.rules.pk import ENERGON


def codes(text: str, **kw: object) -> list[str]:
    return [d.code for d in lint_text(text, **kw)]


def found(text: str, code: str) -> list:
    return [d for d in lint_text(text) if d.code == code]


# --- SC002: 0 is "off" where Bridge treats it so ---------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        BASE + "validation:\n  eval_interval: 0\n",
        BASE + "checkpoint:\n  save: /tmp/ckpt\n  save_interval: 0\n",
        edit(("  global_batch_size: 128\n", "  global_batch_size: 128\n  exit_interval: 0\n")),
    ],
    ids=["eval_interval", "save_interval", "exit_interval"],
)
def test_zero_interval_that_bridge_treats_as_off_is_valid(text: str) -> None:
    assert "SC002" not in codes(text)


def test_negative_interval_is_still_sc002() -> None:
    assert "SC002" in codes(BASE + "validation:\n  eval_interval: -1\n")


# --- PL603: advice, in Bridge's words ---------------------------------------------------------------------


def test_pl603_is_info_and_names_finalize() -> None:
    (d,) = found(after("  calculate_per_token_loss: true", "  sequence_parallel: true\n"), "PL603")
    assert d.severity is Severity.INFO
    assert "finalize()" in d.message and "off" in d.message
    assert all_rules()["PL603"].severity is Severity.INFO


# --- LS304: info, packed fine-tuning with CP only ---------------------------------------------------------

CP2_FUSED = edit(("  cross_entropy_loss_fusion: false\n", "  cross_entropy_loss_fusion: true\n"), base=CP2)
CP2_PAD = edit(
    ("    packed_sequence_size: 4096\n", "    packed_sequence_size: 4096\n    pad_seq_to_mult: 4\n")
)


def test_ls304_is_info_on_packed_finetuning_with_cp() -> None:
    text = edit(
        ("    packed_sequence_size: 4096\n", "    packed_sequence_size: 4096\n    pad_seq_to_mult: 4\n"),
        base=CP2_FUSED,
    )
    (d,) = found(text, "LS304")
    assert d.severity is Severity.INFO


PRETRAIN_CP = """\
model:
  _target_: megatron.bridge.models.llama.llama_provider.Llama3ModelProvider8B
  seq_length: 8192
  context_parallel_size: 2
dataset:
  _target_: megatron.bridge.training.config.GPTDatasetConfig
  seq_length: 8192
train:
  micro_batch_size: 1
  global_batch_size: 128
"""


def test_ls304_never_on_pretraining() -> None:
    assert "LS304" not in codes(PRETRAIN_CP)
    assert "LS304" not in codes(
        PRETRAIN_CP.replace(
            "  context_parallel_size: 2\n", "  context_parallel_size: 2\n  cross_entropy_loss_fusion: true\n"
        )
    )


def test_ls304_not_without_packing() -> None:
    unpacked = edit(
        ("  enable_offline_packing: true\n  offline_packing_specs:\n    packed_sequence_size: 4096\n", ""),
        base=CP2_FUSED,
    )
    assert "LS304" not in codes(unpacked)


# --- PK120: what counts as Energon-native, and the new requirements ----------------------------------------

DIFFUSION = """\
model:
  _target_: megatron.bridge.diffusion.models.wan.wan_provider.WanModelProvider
  seq_length: 1024
  context_parallel_size: 8
dataset:
  _target_: megatron.bridge.diffusion.data.wan.wan_energon_datamodule.WanDatasetConfig
  seq_length: 1024
  packing_buffer_size: 200
  micro_batch_size: 1
train:
  micro_batch_size: 1
  global_batch_size: 4
"""


def test_diffusion_provider_with_packing_buffer_is_not_energon_native() -> None:
    got = codes(DIFFUSION)
    assert not {"PK120", "PK101", "PK112", "PK121"} & set(got), got


def test_energon_without_target_is_recognised_by_task_encoder() -> None:
    text = ENERGON.replace("  _target_: megatron.bridge.data.builders.energon.EnergonDatasetConfig\n", "")
    text = text.replace("  calculate_per_token_loss: true\n", "  calculate_per_token_loss: false\n")
    assert "PK120" in codes(text)


def test_pk120_mtp_and_vision_graphs_one_diagnostic_each() -> None:
    text = after(
        "  calculate_per_token_loss: true",
        "  mtp_num_layers: 2\n  vision_cuda_graph_impl: transformer_engine\n",
        base=ENERGON,
    )
    messages = [d.message for d in found(text, "PK120")]
    assert len(messages) == 2, messages
    assert any("multi-token prediction" in m for m in messages)
    assert any("vision CUDA graphs" in m for m in messages)


def test_pk120_quiet_for_mtp_zero_and_vision_none() -> None:
    text = after(
        "  calculate_per_token_loss: true",
        "  mtp_num_layers: 0\n  vision_cuda_graph_impl: none\n",
        base=ENERGON,
    )
    assert "PK120" not in codes(text)


def test_pk120_dist_train_as_bridge_spells_it() -> None:
    text = after(
        "  calculate_per_token_loss: true", "  dist_train:\n    use_dist_train: true\n", base=ENERGON
    )
    assert any("DistTrain" in d.message for d in found(text, "PK120"))


# --- PK121 ---------------------------------------------------------------------------------------------------


def test_pk121_energon_eval_micro_batch_mismatch() -> None:
    (d,) = found(ENERGON + "validation:\n  eval_micro_batch_size: 4\n", "PK121")
    assert "4" in d.message and "1" in d.message
    assert d.severity is Severity.ERROR


def test_pk121_quiet_when_unset_equal_or_no_validation() -> None:
    assert "PK121" not in codes(ENERGON)
    assert "PK121" not in codes(ENERGON + "validation:\n  eval_micro_batch_size: 1\n")
    no_val = after(
        "  micro_batch_size: 1\n  packing_buffer_size: 64", "  do_validation: false\n", base=ENERGON
    )
    assert "PK121" not in codes(no_val + "validation:\n  eval_micro_batch_size: 4\n")


def test_pk121_not_for_other_datasets() -> None:
    assert "PK121" not in codes(BASE + "validation:\n  eval_micro_batch_size: 4\n")


# --- CG505: offline packing always has a padding mask ------------------------------------------------------

MOE = edit(
    ("  family: llama\n", "  family: qwen3_moe\n"),
    (
        "  _target_: megatron.bridge.models.llama.llama_provider.Llama3ModelProvider8B\n",
        "  _target_: megatron.bridge.models.qwen.qwen_provider.Qwen3MoEModelProvider30B_A3B\n",
    ),
)


@pytest.mark.parametrize("mult", [None, 1, 8])
def test_cg505_whatever_pad_seq_to_mult(mult: int | None) -> None:
    base = MOE
    if mult is not None:
        base = edit(
            (
                "    packed_sequence_size: 4096\n",
                f"    packed_sequence_size: 4096\n    pad_seq_to_mult: {mult}\n",
            ),
            base=MOE,
        )
    text = after(
        "  calculate_per_token_loss: true",
        "  cuda_graph_impl: transformer_engine\n  cuda_graph_scope:\n  - moe_router\n",
        base=base,
    )
    assert "CG505" in codes(text)


@pytest.mark.parametrize(
    "scope,fires", [("[moe]", True), ("[moe_preprocess]", True), ("[attn]", False), ("[mlp]", False)]
)
def test_cg505_router_capturing_scopes(scope: str, fires: bool) -> None:
    text = after(
        "  calculate_per_token_loss: true",
        f"  cuda_graph_impl: transformer_engine\n  cuda_graph_scope: {scope}\n",
        base=MOE,
    )
    assert ("CG505" in codes(text)) is fires


def test_cg505_not_for_dense_models() -> None:
    text = after(
        "  calculate_per_token_loss: true",
        "  cuda_graph_impl: transformer_engine\n  cuda_graph_scope: [moe_router]\n",
    )
    assert "CG505" not in codes(text)


# --- CG507 -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "lines,fires",
    [
        ("  cuda_graph_impl: local\n  cuda_graph_scope: [attn]\n", True),
        ("  cuda_graph_impl: local\n", True),
        ("  cuda_graph_impl: local\n  cuda_graph_scope: [full_iteration]\n", False),
        ("  cuda_graph_impl: local\n  cuda_graph_modules: full_iteration\n", False),
        ("  cuda_graph_impl: local\n  inference_cuda_graph_scope: layer\n", False),
        ("  cuda_graph_impl: full_iteration\n", False),
        ("  cuda_graph_impl: transformer_engine\n  cuda_graph_scope: [attn]\n", False),
        ("  cuda_graph_impl: none\n", False),
    ],
)
def test_cg507_local_only_for_full_iteration(lines: str, fires: bool) -> None:
    text = after("  calculate_per_token_loss: true", lines)
    assert ("CG507" in codes(text)) is fires


# --- docs speak in the project's terms ---------------------------------------------------------------------


@pytest.mark.parametrize("code", sorted(all_rules()))
def test_sources_name_where_the_rule_comes_from(code: str) -> None:
    docs = all_rules()[code].docs
    for text in (docs.source, docs.what, docs.why):
        assert "seed" not in text.lower(), (code, text)
        assert "pitfall" not in text.lower(), (code, text)
    if "Bridge" in docs.source:  # a Bridge file is cited with the version it was read at
        assert re.search(r"main [0-9a-f]{7}|v\d+\.\d+", docs.source), (code, docs.source)


def test_explain_prints_bridge_source_with_version() -> None:
    text = explain("PK110")
    assert text is not None
    assert "seed" not in text.lower()
    assert "Megatron Bridge training/config.py" in text and "main 067f987" in text


def test_sc003_did_you_mean_once() -> None:
    from packcfg.lint.reporters.text import render

    diagnostics = lint_text(edit(("  micro_batch_size: 1\n", "  micro_batch_sise: 1\n")))
    out = render(diagnostics, ["x.yaml"])
    assert out.count("did you mean") == 1, out


PIPELINE_SPLIT = """\
model:
  num_layers: {layers}
  pipeline_model_parallel_size: {pp}
  account_for_embedding_in_pipeline_split: {emb}
  account_for_loss_in_pipeline_split: {loss}
"""


@pytest.mark.parametrize(
    ("layers", "pp", "emb", "loss", "fires"),
    [
        (126, 16, "true", "true", False),  # Bridge's llama31_405b recipe: 126 + 2 = 128 over PP 16
        (94, 16, "true", "true", False),  # Bridge's qwen3_235b_a22b recipe: 94 + 2 = 96 over PP 16
        (127, 16, "true", "false", False),
        (128, 16, "true", "true", True),  # 130 over PP 16
        (128, 16, "false", "false", False),
        (126, 16, "false", "false", True),
    ],
)
def test_pl605_counts_embedding_and_loss_in_the_pipeline_split(
    layers: int, pp: int, emb: str, loss: str, fires: bool
) -> None:
    text = PIPELINE_SPLIT.format(layers=layers, pp=pp, emb=emb, loss=loss)
    assert ("PL605" in codes(text)) is fires


def test_pk150_not_on_yarn_rope_that_bridge_keeps_unfused() -> None:
    base = after("  calculate_per_token_loss: true", "  apply_rope_fusion: false\n")
    assert "PK150" in codes(base)
    yarn = after(
        "  calculate_per_token_loss: true", "  apply_rope_fusion: false\n  position_embedding_type: yarn\n"
    )
    assert "PK150" not in codes(yarn)


def test_pk110_with_gbs_not_a_multiple_never_writes_a_fraction() -> None:
    text = edit(("  micro_batch_size: 1\n", "  micro_batch_size: 3\n"))
    (pk110,) = found(text, "PK110")
    assert pk110.fix is None
    assert "/" not in pk110.message and "no exact packed equivalent" in pk110.message
    assert "126 (packed: 42) or 129 (packed: 43)" in (pk110.hint or "")
