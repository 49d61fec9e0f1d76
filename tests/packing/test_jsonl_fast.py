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


@pytest.fixture(autouse=True, params=[1, 2], ids=["1 reader", "2 readers"])
def read_workers(request, monkeypatch):
    """Every test with blocks parsed one at a time and two at a time (same batches, same errors)."""
    monkeypatch.setattr(sources.threads, "READ_WORKERS", request.param)
    return request.param


def _flat(batches) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    values, masks, lens, lines = [], [], [], []
    for b in batches:
        values.append(b.values)
        masks.append(b.mask)
        lens.append(np.diff(b.offsets))
        lines.append(b.sample_lines())
    return tuple(np.concatenate(x) for x in (values, masks, lens, lines))  # type: ignore[return-value]


def _both(path: Path, block: int):
    fast = _flat(sources.iter_token_jsonl_fast(path, 7, block_bytes=block))
    exact = _flat(sources.iter_token_jsonl(path, 7))
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
        list(sources.iter_token_jsonl_fast(path, 7, block_bytes=block))
    with pytest.raises(PackingError) as exact:
        list(sources.iter_token_jsonl(path, 7))
    assert str(fast.value) == str(exact.value) and "t.jsonl:14:" in str(fast.value)


# --------------------------------------------------------------------------- the compiled strict reader

kernel = pytest.importorskip("packcfg.packing._jsonl_kernel")
if not kernel.HAVE_NUMBA:  # pragma: no cover - numba is in the pack and dev extras
    pytest.skip("numba is not installed", allow_module_level=True)


def _outcome(path: Path, block: int = 1 << 20):
    """What the fast reader gives: the flat samples, or the one-line error."""
    try:
        return _flat(sources.iter_token_jsonl_fast(path, 7, block_bytes=block))
    except PackingError as exc:
        return str(exc)


def _exact(path: Path):
    try:
        return _flat(sources.iter_token_jsonl(path, 7))
    except PackingError as exc:
        return str(exc)


def _same(a, b) -> bool:
    if isinstance(a, str) or isinstance(b, str):
        return a == b
    return all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))


def _plain_lines(seed: int, kind: str) -> list[str]:
    """12 lines of one kind (a block of mixed kinds goes to the exact reader whoever parses it), with JSON
    whitespace in every place it may be (none, tabs, CR before the newline)."""
    rows = random_token_rows(12, seed=seed, kind=kind)
    styles = [{}, {"separators": (",", ":")}, {"indent": None, "separators": (" ,\t", " :  ")}]
    return [json.dumps(r, **styles[i % 3]) + ("\r" if i == 5 else "") for i, r in enumerate(rows)]


@pytest.mark.parametrize("kind", ["mask", "answer", "none"])
def test_kernel_reads_plain_lines_itself_and_as_the_exact_reader(tmp_path, kind, monkeypatch):
    text = "\n".join(_plain_lines(11, kind)) + "\n"
    records = kernel.parse_block(text.encode())
    assert records is not None and len(records[1]) == 12  # the kernel, not pyarrow, reads it
    path = tmp_path / "t.jsonl"
    path.write_text(text)
    assert _same(_outcome(path), _exact(path))
    monkeypatch.setattr(kernel, "HAVE_NUMBA", False)  # pyarrow's reader alone: the same
    assert _same(_outcome(path), _exact(path))


MUTATIONS = {
    "sign": lambda s: s.replace("[", "[-", 1),
    "leading zero": lambda s: s.replace("[", "[0", 1),
    "float": lambda s: s.replace(",", ".0,", 1),
    "exponent": lambda s: s.replace(",", "e1,", 1),
    "null": lambda s: s.replace("[", "[null, ", 1),
    "bool": lambda s: s.replace("[", "[true, ", 1),
    "other key": lambda s: s.replace("{", '{"x": 1, ', 1),
    "repeated key": lambda s: s.replace("{", '{"input_ids": [3], ', 1),
    "escaped key": lambda s: s.replace('"input_ids"', '"input\\u005fids"', 1),
    "beyond int32": lambda s: s.replace("[", "[2147483648, ", 1),
    "int32 max": lambda s: s.replace("[", "[2147483647, ", 1),
    "empty ids": lambda s: '{"input_ids": []}',
    "empty object": lambda s: "{}",
    "no input_ids": lambda s: '{"loss_mask": [1, 0]}',
    "mask 2": lambda s: '{"input_ids": [5, 6], "loss_mask": [2, 0]}',
    "answer at len": lambda s: '{"input_ids": [5, 6], "answer_start_idx": 2}',
    "answer past len": lambda s: '{"input_ids": [5, 6], "answer_start_idx": 3}',
    "answer negative": lambda s: '{"input_ids": [5, 6], "answer_start_idx": -1}',
    "answer null": lambda s: '{"input_ids": [5, 6], "answer_start_idx": null}',
    "two objects": lambda s: s + " " + s,
    "trailing text": lambda s: s + " x",
    "blank": lambda s: "   ",
    "array": lambda s: "[1, 2]",
    "unclosed": lambda s: s[:-1],
}


@pytest.mark.parametrize("kind", ["mask", "answer", "none"])
@pytest.mark.parametrize("name", sorted(MUTATIONS))
def test_kernel_gives_up_exactly_where_it_must(tmp_path, name, kind):
    """One odd line among plain ones: the outcome (samples and line numbers, or the error) is the exact
    reader's, whichever reader ends up deciding."""
    lines = _plain_lines(21, kind)
    lines[6] = MUTATIONS[name](lines[6])
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(lines) + "\n")
    for block in (150, 1 << 20):
        assert _same(_outcome(path, block), _exact(path)), (name, block)


@pytest.mark.parametrize("kind", ["mask", "answer", "none"])
def test_kernel_fuzzed_bytes_match_the_exact_reader(tmp_path, kind):
    """Random single-byte edits of JSON-ish characters: never a different outcome from json.loads."""
    rng = np.random.default_rng(5)
    alphabet = list('0123456789,[]{}":-.e \t') + ["null", "true", '"loss_mask"', '"answer_start_idx"']
    base = _plain_lines(31, kind)
    path = tmp_path / "t.jsonl"
    for trial in range(200):
        lines = list(base)
        k = int(rng.integers(len(lines)))
        s = lines[k]
        pos = int(rng.integers(len(s) + 1))
        edit = alphabet[int(rng.integers(len(alphabet)))]
        lines[k] = s[:pos] + edit + s[pos + int(rng.integers(0, 2)) :]  # insert, or replace one char
        path.write_text("\n".join(lines) + "\n")
        assert _same(_outcome(path), _exact(path)), (trial, lines[k])


def test_control_a_wrong_kernel_is_caught(tmp_path, monkeypatch):
    """The comparisons above can fail: a kernel that swaps two ids is found."""
    real = kernel.parse_block

    def swapped(block):
        out = real(block)
        if out is not None:
            out[0][[0, 1]] = out[0][[1, 0]]
        return out

    lines = _plain_lines(41, "answer")
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(lines) + "\n")
    assert _same(_outcome(path), _exact(path))
    monkeypatch.setattr(kernel, "parse_block", swapped)
    assert not _same(_outcome(path), _exact(path))


def test_a_line_longer_than_a_block_stays_on_the_fast_path(tmp_path, monkeypatch):
    """Its block grows to hold it: the exact reader is not needed (before, it read the rest of the file)."""
    from packcfg.packing.sources import token_jsonl

    rows = random_token_rows(40, seed=8, kind="answer", max_len=400)
    rows[5]["input_ids"] = list(range(3, 3000))  # ~15 kB: hundreds of 64-byte blocks
    path = tmp_path / "long.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    exact = _flat(sources.iter_token_jsonl(path, 7))

    def refuse(*args, **kwargs):
        raise AssertionError("the exact reader was used")

    monkeypatch.setattr(token_jsonl, "iter_token_jsonl", refuse)
    for block in (64, 1000):
        fast = _flat(sources.iter_token_jsonl_fast(path, 7, block_bytes=block))
        for a, b in zip(fast, exact, strict=True):
            assert np.array_equal(a, b)
