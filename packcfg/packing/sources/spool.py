"""The spool: every sample of a source in flat arrays (memory-mapped files), read once."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from packcfg.packing.errors import PackingError
from packcfg.packing.sources.read import iter_batches
from packcfg.packing.sources.threads import prefetched


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
