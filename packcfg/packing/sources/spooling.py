"""The spool: every sample of a source in flat arrays (memory-mapped files), read once."""

from __future__ import annotations

import os
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from packcfg.packing.errors import PackingError
from packcfg.packing.sources.read import iter_batches
from packcfg.packing.sources.threads import prefetched

_MALLOC_TRIM: list[Any] = []


def release_memory() -> None:
    """Hand freed memory back to the OS: pyarrow's pool (mimalloc/jemalloc keep the packed file's read
    buffers, ~50 MB at 1M samples, unless asked) and glibc's heaps (malloc_trim(0); a no-op without glibc).

    glibc keeps up to its trim threshold (which grows to 64 MB) free at the top of each heap and does not
    return holes below live blocks; with the source read in a second thread there are two heaps, and at
    1M samples they held ~90-130 MB free at the peak. Called between phases (three calls, ~20 ms in all),
    it takes ~60 MiB off JSONL verify --source's peak RSS (1M samples: 475 -> 415 MiB) and ~25 MiB off
    Parquet's; the env vars that change glibc's thresholds for the whole run (MALLOC_MMAP_THRESHOLD_) cost
    much more time."""
    try:
        import pyarrow as pa

        getattr(pa.default_memory_pool(), "release_unused", lambda: None)()
    except ImportError:  # pragma: no cover - pyarrow is a dependency of the pack extra
        pass
    if not _MALLOC_TRIM:
        import ctypes

        try:
            _MALLOC_TRIM.append(ctypes.CDLL(None).malloc_trim)
        except (OSError, AttributeError):  # not glibc
            _MALLOC_TRIM.append(None)
    if _MALLOC_TRIM[0] is not None:
        _MALLOC_TRIM[0](0)


# A spool value is a token id and its loss-mask bit in one unsigned integer, the bit on top: 16 bits while
# every id is below 2**15 (Llama 2, Mistral and other 32k vocabularies), else 32 (ids are int32, so below
# 2**31). One array instead of two (int32 ids and an int8 mask) is what the writer gathers from: 2 bytes a
# token instead of 5 for small vocabularies, 4 instead of 5 for large ones, and one gather instead of two.
SPOOL_FILE = "spool.bin"


def pack_values(values: np.ndarray, mask: np.ndarray, bits: int) -> np.ndarray:
    """Token ids (< 2**(bits - 1)) and their 0/1 mask as one uint16/uint32 array."""
    dtype = np.uint16 if bits == 16 else np.uint32
    out = values.astype(dtype)
    out |= mask.astype(dtype) << dtype(bits - 1)
    return out


def unpack_values(packed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(int32 token ids, int8 mask) of packed spool values."""
    shift = packed.dtype.itemsize * 8 - 1
    tokens = packed.astype(np.int32)  # a uint32's top bit becomes the sign bit: cleared next
    tokens &= np.int32((1 << shift) - 1) if shift < 31 else np.int32(2**31 - 1)
    mask = (packed >> packed.dtype.type(shift)).astype(np.int8)
    return tokens, mask


def bits_for(max_id: int) -> int:
    return 16 if max_id < 1 << 15 else 32


@dataclass
class Spool:
    """All samples in one flat array of packed values (`pack_values`: the token id and its label-aligned
    loss-mask bit), memory-mapped from a file, or in memory for small data."""

    packed: np.ndarray  # uint16 or uint32
    offsets: np.ndarray  # int64, n+1
    lines: np.ndarray  # int64: source line/row of each sample (for messages)
    workdir: Path | None = None

    @property
    def num_samples(self) -> int:
        return len(self.offsets) - 1

    @property
    def tokens(self) -> np.ndarray:
        """Every token id (int32), in memory."""
        return unpack_values(np.asarray(self.packed))[0]

    @property
    def mask(self) -> np.ndarray:
        """Every label-aligned mask value (int8), in memory."""
        return unpack_values(np.asarray(self.packed))[1]

    def lengths(self) -> np.ndarray:
        """Token count of every sample (len(input_ids))."""
        return np.diff(self.offsets)

    def runtime_lengths(self) -> np.ndarray:
        """What a sample occupies in a pack at runtime: input and label are one token shorter."""
        return np.diff(self.offsets) - 1

    def sample(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        """(input_ids int32, label-aligned loss mask int8) of sample i."""
        s, e = int(self.offsets[i]), int(self.offsets[i + 1])
        return unpack_values(np.asarray(self.packed[s:e]))

    def close(self) -> None:
        """Drop the memory map and delete the spool file."""
        self.packed = np.zeros(0, dtype=np.uint16)
        if self.workdir is not None:
            try:
                (self.workdir / SPOOL_FILE).unlink()
            except FileNotFoundError:
                pass


def _widen(path: Path, count: int) -> None:
    """Rewrite a 16-bit spool file of `count` values as 32-bit (ids and mask bit moved), in 4M-value steps."""
    wide = path.with_name(path.name + ".wide")
    step = 1 << 22
    with open(path, "rb") as src, open(wide, "wb") as dst:
        for lo in range(0, count, step):
            narrow = np.fromfile(src, dtype=np.uint16, count=min(step, count - lo))
            tokens, mask = unpack_values(narrow)
            pack_values(tokens, mask, 32).tofile(dst)
    os.replace(wide, path)


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
    parts: list[tuple[np.ndarray, np.ndarray]] = []
    bits, max_id = 16, 0
    f = None
    if workdir is not None:
        workdir.mkdir(parents=True, exist_ok=True)
        f = open(workdir / SPOOL_FILE, "wb")  # closed below
    # closed on the way out, so that an exception here (Ctrl-C included) stops and joins the reader thread
    # at once: while the exception's traceback holds this frame, the generator would otherwise stay open,
    # and a daemon thread still inside pyarrow when the interpreter exits can abort the process
    try:
        with closing(prefetched(iter_batches(Path(path), tokenizer, batch_size))) as batches:
            for b in batches:
                if len(b.values):
                    max_id = max(max_id, int(b.values.max()))
                if f is not None:
                    if bits_for(max_id) > bits:  # an id past 2**15: the spool so far becomes 32-bit
                        f.close()
                        _widen(workdir / SPOOL_FILE, total)  # type: ignore[operator]
                        f = open(workdir / SPOOL_FILE, "ab")  # type: ignore[operator]
                        bits = 32
                    pack_values(b.values, b.mask, bits).tofile(f)
                else:
                    parts.append((b.values, b.mask))
                offsets_parts.append(b.offsets[1:] + total)
                lines_parts.append(b.sample_lines())
                total += int(b.offsets[-1])
                if progress is not None:
                    progress.update(len(b.offsets) - 1)
    finally:
        if f is not None:
            f.close()
    offsets = np.concatenate(offsets_parts)
    if len(offsets) == 1:
        raise PackingError(f"{path}: empty dataset (no samples)")
    lines = np.concatenate(lines_parts)
    if workdir is not None:
        dtype = np.uint16 if bits == 16 else np.uint32
        packed = np.memmap(workdir / SPOOL_FILE, dtype=dtype, mode="r", shape=(total,))
        return Spool(packed, offsets, lines, workdir)
    bits = bits_for(max_id)
    packed = np.concatenate([pack_values(v, m, bits) for v, m in parts])
    return Spool(packed, offsets, lines)
