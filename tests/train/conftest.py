"""Fixtures for the executor tests: a world of 1 with the tiny fp32 model."""

from __future__ import annotations

import warnings
from collections.abc import Iterator

import pytest

pytest.importorskip("torch")
pytest.importorskip("megatron.core")

from .cases import tiny_config  # noqa: E402


@pytest.fixture(scope="module")
def tiny_world() -> Iterator[tuple[object, object]]:
    """(model, settings) of the tiny config inside a world of 1, torn down after the module."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from packcfg.train.model import build_model
        from packcfg.train.parallel import distributed
        from packcfg.train.settings import TrainSettings

        settings = TrainSettings.from_config(tiny_config())
        with distributed() as _layout:
            yield build_model(settings.model, settings.seed), settings
