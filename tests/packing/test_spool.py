"""The spool: one array of token ids with their mask bit on top, 16 bits while every id is below 2**15 and
32 from the first batch with a larger one (the file written so far is widened), the same samples either way."""

from __future__ import annotations

import numpy as np
import pytest

from packcfg.packing.sources import iter_batches, spool
from packcfg.packing.sources.spooling import bits_for, pack_values, unpack_values

from .conftest import random_token_rows, write_jsonl


def _samples(path, batch_size):
    out = []
    for b in iter_batches(path, batch_size=batch_size):
        for j in range(len(b.offsets) - 1):
            s, e = b.offsets[j], b.offsets[j + 1]
            out.append((b.values[s:e].tolist(), b.mask[s:e].tolist()))
    return out


@pytest.mark.parametrize("bits", [16, 32])
def test_pack_values_round_trips_at_the_bounds(bits):
    top = 2 ** (bits - 1) - 1
    values = np.array([0, 1, top, top - 1, 7], dtype=np.int64).astype(np.int32)
    mask = np.array([1, 0, 1, 0, 1], dtype=np.int8)
    packed = pack_values(values, mask, bits)
    assert packed.dtype == (np.uint16 if bits == 16 else np.uint32)
    tokens, back = unpack_values(packed)
    assert tokens.dtype == np.int32 and back.dtype == np.int8
    assert tokens.tolist() == values.tolist() and back.tolist() == mask.tolist()
    assert bits_for(top) == bits and bits_for(2**15) == 32


@pytest.mark.parametrize("big_at", [None, 0, 37, 299])
@pytest.mark.parametrize("on_disk", [True, False])
def test_spool_widens_at_the_first_large_id_and_keeps_every_sample(tmp_path, big_at, on_disk):
    rows = random_token_rows(300, seed=4, kind="mask")
    if big_at is not None:
        rows[big_at]["input_ids"][0] = 2**31 - 1
        rows[min(big_at + 1, 299)]["input_ids"][-1] = 40_000
    src = write_jsonl(tmp_path / "t.jsonl", rows)
    sp = spool(src, None, tmp_path / "spool" if on_disk else None, batch_size=8)
    assert sp.packed.dtype == (np.uint16 if big_at is None else np.uint32)
    want = _samples(src, 8)
    got = [tuple(x.tolist() for x in sp.sample(i)) for i in range(sp.num_samples)]
    assert got == want
    assert np.array_equal(sp.tokens, np.concatenate([np.array(ids, dtype=np.int32) for ids, _ in want]))
    assert sp.lines.tolist() == list(range(1, 301))
