"""The NeMo-Run plugin through NeMo-Run's public API (Experiment.add / run, LocalExecutor): a Bridge-style
`run.Partial(finetune, config=..., forward_step_func=...)` whose config breaks a packing rule is refused at
`exp.add`, naming each finding, and never runs; a clean one launches and runs; `allow`, a task without a config,
and a `run.Script` with `--config-file` and Hydra overrides."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("nemo_run")

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> tuple[dict, Path]:
    out = tmp_path_factory.mktemp("nemo_run_plugin")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(HERE)])}
    proc = subprocess.run(
        [sys.executable, str(HERE / "nemo_run_driver.py"), str(out)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    _, _, tail = proc.stdout.partition("@@RESULTS@@")
    return json.loads(tail), out


def test_a_packing_error_refuses_the_launch_naming_each_finding(results) -> None:
    found, out = results
    refused = found["refused"]
    assert refused["codes"] == ["PK110"]
    assert refused["refused"].startswith("packcfg: 1 finding blocks the launch of finetune (<dict>):")
    assert (
        "PK110 error at train.micro_batch_size: offline packing needs train.micro_batch_size 1, got 2"
        in (refused["refused"])
    )
    ran = json.loads((out / "ran.json").read_text())  # only the clean task ran
    assert ran["config"]["train"]["micro_batch_size"] == 1


def test_a_clean_config_launches_and_the_task_runs(results) -> None:
    found, out = results
    assert found["launched"]["refused"] is None
    assert "PK110" not in found["launched"]["codes"]
    ran = json.loads((out / "ran.json").read_text())
    assert ran == {
        "config": {**ran["config"], "train": {"micro_batch_size": 1, "global_batch_size": 32}},
        "forward_step_func": "forward_step",
    }


def test_allow_buildable_and_missing_config(results) -> None:
    found, _ = results
    assert found["buildable"]["codes"] == ["PK110"]
    assert found["allowed"]["refused"] is None
    assert "PK110" in found["allowed"]["codes"]  # reported, not blocking
    assert "has no argument 'config' to check" in found["no_config"]["error"]


def test_script_tasks_read_config_file_and_overrides(results) -> None:
    found, out = results
    assert found["script_refused"]["codes"] == ["PK110"]
    assert f"the launch of run_recipe.py ({out / 'packed.yaml'})" in found["script_refused"]["refused"]
    assert found["script_fixed"]["refused"] is None
