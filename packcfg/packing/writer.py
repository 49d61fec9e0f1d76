"""Fill a plan with tokens and write Megatron Bridge's packed Parquet plus its metadata JSON.

One row per pack: `input_ids` list<int32>, `loss_mask` list<int8> (label-aligned, 0 at each sample's last
position), `seq_start_id` list<int32> (start of each sample in the row, first 0). A sample occupies
`runtime + 1` tokens in the row (Bridge drops each sample's last token from the input and its first from
the label). With `pad_seq_to_mult` > 1 each sample is pre-padded with the pad (EOS) id so that its runtime
length is a multiple of it, as Bridge does for context parallelism; padding never counts in the loss.

Rows are gathered from the spool with vectorised numpy and written one row group at a time to a temporary
file that is renamed only when complete; the metadata is written (atomically) last, so metadata that
matches a file means that file is complete.
"""

from __future__ import annotations

import json
import mmap
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from packcfg import __version__
from packcfg.core.atomic import atomic_path, atomic_write_text, check_output
from packcfg.core.inputs import check_input
from packcfg.packing.errors import PackingError
from packcfg.packing.parquet import Compressor, ListColumn, ListParquetWriter, RowGroup, encode_row_group
from packcfg.packing.planner import PackPlan
from packcfg.packing.sources.spooling import Spool, release_memory, unpack_values
from packcfg.packing.sources.threads import ordered_map

FORMAT_VERSION = 1
# row groups written between two hand-backs of freed memory to the OS (`release_memory`, ~1 ms each): glibc's
# per-thread arenas otherwise keep the builders' freed temporaries, ~60 MB at 1M samples
TRIM_EVERY = 1
MAX_METADATA_BYTES = 64 * 1024 * 1024
SPLIT_NAMES = ("train", "validation", "test")


# A row group's samples come from all over the spool (packs are written in a seeded random order), and the
# kernel maps 16 pages around every page fault, so one row group's gather maps nearly the whole memory-mapped
# spool, which then counts in the process's RSS (token JSONL, 1M samples: 145 MiB of a 484 MiB peak). The
# gather runs in chunks of this many tokens and hands the mapped pages back after each (madvise DONTNEED on the
# read-only shared mapping: the page cache keeps them, a later read maps them again). bench/pack_io.py, token
# JSONL `pack`, median of 3: one gather a row group 3.3 s, peak 484-497 MiB (max 509 in 5 runs); chunks of
# 16,384 tokens 4.0 s / 357 MiB, 65,536 3.8 s / 384 MiB (max 397), 262,144 3.8 s / 449 MiB
GATHER_CHUNK_TOKENS = 65_536


def gather_spool(packed: np.ndarray, gather: np.ndarray) -> np.ndarray:
    """packed[gather]. From a read-only memory-mapped spool, in chunks of GATHER_CHUNK_TOKENS, handing the
    mapped pages back after each (release_mapped_pages)."""
    mapping = getattr(packed, "_mmap", None)  # np.memmap's own mmap object
    if mapping is None or getattr(packed, "mode", None) != "r" or len(gather) <= GATHER_CHUNK_TOKENS:
        return packed[gather]
    out = np.empty(len(gather), dtype=packed.dtype)
    for lo in range(0, len(gather), GATHER_CHUNK_TOKENS):
        hi = lo + GATHER_CHUNK_TOKENS
        np.take(packed, gather[lo:hi], out=out[lo:hi])
        release_mapped_pages(mapping)
    return out


def release_mapped_pages(mapping: mmap.mmap) -> None:
    """Unmap the pages of a read-only shared file mapping from this process (they stay in the page cache;
    a later read maps them again), so that they stop counting in its RSS. Only for mode "r" mappings: on a
    private writable one it would drop changes."""
    if hasattr(mapping, "madvise") and hasattr(mmap, "MADV_DONTNEED"):  # (Linux; elsewhere nothing)
        try:
            mapping.madvise(mmap.MADV_DONTNEED)
        except OSError:  # best effort: the pages then stay mapped, as without it
            pass


def pack_rows(
    spool: Spool, p: PackPlan, packs: np.ndarray, pad_id: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Build the rows for the given pack ids, flat: (tokens, mask, row_offsets, seq_starts, seq_offsets)."""
    offsets = p.offsets
    counts = offsets[packs + 1] - offsets[packs]
    # the item ids of these packs, in pack order
    starts = offsets[packs]
    rel = np.arange(int(counts.sum()), dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts)
    items = p.order[np.repeat(starts, counts) + rel]
    real = p.item_length[items] + 1  # tokens of the sample (piece) in the row
    slot = p.item_aligned[items] + 1  # with alignment padding
    src = spool.offsets[p.item_sample[items]] + p.item_start[items]
    slot_start = np.cumsum(slot) - slot
    total = int(slot.sum())
    # per-token source index as a running sum: +1 inside a slot, a jump to the next slot's source at its
    # start (one pass over the tokens instead of several np.repeat'ed index arrays)
    # int32 indices while the spool is below 2**31 tokens: half the memory of the largest temporary
    step = np.ones(total, dtype=np.int32 if len(spool.packed) < 2**31 else np.int64)
    if total:
        step[0] = src[0]
        step[slot_start[1:]] = src[1:] - (src[:-1] + slot[:-1] - 1)
    gather = np.cumsum(step, out=step)
    padded = bool((slot != real).any())
    if padded:  # alignment padding reads past its sample: any valid index, overwritten below
        is_pad = np.zeros(total + 1, dtype=np.int8)
        np.add.at(is_pad, slot_start + real, 1)
        np.add.at(is_pad, slot_start + slot, -1)
        is_pad = np.cumsum(is_pad[:-1], dtype=np.int8).astype(bool)
        np.minimum(gather, len(spool.packed) - 1, out=gather)
    tokens, mask = unpack_values(gather_spool(spool.packed, gather))
    if padded:
        tokens[is_pad] = pad_id
        mask[is_pad] = 0
    # the last real position of every piece predicts nothing inside it (a split piece's next token
    # belongs to the next piece; for a whole sample this is already 0)
    mask[slot_start + real - 1] = 0
    # row boundaries: every pack holds at least one item, so its last slot ends the row
    seq_offsets = np.zeros(len(packs) + 1, dtype=np.int64)
    np.cumsum(counts, out=seq_offsets[1:])
    row_tok_end = np.zeros(len(packs) + 1, dtype=np.int64)
    row_tok_end[1:] = (slot_start + slot)[seq_offsets[1:] - 1]
    seq_starts = (slot_start - np.repeat(row_tok_end[:-1], counts)).astype(np.int32)
    return tokens, mask, row_tok_end, seq_starts, seq_offsets


M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
GOLD = np.uint64(0x9E3779B97F4A7C15)


def mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser, elementwise on uint64 (wrapping arithmetic)."""
    x = x ^ (x >> np.uint64(30))
    x *= M1
    x ^= x >> np.uint64(27)
    x *= _M2
    x ^= x >> np.uint64(31)
    return x


_POSITION_KEYS = np.zeros(0, dtype=np.uint64)


def position_keys(n: int) -> np.ndarray:
    """Fixed pseudo-random odd 64-bit multipliers, one per position (grown on demand; thread-safe: a
    caller gets arrays at least n long even when another thread grows the cache meanwhile)."""
    global _POSITION_KEYS
    keys = _POSITION_KEYS
    if len(keys) < n:
        size = max(n, 2 * len(keys), 1 << 16)
        keys = np.random.default_rng(0x5EED).integers(0, 2**63, size=size, dtype=np.uint64) * np.uint64(2)
        keys |= np.uint64(1)
        _POSITION_KEYS = keys
    return keys


_R = 0x9E3779B97F4A7C15  # odd: invertible modulo 2**64
_R_INV = pow(_R, -1, 2**64)
_POWERS = (np.ones(1, dtype=np.uint64), np.ones(1, dtype=np.uint64))


def _powers(n: int) -> tuple[np.ndarray, np.ndarray]:
    """R**i and R**-i modulo 2**64 for i < n (cached, grown on demand; thread-safe like position_keys)."""
    global _POWERS
    powers = _POWERS
    if len(powers[0]) < n:
        # an eighth more than asked: row groups differ by a few tokens; doubling held 2x the arrays (34 MB)
        size = max(n + n // 8, len(powers[0]) + len(powers[0]) // 8)
        with np.errstate(over="ignore"):
            fwd = np.empty(size, dtype=np.uint64)
            inv = np.empty(size, dtype=np.uint64)
            fwd[0] = inv[0] = 1
            fwd[1:] = np.cumprod(np.full(size - 1, _R, dtype=np.uint64))
            inv[1:] = np.cumprod(np.full(size - 1, _R_INV, dtype=np.uint64))
        powers = _POWERS = (fwd, inv)
    return powers


def slot_hashes(tokens: np.ndarray, mask: np.ndarray, slot_offsets: np.ndarray) -> np.ndarray:
    """A 64-bit hash of every sample slot (its tokens, loss mask and length) in flat rows, vectorised.

    `slot_offsets` (len n+1) bounds the slots in `tokens`/`mask`. Position i of the range holds
    v = 2 * token + mask bit; a slot starting at s hashes sum(v_i * R**(i - s)) mod 2**64 (computed as
    sum(v_i * R**i) * R**-s, so no per-position index is built), then mixed with its length (splitmix64).
    The pack-time sum of these hashes is the metadata's `samples_digest`; `verify` recomputes it from the
    file alone, so a sample dropped, duplicated or altered after packing is found without the source.
    """
    n = len(slot_offsets) - 1
    if n <= 0:
        return np.zeros(0, dtype=np.uint64)
    lo, hi = int(slot_offsets[0]), int(slot_offsets[-1])
    starts = np.asarray(slot_offsets[:-1], dtype=np.int64) - lo
    lens = np.diff(np.asarray(slot_offsets, dtype=np.int64))
    sums = np.zeros(n, dtype=np.uint64)
    if hi > lo:
        fwd, inv = _powers(hi - lo)
        with np.errstate(over="ignore"):
            # v = (2 * token | mask bit) * R**i, in one uint64 buffer (ids are >= 0: checked)
            v = np.empty(hi - lo, dtype=np.uint64)
            np.left_shift(np.asarray(tokens[lo:hi]), 1, out=v, casting="unsafe", dtype=np.uint64)
            m = np.asarray(mask[lo:hi])
            m = m.view(np.uint8) if m.dtype.itemsize == 1 else m.astype(np.uint8)
            np.bitwise_or(v, m & np.uint8(1), out=v, casting="unsafe")
            np.multiply(v, fwd[: hi - lo], out=v)
            nonempty = lens > 0
            sums[nonempty] = np.add.reduceat(v, starts[nonempty]) * inv[starts[nonempty]]
    with np.errstate(over="ignore"):
        return mix(sums + lens.astype(np.uint64) * GOLD)


def digest_add(digest: int, hashes: np.ndarray) -> int:
    """Add slot hashes to a running digest (sum mod 2**64: independent of row and sample order)."""
    with np.errstate(over="ignore"):
        return (digest + int(hashes.sum(dtype=np.uint64))) & 0xFFFFFFFFFFFFFFFF


# Parquet settings are keyed by a column's leaf path; for a list column that is `<name>.list.element`.
COLUMNS = ("input_ids", "loss_mask", "seq_start_id")


def leaf(column: str) -> str:
    """The Parquet leaf path of a list<...> column (what a reader's column metadata names)."""
    return f"{column}.list.element"


# Chosen by measurement (docs/packing.md, "Output size"): token ids and the 0/1 loss mask are
# dictionary-encoded (ids become 16-bit codes, most frequent first; the mask 1-bit codes) and every page is
# zstd-compressed at level 1; the small seq_start_id column is plain.
PACKED_COLUMNS = (
    ListColumn("input_ids", np.int32, dictionary=True),
    ListColumn("loss_mask", np.int8, dictionary=True),
    ListColumn("seq_start_id", np.int32, dictionary=False),
)
CODEC, CODEC_LEVEL = "zstd", 1


def arrow_schema() -> Any:
    """The packed file's Arrow schema (what pyarrow reads back)."""
    import pyarrow as pa

    return pa.schema(
        [
            ("input_ids", pa.list_(pa.int32())),
            ("loss_mask", pa.list_(pa.int8())),
            ("seq_start_id", pa.list_(pa.int32())),
        ]
    )


def _row_group(
    spool: Spool, p: PackPlan, packs: np.ndarray, pad_id: int, compress: Compressor
) -> tuple[RowGroup, np.ndarray]:
    """One row group of the packed file, encoded, with the slot hashes of its samples."""
    tokens, mask, row_off, seq_starts, seq_off = pack_rows(spool, p, packs, pad_id)
    slots = np.append(seq_starts + np.repeat(row_off[:-1], np.diff(seq_off)), row_off[-1])
    hashes = slot_hashes(tokens, mask, slots)
    group = encode_row_group(
        PACKED_COLUMNS, [(tokens, row_off), (mask, row_off), (seq_starts, seq_off)], compress
    )
    return group, hashes


# the key of packcfg's own entry in the Parquet file's key-value metadata: it marks a file packcfg wrote
PARQUET_KEY = b"packcfg"


def write_packed(
    out_path: Path,
    spool: Spool,
    p: PackPlan,
    pad_id: int,
    seed: int,
    shuffle: bool = True,
    progress: Any = None,
    rows_per_group: int | None = None,
    fail_after_rows: int | None = None,
    file_metadata: dict[str, Any] | None = None,
    inputs: tuple[Path | None, ...] = (),
    workers: int | None = None,
) -> np.ndarray:
    """Write the packed Parquet atomically; returns the pack ids in file row order.

    Packs are written in a seeded random order (Bridge's packer shuffles too): a best-fit plan lists its
    packs from the longest samples to the shortest, and a trainer that reads rows in order must not see
    that drift. Row groups (~1M tokens each) are built, hashed and encoded in `workers` threads (default:
    the CPUs, at most 4; numpy and zstd release the GIL) and written in order, at most `workers` + 1 in
    memory. `file_metadata` gets `samples_digest` (the sum of `slot_hashes` over every slot) and goes into
    the file's key-value metadata under `packcfg` (it marks the file as packcfg's: `pack` replaces only
    such files without --force). `inputs`: files the output must not be. `fail_after_rows` exists for
    tests of atomicity (raise mid-write).
    """
    n = p.num_packs
    row_order = np.random.default_rng(seed).permutation(n) if shuffle else np.arange(n)
    if rows_per_group is None:
        # ~1M tokens per row group: bounded memory whatever the capacity, and Bridge-friendly group sizes
        rows_per_group = max(16, min(4096, (1 << 20) // max(1, p.capacity)))
    workers = workers or max(1, min(4, os.cpu_count() or 1))
    compress = Compressor(CODEC, CODEC_LEVEL)
    written = 0
    groups_written = 0
    digest = 0
    with atomic_path(out_path, inputs=inputs, what="packed file") as tmp, open(tmp, "wb") as fh:
        writer = ListParquetWriter(
            fh,
            PACKED_COLUMNS,
            CODEC,
            arrow_schema=arrow_schema(),
            created_by=f"packcfg version {__version__}",
        )
        groups = (row_order[lo : lo + rows_per_group] for lo in range(0, n, rows_per_group))
        for group, hashes in ordered_map(
            lambda packs: _row_group(spool, p, packs, pad_id, compress), groups, workers
        ):
            digest = digest_add(digest, hashes)
            writer.write(group)
            written += group.num_rows
            groups_written += 1
            if groups_written % TRIM_EVERY == 0:
                release_memory()  # the builders' freed temporaries, which glibc's arenas would keep
            if progress is not None:
                progress.update(group.num_rows)
            if fail_after_rows is not None and written >= fail_after_rows:
                raise OSError("injected failure (test)")
        key_value = None
        if file_metadata is not None:
            file_metadata["samples_digest"] = f"{digest:016x}"
            key_value = {PARQUET_KEY.decode(): json.dumps(file_metadata, sort_keys=True)}
        writer.close(key_value)
    return row_order


def parquet_entry(path: Path) -> dict[str, Any] | None:
    """packcfg's entry in a Parquet file's key-value metadata (None: not a Parquet file packcfg wrote)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        kv = pq.read_metadata(path).metadata or {}
        entry = json.loads(kv[PARQUET_KEY]) if PARQUET_KEY in kv else None
    except (OSError, ValueError, pa.ArrowException):
        return None
    return (
        entry if isinstance(entry, dict) and str(entry.get("fingerprint", "")).startswith("sha256:") else None
    )


def write_json_atomic(path: Path, data: Any) -> None:
    atomic_write_text(path, json.dumps(data, indent=2, sort_keys=False) + "\n")


def bridge_metadata(p: PackPlan) -> dict[str, Any]:
    """The keys Megatron Bridge reads (create_packing_strategy's packing_metadata), from the plan."""
    fills = p.pack_lengths()
    sizes = p.pack_sizes()
    placed = p.order
    return {
        "dataset_max_seqlen": int(p.item_aligned[placed].max()) if len(placed) else 0,
        "max_samples_per_bin": int(sizes.max()) if len(sizes) else 0,
        "packing_factor": round(len(placed) / max(1, p.num_packs), 2),
        "packing_efficiency": round(
            100.0 * int(p.item_length[placed].sum()) / max(1, p.num_packs * p.capacity), 2
        ),
        "pack_size": int(p.capacity),
        "min_packed_seqlen": int(fills.min()) if len(fills) else 0,
    }


def read_metadata(path: Path) -> list[dict[str, Any]]:
    """The metadata JSON: a list of dicts, one per split. Raises PackingError when unreadable."""
    # never block on a FIFO or read /dev/zero forever; metadata is one small object per split
    check_input(path, error=PackingError, max_bytes=MAX_METADATA_BYTES)
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise PackingError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise PackingError(f"{path}: cannot read ({exc})") from None
    except json.JSONDecodeError as exc:
        raise PackingError(f"{path}:{exc.lineno}: malformed JSON ({exc.msg})") from None
    except RecursionError:
        raise PackingError(f"{path}: malformed JSON (nested too deeply)") from None
    if isinstance(data, dict):  # tolerate a single split written as an object
        data = [data]
    if not isinstance(data, list) or not all(isinstance(d, dict) for d in data):
        raise PackingError(f"{path}: expected a JSON list of objects (one per split)")
    return data


def merge_split_metadata(path: Path, entry: dict[str, Any]) -> list[dict[str, Any]]:
    """Replace (or add) the entry for entry['split'] in an existing metadata list."""
    existing: list[dict[str, Any]] = []
    if path.exists():
        try:
            existing = read_metadata(path)
        except PackingError:
            existing = []  # a corrupt metadata file is rewritten
    split = entry.get("split")
    out = [d for d in existing if d.get("split") != split]
    out.append(entry)
    out.sort(key=lambda d: SPLIT_NAMES.index(d["split"]) if d.get("split") in SPLIT_NAMES else 99)
    return out


def iter_packed(
    path: Path, columns: list[str] | None = None, batch_rows: int = 256
) -> Iterator[dict[str, Any]]:
    """Rows of a packed Parquet as dicts of numpy arrays, streamed row group by row group."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(path)
    except FileNotFoundError:
        raise PackingError(f"{path}: no such file") from None
    except (OSError, pa.ArrowException) as exc:
        raise PackingError(f"{path}: not a readable Parquet file ({exc})") from None
    names = pf.schema_arrow.names
    want = columns or ["input_ids", "loss_mask", "seq_start_id"]
    missing = [c for c in want if c not in names]
    if missing:
        raise PackingError(f"{path}: missing column(s) {', '.join(missing)} (columns: {', '.join(names)})")
    for rb in pf.iter_batches(batch_size=batch_rows, columns=want):
        cols = {}
        for c in want:
            arr = rb.column(c)
            offs = np.asarray(arr.offsets)
            vals = arr.values.to_numpy(zero_copy_only=False) if len(arr) else np.zeros(0)
            cols[c] = (vals, offs)
        for i in range(rb.num_rows):
            yield {c: v[o[i] : o[i + 1]] for c, (v, o) in cols.items()}


NPY_MAGIC = b"\x93NUMPY"


def is_npy_file(path: Path) -> bool:
    """Whether `path` holds a numpy .npy file (what --bridge-npy may replace without --force)."""
    try:
        with open(path, "rb") as fh:
            return fh.read(len(NPY_MAGIC)) == NPY_MAGIC
    except OSError:
        return False


def check_bridge_npy_output(
    out: Path, parquet: Path, *, inputs: tuple[Path | None, ...] = (), force: bool = False
) -> None:
    """The output rule for --bridge-npy, checked before any packing: never the packed file, the source,
    the tokenizer or a config of the same command; an existing file that is not a .npy only with --force.
    Raises OutputRefused."""
    check_output(out, **_bridge_npy_rule(parquet, inputs, force))


def _bridge_npy_rule(parquet: Path, inputs: tuple[Path | None, ...], force: bool) -> dict[str, Any]:
    """The output rule's arguments for --bridge-npy (check_output / atomic_path)."""
    return {"inputs": (parquet, *inputs), "force": force, "may_replace": is_npy_file, "what": "--bridge-npy"}


def write_bridge_npy(
    parquet: Path, out: Path, *, force: bool = False, inputs: tuple[Path | None, ...] = ()
) -> Path:
    """Write a packed Parquet again as Megatron Bridge 0.3.1's packed file, the only packed input 0.3.1
    accepts (its `PackedSequenceSpecs` asserts a `.npy` suffix; Parquet is read from 0.4.0 on, by
    `GPTSFTPackedParquetDataset`): a numpy object array of one dict per pack with `input_ids`,
    `loss_mask` and `seq_start_id` lists, as 0.3.1's `fill_packing_strategy` builds it and its
    `GPTSFTPackedDataset` loads it with `np.load(allow_pickle=True)` (megatron-bridge v0.3.1,
    src/megatron/bridge/data/datasets/packing_utils.py and sft.py). The format is a pickle: packcfg
    writes it for Bridge and never reads one back. `inputs`: the files of the command that made the
    Parquet (source, tokenizer, configs), which the .npy must not replace."""
    rows = [
        {key: row[key].astype(np.int64).tolist() for key in ("input_ids", "loss_mask", "seq_start_id")}
        for row in iter_packed(parquet)
    ]
    data = np.empty(len(rows), dtype=object)
    data[:] = rows
    with atomic_path(out, **_bridge_npy_rule(parquet, inputs, force)) as tmp, open(tmp, "wb") as fh:
        np.save(fh, data, allow_pickle=True)  # a file object: np.save would add ".npy" to a path
    return out
