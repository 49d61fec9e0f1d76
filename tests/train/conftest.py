"""Fixtures for the executor tests: a world of 1 with the tiny fp32 model, and a torchrun runner."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("megatron.core")

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parents[1]
TORCHRUN_TIMEOUT_S = 300


@pytest.fixture(scope="module")
def tiny_world() -> Iterator[tuple[object, object]]:
    """(model, settings) of the tiny config inside a world of 1, torn down after the module."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from packcfg.train.model import build_model
        from packcfg.train.parallel import distributed
        from packcfg.train.settings import TrainSettings
        from tests.train.cases import tiny_config

        settings = TrainSettings.from_config(tiny_config())
        with distributed() as _layout:
            yield build_model(settings.model, settings.seed), settings


def run_torchrun(
    args: list[str], nproc: int = 2, timeout: int = TORCHRUN_TIMEOUT_S
) -> subprocess.CompletedProcess:
    """`python -m torch.distributed.run` on a free port; a failure shows the children's output."""
    from packcfg.train.parallel import free_port

    cmd = [
        sys.executable, "-m", "torch.distributed.run",
        f"--nproc-per-node={nproc}", f"--master-port={free_port()}", "--master-addr=127.0.0.1",
        *args,
    ]  # fmt: skip
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "OMP_NUM_THREADS": "1"}
    try:
        proc = subprocess.run(cmd, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"torchrun timed out after {timeout}s: {' '.join(cmd)}\n{exc.stdout}\n{exc.stderr}")
    if proc.returncode != 0:
        pytest.fail(
            f"torchrun failed ({proc.returncode}): {' '.join(cmd)}\n--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}"
        )
    return proc
