"""Compiled (numba) reader for token-id JSONL in its plain shape, one pass over the bytes.

pyarrow's JSON reader costs ~30 ns per byte on token-id lines (10 s of CPU for 1M samples / 364 MB), which
is most of `pack` and `verify --source` from JSONL. This kernel reads the lines packcfg's own writers and
Bridge's tooling produce, `{"input_ids": [1, 2], "loss_mask": [0, 1]}` or with `"answer_start_idx": 5`
(keys in any order, JSON whitespace anywhere), in one pass at a few ns per byte.

It is strict on purpose: any other key, a repeated key, a null, a bool, a float, a sign, a leading zero, an
id beyond int32, a mask value other than 0/1, a blank line or a string escape makes it give up on the
block, which then goes to pyarrow's reader and, where that differs too, to the exact `json.loads` reader
(`sources.token_jsonl.iter_token_jsonl_fast`). So what it accepts it reads exactly as both of those do, and every
error message still comes from the exact reader. `tests/packing/test_jsonl_fast.py` checks that.

Used when numba is importable (the same test as the bfd kernel's); compiled once, cached like it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from packcfg.packing._bfd_kernel import HAVE_NUMBA, compiled

_MAX_ID = 2**31 - 1
_MAX_ANSWER = 10**15  # far beyond any sample length; larger is refused (the exact reader decides)


@compiled
def _skip_ws(buf, i, end):  # type: ignore[no-untyped-def]
    while i < end and (buf[i] == 32 or buf[i] == 9 or buf[i] == 13):
        i += 1
    return i


@compiled
def _uint(buf, i, end, limit):  # type: ignore[no-untyped-def]
    """A JSON non-negative integer without sign or leading zero at buf[i:], <= limit: (value, next i) or
    (-1, i) when there is none (a float, an exponent or a second digit after a 0 count as none)."""
    if i >= end or buf[i] < 48 or buf[i] > 57:
        return -1, i
    if buf[i] == 48:
        i += 1
        if i < end and (48 <= buf[i] <= 57 or buf[i] == 46 or buf[i] == 101 or buf[i] == 69):
            return -1, i
        return 0, i
    v = 0
    while i < end and 48 <= buf[i] <= 57:
        v = v * 10 + (buf[i] - 48)
        if v > limit:
            return -1, i
        i += 1
    if i < end and (buf[i] == 46 or buf[i] == 101 or buf[i] == 69):
        return -1, i
    return v, i


@compiled
def _int_list(buf, i, end, out, k, limit):  # type: ignore[no-untyped-def]
    """`[v, v, ...]` at buf[i:] into out[k:]: (values read or -1, next i)."""
    if i >= end or buf[i] != 91:  # [
        return -1, i
    i = _skip_ws(buf, i + 1, end)
    n = 0
    if i < end and buf[i] == 93:  # ]
        return 0, i + 1
    while True:
        v, i = _uint(buf, i, end, limit)
        if v < 0:
            return -1, i
        out[k + n] = v
        n += 1
        i = _skip_ws(buf, i, end)
        if i < end and buf[i] == 44:  # ,
            i = _skip_ws(buf, i + 1, end)
        elif i < end and buf[i] == 93:
            return n, i + 1
        else:
            return -1, i


@compiled
def _key(buf, i, end):  # type: ignore[no-untyped-def]
    """Which known key starts at buf[i:] (0 input_ids, 1 loss_mask, 2 answer_start_idx, -1 another), and
    the index after its closing quote."""
    if i >= end or buf[i] != 34:
        return -1, i
    j = i + 1
    while j < end and buf[j] != 34 and buf[j] != 92:  # a backslash: an escape, refused
        j += 1
    if j >= end or buf[j] != 34:
        return -1, j
    n = j - i - 1
    s = i + 1
    # compare bytes: "input_ids", "loss_mask", "answer_start_idx"
    if n == 9 and buf[s] == 105 and buf[s + 1] == 110 and buf[s + 2] == 112 and buf[s + 3] == 117:
        if buf[s + 4] == 116 and buf[s + 5] == 95 and buf[s + 6] == 105 and buf[s + 7] == 100:
            if buf[s + 8] == 115:
                return 0, j + 1
    if n == 9 and buf[s] == 108 and buf[s + 1] == 111 and buf[s + 2] == 115 and buf[s + 3] == 115:
        if buf[s + 4] == 95 and buf[s + 5] == 109 and buf[s + 6] == 97 and buf[s + 7] == 115:
            if buf[s + 8] == 107:
                return 1, j + 1
    if n == 16 and buf[s] == 97 and buf[s + 1] == 110 and buf[s + 2] == 115 and buf[s + 3] == 119:
        tail = (101, 114, 95, 115, 116, 97, 114, 116, 95, 105, 100, 120)  # "er_start_idx"
        for t in range(12):
            if buf[s + 4 + t] != tail[t]:
                return -1, j + 1
        return 2, j + 1
    return -1, j + 1


@compiled
def _parse(buf, ids, id_len, masks, mask_len, answer):  # type: ignore[no-untyped-def]
    """Fill the outputs line by line to the end of `buf`; returns (ids read, mask values read, lines, -1)
    or (_, _, _, failing line)."""
    end = buf.shape[0]
    n_lines = id_len.shape[0]
    i = 0
    k = 0
    m = 0
    line = 0
    while i < end:
        if line >= n_lines:
            return k, m, line, line
        seen = 0  # bit per known key: a repeated key is refused
        id_len[line] = -1
        mask_len[line] = -1
        answer[line] = -1
        i = _skip_ws(buf, i, end)
        if i >= end or buf[i] != 123:  # {
            return k, m, line, line
        i = _skip_ws(buf, i + 1, end)
        while True:
            key, i = _key(buf, i, end)
            if key < 0 or (seen >> key) & 1:
                return k, m, line, line
            seen |= 1 << key
            i = _skip_ws(buf, i, end)
            if i >= end or buf[i] != 58:  # :
                return k, m, line, line
            i = _skip_ws(buf, i + 1, end)
            if key == 0:
                n, i = _int_list(buf, i, end, ids, k, _MAX_ID)
                if n <= 0:
                    return k, m, line, line
                id_len[line] = n
                k += n
            elif key == 1:
                n, i = _int_list(buf, i, end, masks, m, 1)
                if n < 0:
                    return k, m, line, line
                mask_len[line] = n
                m += n
            else:
                v, i = _uint(buf, i, end, _MAX_ANSWER)
                if v < 0:
                    return k, m, line, line
                answer[line] = v
            i = _skip_ws(buf, i, end)
            if i < end and buf[i] == 44:
                i = _skip_ws(buf, i + 1, end)
                continue
            if i < end and buf[i] == 125:  # }
                i = _skip_ws(buf, i + 1, end)
                break
            return k, m, line, line
        if not seen & 1:
            return k, m, line, line
        if i < end:
            if buf[i] != 10:
                return k, m, line, line
            i += 1
        line += 1
    return k, m, line, -1


def parse_block(block: bytes) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, Any] | None:
    """The block's records, one per line, or None where the strict reader gives up (then pyarrow's reader
    decides).

    Returns (ids int32, lengths int64, mask values int8, mask lengths int64 (-1: no loss_mask), answer
    int64 (-1: no answer_start_idx)) for the lines of `block` (whole lines; the last may lack its newline).
    """
    if not HAVE_NUMBA or not block:
        return None
    buf = np.frombuffer(block, dtype=np.uint8)
    # np.empty: only what is written becomes resident. A value takes a digit and a separator; a line at
    # least `{"input_ids":[0]}`, 17 bytes, and a newline
    cap = len(buf) // 2 + 1
    max_lines = len(buf) // 17 + 1
    ids = np.empty(cap, dtype=np.int32)
    masks = np.empty(cap, dtype=np.int8)
    id_len = np.empty(max_lines, dtype=np.int64)
    mask_len = np.empty(max_lines, dtype=np.int64)
    answer = np.empty(max_lines, dtype=np.int64)
    k, m, lines, bad = _parse(buf, ids, id_len, masks, mask_len, answer)
    if bad >= 0:
        return None
    return ids[:k], id_len[:lines], masks[:m], mask_len[:lines], answer[:lines]
