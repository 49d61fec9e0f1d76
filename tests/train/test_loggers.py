"""Metrics where users look: a tiny training with `logger.tensorboard_dir` writes TensorBoard event files whose
scalars (Megatron's tag names) equal `metrics.jsonl`; with `logger.wandb_project` and WANDB_MODE=offline the
W&B run's history holds the same loss, no network; a configured logger whose package is missing stops the run
before it starts, naming the extra."""

from __future__ import annotations

import glob
import json
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from packcfg.train.data import PackedParquet, write_packed_parquet
from packcfg.train.loop import TrainOptions, train
from packcfg.train.metrics import read_metrics
from packcfg.train.preflight import logger_problems

from .cases import REPO_ROOT, greedy_packs, synthetic_samples, tiny_config

STEPS = 4


@pytest.fixture(scope="module")
def packed_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("data") / "train.parquet"
    return write_packed_parquet(path, greedy_packs(synthetic_samples(40, seed=3), 64))


def _event_accumulator():
    """TensorBoard's own reader of event files (the extra `tensorboard`, in `dev`)."""
    return pytest.importorskip("tensorboard.backend.event_processing.event_accumulator").EventAccumulator


def _train(tmp_path: Path, packed_file: Path, logger: dict) -> list[dict]:
    config = tiny_config(train={"train_iters": STEPS}, logger=logger)
    out = tmp_path / "out"
    train(config, TrainOptions(units=PackedParquet(packed_file), output_dir=out, progress=False))
    return read_metrics(out / "metrics.jsonl")


def test_tensorboard_events_equal_metrics_jsonl(tmp_path, packed_file):
    EventAccumulator = _event_accumulator()

    metrics = _train(tmp_path, packed_file, {"tensorboard_dir": str(tmp_path / "tb")})
    events = EventAccumulator(str(tmp_path / "tb"))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    assert {"lm loss", "learning-rate", "grad-norm", "batch-size", "lm loss vs samples"} <= tags

    def series(tag: str) -> list[tuple[int, float]]:
        return [(e.step, e.value) for e in events.Scalars(tag)]

    # event files store float32: compare at float32 precision
    for tag, key in (("lm loss", "loss"), ("learning-rate", "lr"), ("grad-norm", "grad_norm")):
        expected = [(m["step"], m[key]) for m in metrics]
        assert [s for s, _ in series(tag)] == list(range(1, STEPS + 1))
        assert [v for _, v in series(tag)] == pytest.approx([v for _, v in expected], rel=1e-6), tag
    assert [s for s, _ in series("lm loss vs samples")] == [4 * k for k in range(1, STEPS + 1)]  # GBS 4


def test_tensorboard_log_interval(tmp_path, packed_file):
    EventAccumulator = _event_accumulator()

    _train(tmp_path, packed_file, {"tensorboard_dir": str(tmp_path / "tb"), "tensorboard_log_interval": 2})
    events = EventAccumulator(str(tmp_path / "tb"))
    events.Reload()
    assert [e.step for e in events.Scalars("lm loss")] == [2, 4]


@pytest.fixture
def fresh_wandb():
    """wandb keeps its settings (WANDB_MODE included) in a process-wide singleton from the first run on:
    tear it down so each test's environment counts."""
    wandb = pytest.importorskip("wandb")
    wandb.teardown()
    yield
    wandb.teardown()


def _wandb_records(path: str):
    """The records of a W&B transaction log (`run-<id>.wandb`): a 7-byte header (":W&B", magic, version),
    then LevelDB-log framing (32 KiB blocks; per record crc32c, length, type: 1 full, 2 first, 3 middle,
    4 last). wandb 0.31 reads these in its Go core only, so the test reads them itself."""
    block = 32768
    data = Path(path).read_bytes()
    assert data[:4] == b":W&B", path
    pos, pending = 7, b""
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        if kind == 0:  # zero padding at a block's end
            pos += left
            continue
        chunk, pos = data[pos + 7 : pos + 7 + length], pos + 7 + length
        if kind == 1:
            yield chunk
        elif kind == 2:
            pending = chunk
        elif kind == 3:
            pending += chunk
        elif kind == 4:
            yield pending + chunk


def test_wandb_offline_history_has_the_loss(tmp_path, packed_file, monkeypatch, fresh_wandb):
    wandb_internal_pb2 = pytest.importorskip("wandb.proto.wandb_internal_pb2")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    logger = {"wandb_project": "packcfg-test", "wandb_save_dir": str(tmp_path / "wb")}
    metrics = _train(tmp_path, packed_file, logger)
    [log] = glob.glob(str(tmp_path / "wb" / "wandb" / "offline-run-*" / "run-*.wandb"))
    history = []
    for raw in _wandb_records(log):
        record = wandb_internal_pb2.Record()
        record.ParseFromString(raw)
        if record.WhichOneof("record_type") == "history":
            items = record.history.item  # a key is `key`, or `nested_key` parts (wandb's own "_step")
            history.append({i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in items})
    assert [(h["_step"], h["lm loss"]) for h in history] == [(m["step"], m["loss"]) for m in metrics]
    assert [h["learning-rate"] for h in history] == [m["lr"] for m in metrics]


def test_wandb_config_has_no_secrets():
    from packcfg.train.settings import redacted

    config = {
        "launch": {"env": {"HF_TOKEN": "hf_abc", "WANDB_API_KEY": "k"}},
        "tokenizer": {"eos_token": "</s>"},
    }
    assert redacted(config) == {
        "launch": {"env": {"HF_TOKEN": "<redacted>", "WANDB_API_KEY": "<redacted>"}},
        "tokenizer": {"eos_token": "</s>"},
    }


def test_missing_logger_package_is_one_line_naming_the_extra(monkeypatch):
    import packcfg.core.extras as extras

    monkeypatch.setattr(extras, "missing_modules", lambda names: [n for n in names if n == "wandb"])
    config = tiny_config(logger={"tensorboard_dir": "tb", "wandb_project": "p"})
    assert logger_problems(config) == [
        "logger.wandb_project is set but wandb is not installed: pip install 'packcfg[wandb]'"
    ]
    assert logger_problems(tiny_config()) == []


def test_cli_stops_before_training_when_the_logger_package_is_missing(tmp_path):
    """`packcfg train` with logger.wandb_project set and wandb not importable: one line naming the extra,
    exit 2, nothing packed or trained."""
    recipe = REPO_ROOT / "recipes" / "tiny_cpu_sft.yaml"
    code = (
        "import sys; sys.modules['wandb'] = None\n"  # importlib then treats wandb as not installed
        "from packcfg.cli import main\n"
        f"sys.exit(main(['train', {str(recipe)!r}, 'logger.wandb_project=p', '--nproc-per-node', '1']))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"packcfg train: {recipe}: logger.wandb_project is set but wandb is not installed: "
        "pip install 'packcfg[wandb]'"
    ]
    assert not (tmp_path / "runs").exists()


def test_wandb_without_login_stops_before_the_first_step(tmp_path, packed_file, monkeypatch, fresh_wandb):
    """Online mode with no API key: one line saying so (and how to log offline), no step run."""
    for name in ("WANDB_MODE", "WANDB_API_KEY", "WANDB_CONFIG_DIR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # no ~/.netrc login
    logger = {"wandb_project": "packcfg-test", "wandb_save_dir": str(tmp_path / "wb")}
    with pytest.raises(ValueError) as err:
        _train(tmp_path, packed_file, logger)
    message = str(err.value)
    assert message.startswith("logger.wandb_project packcfg-test: wandb could not start a run (No API key")
    assert message.endswith("set WANDB_MODE=offline to log locally without an account")
    assert "\n" not in message
    assert not (tmp_path / "out" / "metrics.jsonl").exists()


def test_tensorboard_after_resume_shows_one_curve(tmp_path, packed_file):
    """A run resumed from step 2 after logging steps 1..4: `purge_step` hides the old steps 3..4, so
    TensorBoard shows each step once, with the values `metrics.jsonl` holds."""
    import shutil

    EventAccumulator = _event_accumulator()

    def run(resume: bool) -> list[dict]:
        config = tiny_config(
            train={"train_iters": STEPS},
            checkpoint={"save": str(tmp_path / "ckpt"), "save_interval": 2},
            logger={"tensorboard_dir": str(tmp_path / "tb")},
            optimizer={"lr": 3e-2 if resume else 1e-2},  # the resumed steps differ from the first run's
        )
        options = TrainOptions(units=PackedParquet(packed_file), output_dir=tmp_path / "out", progress=False)
        options.resume = resume
        train(config, options)
        return read_metrics(tmp_path / "out" / "metrics.jsonl")

    first = run(resume=False)
    shutil.rmtree(tmp_path / "ckpt" / f"iter_{STEPS:07d}")
    (tmp_path / "ckpt" / "latest_checkpointed_iteration.txt").write_text("2")
    resumed = run(resume=True)
    assert [m["step"] for m in resumed] == [1, 2, 3, 4] and resumed[3]["loss"] != first[3]["loss"]
    events = EventAccumulator(str(tmp_path / "tb"))
    events.Reload()
    logged = [(e.step, e.value) for e in events.Scalars("lm loss")]
    assert [s for s, _ in logged] == [1, 2, 3, 4]
    assert [v for _, v in logged] == pytest.approx([m["loss"] for m in resumed], rel=1e-6)
