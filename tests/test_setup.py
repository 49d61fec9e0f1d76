"""The README's set-up installs requirements-dev.txt with --no-deps: the file must pin every requirement of
pyproject.toml's base list and dev extra (at a version the requirement accepts), leave out only what
scripts/lock_dev.py says, and, in CI (which runs exactly that set-up), be what is installed."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
LOCK = ROOT / "requirements-dev.txt"


def _pins() -> dict[str, Version]:
    pins: dict[str, Version] = {}
    for number, line in enumerate(LOCK.read_text().splitlines(), 1):
        if not line or line.startswith("#"):
            continue
        name, sep, version = line.partition("==")
        assert sep and name.strip() == name and version.strip() == version, f"line {number}: {line!r}"
        assert canonicalize_name(name) not in pins, f"line {number}: {name} pinned twice"
        pins[canonicalize_name(name)] = Version(version)
    return pins


def _lock_dev():
    spec = importlib.util.spec_from_file_location("lock_dev", ROOT / "scripts" / "lock_dev.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_ci_runs_the_readme_set_up_and_test_commands():
    quick_start = (ROOT / "README.md").read_text().split("## Quick start", 1)[1].split("\n## ", 1)[0]
    set_up, tests = (block.strip() for block in re.findall(r"```bash\n(.*?)```", quick_start, re.S)[:2])
    assert "requirements-dev.txt" in set_up and tests.startswith("python -m pytest")
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    assert any(line == set_up or line.startswith(set_up + " ||") for line in ci), set_up
    assert tests in ci, tests


def test_lock_pins_every_base_and_dev_requirement():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pins = _pins()
    for line in project["dependencies"] + project["optional-dependencies"]["dev"]:
        req = Requirement(line)
        name = canonicalize_name(req.name)
        assert name in pins, f"requirements-dev.txt lacks {req.name}: run `python scripts/lock_dev.py`"
        assert req.specifier.contains(pins[name], prereleases=True), (
            f"requirements-dev.txt pins {req.name}=={pins[name]}, outside {line!r}: run `python scripts/lock_dev.py`"
        )


def test_lock_leaves_out_only_what_nothing_imports():
    pins = _pins()
    left_out = _lock_dev().LEFT_OUT
    assert "ray" in left_out
    for name in left_out:
        assert canonicalize_name(name) not in pins, name
        assert name in LOCK.read_text().split("\n\n")[0], (
            f"the file's header does not say why {name} is left out"
        )
    # what the suite does not run is not installed
    assert not {"mypy", "polars", "duckdb", "ruff"} & set(pins)


@pytest.mark.skipif(
    not os.environ.get("CI"), reason="the installed set is the lock's only in CI's fresh set-up"
)
def test_ci_installed_exactly_the_lock():
    """CI runs the README's set-up on a fresh machine: every pinned package is installed at its pinned version
    (the `importorskip`s of optional integrations then cannot skip silently)."""
    wrong = []
    for name, version in _pins().items():
        try:
            installed = Version(importlib.metadata.version(name))
        except importlib.metadata.PackageNotFoundError:
            wrong.append(f"{name}: not installed")
            continue
        if installed.public != version.public:
            wrong.append(f"{name}: {installed}, pinned {version}")
    assert not wrong, wrong
