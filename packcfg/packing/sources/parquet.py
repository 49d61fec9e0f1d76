"""Parquet sources of token ids (`input_ids`, and `loss_mask` or `answer_start_idx`), row groups decoded side by
side."""

from __future__ import annotations

import threading
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
)


def iter_parquet(path: Path, batch_size: int, workers: int | None = None) -> Iterator[Batch]:
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
    workers = workers or threads.READ_WORKERS
    if workers < 2 or meta.num_row_groups < 2 or biggest > PARALLEL_ROW_GROUP_BYTES:
        row = 1
        for rb in pf.iter_batches(batch_size=batch_size, columns=columns, use_threads=False):
            yield parquet_batch(path, rb, row, mode)
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
            out.append(parquet_batch(path, rb, row, mode))
            row += rb.num_rows
        return out

    for batches in threads.ordered_map(group, range(meta.num_row_groups), workers):
        yield from batches


# row groups up to this size (uncompressed) are decoded two at a time; larger ones stream batch by batch
PARALLEL_ROW_GROUP_BYTES = 32 << 20


def parquet_batch(path: Path, rb: Any, row: int, mode: str) -> Batch:
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
