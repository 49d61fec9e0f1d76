"""Shared pytest fixtures and environment for every flow's tests."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
RECIPES = REPO_ROOT / "recipes"
TINY_RECIPE = RECIPES / "tiny_cpu_sft.yaml"

# megatron-core prints these on import; they are harmless on CPU.
os.environ.setdefault("PYTHONWARNINGS", "ignore")


@pytest.fixture(autouse=True)
def _private_token_cache(tmp_path_factory, monkeypatch) -> None:
    """Each test packs with its own tokenized cache (packcfg.packing.sources.cache), never the user's."""
    monkeypatch.setenv("PACKCFG_CACHE_DIR", str(tmp_path_factory.mktemp("packcfg-cache")))


@pytest.fixture
def repo_root() -> Path:
    return REPO_ROOT


@pytest.fixture
def tiny_recipe() -> Path:
    return TINY_RECIPE
