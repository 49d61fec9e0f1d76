"""Fixtures for the launch tests: the real single-node Slurm, NeMo-Run, and a script harness.

Slurm and NeMo-Run tests skip (saying why) where those are missing, except in CI (`CI=true`), where a
missing Slurm is a failure: the integration tests must never pass vacuously there.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
TINY = REPO_ROOT / "recipes" / "tiny_cpu_sft.yaml"
DATA = Path(__file__).resolve().parent / "data"
FOUR_NODE = DATA / "four_node_8gpu.yaml"
# A short run of the tiny recipe: enough steps to see the loss move, quick on 2 CPU cores.
SHORT_RUN = ["train.train_iters=4", "scheduler.lr_decay_iters=4", "scheduler.lr_warmup_iters=1"]


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("true", "1", "yes")


def slurm_problem() -> str | None:
    """Why the local Slurm cannot run jobs, or None when it can (sinfo + scontrol ping)."""
    for tool in ("sbatch", "squeue", "scontrol", "sinfo", "scancel"):
        if shutil.which(tool) is None:
            return f"{tool} not on PATH (start Slurm with .ci/slurm-up.sh)"
    try:
        ping = subprocess.run(["scontrol", "ping"], capture_output=True, text=True, timeout=20)
        if "UP" not in ping.stdout:
            first = (ping.stdout + ping.stderr).strip().splitlines()
            return f"scontrol ping: {first[0] if first else 'no answer'}"
        nodes = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"Slurm does not answer: {exc}"
    states = nodes.stdout.split()
    if not any(s.rstrip("*~#") in ("idle", "mixed", "allocated", "completing") for s in states):
        return f"no usable Slurm node (sinfo states: {states or 'none'})"
    return None


def require(problem: str | None, what: str) -> None:
    if problem is None:
        return
    if in_ci():
        pytest.fail(f"CI=true but {what} is not usable: {problem}", pytrace=False)
    pytest.skip(f"{what} not available: {problem}")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test that needs the real Slurm carries the `slurm` mark (`-m "not slurm"` leaves them out)."""
    for item in items:
        if "slurm" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slurm)


@pytest.fixture(scope="session")
def slurm() -> None:
    """The real single-node Slurm started by .ci/slurm-up.sh."""
    require(slurm_problem(), "Slurm")


@pytest.fixture(scope="session")
def nemo_run() -> None:
    problem = None if importlib.util.find_spec("nemo_run") else "nemo_run is not installed (extra nemo-run)"
    require(problem, "NeMo-Run")


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    return tmp_path / "state"


def packcfg(
    *args: str, cwd: Path | None = None, env: dict[str, str] | None = None, timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    """Run the real CLI in a subprocess (exit code, stdout and stderr as the user sees them)."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "packcfg", *args],
        cwd=cwd or REPO_ROOT,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


_STUB = """#!{python}
# Harness stub: records how it was called (argv and environment) and runs nothing.
import json, os, sys
prog = os.path.basename(sys.argv[0])
with open(os.environ["HARNESS_LOG"], "a") as fh:
    fh.write(json.dumps({{"prog": prog, "argv": sys.argv[1:], "cwd": os.getcwd(), "env": dict(os.environ)}}) + "\\n")
if prog == "scontrol" and sys.argv[1:3] == ["show", "hostnames"]:
    print("\\n".join(os.environ.get("HARNESS_NODES", "node001").split()))
"""


class Harness:
    """Runs a rendered script with every external command (torchrun, srun, scontrol, python3,
    sbatch) replaced by a stub that only records its call, so a test can see exactly what the script
    would run, and prove that nothing else (an injected command) ran."""

    STUBS = ("torchrun", "srun", "scontrol", "python3", "python", "sbatch")

    def __init__(self, root: Path) -> None:
        self.root = root
        self.bin = root / "bin"
        self.bin.mkdir(parents=True)
        self.log = root / "calls.jsonl"
        for name in self.STUBS:
            path = self.bin / name
            path.write_text(_STUB.format(python=sys.executable))
            path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)

    def run(
        self, script: Path, env: dict[str, str] | None = None, cwd: Path | None = None
    ) -> subprocess.CompletedProcess[str]:
        base = {
            "PATH": f"{self.bin}:/usr/bin:/bin",
            "HOME": str(self.root),
            "HARNESS_LOG": str(self.log),
        }
        return subprocess.run(
            ["bash", str(script)],
            cwd=cwd or self.root,
            env={**base, **(env or {})},
            capture_output=True,
            text=True,
            timeout=60,
        )

    def calls(self) -> list[dict[str, Any]]:
        if not self.log.is_file():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines() if line.strip()]


@pytest.fixture
def harness(tmp_path: Path) -> Callable[[], Harness]:
    counter = iter(range(1000))
    return lambda: Harness(tmp_path / f"harness{next(counter)}")
