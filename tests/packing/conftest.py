"""Fixtures for the packing tests: small real files (token JSONL, Parquet, SFT text) and the bundled data."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from packcfg.resources import data_dir

SAMPLE_SFT = data_dir() / "sample_sft"


@pytest.fixture(scope="module")
def only_the_tries():
    """PACKCFG_PLANNER_EXACT=off and PACKCFG_PLANNER_NEAR_PAIRS=off for a module whose tests pin down bfd's tries
    or post-pass on inputs where the refinement stage's exact try, which runs first, would end the stage, or
    where the near pairs, which run after the tries, would change the plan they leave
    (tests/packing/test_planner_exact.py and test_planner_near_pairs.py have those)."""
    with pytest.MonkeyPatch.context() as m:
        m.setenv("PACKCFG_PLANNER_EXACT", "off")
        m.setenv("PACKCFG_PLANNER_NEAR_PAIRS", "off")
        yield


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def random_token_rows(n: int, seed: int = 0, max_len: int = 90, kind: str = "mask") -> list[dict]:
    """Samples with varied lengths and a prompt/answer split given as loss_mask or answer_start_idx."""
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(n):
        length = int(rng.integers(2, max_len))
        ids = rng.integers(3, 2000, size=length).tolist()
        start = int(rng.integers(0, length))
        if kind == "mask":
            rows.append({"input_ids": ids, "loss_mask": [int(i >= start) for i in range(length)]})
        elif kind == "answer":
            rows.append({"input_ids": ids, "answer_start_idx": start})
        else:
            rows.append({"input_ids": ids})
    return rows


@pytest.fixture
def token_jsonl(tmp_path: Path) -> Path:
    return write_jsonl(tmp_path / "tokens.jsonl", random_token_rows(300, seed=1))


@pytest.fixture
def sample_sft() -> Path:
    return SAMPLE_SFT
