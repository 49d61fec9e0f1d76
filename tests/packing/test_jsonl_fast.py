"""Token-id JSONL read through pyarrow's JSON reader gives exactly what the exact (json.loads) reader gives:
the same samples, masks and line numbers, and the same one-line error, whatever falls where in a block."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from packcfg.packing import sources
from packcfg.packing.errors import PackingError

from .conftest import random_token_rows


def _flat(batches) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    values, masks, lens, lines = [], [], [], []
    for b in batches:
        values.append(b.values)
        masks.append(b.mask)
        lens.append(np.diff(b.offsets))
        lines.append(b.sample_lines())
    return tuple(np.concatenate(x) for x in (values, masks, lens, lines))  # type: ignore[return-value]


def _both(path: Path, block: int):
    fast = _flat(sources._iter_token_jsonl_fast(path, 7, block_bytes=block))
    exact = _flat(sources._iter_token_jsonl(path, 7))
    return fast, exact


@pytest.mark.parametrize("kind", ["mask", "answer", "none"])
@pytest.mark.parametrize("block", [64, 1000, 1 << 20])
def test_fast_reader_matches_the_exact_reader(tmp_path, kind, block):
    rows = random_token_rows(60, seed=3, kind=kind)
    for i, r in enumerate(rows):
        r["note"] = f"row {i}, with true and false in the text"  # ignored fields, bool-looking text
    path = tmp_path / "t.jsonl"
    text = "".join(json.dumps(r) + "\n" for r in rows)
    path.write_text(text[:-1])  # no newline at the end
    fast, exact = _both(path, block)
    for a, b in zip(fast, exact, strict=True):
        assert np.array_equal(a, b)


def test_blank_lines_mixed_kinds_and_bool_masks_fall_back_exactly(tmp_path):
    rows = random_token_rows(30, seed=4, kind="mask") + random_token_rows(30, seed=5, kind="answer")
    lines = [json.dumps(r) for r in rows]
    lines.insert(40, "")  # a blank line: line numbers after it shift
    lines[50] = json.dumps({"input_ids": [5, 6, 7], "loss_mask": [True, False, True]})
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(lines) + "\n")
    for block in (200, 3000, 1 << 20):
        fast, exact = _both(path, block)
        for a, b in zip(fast, exact, strict=True):
            assert np.array_equal(a, b)


@pytest.mark.parametrize("bad", ["[1, null]", "[1, true]", "[1, 2.5]", "[1, -4]", "[1, 4294967296]", "[]"])
@pytest.mark.parametrize("block", [100, 1 << 20])
def test_errors_are_the_exact_readers(tmp_path, bad, block):
    rows = [json.dumps(r) for r in random_token_rows(20, seed=6, kind="none")]
    rows[13] = '{"input_ids": ' + bad + "}"
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(rows) + "\n")
    with pytest.raises(PackingError) as fast:
        list(sources._iter_token_jsonl_fast(path, 7, block_bytes=block))
    with pytest.raises(PackingError) as exact:
        list(sources._iter_token_jsonl(path, 7))
    assert str(fast.value) == str(exact.value) and "t.jsonl:14:" in str(fast.value)
