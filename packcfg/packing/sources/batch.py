"""`Batch`: samples in flat arrays (what every reader yields), and the label-aligned loss masks.

Loss-mask convention (Bridge's packed format): the stored mask is *label-aligned*: position i says whether
the prediction made at token i (of token i+1) counts. From an input-aligned `loss_mask` that is the mask
shifted left by one; from `answer_start_idx` it is `i >= answer_start_idx - 1`; with neither, every
prediction counts. Each sample's last position is 0: it predicts nothing inside the sample.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MAX_TOKEN_ID = 2**31 - 1  # input_ids are stored as int32


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


def make_batch(
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


def slice_batch(b: Batch, lo: int, hi: int) -> Batch:
    hi = min(hi, len(b.offsets) - 1)
    if lo == 0 and hi == len(b.offsets) - 1:
        return b
    s, e = int(b.offsets[lo]), int(b.offsets[hi])
    lines = b.lines[lo:hi] if b.lines is not None else None
    return Batch(b.values[s:e], b.offsets[lo : hi + 1] - s, b.mask[s:e], b.first_line + lo, lines)
