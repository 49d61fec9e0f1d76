"""The training loop end to end: resume continues the exact loss curve, checkpoints load as initial
weights, metrics are written, and `packcfg train` runs the tiny CPU recipe (reduced) from a clean folder."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from packcfg.train.data import PackedParquet, write_packed_parquet
from packcfg.train.loop import TrainOptions, train
from packcfg.train.metrics import read_metrics

from .cases import REPO_ROOT, greedy_packs, synthetic_samples, tiny_config
from .devices import skip_unless_one_gpu_per_rank
from .faults import Faults, injected

STEPS, SAVE_AT = 6, 3


@pytest.fixture(scope="module")
def packed_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("data") / "train.parquet"
    return write_packed_parquet(path, greedy_packs(synthetic_samples(60, seed=5), 64))


def _config(tmp_path, iters: int, **checkpoint):
    return tiny_config(
        train={"train_iters": iters, "global_batch_size": 4},
        scheduler={"lr_warmup_iters": 2, "lr_decay_iters": STEPS},  # the schedule must not depend on iters
        checkpoint={"save": str(tmp_path / "ckpt"), "save_interval": SAVE_AT, **checkpoint},
    )


def _run(config, packed_file, out, **options):
    return train(
        config, TrainOptions(units=PackedParquet(packed_file), output_dir=out, progress=False, **options)
    )


# ---- 6. save at step k and resume vs an uninterrupted run


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory, packed_file):
    tmp = tmp_path_factory.mktemp("straight")
    return _run(_config(tmp, STEPS), packed_file, tmp / "out")


def test_resume_continues_the_exact_loss_curve(tmp_path, packed_file, uninterrupted):
    first = _run(_config(tmp_path, SAVE_AT), packed_file, tmp_path / "out")
    assert [p.name for p in first.checkpoints] == [f"iter_{SAVE_AT:07d}"]
    resumed = _run(_config(tmp_path, STEPS), packed_file, tmp_path / "out", resume=True)
    assert resumed.start_step == SAVE_AT
    assert first.losses == uninterrupted.losses[:SAVE_AT]
    assert resumed.losses == uninterrupted.losses[SAVE_AT:]  # bit for bit on one process
    assert uninterrupted.losses[-1] < uninterrupted.losses[0]
    metrics = read_metrics(tmp_path / "out" / "metrics.jsonl")
    assert [m["step"] for m in metrics] == list(range(1, STEPS + 1))
    assert [m["loss"] for m in metrics] == uninterrupted.losses
    assert set(metrics[0]) >= {
        "step",
        "loss",
        "lr",
        "grad_norm",
        "real_tokens",
        "padded_tokens",
        "tokens_per_s",
        "step_time",
    }


def test_resume_control_replaying_data_breaks_the_curve(tmp_path, packed_file, uninterrupted):
    _run(_config(tmp_path, SAVE_AT), packed_file, tmp_path / "out")
    with injected(Faults(resume_data_from_start=True)):
        resumed = _run(_config(tmp_path, STEPS), packed_file, tmp_path / "out", resume=True)
    assert resumed.losses != uninterrupted.losses[SAVE_AT:]


def test_checkpoint_is_complete_and_atomic(tmp_path, packed_file):
    """ckpt_format: torch (per-TP-rank files); torch_dist's layout: tests/train/test_dist_checkpoint.py."""
    _run(_config(tmp_path, SAVE_AT, ckpt_format="torch"), packed_file, tmp_path / "out")
    root = tmp_path / "ckpt"
    assert (root / "latest_checkpointed_iteration.txt").read_text().strip() == str(SAVE_AT)
    assert sorted(p.name for p in (root / f"iter_{SAVE_AT:07d}").iterdir()) == [
        "model_optim_tp00.pt",
        "rng_rank00000.pt",
    ]
    assert not list(root.glob(".tmp*"))


def test_pretrained_checkpoint_gives_initial_weights(tmp_path, packed_file, uninterrupted):
    _run(_config(tmp_path, SAVE_AT), packed_file, tmp_path / "a")
    fresh = _run(_config(tmp_path / "b", 1), packed_file, tmp_path / "b" / "out")
    warm = _run(
        _config(tmp_path / "c", 1, pretrained_checkpoint=str(tmp_path / "ckpt")),
        packed_file,
        tmp_path / "c" / "out",
    )
    # Same first batch; the fine-tuned start has the trained weights, so its loss is the lower.
    assert fresh.losses == uninterrupted.losses[:1]
    assert warm.losses[0] < fresh.losses[0]


# ---- the CLI on the tiny recipe, reduced (a fresh folder: packs the bundled sample data first)


@pytest.mark.slow
@pytest.mark.torchrun
def test_packcfg_train_tiny_recipe_reduced(tmp_path):
    skip_unless_one_gpu_per_rank(2)  # the recipe trains data parallel 2
    recipe = REPO_ROOT / "recipes" / "tiny_cpu_sft.yaml"
    common = [
        "-o",
        "checkpoint.save_interval=2",
        "-o",
        "scheduler.lr_decay_iters=40",
        "-o",
        "logger.log_interval=1",
    ]

    def cli(*args: str) -> subprocess.CompletedProcess:
        proc = subprocess.run(
            [sys.executable, "-m", "packcfg", "train", str(recipe), *common, *args],
            cwd=tmp_path, capture_output=True, text=True, timeout=300,
            env={**__import__("os").environ, "PYTHONWARNINGS": "ignore"},
        )  # fmt: skip
        assert proc.returncode == 0, f"--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}"
        return proc

    first = cli("-o", "train.train_iters=4")
    assert "DP 2" in first.stdout and "step     4/4" in first.stdout
    assert (tmp_path / "runs/tiny_cpu_sft/packed/train.parquet").is_file()
    assert (tmp_path / "runs/tiny_cpu_sft/checkpoints/iter_0000004").is_dir()
    cli("-o", "train.train_iters=6", "--resume")
    lines = (tmp_path / "runs/tiny_cpu_sft/metrics.jsonl").read_text().splitlines()
    metrics = [json.loads(line) for line in lines]
    assert [m["step"] for m in metrics] == [1, 2, 3, 4, 5, 6]
    assert metrics[-1]["loss"] < metrics[0]["loss"]
    assert all(m["real_tokens"] <= m["padded_tokens"] == 8 * 512 for m in metrics)


def test_bf16_trains_with_fp32_master_weights_and_resumes(tmp_path, packed_file):
    def config(iters):
        c = _config(tmp_path, iters)
        c["model"]["bf16"] = True
        return c

    straight = _run(config(STEPS), packed_file, tmp_path / "straight")
    resumed = _run(config(STEPS), packed_file, tmp_path / "resumed", resume=True)  # resumes at step 6
    assert resumed.start_step == STEPS and resumed.losses == []
    (tmp_path / "ckpt" / "latest_checkpointed_iteration.txt").write_text(f"{SAVE_AT}\n")
    again = _run(config(STEPS), packed_file, tmp_path / "again", resume=True)
    assert again.losses == straight.losses[SAVE_AT:]
    assert straight.losses[-1] < straight.losses[0]


def test_launcher_shim_is_packcfg_train():
    proc = subprocess.run(
        [sys.executable, str(REPO_ROOT / "launchers" / "train.py"), "--help"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0 and "usage: packcfg train" in proc.stdout


def test_more_ranks_than_gpus_is_one_line(monkeypatch):
    """A node asked for more processes than it has GPUs: each extra rank says so in one line instead of
    CUDA's "invalid device ordinal" traceback."""
    import torch

    from packcfg.train.parallel import distributed

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    with pytest.raises(
        ValueError, match=r"local rank 1: this node has 1 visible GPU\(s\) \(CUDA_VISIBLE_DEVICES=0\)"
    ):
        with distributed():
            pass
