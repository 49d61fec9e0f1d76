"""Token-id JSONL (`{"input_ids": [...], "loss_mask"|"answer_start_idx": ...}`): a fast block reader
(compiled kernel, then pyarrow) and the exact `json.loads` reader it hands over to."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from packcfg.packing.errors import PackingError
from packcfg.packing.sources import threads
from packcfg.packing.sources.batch import (
    MAX_TOKEN_ID,
    Batch,
    label_mask_all,
    label_mask_from_answer_start,
    label_mask_from_input_mask,
    make_batch,
    slice_batch,
)
from packcfg.packing.sources.jsonl import jsonl_lines


def _json_value(value: Any) -> str:
    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)


def _bad_id(path: Path, where: str, k: int, value: Any) -> PackingError:
    return PackingError(
        f"{path}:{where}: input_ids[{k}] is {_json_value(value)}: token ids must be integers in "
        f"0..{MAX_TOKEN_ID}"
    )


def check_ids(path: Path, where: str, ids: Any, line: str | None = None) -> np.ndarray:
    """The sample's token ids as an array, or a PackingError naming the file, line, position and value
    (null, true/false, a float, a string, a negative or an id beyond int32 are all refused)."""
    if not isinstance(ids, list) or not ids:
        what = "an empty list" if isinstance(ids, list) else type(ids).__name__
        raise PackingError(f"{path}:{where}: input_ids must be a non-empty list of token ids, got {what}")
    try:
        arr = np.asarray(ids)
    except (OverflowError, ValueError):
        arr = np.asarray(ids, dtype=object)
    if arr.dtype.kind not in "iu" or arr.ndim != 1:
        # the first value that is not a plain int, or (object arrays of big ints) out of range
        k = next(
            (
                k
                for k, x in enumerate(ids)
                if type(x) is not int or not 0 <= x <= MAX_TOKEN_ID  # noqa: E721 (bool is refused)
            ),
            0,
        )
        raise _bad_id(path, where, k, ids[k])
    # bools pass np.asarray as ints ([1, true] -> [1, 1]); look for them only when the line has one
    if line is None or "true" in line or "false" in line:
        k = next((k for k, x in enumerate(ids) if type(x) is bool), None)
        if k is not None:
            raise _bad_id(path, where, k, ids[k])
    lo, hi = arr.min(), arr.max()
    if lo < 0 or hi > MAX_TOKEN_ID:
        k = int(np.flatnonzero((arr < 0) | (arr > MAX_TOKEN_ID))[0])
        raise _bad_id(path, where, k, ids[k])
    return arr


# 4 MiB: the same speed as 16 MiB, ~100 MiB less peak RSS (a block's text, its copies and the parser's
# output are ~6x the block while it is parsed, and two are parsed at a time)
JSONL_BLOCK_BYTES = 4 << 20


def iter_token_jsonl_fast(
    path: Path, batch_size: int, block_bytes: int = JSONL_BLOCK_BYTES, workers: int | None = None
) -> Iterator[Batch]:
    """Token-id JSONL through pyarrow's JSON reader, block by block (bounded memory), at Parquet speed.

    Used while every line of a block is one record (so line numbers stay exact) whose input_ids (and
    loss_mask, answer_start_idx) parse as integers and pass the checks; at the first block where anything
    differs (a blank line, a bool, a null, a float, an id out of range, mixed mask kinds, ...) the exact
    Python reader takes over from that record, and gives the same batches or the same one-line error."""
    try:
        import pyarrow as pa
        import pyarrow.json as pj
    except ImportError:  # pragma: no cover - pyarrow is a dependency of the pack extra
        yield from iter_token_jsonl(path, batch_size)
        return
    schema = pa.schema(
        [
            ("input_ids", pa.list_(pa.int64())),
            ("loss_mask", pa.list_(pa.int64())),
            ("answer_start_idx", pa.int64()),
        ]
    )
    parse = pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore")
    try:
        f = open(path, "rb")
    except OSError as exc:
        raise PackingError(f"{path}: cannot read ({exc.strerror or exc})") from None

    def blocks() -> Iterator[bytes | None]:
        """Whole-line blocks of the file, about `block_bytes` each; a line longer than that makes its block
        as long as the line (read on to its end)."""
        rest = b""
        while True:
            chunk = f.read(block_bytes)
            if chunk and chunk.rfind(b"\n") < 0:  # no line ends here: gather up to the next newline
                parts = [rest, chunk]
                while chunk and chunk.rfind(b"\n") < 0:
                    chunk = f.read(block_bytes)
                    parts.append(chunk)
                block = b"".join(parts)
            else:
                block = rest + chunk
            if chunk:
                cut = block.rfind(b"\n") + 1
                block, rest = block[:cut], block[cut:]
            if block:
                yield block
            if not chunk:
                return

    def parsed(block: bytes | None) -> tuple[Batch | None, int]:
        if block is None:
            return None, 0
        return _token_block(block, parse, 1, max(block_bytes, len(block)))

    done = 0  # records yielded so far (= lines: every earlier block had one record per line)
    with f:
        # blocks are parsed two at a time (the compiled reader releases the GIL), handed on in order; at
        # most one more waits, so memory stays at a few blocks
        for batch, lines in threads.ordered_map(parsed, blocks(), workers or threads.READ_WORKERS, ahead=1):
            if batch is None:
                break
            batch.first_line = done + 1
            for lo in range(0, len(batch.offsets) - 1, batch_size):
                yield slice_batch(batch, lo, lo + batch_size)
            done += lines
        else:
            return
    yield from iter_token_jsonl(path, batch_size, skip=done)


def _token_block(block: bytes, parse: Any, first_line: int, block_bytes: int) -> tuple[Batch | None, int]:
    """One block of token-id JSONL (whole lines) as (Batch, lines), or (None, _) when the exact reader
    must decide.

    The compiled strict reader (`_jsonl_kernel`, when numba is installed) goes first; a block it gives up
    on goes to pyarrow's JSON reader. Both hand the same arrays to `_records_batch`."""
    from packcfg.packing import _jsonl_kernel

    records = _jsonl_kernel.parse_block(block)
    if records is not None:
        lines = len(records[1])  # it refuses blank lines: one record per line
    else:
        lines = block.count(b"\n") + (0 if block.endswith(b"\n") else 1)
        records = _arrow_records(block, lines, parse, block_bytes)
    return (None if records is None else _records_batch(*records, first_line)), lines


def _arrow_records(
    block: bytes, lines: int, parse: Any, block_bytes: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """A block through pyarrow's JSON reader, as `_jsonl_kernel.parse_block` returns it (None: pyarrow
    refused it, or read a record per line differently)."""
    import io

    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.json as pj

    if b"null" in block:
        return None  # pyarrow reads `"answer_start_idx": null` as an absent key; json.loads does not
    # 1 MiB blocks are parsed on pyarrow's threads; a line longer than that straddles two blocks, which
    # pyarrow refuses, so then the whole block is parsed as one (on one thread)
    for size in (1 << 20, max(1 << 20, min(len(block) + 1, block_bytes + 1))):
        try:
            table = pj.read_json(
                io.BytesIO(block),
                read_options=pj.ReadOptions(block_size=size, use_threads=True),
                parse_options=parse,
            )
            break
        except (pa.ArrowException, ValueError):
            continue
    else:
        return None
    if table.num_rows != lines or lines == 0:
        return None  # blank lines (line numbers would drift) or something pyarrow read differently
    ids = table.column("input_ids").combine_chunks()
    if ids.null_count:
        return None
    flat = ids.flatten()
    if flat.null_count:
        return None
    lens = pc.list_value_length(ids).to_numpy(zero_copy_only=False).astype(np.int64)
    values = flat.to_numpy(zero_copy_only=False)
    if len(values) and (values.min() < 0 or values.max() > MAX_TOKEN_ID):
        return None
    lm_col = table.column("loss_mask").combine_chunks()
    mflat = lm_col.flatten()
    if mflat.null_count:
        return None
    mv = mflat.to_numpy(zero_copy_only=False)
    if len(mv) and (mv.min() < 0 or mv.max() > 1):
        return None
    mlens = pc.fill_null(pc.list_value_length(lm_col), -1).to_numpy(zero_copy_only=False).astype(np.int64)
    ans_col = table.column("answer_start_idx").combine_chunks()
    if ans_col.null_count < len(ans_col) and pc.min(ans_col).as_py() < 0:
        return None  # -1 means "absent" below
    answer = pc.fill_null(ans_col, -1).to_numpy(zero_copy_only=False).astype(np.int64)
    return values.astype(np.int32), lens, mv.astype(np.int8), mlens, answer


def _records_batch(
    values: np.ndarray,
    lens: np.ndarray,
    mask_values: np.ndarray,
    mask_lens: np.ndarray,
    answer: np.ndarray,
    first_line: int,
) -> Batch | None:
    """The Batch of a block's records (lengths; mask lengths and answers -1 where the key is absent), or
    None unless every record is usable the same way: non-empty input_ids, and either a loss_mask as long
    as input_ids on every record (it wins over answer_start_idx), or none and then answer_start_idx in
    0..len on every record or on none."""
    n = len(lens)
    if not n or lens.min() <= 0:
        return None
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lens, out=offsets[1:])
    has_mask = mask_lens >= 0
    if has_mask.all():
        if not np.array_equal(mask_lens, lens):
            return None
        lm = label_mask_from_input_mask(mask_values, offsets)
    elif has_mask.any():
        return None
    elif (answer >= 0).all():
        if (answer > lens).any():
            return None
        lm = label_mask_from_answer_start(answer, offsets)
    elif (answer >= 0).any():
        return None
    else:
        lm = label_mask_all(offsets)
    return Batch(values, offsets, lm, first_line)


def iter_token_jsonl(path: Path, batch_size: int, skip: int = 0) -> Iterator[Batch]:
    """The exact token-id JSONL reader (json.loads per line); `skip`: records already read."""
    ids_list: list[np.ndarray] = []
    masks: list[np.ndarray] = []
    linenos: list[int] = []
    first = 0
    for lineno, line, obj in jsonl_lines(path):
        if skip:
            skip -= 1
            continue
        where = str(lineno)
        if "input_ids" not in obj:
            raise PackingError(f"{path}:{lineno}: missing 'input_ids'")
        ids = check_ids(path, where, obj["input_ids"], line)
        n = len(ids)
        if "loss_mask" in obj:
            m = obj["loss_mask"]
            arr = np.asarray(m) if isinstance(m, list) else None
            if arr is None or len(arr) != n or (n and arr.dtype.kind not in "biu"):
                got = f"{len(m)} values" if isinstance(m, list) else type(m).__name__
                raise PackingError(
                    f"{path}:{lineno}: loss_mask must be a list of 0/1 as long as input_ids ({n}), got {got}"
                )
            if n and (arr.min() < 0 or arr.max() > 1):
                raise PackingError(f"{path}:{lineno}: loss_mask values must be 0 or 1, got {int(arr.max())}")
            lm = np.zeros(n, dtype=np.int8)
            lm[:-1] = arr[1:]
        elif "answer_start_idx" in obj:
            a = obj["answer_start_idx"]
            if type(a) is not int or not 0 <= a <= n:
                raise PackingError(
                    f"{path}:{lineno}: answer_start_idx must be an integer in 0..{n}, got {a!r}"
                )
            lm = (np.arange(n) >= a - 1).astype(np.int8)
            lm[-1] = 0
        else:
            lm = np.ones(n, dtype=np.int8)
            lm[-1] = 0
        if not ids_list:
            first = lineno
        ids_list.append(ids)
        masks.append(lm)
        linenos.append(lineno)
        if len(ids_list) >= batch_size:
            yield make_batch(ids_list, masks, first, linenos)
            ids_list, masks, linenos = [], [], []
    if ids_list:
        yield make_batch(ids_list, masks, first, linenos)
