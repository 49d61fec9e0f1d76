"""The real `packcfg` command in a subprocess, and the refusal contract the robustness tests assert."""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import subprocess
import sys
import traceback
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


def run_in_process(
    args: list[str], cwd: Path, *, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """`packcfg ARGS` through `packcfg.cli.main` in this process, in `cwd`, with `env` added for the call:
    the same program as `run` without a new interpreter (~1 s of imports per call), for the large matrices of
    hostile inputs. An exception escaping `main` is what the user would see as a traceback: it is written to
    stderr as one, exit 1. Signals, interpreter start-up and permission bits stay with `run`."""
    from packcfg.cli import main

    out, err = io.StringIO(), io.StringIO()
    added = {"NO_COLOR": "1", **(env or {})}
    saved = {key: os.environ.get(key) for key in added}
    here = os.getcwd()
    try:
        os.chdir(cwd)
        os.environ.update(added)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(args)
            except SystemExit as stop:
                code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 2)
            except Exception:
                err.write(traceback.format_exc())
                code = 1
    finally:
        os.chdir(here)
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    return subprocess.CompletedProcess(["packcfg", *args], code or 0, out.getvalue(), err.getvalue())


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
