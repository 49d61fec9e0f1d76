"""The plan's parameter, gradient and optimizer-state counts equal the executor's real megatron-core model.

TP 1 in this process (the big shapes on the meta device: no memory, exact counts); TP 2 and PP 2 per rank
under torchrun (megatron splits the vocabulary and the column/row-parallel weights by TP, the layers by PP,
and keeps a copy of a tied embedding on the last stage).
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from packcfg.core.config import load_config
from packcfg.plan.estimate import Layout, Precision, memory
from packcfg.plan.search import precision_of
from packcfg.plan.shape import shape_from_config

pytest.importorskip("torch")
pytest.importorskip("megatron.core")

REPO = Path(__file__).resolve().parents[2]
VOCAB = "++model.vocab_size=128256"  # Llama 3's; the 8B/70B recipes take the shape from the HF id
ONE_B = "++recipe.base=llama32_1b_sft_config"  # Bridge's Llama 3.2 1B recipe: 16 x 2048, GQA 32/8, tied
CASES = {
    "tiny_cpu_sft": ("recipes/tiny_cpu_sft.yaml", []),
    "tiny_cpu_dpo": ("recipes/tiny_cpu_dpo.yaml", []),
    "tiny_cpu_sft_bf16": ("recipes/tiny_cpu_sft.yaml", ["model.bf16=true"]),
    "llama3_8b": ("recipes/llama3_8b_packed_sft.yaml", [VOCAB]),
    "llama3_70b": ("recipes/llama3_70b_packed_sft_cp2.yaml", [VOCAB]),
    "llama32_1b_tied": ("recipes/llama32_1b_sft_bridge.yaml", [ONE_B]),
    "llama32_1b_untied": (
        "recipes/llama32_1b_sft_bridge.yaml",
        [ONE_B, "model.share_embeddings_and_output_weights=false"],
    ),
}
REAL = {"tiny_cpu_sft", "tiny_cpu_dpo", "tiny_cpu_sft_bf16"}  # built for real, with an optimizer step


def _plan_counts(config: str, overrides: list[str], tp: int = 1, pp: int = 1) -> tuple[object, dict]:
    cfg = load_config([REPO / config], overrides)
    shape = shape_from_config(cfg)
    precision = Precision(**{**precision_of(cfg).__dict__, "distributed_optimizer": False})
    layout = Layout(tp=tp, cp=1, pp=pp, dp=1, pack_size=512, pad_seq_to_mult=1, global_batch_size=1)
    return shape, memory(shape, layout, precision)[1]


@pytest.mark.parametrize("name", sorted(CASES))
def test_counts_equal_the_executor_model_at_tp1(name: str) -> None:
    from tests.plan.executor_counts import executor_counts

    config, overrides = CASES[name]
    real = executor_counts(str(REPO / config), overrides, optimizer=name in REAL)
    shape, counts = _plan_counts(config, overrides)
    assert shape.total_params() == real["params"]
    assert counts["params"] == real["params"]
    assert counts["grads"] == real["grads"]
    if "optimizer_states" in real:  # Adam's two moments (+ the fp32 master copy under bf16)
        assert counts["optimizer_states"] == real["optimizer_states"]


def test_known_sizes() -> None:
    """Published sizes: Llama 3 8B 8.03 B, 70B 70.55 B, Llama 3.2 1B 1.24 B parameters."""
    assert _plan_counts(*CASES["llama3_8b"])[0].total_params() == 8_030_261_248
    assert _plan_counts(*CASES["llama3_70b"])[0].total_params() == 70_553_706_496
    assert _plan_counts(*CASES["llama32_1b_tied"])[0].total_params() == 1_235_814_400


@pytest.mark.skipif(importlib.util.find_spec("transformers") is None, reason="needs transformers")
@pytest.mark.parametrize("family", ["llama", "qwen3"])
def test_counts_of_the_hf_recipe(tmp_path: Path, family: str) -> None:
    """recipes/tiny_hf_sft.yaml takes its shape from the HF folder (the Qwen3 one has q/k norms)."""
    from tests.plan.executor_counts import executor_counts

    subprocess.run(
        [sys.executable, "scripts/make_tiny_hf_model.py", "--out", str(tmp_path), "--family", family],
        cwd=REPO,
        check=True,
        capture_output=True,
    )
    overrides = [f"model.hf_path={tmp_path / family}"]
    real = executor_counts(str(REPO / "recipes/tiny_hf_sft.yaml"), overrides, optimizer=True)
    shape, counts = _plan_counts("recipes/tiny_hf_sft.yaml", overrides)
    assert shape.qk_layernorm == (family == "qwen3")
    assert (counts["params"], counts["grads"], counts["optimizer_states"]) == (
        real["params"],
        real["grads"],
        real["optimizer_states"],
    )


@pytest.mark.torchrun
@pytest.mark.slow
def test_counts_per_rank_under_tp2_and_pp2(tmp_path: Path) -> None:
    from tests.train.cases import run_torchrun

    names = ["tiny_cpu_sft", "llama3_8b", "llama32_1b_tied", "llama32_1b_untied"]
    cases = [
        {"name": n, "config": str(REPO / CASES[n][0]), "overrides": CASES[n][1], "tp": tp, "pp": pp}
        for n in names
        for tp, pp in ((2, 1), (1, 2))
    ]
    (tmp_path / "cases.json").write_text(json.dumps(cases))
    out = tmp_path / "out.json"
    run_torchrun(["tests/plan/executor_counts.py", str(tmp_path / "cases.json"), str(out)], nproc=2)
    for case, ranks in zip(cases, json.loads(out.read_text()), strict=True):
        shape, counts = _plan_counts(case["config"], case["overrides"], case["tp"], case["pp"])
        for rank in ranks:
            want = shape.stage_params(case["tp"], case["pp"], rank["pp_rank"])
            assert (rank["params"], rank["grads"]) == (want, want), (
                case["name"],
                case["tp"],
                case["pp"],
                rank,
            )
        assert counts["params"] == max(r["params"] for r in ranks)
