"""torch_dist checkpoints (megatron-core dist_checkpointing): layout, resume across TP sizes with a
control that must fail, Megatron-written checkpoints as initial weights, consumed-samples data position,
refusal of code in common.pt, and one-line errors.

Also run as a script under torchrun (one training call per rank, rank 0 writes the losses):
    python -m torch.distributed.run --nproc-per-node 2 tests/train/test_dist_checkpoint.py CONFIG.json OUT.json [FAULT ...]
"""

from __future__ import annotations

import json
import os
import sys
import warnings
from pathlib import Path

warnings.filterwarnings("ignore")
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import pytest  # noqa: E402
import torch  # noqa: E402

from packcfg.train.data import PackedParquet, write_packed_parquet  # noqa: E402
from packcfg.train.loop import TrainOptions, train  # noqa: E402
from packcfg.train.run_folder import CheckpointError  # noqa: E402
from tests.train.cases import greedy_packs, run_torchrun, synthetic_samples, tiny_config  # noqa: E402
from tests.train.faults import Faults, injected  # noqa: E402

STEPS, SAVE_AT = 6, 3
TOL = 1e-5


def _data(path: Path) -> Path:
    return write_packed_parquet(path, greedy_packs(synthetic_samples(60, seed=5), 64))


def _config(ckpt: Path, iters: int, tp: int = 1, gbs: int = 4, **checkpoint):
    return tiny_config(
        model={"tensor_model_parallel_size": tp},
        train={"train_iters": iters, "global_batch_size": gbs},
        scheduler={"lr_warmup_iters": 2, "lr_decay_iters": STEPS},
        checkpoint={"save": str(ckpt), "save_interval": SAVE_AT, **checkpoint},
    )


def _run(config, data: Path, out: Path, **options):
    return train(config, TrainOptions(units=PackedParquet(data), output_dir=out, progress=False, **options))


def _torchrun(tmp: Path, config, data: Path, faults: list[str] = ()) -> list[float]:
    spec = tmp / "run.json"
    spec.write_text(json.dumps({"config": config, "data": str(data), "out": str(tmp / "out_tr")}))
    result = tmp / "losses.json"
    proc = run_torchrun([str(Path(__file__).resolve()), str(spec), str(result), *faults])
    LOGS.append(proc.stdout + proc.stderr)
    return json.loads(result.read_text())


LOGS: list[str] = []  # every torchrun's output, newest last


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return _data(tmp_path_factory.mktemp("data") / "train.parquet")


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory, data):
    tmp = tmp_path_factory.mktemp("straight")
    return _run(_config(tmp / "ckpt", STEPS), data, tmp / "out").losses


def _max_diff(a: list[float], b: list[float]) -> float:
    assert len(a) == len(b), (a, b)
    return max(abs(x - y) for x, y in zip(a, b, strict=True))


def test_layout_is_bridges(tmp_path, data):
    _run(_config(tmp_path / "ckpt", SAVE_AT), data, tmp_path / "out")
    root = tmp_path / "ckpt"
    assert (root / "latest_checkpointed_iteration.txt").read_text().strip() == str(SAVE_AT)
    files = {p.name for p in (root / "iter_0000003").iterdir()}
    assert {"metadata.json", "common.pt"} <= files and any(f.endswith(".distcp") for f in files)
    assert (
        json.loads((root / "iter_0000003" / "metadata.json").read_text())["sharded_backend"] == "torch_dist"
    )
    assert not list(root.glob(".tmp*"))


@pytest.mark.torchrun
def test_resume_tp1_to_tp2_and_back_reproduces_the_curve(tmp_path, data, uninterrupted):
    # TP 1 saves at step 3, TP 2 resumes to step 6
    _run(_config(tmp_path / "a", SAVE_AT), data, tmp_path / "out_a")
    resumed = _torchrun(tmp_path, _config(tmp_path / "a", STEPS, tp=2), data)
    diff = _max_diff(resumed, uninterrupted[SAVE_AT:])
    print(f"TP1->TP2 resume: max |loss diff| = {diff:.3e}")
    assert diff < TOL
    # TP 2 saves at step 3, TP 1 resumes to step 6
    _torchrun(tmp_path, _config(tmp_path / "b", SAVE_AT, tp=2), data)
    back = _run(_config(tmp_path / "b", STEPS), data, tmp_path / "out_b", resume=True).losses
    diff = _max_diff(back, uninterrupted[SAVE_AT:])
    print(f"TP2->TP1 resume: max |loss diff| = {diff:.3e}")
    assert diff < TOL


@pytest.mark.torchrun
def test_resume_control_without_optimizer_state_breaks_the_curve(tmp_path, data, uninterrupted):
    _run(_config(tmp_path / "a", SAVE_AT), data, tmp_path / "out_a")
    resumed = _torchrun(tmp_path, _config(tmp_path / "a", STEPS, tp=2), data, ["resume_without_optimizer"])
    diff = _max_diff(resumed, uninterrupted[SAVE_AT:])
    print(f"control (optimizer state dropped) TP1->TP2: max |loss diff| = {diff:.3e}")
    assert diff > 100 * TOL


@pytest.mark.torchrun
def test_saving_on_two_data_parallel_ranks_logs_nothing_about_per_rank_state(tmp_path, data):
    """Each rank's RNG state differs: kept out of megatron's common state (which megatron compares across
    ranks, printing a 41k-character difference at every save), in per-rank files instead."""
    _torchrun(tmp_path, _config(tmp_path / "dp", SAVE_AT, gbs=4), data)
    log = LOGS[-1]
    assert "differs from rank 0" not in log
    assert max(map(len, log.splitlines()), default=0) < 1000, "a log line of over 1,000 characters"
    saved = tmp_path / "dp" / f"iter_{SAVE_AT:07d}"
    assert sorted(p.name for p in saved.glob("rng_rank*.pt")) == ["rng_rank00000.pt", "rng_rank00001.pt"]


def test_changed_global_batch_size_continues_at_the_next_unit(tmp_path, data):
    from packcfg.train.checkpoint import load_file

    _run(_config(tmp_path / "c", SAVE_AT, gbs=4), data, tmp_path / "out")  # consumes units 0..11
    _run(_config(tmp_path / "c", SAVE_AT + 2, gbs=2), data, tmp_path / "out2", resume=True)
    common = load_file(tmp_path / "c" / "iter_0000005" / "common.pt")
    assert common["consumed_units"] == 3 * 4 + 2 * 2
    # the step after 12 consumed units at GBS 2 holds units 12 and 13: the first half of GBS 4's step 3
    from packcfg.train.data import BatchPlan
    from packcfg.train.settings import TrainSettings

    settings = TrainSettings.from_config(_config(tmp_path / "c", 1))
    units = PackedParquet(data)
    at4 = BatchPlan(units, settings.data, 1, 4, 1, 0).micro_batches(3)
    at2 = BatchPlan(units, settings.data, 1, 2, 1, 0).micro_batches_after(12)
    assert [torch.equal(a.tokens, b.tokens) for a, b in zip(at2, at4[:2], strict=True)] == [True, True]
    shifted = BatchPlan(units, settings.data, 1, 2, 1, 0).micro_batches(3)  # the old step-based position
    assert not all(torch.equal(a.tokens, b.tokens) for a, b in zip(shifted, at4[:2], strict=True))


def test_megatron_written_checkpoint_gives_initial_weights(tmp_path, data):
    """A checkpoint written by megatron-core's own `dist_checkpointing.save` of a GPTModel's
    sharded_state_dict under "model" in Bridge's layout, with no packcfg entries in its common state."""
    from megatron.core import dist_checkpointing

    from packcfg.core.atomic import atomic_write_text
    from packcfg.train.checkpoint import load_weights
    from packcfg.train.dist_checkpoint import _sync_save_strategy
    from packcfg.train.model import build_model
    from packcfg.train.parallel import distributed
    from packcfg.train.settings import TrainSettings

    settings = TrainSettings.from_config(_config(tmp_path / "x", 1))
    root = tmp_path / "bridge"
    with distributed(tp=1, cp=1) as layout:
        source = build_model(settings.model, seed=99)
        (root / "iter_0000010").mkdir(parents=True)
        dist_checkpointing.save(
            {"model": source.sharded_state_dict(), "iteration": 10},
            str(root / "iter_0000010"),
            sharded_strategy=_sync_save_strategy(),
        )
        atomic_write_text(root / "latest_checkpointed_iteration.txt", "10\n")
        target = build_model(settings.model, seed=11)
        assert load_weights(root / "iter_0000010", layout, target) == 10
        for (name, a), (_, b) in zip(source.state_dict().items(), target.state_dict().items(), strict=True):
            if isinstance(a, torch.Tensor):
                assert torch.equal(a, b), name
    result = _run(_config(tmp_path / "y", 1, pretrained_checkpoint=str(root)), data, tmp_path / "out")
    assert len(result.losses) == 1


def test_code_in_common_pt_is_refused_not_run(tmp_path, data):
    _run(_config(tmp_path / "ckpt", SAVE_AT), data, tmp_path / "out")
    marker = tmp_path / "ran"

    class Payload:
        def __reduce__(self):
            return (Path.touch, (marker,))

    torch.save({"iteration": 3, "x": Payload()}, tmp_path / "ckpt" / "iter_0000003" / "common.pt")
    # control: megatron's own loader on a torch without the weights_only default would run it
    torch.load(tmp_path / "ckpt" / "iter_0000003" / "common.pt", weights_only=False)
    assert marker.exists()
    marker.unlink()
    with pytest.raises(CheckpointError, match="refused"):
        _run(_config(tmp_path / "ckpt", STEPS), data, tmp_path / "out2", resume=True)
    assert not marker.exists()


def test_errors_are_one_line(tmp_path, data):
    _run(_config(tmp_path / "ckpt", SAVE_AT), data, tmp_path / "out")
    bigger = _config(tmp_path / "ckpt", STEPS)
    bigger["model"]["hidden_size"] = 64
    with pytest.raises(CheckpointError, match=r"model\.hidden_size=32"):
        _run(bigger, data, tmp_path / "out2", resume=True)
    (tmp_path / "ckpt" / "iter_0000003" / "metadata.json").unlink()  # a partial save
    with pytest.raises(CheckpointError, match="not a complete torch_dist checkpoint|not a checkpoint"):
        _run(_config(tmp_path / "ckpt", STEPS), data, tmp_path / "out3", resume=True)
    qk = _config(tmp_path / "ckpt", STEPS, pretrained_checkpoint=str(tmp_path / "ckpt"))
    qk["model"]["qk_layernorm"] = True  # a tensor the checkpoint lacks (another family: Qwen3 vs Llama)
    qk["checkpoint"]["save"] = str(tmp_path / "qk")
    (tmp_path / "ckpt2").mkdir()
    _run(_config(tmp_path / "ckpt2", SAVE_AT), data, tmp_path / "out5")
    qk["checkpoint"]["pretrained_checkpoint"] = str(tmp_path / "ckpt2")
    with pytest.raises(CheckpointError, match=r"has no tensor decoder\.layers\.self_attention\.q_layernorm"):
        _run(qk, data, tmp_path / "out6")
    with pytest.raises(ValueError, match="checkpoint.ckpt_format: 'zarr'"):
        _run(_config(tmp_path / "z", 1, ckpt_format="zarr"), data, tmp_path / "out4")


def _main() -> None:
    spec = json.loads(Path(sys.argv[1]).read_text())
    out, faults = Path(sys.argv[2]), Faults.from_names(sys.argv[3:])
    with injected(faults):
        result = _run(spec["config"], Path(spec["data"]), Path(spec["out"]), resume=True)
    if os.environ.get("RANK", "0") != "0":
        return
    out.write_text(json.dumps(result.losses))


if __name__ == "__main__":
    _main()
