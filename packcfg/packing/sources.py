"""Read the samples to pack: token JSONL/Parquet or Bridge SFT JSONL text plus a local tokenizer.json.

Every reader yields `Batch`es of flat numpy arrays (token values, sample offsets, a label-aligned loss
mask), never per-token Python objects, and `spool` appends them to flat files on disk (memory-mapped
afterwards), so that the writer can gather any sample in O(1) while memory stays bounded by one batch.

Loss-mask convention (Bridge's packed format): the stored mask is *label-aligned*: position i says whether
the prediction made at token i (of token i+1) counts. From an input-aligned `loss_mask` that is the mask
shifted left by one; from `answer_start_idx` it is `i >= answer_start_idx - 1`; with neither, every
prediction counts. Each sample's last position is 0: it predicts nothing inside the sample.
"""

from __future__ import annotations

import collections
import hashlib
import json
import os
import queue
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from packcfg.core.inputs import check_input
from packcfg.packing.errors import PackingError

EOS_CANDIDATES = ("<eos>", "</s>", "<|endoftext|>", "<|end_of_text|>", "<|eot_id|>", "<|im_end|>", "[SEP]")
PARQUET_SUFFIXES = (".parquet", ".pq")
T = TypeVar("T")
U = TypeVar("U")
TOKENIZED_FORMATS = ("text", "chat")  # the source formats a tokenizer reads (the others hold token ids)


@dataclass
class Batch:
    """Samples in flat form: sample j is values[offsets[j]:offsets[j+1]]."""

    values: np.ndarray  # int32 token ids
    offsets: np.ndarray  # int64, len n+1, starts at 0
    mask: np.ndarray  # int8 label-aligned loss mask, same length as values
    first_line: int  # 1-based line (JSONL) or row (Parquet) of sample 0, for messages
    lines: np.ndarray | None = None  # the line of every sample, when they are not consecutive

    def sample_lines(self) -> np.ndarray:
        """The source line (or row) of every sample in the batch."""
        if self.lines is not None:
            return self.lines
        return np.arange(self.first_line, self.first_line + len(self.offsets) - 1, dtype=np.int64)


# --------------------------------------------------------------------------------------------- format


def detect_format(path: Path) -> str:
    """`parquet` (token ids), `tokens` (JSONL of token ids), `text` (Bridge SFT JSONL input/output) or `chat`
    (JSONL rows of `messages`, rendered with the tokenizer's chat template: packcfg.packing.chat)."""
    if os.path.isdir(path):
        raise PackingError(f"{path}: is a directory, expected a .jsonl or .parquet file")
    check_input(path, error=PackingError)  # never open a FIFO or a device (it blocks)
    if path.suffix.lower() in PARQUET_SUFFIXES:
        return "parquet"
    for lineno, obj in _jsonl_records(path):
        if "input_ids" in obj:
            return "tokens"
        if "input" in obj or "output" in obj:
            return "text"
        if "messages" in obj:
            return "chat"
        keys = ", ".join(sorted(obj)) or "none"
        raise PackingError(
            f"{path}:{lineno}: expected 'input_ids' (tokenized), 'input'/'output' (SFT text) or 'messages' "
            f"(chat SFT), got keys: {keys}"
        )
    raise PackingError(f"{path}: empty dataset (no samples)")


def _jsonl_records(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) for each non-blank line; bad JSON, bad UTF-8 or an unreadable file is a
    PackingError naming the file (and line). The file closes when the caller stops iterating."""
    for lineno, _, obj in _jsonl_lines(path):
        yield lineno, obj


def _jsonl_lines(path: Path) -> Iterator[tuple[int, str, dict[str, Any]]]:
    """(line number, raw line, object) for each non-blank line (see `_jsonl_records`)."""
    try:
        f = open(path, encoding="utf-8")
    except OSError as exc:
        raise PackingError(f"{path}: cannot read ({exc.strerror or exc})") from None
    with f:
        try:
            for lineno, line in enumerate(f, 1):
                if line.strip():
                    yield lineno, line, _parse_line(path, lineno, line)
        except UnicodeDecodeError as exc:
            raise PackingError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None


def _parse_line(path: Path, lineno: int, line: str) -> dict[str, Any]:
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as exc:
        snippet = line.strip()[:60]
        raise PackingError(
            f"{path}:{lineno}: malformed JSON ({exc.msg} at column {exc.colno}): {snippet!r}"
        ) from None
    except RecursionError:
        raise PackingError(f"{path}:{lineno}: malformed JSON (nested too deeply)") from None
    if not isinstance(obj, dict):
        raise PackingError(f"{path}:{lineno}: expected a JSON object, got {type(obj).__name__}")
    return obj


# --------------------------------------------------------------------------------------------- masks


def label_mask_from_input_mask(mask: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Input-aligned mask (token i is a target) -> label-aligned (prediction at i counts), per sample."""
    out = np.zeros(len(mask), dtype=np.int8)
    if len(mask) > 1:
        out[:-1] = mask[1:]
    ends = offsets[1:] - 1
    out[ends[ends >= 0]] = 0
    return out


def label_mask_from_answer_start(answer_start: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """1 from position answer_start - 1 of each sample up to, not including, its last position."""
    # each sample is three runs, 0s up to its targets, 1s, and a 0 at its last position: one np.repeat
    # writes them (4x less CPU than a running sum over the tokens)
    lens = np.diff(offsets)
    head = np.minimum(np.maximum(np.asarray(answer_start, dtype=np.int64) - 1, 0), lens - 1)
    runs = np.empty((len(lens), 3), dtype=np.int64)
    runs[:, 0] = head
    runs[:, 1] = lens - 1 - head
    runs[:, 2] = 1
    return np.repeat(np.tile(np.array([0, 1, 0], dtype=np.int8), len(lens)), runs.ravel())


def label_mask_all(offsets: np.ndarray) -> np.ndarray:
    out = np.ones(int(offsets[-1]), dtype=np.int8)
    out[offsets[1:] - 1] = 0
    return out


# --------------------------------------------------------------------------------------------- readers


def iter_batches(
    path: Path,
    tokenizer: Path | None = None,
    batch_size: int = 4096,
    fmt: str | None = None,
    jsonl_block_bytes: int | None = None,
    workers: int | None = None,
) -> Iterator[Batch]:
    """Stream the source as batches; raises PackingError naming file and line on bad input.
    `jsonl_block_bytes`: the block size token-id JSONL is read in (default JSONL_BLOCK_BYTES); `workers`:
    threads that decode Parquet row groups or parse JSONL blocks side by side (default READ_WORKERS)."""
    fmt = fmt or detect_format(path)
    workers = workers or READ_WORKERS
    if fmt == "parquet":
        yield from _iter_parquet(path, batch_size, workers)
    elif fmt == "tokens":
        yield from _iter_token_jsonl_fast(path, batch_size, jsonl_block_bytes or JSONL_BLOCK_BYTES, workers)
    elif fmt == "text":
        if tokenizer is None:
            raise PackingError(
                f"{path}: SFT text (input/output) needs a tokenizer: pass --tokenizer PATH/tokenizer.json"
            )
        yield from _tokenized_text(path, Path(tokenizer), batch_size)
    elif fmt == "chat":
        if tokenizer is None:
            raise PackingError(
                f"{path}: chat SFT (messages) needs a local tokenizer folder with a chat template: "
                "pass --tokenizer DIR"
            )
        yield from _iter_chat_jsonl(path, load_tokenizer(Path(tokenizer)), batch_size)
    else:
        raise PackingError(f"{path}: unknown input format {fmt!r}")


MAX_TOKEN_ID = 2**31 - 1  # input_ids are stored as int32


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


def _check_ids(path: Path, where: str, ids: Any, line: str | None = None) -> np.ndarray:
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


JSONL_BLOCK_BYTES = 16 << 20
# threads that read a source (Parquet row groups, JSONL blocks) side by side
READ_WORKERS = min(2, os.cpu_count() or 1)


def _iter_token_jsonl_fast(
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
        yield from _iter_token_jsonl(path, batch_size)
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
        """Whole-line blocks of the file; None: a line longer than a block (the exact reader decides)."""
        rest = b""
        while True:
            chunk = f.read(block_bytes)
            block = rest + chunk
            if chunk:
                cut = block.rfind(b"\n") + 1
                if cut == 0:
                    yield None
                    return
                block, rest = block[:cut], block[cut:]
            if block:
                yield block
            if not chunk:
                return

    def parsed(block: bytes | None) -> tuple[Batch | None, int]:
        return (None, 0) if block is None else _token_block(block, parse, 1, block_bytes)

    done = 0  # records yielded so far (= lines: every earlier block had one record per line)
    with f:
        # blocks are parsed two at a time (the compiled reader releases the GIL), handed on in order; at
        # most one more waits, so memory stays at a few blocks
        for batch, lines in ordered_map(parsed, blocks(), workers or READ_WORKERS, ahead=1):
            if batch is None:
                break
            batch.first_line = done + 1
            for lo in range(0, len(batch.offsets) - 1, batch_size):
                yield _slice_batch(batch, lo, lo + batch_size)
            done += lines
        else:
            return
    yield from _iter_token_jsonl(path, batch_size, skip=done)


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


def _slice_batch(b: Batch, lo: int, hi: int) -> Batch:
    hi = min(hi, len(b.offsets) - 1)
    if lo == 0 and hi == len(b.offsets) - 1:
        return b
    s, e = int(b.offsets[lo]), int(b.offsets[hi])
    lines = b.lines[lo:hi] if b.lines is not None else None
    return Batch(b.values[s:e], b.offsets[lo : hi + 1] - s, b.mask[s:e], b.first_line + lo, lines)


def _iter_token_jsonl(path: Path, batch_size: int, skip: int = 0) -> Iterator[Batch]:
    """The exact token-id JSONL reader (json.loads per line); `skip`: records already read."""
    ids_list: list[np.ndarray] = []
    masks: list[np.ndarray] = []
    linenos: list[int] = []
    first = 0
    for lineno, line, obj in _jsonl_lines(path):
        if skip:
            skip -= 1
            continue
        where = str(lineno)
        if "input_ids" not in obj:
            raise PackingError(f"{path}:{lineno}: missing 'input_ids'")
        ids = _check_ids(path, where, obj["input_ids"], line)
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
            yield _make_batch(ids_list, masks, first, linenos)
            ids_list, masks, linenos = [], [], []
    if ids_list:
        yield _make_batch(ids_list, masks, first, linenos)


def _make_batch(
    ids_list: list[np.ndarray], masks: list[np.ndarray], first: int, linenos: list[int] | None = None
) -> Batch:
    offsets = np.zeros(len(ids_list) + 1, dtype=np.int64)
    np.cumsum([len(x) for x in ids_list], out=offsets[1:])
    return Batch(
        np.concatenate(ids_list).astype(np.int32, copy=False),
        offsets,
        np.concatenate(masks).astype(np.int8, copy=False),
        first,
        np.asarray(linenos, dtype=np.int64) if linenos is not None else None,
    )


def _iter_parquet(path: Path, batch_size: int, workers: int | None = None) -> Iterator[Batch]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(path, pre_buffer=False, buffer_size=1 << 20)  # memory: one batch, no read-ahead
    except (OSError, pa.ArrowException) as exc:
        raise PackingError(f"{path}: not a readable Parquet file ({exc})") from None
    schema = pf.schema_arrow
    names = set(schema.names)
    if "input_ids" not in names:
        raise PackingError(f"{path}: no 'input_ids' column (columns: {', '.join(schema.names)})")

    def list_of_ints(name: str, allow_bool: bool = False) -> None:
        t = schema.field(name).type
        ok = (pa.types.is_list(t) or pa.types.is_large_list(t)) and (
            pa.types.is_integer(t.value_type) or (allow_bool and pa.types.is_boolean(t.value_type))
        )
        if not ok:
            raise PackingError(f"{path}: column {name!r} has type {t}, expected list<int>")

    list_of_ints("input_ids")
    columns = ["input_ids"]
    mode = "all"
    if "loss_mask" in names:
        list_of_ints("loss_mask", allow_bool=True)
        columns.append("loss_mask")
        mode = "mask"
    elif "answer_start_idx" in names:
        t = schema.field("answer_start_idx").type
        if not pa.types.is_integer(t):
            raise PackingError(f"{path}: column 'answer_start_idx' has type {t}, expected int")
        columns.append("answer_start_idx")
        mode = "answer"
    meta = pf.metadata
    first_rows = np.zeros(meta.num_row_groups + 1, dtype=np.int64)
    np.cumsum([meta.row_group(i).num_rows for i in range(meta.num_row_groups)], out=first_rows[1:])
    biggest = max((meta.row_group(i).total_byte_size for i in range(meta.num_row_groups)), default=0)
    workers = workers or READ_WORKERS
    if workers < 2 or meta.num_row_groups < 2 or biggest > PARALLEL_ROW_GROUP_BYTES:
        row = 1
        for rb in pf.iter_batches(batch_size=batch_size, columns=columns, use_threads=False):
            yield _parquet_batch(path, rb, row, mode)
            row += rb.num_rows
        return
    # row groups decoded (and checked, and masked) in parallel, handed on in file order; each worker
    # opens the file itself (a ParquetFile is not shared between threads)
    local = threading.local()

    def group(i: int) -> list[Batch]:
        if not hasattr(local, "file"):
            local.file = pq.ParquetFile(path, pre_buffer=False, buffer_size=1 << 20)
        table = local.file.read_row_group(i, columns=columns, use_threads=False)
        out, row = [], 1 + int(first_rows[i])
        for rb in table.to_batches(max_chunksize=batch_size):
            out.append(_parquet_batch(path, rb, row, mode))
            row += rb.num_rows
        return out

    for batches in ordered_map(group, range(meta.num_row_groups), workers):
        yield from batches


# row groups up to this size (uncompressed) are decoded two at a time; larger ones stream batch by batch
PARALLEL_ROW_GROUP_BYTES = 32 << 20


def _parquet_batch(path: Path, rb: Any, row: int, mode: str) -> Batch:
    """A record batch of a Parquet source (its first row is `row`, 1-based) as a Batch, checked.
    (List lengths come from the offsets: pyarrow.compute costs ~90 ms to import.)"""
    ids_col = rb.column("input_ids")
    if ids_col.null_count:
        bad = row + int(np.flatnonzero(ids_col.is_null().to_numpy(zero_copy_only=False))[0])
        raise PackingError(f"{path}: row {bad}: input_ids is null")
    offsets = np.asarray(ids_col.offsets, dtype=np.int64)
    offsets = offsets - offsets[0]  # a sliced batch's offsets start where its rows do
    lens = np.diff(offsets)
    if (lens == 0).any():
        raise PackingError(f"{path}: row {row + int(np.argmin(lens))}: input_ids is empty")
    flat = _list_values(ids_col)
    if flat.null_count:  # a null inside a list: never let it become -2147483648
        k = int(np.flatnonzero(flat.is_null().to_numpy(zero_copy_only=False))[0])
        j = int(np.searchsorted(offsets, k, side="right")) - 1
        raise PackingError(f"{path}: row {row + j}: input_ids[{k - int(offsets[j])}] is null")
    values = flat.to_numpy(zero_copy_only=False)
    if len(values) and (values.min() < 0 or values.max() > MAX_TOKEN_ID):
        k = int(np.flatnonzero((values < 0) | (values > MAX_TOKEN_ID))[0])
        j = int(np.searchsorted(offsets, k, side="right")) - 1
        raise PackingError(
            f"{path}: row {row + j}: input_ids[{k - int(offsets[j])}] is {int(values[k])}: token ids "
            f"must be integers in 0..{MAX_TOKEN_ID}"
        )
    if mode == "mask":
        mcol = rb.column("loss_mask")
        if mcol.null_count:  # a null loss_mask list
            j = int(np.flatnonzero(mcol.is_null().to_numpy(zero_copy_only=False))[0])
            raise PackingError(f"{path}: row {row + j}: loss_mask length differs from input_ids")
        mlens = np.diff(np.asarray(mcol.offsets, dtype=np.int64))
        if not np.array_equal(mlens, lens):
            j = int(np.flatnonzero(mlens != lens)[0])
            raise PackingError(f"{path}: row {row + j}: loss_mask length differs from input_ids")
        mflat = _list_values(mcol)
        if mflat.null_count:
            k = int(np.flatnonzero(mflat.is_null().to_numpy(zero_copy_only=False))[0])
            j = int(np.searchsorted(offsets, k, side="right")) - 1
            raise PackingError(f"{path}: row {row + j}: loss_mask[{k - int(offsets[j])}] is null")
        m = mflat.to_numpy(zero_copy_only=False).astype(np.int64)
        if len(m) and (m.min() < 0 or m.max() > 1):
            raise PackingError(f"{path}: row {row}..{row + len(lens) - 1}: loss_mask values must be 0 or 1")
        lm = label_mask_from_input_mask(m, offsets)
    elif mode == "answer":
        a = rb.column("answer_start_idx").to_numpy(zero_copy_only=False)
        if np.isnan(a.astype(float)).any() or (a < 0).any() or (a > lens).any():
            j = int(np.flatnonzero(np.isnan(a.astype(float)) | (a < 0) | (a > lens))[0])
            raise PackingError(f"{path}: row {row + j}: answer_start_idx {a[j]} outside 0..{lens[j]}")
        lm = label_mask_from_answer_start(a.astype(np.int64), offsets)
    else:
        lm = label_mask_all(offsets)
    return Batch(values.astype(np.int32, copy=False), offsets, lm, row)


def _list_values(arr: Any) -> Any:
    """The values of a list array without null lists, as `flatten()` gives them (which imports
    pyarrow.compute): the child array between the first and last offset."""
    offsets = arr.offsets
    lo = offsets[0].as_py() if len(offsets) else 0
    hi = offsets[-1].as_py() if len(offsets) else 0
    return arr.values.slice(lo, hi - lo)


# --------------------------------------------------------------------------------------------- text


@dataclass
class LoadedTokenizer:
    tokenizer: Any
    path: Path
    eos_id: int
    pad_id: int


def _read_json_object(path: Path) -> dict[str, Any] | None:
    if not os.path.lexists(path):
        return None
    check_input(path, error=PackingError)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise PackingError(f"{path}: not readable JSON ({str(exc).splitlines()[0]})") from None
    except RecursionError:
        raise PackingError(f"{path}: not readable JSON (nested too deeply)") from None
    return data if isinstance(data, dict) else None


def _configured_eos(folder: Path, tok: Any) -> int | None:
    """The EOS id the tokenizer folder itself names, as Hugging Face tokenizers record it: `eos_token` in
    tokenizer_config.json, then in special_tokens_map.json (a string or {"content": ...}), then
    generation_config.json's `eos_token_id` (an int or a list; the first). None when no file names one,
    so the fixed EOS_CANDIDATES list is only a fallback (it would pick <|end_of_text|> over Llama 3
    instruct's <|eot_id|> and <|endoftext|> over Qwen chat's <|im_end|>)."""
    for name in ("tokenizer_config.json", "special_tokens_map.json"):
        cfg = _read_json_object(folder / name)
        token = cfg.get("eos_token") if cfg else None
        if isinstance(token, dict):
            token = token.get("content")
        if isinstance(token, str) and token:
            tid = tok.token_to_id(token)
            if tid is None:
                raise PackingError(
                    f"{folder / name}: eos_token {token!r} is not in the tokenizer's vocabulary"
                )
            return int(tid)
    gen = _read_json_object(folder / "generation_config.json")
    value = gen.get("eos_token_id") if gen else None
    if isinstance(value, list) and value:
        value = value[0]
    if type(value) is int and value >= 0:
        if tok.id_to_token(value) is None:
            raise PackingError(
                f"{folder / 'generation_config.json'}: eos_token_id {value} is not in the tokenizer's vocabulary"
            )
        return value
    return None


def load_tokenizer(path: Path) -> LoadedTokenizer:
    """A local tokenizer.json (tokenizers library); no hub downloads. EOS ends every sample."""
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise PackingError(
            "tokenizing SFT text needs the 'tokenizers' package: pip install 'packcfg[pack]'"
        ) from None
    path = Path(path)
    if path.is_dir():
        path = path / "tokenizer.json"
    try:
        os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        raise PackingError(
            f"{path}: tokenizer not found (need a local tokenizer.json; no hub downloads)"
        ) from None
    except OSError:
        pass  # check_input names it
    check_input(path, what="tokenizer", error=PackingError)
    try:
        tok = Tokenizer.from_file(str(path))
    except Exception as exc:  # the Rust side raises plain Exception subclasses
        raise PackingError(f"{path}: not a tokenizers JSON file ({str(exc).splitlines()[0]})") from None
    eos = _configured_eos(path.parent, tok)
    if eos is None:
        eos = next((tok.token_to_id(t) for t in EOS_CANDIDATES if tok.token_to_id(t) is not None), None)
    if eos is None:
        raise PackingError(f"{path}: no end-of-sequence token (looked for {', '.join(EOS_CANDIDATES)})")
    # Bridge pads packed samples with the EOS id (its collate relies on that); keep that convention.
    return LoadedTokenizer(tok, path, int(eos), int(eos))


# Small text sources are tokenized once per process: the trainer calls ensure_packed and then
# tokenized_samples on the same file, and tokenizing dominates both. Keyed by both files' identity.
_TEXT_CACHE: dict[tuple[Any, ...], list[Batch]] = {}
_TEXT_CACHE_MAX_BYTES = 32 << 20


def _tokenized_text(path: Path, tokenizer: Path, batch_size: int) -> Iterator[Batch]:
    tok = load_tokenizer(tokenizer)
    try:
        st, tt = path.stat(), tok.path.stat()
    except OSError as exc:
        raise PackingError(f"{path}: cannot read ({exc.strerror or exc})") from None
    if st.st_size > _TEXT_CACHE_MAX_BYTES:
        yield from _iter_text_jsonl(path, tok, batch_size)
        return
    key = (
        str(path.resolve()),
        st.st_size,
        st.st_mtime_ns,
        str(tok.path.resolve()),
        tt.st_size,
        tt.st_mtime_ns,
        tok.eos_id,
    )
    cached = _TEXT_CACHE.get(key)
    if cached is None:
        cached = list(_iter_text_jsonl(path, tok, batch_size))
        if len(_TEXT_CACHE) >= 4:
            _TEXT_CACHE.pop(next(iter(_TEXT_CACHE)))
        _TEXT_CACHE[key] = cached
    yield from cached


def _iter_text_jsonl(path: Path, tok: LoadedTokenizer, batch_size: int) -> Iterator[Batch]:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "true")
    contexts: list[str] = []
    answers: list[str] = []
    first = 0
    linenos: list[int] = []

    def flush() -> Batch:
        ctx = tok.tokenizer.encode_batch(contexts, add_special_tokens=False)
        ans = tok.tokenizer.encode_batch(answers, add_special_tokens=False)
        ids_list = []
        masks = []
        for c, a in zip(ctx, ans, strict=True):
            ids = np.asarray(c.ids + a.ids + [tok.eos_id], dtype=np.int32)
            lm = (np.arange(len(ids)) >= len(c.ids) - 1).astype(np.int8)  # predict the answer and EOS
            lm[-1] = 0
            ids_list.append(ids)
            masks.append(lm)
        return _make_batch(ids_list, masks, first, linenos)

    for lineno, obj in _jsonl_records(path):
        for key in ("input", "output"):
            if key not in obj:
                raise PackingError(
                    f"{path}:{lineno}: missing {key!r} (Bridge SFT JSONL needs input and output)"
                )
            if not isinstance(obj[key], str):
                raise PackingError(
                    f"{path}:{lineno}: {key!r} must be a string, got {type(obj[key]).__name__}"
                )
        if not contexts:
            first = lineno
            linenos = []
        linenos.append(lineno)
        # Bridge's default prompt template is "{input} {output}": the answer follows a space.
        contexts.append(obj["input"])
        answers.append(" " + obj["output"])
        if len(contexts) >= batch_size:
            yield flush()
            contexts, answers = [], []
    if contexts:
        yield flush()


def _iter_chat_jsonl(path: Path, tok: LoadedTokenizer, batch_size: int) -> Iterator[Batch]:
    """Chat rows rendered with the chat template beside tokenizer.json; the mask: assistant turns only."""
    from packcfg.packing.chat import assistant_spans, check_messages, load_chat_template, span_mask

    os.environ.setdefault("TOKENIZERS_PARALLELISM", "true")
    template = load_chat_template(tok.path.parent)
    texts: list[str] = []
    spans: list[list[tuple[int, int]]] = []
    linenos: list[int] = []

    def flush() -> Batch:
        # rendered text is tokenized as transformers' apply_chat_template does: no added special tokens
        encodings = tok.tokenizer.encode_batch(texts, add_special_tokens=False)
        ids_list, masks = [], []
        for enc, row_spans, lineno in zip(encodings, spans, linenos, strict=True):
            if len(enc.ids) < 2:
                raise PackingError(f"{path}:{lineno}: the chat template renders fewer than 2 tokens")
            ids_list.append(np.asarray(enc.ids, dtype=np.int32))
            mask = span_mask(enc.offsets, row_spans)
            masks.append(label_mask_from_input_mask(mask, np.array([0, len(mask)])))
        return _make_batch(ids_list, masks, linenos[0], linenos)

    for lineno, obj in _jsonl_records(path):
        text, row_spans = assistant_spans(template, check_messages(path, lineno, obj), f"{path}:{lineno}")
        texts.append(text)
        spans.append(row_spans)
        linenos.append(lineno)
        if len(texts) >= batch_size:
            yield flush()
            texts, spans, linenos = [], [], []
    if texts:
        yield flush()


# --------------------------------------------------------------------------------------------- spool


def ordered_map(
    fn: Callable[[U], T], items: Iterable[U], workers: int, ahead: int | None = None
) -> Iterator[T]:
    """fn(item) for each item, computed in `workers` threads, yielded in the order of `items`: at most
    `ahead` (default `workers`) results wait beyond the one being consumed. An exception of fn is raised
    here, in its place in the sequence; when the consumer stops early the pending work is cancelled."""
    from concurrent.futures import Future, ThreadPoolExecutor

    ahead = workers if ahead is None else ahead
    it = iter(items)
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="packcfg-worker")
    try:
        pending: collections.deque[Future[T]] = collections.deque()
        for item in it:
            pending.append(pool.submit(fn, item))
            if len(pending) > ahead:
                break
        while pending:
            result = pending.popleft().result()
            nxt = next(it, _DONE)
            if nxt is not _DONE:
                pending.append(pool.submit(fn, nxt))
            yield result
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


_DONE = object()


def prefetched(items: Iterator[T], depth: int = 2) -> Iterator[T]:
    """What `items` yields, in order, computed up to `depth` items ahead in a worker thread.

    For readers whose work releases the GIL (pyarrow decoding, numpy): on two cores the next batch is read
    while this one is written. An exception of `items` is raised here, in its place in the sequence; when
    the consumer stops early the worker stops at its next item and closes `items`.
    """
    q: queue.Queue[tuple[bool, Any]] = queue.Queue(depth)
    stop = threading.Event()

    def put(entry: tuple[bool, Any]) -> bool:
        while not stop.is_set():
            try:
                q.put(entry, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def work() -> None:
        try:
            for x in items:
                if not put((False, x)):
                    return
            put((True, None))
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer, raised there
            put((True, exc))
        finally:
            close = getattr(items, "close", None)
            if close is not None:
                close()

    worker = threading.Thread(target=work, name="packcfg-prefetch", daemon=True)
    worker.start()
    try:
        while True:
            last, value = q.get()
            if last:
                if value is not None:
                    raise value
                return
            yield value
    finally:
        stop.set()
        worker.join()


@dataclass
class Spool:
    """All samples in flat arrays (memory-mapped files, or in memory for small data)."""

    tokens: np.ndarray  # int32
    mask: np.ndarray  # int8, label-aligned
    offsets: np.ndarray  # int64, n+1
    lines: np.ndarray  # int64: source line/row of each sample (for messages)
    workdir: Path | None = None

    @property
    def num_samples(self) -> int:
        return len(self.offsets) - 1

    def lengths(self) -> np.ndarray:
        """Token count of every sample (len(input_ids))."""
        return np.diff(self.offsets)

    def runtime_lengths(self) -> np.ndarray:
        """What a sample occupies in a pack at runtime: input and label are one token shorter."""
        return np.diff(self.offsets) - 1

    def sample(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        s, e = int(self.offsets[i]), int(self.offsets[i + 1])
        return np.asarray(self.tokens[s:e]), np.asarray(self.mask[s:e])

    def close(self) -> None:
        """Drop the memory maps and delete the spool files."""
        self.tokens = self.mask = np.zeros(0)
        if self.workdir is not None:
            for name in ("tokens.bin", "mask.bin"):
                try:
                    (self.workdir / name).unlink()
                except FileNotFoundError:
                    pass


def spool(
    path: Path,
    tokenizer: Path | None = None,
    workdir: Path | None = None,
    progress: Any = None,
    batch_size: int = 4096,
) -> Spool:
    """Read the whole source once. With `workdir`, tokens go to disk (bounded memory); else to memory."""
    offsets_parts: list[np.ndarray] = [np.zeros(1, dtype=np.int64)]
    lines_parts: list[np.ndarray] = []
    total = 0
    tok_parts: list[np.ndarray] = []
    mask_parts: list[np.ndarray] = []
    tf = mf = None
    if workdir is not None:
        workdir.mkdir(parents=True, exist_ok=True)
        tf = open(workdir / "tokens.bin", "wb")  # closed below
        mf = open(workdir / "mask.bin", "wb")
    try:
        for b in prefetched(iter_batches(Path(path), tokenizer, batch_size)):
            if tf is not None and mf is not None:
                b.values.tofile(tf)
                b.mask.tofile(mf)
            else:
                tok_parts.append(b.values)
                mask_parts.append(b.mask)
            offsets_parts.append(b.offsets[1:] + total)
            lines_parts.append(b.sample_lines())
            total += int(b.offsets[-1])
            if progress is not None:
                progress.update(len(b.offsets) - 1)
    finally:
        if tf is not None and mf is not None:
            tf.close()
            mf.close()
    offsets = np.concatenate(offsets_parts)
    if len(offsets) == 1:
        raise PackingError(f"{path}: empty dataset (no samples)")
    lines = np.concatenate(lines_parts)
    if workdir is not None:
        tokens = np.memmap(workdir / "tokens.bin", dtype=np.int32, mode="r", shape=(total,))
        mask = np.memmap(workdir / "mask.bin", dtype=np.int8, mode="r", shape=(total,))
        return Spool(tokens, mask, offsets, lines, workdir)
    return Spool(np.concatenate(tok_parts), np.concatenate(mask_parts), offsets, lines)


# beside tokenizer.json, the files that change packed tokens: the EOS choice, and the chat template
TOKENIZER_CONFIG_FILES = (
    "tokenizer_config.json",
    "special_tokens_map.json",
    "generation_config.json",
    "chat_template.jinja",
)


def tokenizer_inputs(path: Path | None) -> list[Path]:
    """Every file a tokenizer path makes the command read: the path, its tokenizer.json and the config files
    beside it (no output may be one of them)."""
    if path is None:
        return []
    path = Path(path)
    file = path / "tokenizer.json" if path.is_dir() else path
    return [path, file, *(file.parent / name for name in TOKENIZER_CONFIG_FILES)]


def tokenizer_checksum(path: Path | None) -> str | None:
    """sha256 of tokenizer.json, and of the config files beside it that choose the EOS id (when any exist):
    editing the EOS in tokenizer_config.json changes the packed tokens, so it must re-pack."""
    if path is None:
        return None
    path = Path(path)
    file = path / "tokenizer.json" if path.is_dir() else path
    sums = [
        f"{name}={file_checksum(file.parent / name)}"
        for name in TOKENIZER_CONFIG_FILES
        if (file.parent / name).is_file()
    ]
    base = file_checksum(file)
    if not sums:
        return base  # unchanged from before config files counted: existing packs stay up to date
    return "sha256:" + hashlib.sha256("\n".join([f"tokenizer.json={base}", *sums]).encode()).hexdigest()


def file_checksum(path: Path | None) -> str | None:
    """sha256 of the file's bytes (streamed)."""
    if path is None:
        return None
    h = hashlib.sha256()
    check_input(path, error=PackingError)
    try:
        with open(path, "rb") as f:
            while chunk := f.read(1 << 22):
                h.update(chunk)
    except OSError as exc:
        raise PackingError(f"{path}: cannot read ({exc.strerror or exc})") from None
    return "sha256:" + h.hexdigest()
