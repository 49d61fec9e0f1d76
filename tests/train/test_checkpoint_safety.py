"""Checkpoints never run code, fail with one clear line, and `latest` never moves back (issue 10).

Controls: the crafted pickle below would create a file if it were unpickled with `weights_only=False`, so the
"nothing executed" assertion is a real one (checked against torch.load without the guard).
"""

from __future__ import annotations

import pytest
import torch

from packcfg.train.checkpoint import LATEST, CheckpointError, load_file, read_latest
from packcfg.train.data import PackedParquet, write_packed_parquet
from packcfg.train.loop import TrainOptions, train

from .cases import greedy_packs, synthetic_samples, tiny_config

SAVE_AT = 2


@pytest.fixture(scope="module")
def packed_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("data") / "train.parquet"
    return write_packed_parquet(path, greedy_packs(synthetic_samples(40, seed=7), 64))


def _config(root, iters, bf16=False, **checkpoint):
    config = tiny_config(
        train={"train_iters": iters, "global_batch_size": 4},
        scheduler={"lr_warmup_iters": 1, "lr_decay_iters": 8},
        # the per-rank files of ckpt_format: torch; torch_dist's safety: tests/train/test_dist_checkpoint.py
        checkpoint={
            "save": str(root / "ckpt"),
            "save_interval": SAVE_AT,
            "ckpt_format": "torch",
            **checkpoint,
        },
    )
    config["model"]["bf16"] = bf16
    return config


def _run(config, packed_file, out, **options):
    return train(
        config, TrainOptions(units=PackedParquet(packed_file), output_dir=out, progress=False, **options)
    )


class _Payload:
    """Unpickling this creates `marker`: what a crafted checkpoint would do with weights_only=False."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_crafted_pickle_is_refused_and_never_runs(tmp_path, packed_file):
    _run(_config(tmp_path, SAVE_AT), packed_file, tmp_path / "out")
    marker = tmp_path / "pwned"
    rng = tmp_path / "ckpt" / f"iter_{SAVE_AT:07d}" / "rng_rank00000.pt"
    torch.save({"python": _Payload(str(marker))}, rng)
    # control: the same file loaded the unsafe way does run the payload
    control = tmp_path / "control"
    torch.save(_Payload(str(control)), tmp_path / "control.pt")
    torch.load(tmp_path / "control.pt", weights_only=False)
    assert control.exists()

    with pytest.raises(CheckpointError, match=r"refused: it holds [\w.]*open, which would run code"):
        _run(_config(tmp_path, SAVE_AT + 2), packed_file, tmp_path / "out", resume=True)
    assert not marker.exists()


def test_truncated_checkpoint_is_one_clear_error(tmp_path, packed_file):
    _run(_config(tmp_path, SAVE_AT), packed_file, tmp_path / "out")
    model_file = tmp_path / "ckpt" / f"iter_{SAVE_AT:07d}" / "model_optim_tp00.pt"
    data = model_file.read_bytes()
    model_file.write_bytes(data[: len(data) // 3])
    with pytest.raises(CheckpointError, match="unreadable checkpoint file") as info:
        _run(_config(tmp_path, SAVE_AT + 2), packed_file, tmp_path / "out", resume=True)
    assert "\n" not in str(info.value) and str(model_file) in str(info.value)


@pytest.mark.parametrize("text", ["", "\n", "abc", "-3", "1.5", "\x00\x01"])
def test_bad_latest_file_is_one_clear_error(tmp_path, text):
    (tmp_path / LATEST).write_text(text)
    with pytest.raises(CheckpointError, match="expected an iteration number"):
        read_latest(tmp_path)


def test_latest_naming_a_missing_iteration_is_clear(tmp_path, packed_file):
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / LATEST).write_text("7\n")
    with pytest.raises(CheckpointError, match="names iteration 7"):
        _run(_config(tmp_path, 9), packed_file, tmp_path / "out", resume=True)


def test_latest_never_moves_back(tmp_path, packed_file):
    _run(_config(tmp_path, 2 * SAVE_AT), packed_file, tmp_path / "a")
    assert read_latest(tmp_path / "ckpt") == 2 * SAVE_AT
    _run(_config(tmp_path, SAVE_AT), packed_file, tmp_path / "b")  # a shorter run into the same folder
    assert read_latest(tmp_path / "ckpt") == 2 * SAVE_AT


def test_rng_state_round_trips_through_weights_only(tmp_path):
    import random

    import numpy as np

    from packcfg.train.checkpoint_files import rng_state, set_rng_state

    random.seed(3)
    np.random.seed(4)
    torch.manual_seed(5)
    torch.save(rng_state(), tmp_path / "rng.pt")
    expected = (random.random(), float(np.random.rand()), float(torch.rand(1)))
    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)
    set_rng_state(load_file(tmp_path / "rng.pt"))
    assert (random.random(), float(np.random.rand()), float(torch.rand(1))) == expected


def test_bf16_warm_start_keeps_the_loaded_weights(tmp_path, packed_file):
    """A bf16 run started from a checkpoint must train the loaded weights: its fp32 master copies get them
    too (before, the first optimizer step wrote the random init back into the model)."""
    trained = _run(_config(tmp_path / "a", 6), packed_file, tmp_path / "a" / "out")
    cold = _run(_config(tmp_path / "b", 2, bf16=True), packed_file, tmp_path / "b" / "out")
    warm = _run(
        _config(tmp_path / "c", 2, bf16=True, pretrained_checkpoint=str(tmp_path / "a" / "ckpt")),
        packed_file,
        tmp_path / "c" / "out",
    )
    assert warm.losses[0] < cold.losses[0] - 0.05
    # the second step still starts from (a step past) the trained weights, not from the random init
    assert warm.losses[1] < cold.losses[1] - 0.05
    assert abs(warm.losses[1] - trained.losses[-1]) < abs(cold.losses[1] - trained.losses[-1])
