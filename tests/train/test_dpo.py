"""DPO on packed pairs computes what DPO on unpacked pairs computes (issue 15, DPO half).

Each comparison goes through `equivalence.compare` (loss within 1e-5, every gradient within 1e-4
relative, fp32); each has a control with a bug injected (tests/train/faults.py) that `compare` must catch.
"""

from __future__ import annotations

import pytest
import torch

from packcfg.train.dpo import (
    dpo_forward_backward,
    pack_pairs,
    pair_losses,
    reference_logps,
    unpacked_pairs,
)
from packcfg.train.equivalence import LossAndGrads, compare, full_gradients, load_results
from packcfg.train.settings import DpoSettings

from .cases import pair_packs, run_dpo_case, run_torchrun, synthetic_pairs
from .devices import skip_unless_one_gpu_per_rank
from .faults import NO_FAULTS, Faults, injected

PAIRS = synthetic_pairs(8, seed=2)


@pytest.fixture(scope="module")
def reference_model(tiny_world):
    """A reference model that differs from the policy (another seed), so rewards are not all zero."""
    from packcfg.train.model import build_model

    _, settings = tiny_world
    return build_model(settings.model, settings.seed + 1)


def _run(model, reference, batches, settings: DpoSettings, faults: Faults = NO_FAULTS) -> LossAndGrads:
    refs = reference_logps(reference, batches)
    model.zero_grad(set_to_none=False)
    with injected(faults):
        step = dpo_forward_backward(model, batches, refs, settings)
    return LossAndGrads(loss=step.loss, grads=full_gradients(model))


def _packed_vs_unpacked(model, reference, settings: DpoSettings, faults: Faults) -> list[str]:
    packs = pair_packs(PAIRS, 64)
    assert any(len(p) >= 2 for p in packs), "packs must hold several pairs to test anything"
    unpacked = _run(model, reference, [unpacked_pairs([p]) for p in PAIRS], settings)
    packed = _run(model, reference, [pack_pairs(p, pad_to=64) for p in packs], settings, faults)
    return compare(unpacked, packed)


@pytest.mark.parametrize(
    "settings",
    [
        DpoSettings(beta=0.5),
        DpoSettings(beta=0.1, label_smoothing=0.2),
        DpoSettings(beta=0.5, loss_type="ipo"),
    ],
    ids=["dpo", "dpo_label_smoothing", "ipo"],
)
def test_packed_dpo_equals_unpacked(tiny_world, reference_model, settings):
    model, _ = tiny_world
    assert _packed_vs_unpacked(model, reference_model, settings, Faults()) == []


def test_reference_from_wrong_segment_control_breaks(tiny_world, reference_model):
    model, _ = tiny_world
    assert _packed_vs_unpacked(
        model, reference_model, DpoSettings(beta=0.5), Faults(dpo_ref_wrong_segment=True)
    )


def test_pair_split_across_packs_is_refused(tiny_world, reference_model):
    """A pack holding half a pair cannot be scored: the executor says so instead of mis-pairing."""
    model, _ = tiny_world
    odd = pack_pairs(PAIRS[:2], pad_to=64)
    from packcfg.train.batches import pack_thd

    split = pack_thd([PAIRS[0].chosen, PAIRS[0].rejected, PAIRS[1].chosen], pad_to=64)
    assert reference_logps(reference_model, [odd])[0].shape == (4,)
    with pytest.raises(ValueError, match="whole pairs"):
        reference_logps(reference_model, [split])


def test_dpo_loss_matches_closed_form():
    """At policy == reference the DPO loss is log 2 and the IPO loss 1/(4 beta^2); a chosen reward
    above the rejected one lowers the DPO loss."""
    s = DpoSettings(beta=0.5)
    zero = torch.zeros(4)
    loss, chosen, rejected = pair_losses(zero, zero, s)
    assert torch.allclose(loss, torch.full((2,), float(torch.log(torch.tensor(2.0)))))
    ipo, _, _ = pair_losses(zero, zero, DpoSettings(beta=0.5, loss_type="ipo"))
    assert torch.allclose(ipo, torch.full((2,), 1.0))
    better, _, _ = pair_losses(torch.tensor([1.0, -1.0]), torch.zeros(2), s)
    assert float(better[0]) < float(loss[0])


@pytest.mark.parametrize("case", ["dpo", "dpo_tp"], ids=["dp2_vs_dp1", "tp2_vs_tp1"])
def test_two_ranks_equal_one(tmp_path, case):
    reference = run_dpo_case(["none"])["none"]
    out = tmp_path / "dpo.pt"
    run_torchrun(["tests/train/harness.py", case, str(out), "dpo_ref_wrong_segment"])
    results = load_results(out)
    assert compare(reference, results["none"]) == []
    assert compare(reference, results["dpo_ref_wrong_segment"])


# ---- the recipe: packs of whole pairs, trained by `packcfg train` from a clean folder

RECIPE = "recipes/tiny_cpu_dpo.yaml"


def _train_cli(cwd, *args: str):
    import os
    import subprocess
    import sys

    from .cases import REPO_ROOT

    return subprocess.run(
        [sys.executable, "-m", "packcfg", "train", str(REPO_ROOT / RECIPE), *args],
        cwd=cwd, capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )  # fmt: skip


def test_recipe_trains_on_whole_ordered_pairs(tmp_path):
    """Two DP processes, three steps: metrics carry the DPO fields, and every pack of the packed file
    holds whole pairs, chosen (source line 2k) then rejected (2k+1)."""
    from collections import defaultdict

    from packcfg import packing
    from packcfg.core.config import load_config
    from packcfg.train.data import PackedParquet
    from packcfg.train.metrics import read_metrics

    from .cases import REPO_ROOT

    skip_unless_one_gpu_per_rank(2)  # the recipe's DP 2
    proc = _train_cli(tmp_path, "train.train_iters=3", "checkpoint.save_interval=0")
    assert proc.returncode == 0, proc.stderr
    rows = read_metrics(tmp_path / "runs/tiny_cpu_dpo/metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert rows[0]["reward_margin"] == 0.0  # step 1: policy == reference
    assert all(r["pairs"] > 0 and 0 <= r["reward_accuracy"] <= 1 for r in rows)

    where = defaultdict(set)
    for i, (ids, _) in enumerate(packing.tokenized_samples(load_config([REPO_ROOT / RECIPE]))):
        where[tuple(int(x) for x in ids)].add(i)
    units = PackedParquet(tmp_path / "runs/tiny_cpu_dpo/packed/train.parquet")
    pairs = 0
    for u in range(len(units)):
        samples = [where[tuple(int(x) for x in s.input_ids)] for s in units[u]]
        assert len(samples) % 2 == 0, f"pack {u} holds half a pair"
        for chosen, rejected in zip(samples[0::2], samples[1::2], strict=True):
            assert any(c % 2 == 0 and c + 1 in rejected for c in chosen), (
                f"pack {u}: not a (chosen, rejected) pair"
            )
            pairs += 1
    assert pairs == 512


def test_dpo_with_context_parallel_is_refused(tmp_path):
    proc = _train_cli(
        tmp_path,
        "model.context_parallel_size=2",
        "train.train_iters=1",
        "--nproc-per-node",
        "2",
        "--allow",
        "CP203",
    )  # CP203 (pack alignment for CP) would refuse first; the DPO refusal is preflight's
    assert proc.returncode != 0
    assert "recipe.mode dpo: model.context_parallel_size 2 is not supported" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_resume_keeps_the_initial_reference(tmp_path):
    """Stopped at step 3 and resumed, the run repeats steps 4-6 exactly: the reference is the initial
    weights, not the resumed policy (with that bug the reward margin would restart at 0)."""
    import shutil

    from packcfg.train.metrics import read_metrics

    args = ("train.train_iters=6", "checkpoint.save_interval=3", "--nproc-per-node", "1")
    assert _train_cli(tmp_path, *args).returncode == 0
    full = read_metrics(tmp_path / "runs/tiny_cpu_dpo/metrics.jsonl")
    checkpoints = tmp_path / "runs/tiny_cpu_dpo/checkpoints"
    shutil.rmtree(checkpoints / "iter_0000006")
    (checkpoints / "latest_checkpointed_iteration.txt").write_text("3\n")
    proc = _train_cli(tmp_path, *args, "--resume")
    assert proc.returncode == 0, proc.stderr
    resumed = read_metrics(tmp_path / "runs/tiny_cpu_dpo/metrics.jsonl")
    assert [r["step"] for r in resumed] == [1, 2, 3, 4, 5, 6]
    for a, b in zip(full[3:], resumed[3:], strict=True):
        assert abs(a["loss"] - b["loss"]) < 1e-6 and abs(a["reward_margin"] - b["reward_margin"]) < 1e-6
    assert resumed[3]["reward_margin"] > resumed[1]["reward_margin"]
