"""`packcfg train` from the command line: the lint gate, checks before megatron starts, the run-folder rule,
signals and rank-side errors (issue 10). Real processes throughout."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from packcfg.core.processes import process_tree

from .cases import REPO_ROOT
from .devices import skip_unless_one_gpu_per_rank

RECIPE = REPO_ROOT / "recipes" / "tiny_cpu_sft.yaml"
ENV = {**os.environ, "PYTHONWARNINGS": "ignore"}
ONE_PROCESS = ["--nproc-per-node", "1", "train.train_iters=1", "checkpoint.save_interval=1"]


def cli(cwd: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "packcfg", "train", str(RECIPE), *args],
        cwd=cwd, capture_output=True, text=True, timeout=timeout, env=ENV,
    )  # fmt: skip


def test_gate_blocks_what_lint_rejects(tmp_path):
    """CP 2 without per-token loss used to train and exit 0."""
    proc = cli(
        tmp_path, "model.context_parallel_size=2", "model.calculate_per_token_loss=false", *ONE_PROCESS
    )
    assert proc.returncode == 1, proc.stderr
    assert "LS301" in proc.stderr and "refused" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "runs").exists()  # nothing packed, nothing trained


def test_allow_lets_one_code_through(tmp_path):
    proc = cli(tmp_path, "model.apply_rope_fusion=false", "--allow", "PK999", *ONE_PROCESS)
    assert proc.returncode == 0, proc.stderr  # PK150 is a warning: never blocks
    assert "--allow PK999: no such finding" in proc.stderr
    blocked = cli(tmp_path, "train.micro_batch_size=2", "train.global_batch_size=16", "--nproc-per-node", "1")
    assert blocked.returncode == 1 and "PK110" in blocked.stderr


@pytest.mark.parametrize(
    ("overrides", "needle"),
    [
        (["model.num_attention_heads=3"], "not divisible by model.num_query_groups 2"),
        (["model.vocab_size=100"], "smaller than the tokenizer's vocabulary"),
        (["model.hidden_size=66", "~model.kv_channels"], "hidden_size 66 is not divisible"),
    ],
)
def test_checks_before_megatron_starts(tmp_path, overrides, needle):
    proc = cli(tmp_path, *overrides, *ONE_PROCESS)
    assert proc.returncode == 2, proc.stderr
    assert needle in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.slow
def test_run_folder_is_never_silently_rewritten(tmp_path):
    first = cli(tmp_path, *ONE_PROCESS[:2], "train.train_iters=2", "checkpoint.save_interval=1")
    assert first.returncode == 0, first.stderr
    latest = tmp_path / "runs/tiny_cpu_sft/checkpoints/latest_checkpointed_iteration.txt"
    metrics = tmp_path / "runs/tiny_cpu_sft/metrics.jsonl"
    before = (latest.read_text(), metrics.read_bytes())

    again = cli(tmp_path, *ONE_PROCESS)  # a shorter run into the same folders, no --resume
    assert again.returncode == 2 and "holds another run's results" in again.stderr
    assert (latest.read_text(), metrics.read_bytes()) == before  # nothing moved back, nothing rewritten

    done = cli(tmp_path, *ONE_PROCESS[:2], "train.train_iters=2", "--resume")
    assert done.returncode == 0 and "nothing to do: the run already finished" in done.stdout

    fresh = cli(tmp_path, *ONE_PROCESS, "--force")
    assert fresh.returncode == 0, fresh.stderr
    assert "starting fresh" in fresh.stdout
    assert latest.read_text().strip() == "1"
    assert not (tmp_path / "runs/tiny_cpu_sft/checkpoints/iter_0000002").exists()


@pytest.mark.slow
@pytest.mark.torchrun
def test_rank_side_error_is_one_line_and_exit_2(tmp_path):
    skip_unless_one_gpu_per_rank(2)  # the recipe's DP 2
    ckpt = tmp_path / "runs/tiny_cpu_sft/checkpoints"
    (ckpt / "iter_0000001").mkdir(parents=True)
    (ckpt / "iter_0000001" / "model_optim_tp00.pt").write_bytes(b"not a checkpoint")
    (ckpt / "latest_checkpointed_iteration.txt").write_text("1\n")
    proc = cli(tmp_path, "--resume", "train.train_iters=2")  # DP 2 under torchrun
    assert proc.returncode == 2, proc.stderr
    assert "unreadable checkpoint file" in proc.stderr
    assert "ChildFailedError" not in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.slow
@pytest.mark.torchrun
def test_sigterm_stops_every_rank_and_keeps_the_last_checkpoint(tmp_path):
    skip_unless_one_gpu_per_rank(2)  # the recipe's DP 2
    proc = subprocess.Popen(
        [sys.executable, "-m", "packcfg", "train", str(RECIPE), "train.train_iters=400", "checkpoint.save_interval=2",
         "logger.log_interval=1"],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV,
    )  # fmt: skip
    latest = tmp_path / "runs/tiny_cpu_sft/checkpoints/latest_checkpointed_iteration.txt"
    deadline = time.monotonic() + 240
    while not latest.exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)
    assert latest.exists(), proc.communicate()[1]
    tree = process_tree(proc.pid)
    assert len(tree) >= 3  # packcfg, torchrun and its two ranks
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    time.sleep(0.5)
    alive = [pid for pid in tree if Path(f"/proc/{pid}").exists() and "Z" not in _state(pid)]
    assert alive == [], f"survivors: {alive}"
    step = int(latest.read_text())
    iteration = latest.parent / f"iter_{step:07d}"
    names = {p.name for p in iteration.iterdir()}  # a complete torch_dist checkpoint (the default format)
    assert {"metadata.json", "common.pt"} <= names and any(n.endswith(".distcp") for n in names), names


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0]
    except OSError:
        return "Z"


def test_out_moves_checkpoints_and_packed_data_too(tmp_path):
    """Issue 16: `--out`/`--output-dir` moved metrics but left checkpoints in checkpoint.save; issue 24: and
    the packed data in the config's packed_train_data_path. `--out DIR` holds everything the run writes."""
    proc = cli(tmp_path, *ONE_PROCESS, "--out", "elsewhere")
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["elsewhere"]  # nothing under ./runs
    assert (tmp_path / "elsewhere" / "metrics.jsonl").is_file()
    assert (tmp_path / "elsewhere" / "checkpoints" / "iter_0000001").is_dir()
    assert (tmp_path / "elsewhere" / "packed" / "train.parquet").is_file()
    assert (tmp_path / "elsewhere" / "packed" / "metadata.json").is_file()


def test_out_keeps_a_packed_path_named_on_the_command_line(tmp_path):
    key = "dataset.offline_packing_specs.packed_train_data_path"
    proc = cli(tmp_path, *ONE_PROCESS, "--out", "elsewhere", f"{key}=shared/train.parquet")
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "shared" / "train.parquet").is_file()
    assert not (tmp_path / "elsewhere" / "packed" / "train.parquet").exists()
    assert (tmp_path / "elsewhere" / "packed" / "metadata.json").is_file()  # not named: follows --out


def test_deprecated_output_dir_is_warned_once_across_the_ranks(tmp_path):
    """`--output-dir` still works (issue 24: `--out` is the one spelling) and is warned once, by the user's
    process: the two torchrun ranks it starts parse the same command without repeating the line."""
    skip_unless_one_gpu_per_rank(2)
    proc = cli(tmp_path, "train.train_iters=1", "checkpoint.save_interval=1", "--output-dir", "elsewhere")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.count("is deprecated") == 1, proc.stderr
    assert "packcfg: warning: --output-dir is deprecated, use --out DIR (see CHANGELOG.md)" in proc.stderr
    assert (tmp_path / "elsewhere" / "checkpoints" / "iter_0000001").is_dir()


def test_bad_training_data_is_one_line_on_one_process(tmp_path):
    """Data packed on first use inside the single process: a bad row is one line and exit 2, no traceback
    (a PackingError used to escape `train` as a traceback with --nproc-per-node 1)."""
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "training.jsonl").write_text('{"input": "hi", "output": 3}\n')
    proc = cli(tmp_path, f"dataset.dataset_root={tmp_path / 'data'}", *ONE_PROCESS)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"packcfg train: {tmp_path / 'data' / 'training.jsonl'}:1: 'output' must be a string, got int"
    ]
