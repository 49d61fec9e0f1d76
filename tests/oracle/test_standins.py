"""The CPU stand-ins (scripts/bridge_data/cpu_env.py) change only what a GPU node would show Bridge, and the
shipped base-recipe snapshots are what the generator writes from this installation."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from bridge_side import LINE

REPO = Path(__file__).resolve().parents[2]
SNAPSHOTS = REPO / "packcfg" / "data" / "bridge_recipes"


def test_te_standin_answers_only_the_imports_bridge_makes(bridge):
    te = sys.modules["transformer_engine"]
    assert te.__version__ == bridge.cpu_env.TE_VERSION
    import transformer_engine.pytorch as tep

    assert tep.Linear is not tep.LayerNormLinear
    with pytest.raises(RuntimeError):
        tep.Linear(4, 4)  # a placeholder, never a working layer
    # Anything else is absent, so guarded imports elsewhere keep their no-TE branch.
    with pytest.raises(ImportError):
        from transformer_engine.pytorch import DotProductAttention  # noqa: F401
    with pytest.raises(ImportError):
        import transformer_engine.pytorch.attention  # noqa: F401


def test_megatron_core_module_flags_still_say_no_te(bridge):
    """megatron-core was imported before the stand-in: its kernels and layer specs see this machine as it is."""
    from megatron.core.models.gpt import gpt_layer_specs
    from megatron.core.transformer.moe import moe_utils

    assert moe_utils.HAVE_TE is False
    assert gpt_layer_specs.HAVE_TE is False
    te_ext = sys.modules.get("megatron.core.extensions.transformer_engine")
    assert te_ext is None or te_ext.HAVE_TE is False


def test_version_probes_report_a_gpu_node(bridge):
    from megatron.core.models.common.embeddings import rope_utils
    from megatron.core.utils import get_te_version, is_te_min_version

    assert str(get_te_version()) == bridge.cpu_env.TE_VERSION
    assert is_te_min_version("2.3.0") and not is_te_min_version("2.13.0")
    with pytest.raises(RuntimeError):
        rope_utils.fused_apply_rotary_pos_emb_thd(None, None)  # exists for the config check, never runs


def test_recipe_with_offline_packing_rejects_mbs2_and_accepts_mbs1(bridge, tmp_path):
    """The oracle discriminates: Bridge's own packed-sequence MBS check fires through the stand-ins."""
    bad = tmp_path / "mbs2.yaml"
    bad.write_text("train:\n  micro_batch_size: 2\n")
    verdict = bridge.verdict("llama32_1b_sft_config", bad, {})
    assert (
        verdict.rejected
        and "Micro batch size should be 1 when training with packed sequence" in verdict.message
    )
    good = tmp_path / "mbs1.yaml"
    good.write_text("train:\n  micro_batch_size: 1\n")
    assert not bridge.verdict("llama32_1b_sft_config", good, {}).rejected


def test_parallel_layout_is_checked_at_the_launch_world_size(bridge, tmp_path):
    over = tmp_path / "tp2.yaml"
    over.write_text("model:\n  tensor_model_parallel_size: 2\n")
    assert (
        bridge.verdict("llama32_1b_sft_config", over, {"launch": {"nodes": 1, "gpus_per_node": 8}}).rejected
        is False
    )
    verdict = bridge.verdict("llama32_1b_sft_config", over, {"launch": {"nodes": 1, "gpus_per_node": 3}})
    assert verdict.rejected and "not divisible" in verdict.message


def test_grad_accumulation_fusion_defaults_as_on_a_gpu_node(bridge):
    """Without the Apex stand-in Bridge turns the fusion off and rejects llama31_405b for it."""
    cfg = bridge.gen.build(bridge.gen.resolve(bridge.index["llama31_405b_sft_config"]["function"]))
    assert cfg.model.gradient_accumulation_fusion is True
    assert bridge.gen.validate_at(cfg, bridge.gen.min_world(cfg)) is None


@pytest.mark.skipif(os.environ.get("PACKCFG_ORACLE_SNAPSHOTS") == "0", reason="snapshot check disabled")
@pytest.mark.skipif(LINE != "0.3", reason="the shipped snapshots are Bridge 0.3.1's")
def test_snapshots_match_the_generator(bridge, tmp_path):
    """packcfg/data/bridge_recipes is exactly what scripts/gen_bridge_recipes.py writes from this installation."""
    index = json.loads((SNAPSHOTS / "index.json").read_text())
    fresh_index = bridge.gen.generate(tmp_path)
    assert fresh_index["megatron_bridge"] == index["megatron_bridge"] == bridge.cpu_env.BRIDGE_VERSION
    assert fresh_index["megatron_core"] == index["megatron_core"] == bridge.cpu_env.CORE_VERSION
    assert fresh_index == index, (
        "index.json is stale: run .venv-oracle/bin/python scripts/gen_bridge_recipes.py"
    )
    stale = [
        entry["file"]
        for entry in index["recipes"].values()
        if (tmp_path / entry["file"]).read_text() != (SNAPSHOTS / entry["file"]).read_text()
    ]
    assert not stale, f"stale snapshots (regenerate with scripts/gen_bridge_recipes.py): {stale}"
    shipped = {p.name for p in SNAPSHOTS.glob("*.yaml")}
    assert shipped == {e["file"] for e in index["recipes"].values()}, "snapshot files not in index.json"
