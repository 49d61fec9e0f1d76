"""The real `packcfg` command in a subprocess, and the refusal contract the robustness tests assert."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def run(
    args: list[str],
    cwd: Path,
    *,
    timeout: float,
    unprivileged: bool = False,
    env: dict[str, str] | None = None,
    **kw,
) -> subprocess.CompletedProcess:
    """`python -m packcfg ARGS` in `cwd` (`env`: variables added to this process's); with `unprivileged`, as
    root without the capabilities that let root read and write past permission bits (so chmod means what it
    says). Output that is not UTF-8 is decoded with replacement characters."""
    prefix: list[str] = []
    if unprivileged and os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.skip("running as root without setpriv: permission bits do not stop root")
        prefix = [setpriv, "--bounding-set=-all", "--inh-caps=-all", "--ambient-caps=-all"]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONWARNINGS": "ignore", "NO_COLOR": "1", **(env or {})}
    return subprocess.run(
        [*prefix, sys.executable, "-m", "packcfg", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        errors="replace",
        timeout=timeout,
        env=env,
        stdin=subprocess.DEVNULL,
        **kw,
    )


def refused(proc: subprocess.CompletedProcess, *words: str) -> str:
    """Exit 2, no traceback, exactly one stderr line, naming `words`; returns the line."""
    out = proc.stdout + proc.stderr
    assert "Traceback" not in out, out
    assert proc.returncode == 2, out
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, lines
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]
