"""Pack then unpack: every sample's tokens and label-aligned loss mask come back exactly."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from packcfg.core.config import load_config
from packcfg.packing import (
    PackSettings,
    ensure_packed,
    pack_dataset,
    read_packed,
    tokenized_samples,
    unpack_row,
)
from packcfg.packing.errors import PackingError
from packcfg.packing.sources import spool
from packcfg.packing.verify import verify_packed

from .conftest import random_token_rows, write_jsonl


def expected_label_mask(row: dict) -> list[int]:
    """Label-aligned mask straight from the definition (independent of packcfg's vectorised code)."""
    n = len(row["input_ids"])
    if "loss_mask" in row:
        src = row["loss_mask"]
    elif "answer_start_idx" in row:
        src = [int(i >= row["answer_start_idx"]) for i in range(n)]
    else:
        src = [1] * n
    return [src[i + 1] if i + 1 < n else 0 for i in range(n)]


def unpacked(path: Path) -> Counter:
    slots = Counter()
    for row in read_packed(path):
        for ids, mask in unpack_row(row):
            slots[(tuple(ids.tolist()), tuple(mask.tolist()))] += 1
    return slots


def settings(tmp_path: Path, source: Path, **kw) -> PackSettings:
    return PackSettings(
        source=source,
        output=tmp_path / "out" / "train.parquet",
        metadata=tmp_path / "out" / "metadata.json",
        **kw,
    )


@pytest.mark.parametrize("kind", ["mask", "answer", "none"])
@pytest.mark.parametrize("algorithm", ["bfd", "first_fit_shuffle", "sequential", "greedy_buffer"])
def test_token_jsonl_round_trip(tmp_path, kind, algorithm):
    rows = random_token_rows(200, seed=7, kind=kind)
    src = write_jsonl(tmp_path / "src.jsonl", rows)
    res = pack_dataset(settings(tmp_path, src, capacity=128, algorithm=algorithm, seed=3), progress=False)
    want = Counter((tuple(r["input_ids"]), tuple(expected_label_mask(r))) for r in rows)
    assert unpacked(res.train_path) == want
    assert verify_packed(res.train_path, source=src).ok


def test_parquet_round_trip_and_schema(tmp_path):
    rows = random_token_rows(150, seed=2)
    src = tmp_path / "src.parquet"
    pq.write_table(
        pa.table({"input_ids": [r["input_ids"] for r in rows], "loss_mask": [r["loss_mask"] for r in rows]}),
        src,
        row_group_size=40,
    )
    res = pack_dataset(settings(tmp_path, src, capacity=200), progress=False)
    want = Counter((tuple(r["input_ids"]), tuple(expected_label_mask(r))) for r in rows)
    assert unpacked(res.train_path) == want
    schema = pq.read_schema(res.train_path)
    # exactly the columns and types Megatron Bridge's packed Parquet reader requires
    assert schema.names == ["input_ids", "loss_mask", "seq_start_id"]
    assert schema.field("input_ids").type == pa.list_(pa.int32())
    assert schema.field("loss_mask").type == pa.list_(pa.int8())
    assert schema.field("seq_start_id").type == pa.list_(pa.int32())


def test_metadata_has_bridge_keys(tmp_path, token_jsonl):
    res = pack_dataset(settings(tmp_path, token_jsonl, capacity=256), progress=False)
    import json

    meta = json.loads(res.metadata_path.read_text())
    assert isinstance(meta, list) and len(meta) == 1
    entry = meta[0]
    for key in (
        "dataset_max_seqlen",
        "max_samples_per_bin",
        "packing_factor",
        "packing_efficiency",
        "pack_size",
        "min_packed_seqlen",
        "algorithm",
        "seed",
        "lower_bound",
        "source_checksum",
    ):
        assert key in entry, key
    rows = list(read_packed(res.train_path))
    runtime = [len(r["input_ids"]) - len(r["seq_start_id"]) for r in rows]
    assert entry["pack_size"] == 256
    assert entry["min_packed_seqlen"] == min(runtime)
    assert entry["max_samples_per_bin"] == max(len(r["seq_start_id"]) for r in rows)
    assert entry["packs"] == len(rows)
    seqlens = [np.diff(np.append(r["seq_start_id"], len(r["input_ids"]))) - 1 for r in rows]
    assert entry["dataset_max_seqlen"] == max(int(s.max()) for s in seqlens)


def test_align_pre_pads_each_sample_with_pad_id(tmp_path):
    rows = random_token_rows(120, seed=5)
    src = write_jsonl(tmp_path / "src.jsonl", rows)
    res = pack_dataset(settings(tmp_path, src, capacity=256, align=8, pad_id=0), progress=False)
    originals = Counter((tuple(r["input_ids"]), tuple(expected_label_mask(r))) for r in rows)
    got = Counter()
    for row in read_packed(res.train_path):
        for ids, mask in unpack_row(row):
            assert (len(ids) - 1) % 8 == 0
            # strip the pre-padding (pad id 0 never occurs in the random tokens, which start at 3)
            n = len(ids)
            while n > 1 and ids[n - 1] == 0:
                n -= 1
            assert not mask[n:].any()
            got[(tuple(ids[:n].tolist()), tuple(mask[:n].tolist()))] += 1
    assert got == originals
    assert verify_packed(res.train_path, source=src).ok
    assert res.metadata["pad_seq_to_mult"] == 8


@pytest.mark.parametrize("policy", ["split", "truncate", "drop"])
def test_oversize_policies_round_trip(tmp_path, policy):
    rows = random_token_rows(60, seed=9, max_len=300)
    src = write_jsonl(tmp_path / "src.jsonl", rows)
    res = pack_dataset(settings(tmp_path, src, capacity=100, oversize=policy), progress=False)
    assert verify_packed(res.train_path, source=src).ok
    slots = list(unpacked(res.train_path).elements())
    long_rows = [r for r in rows if len(r["input_ids"]) - 1 > 100]
    assert long_rows  # the fixture must exercise the policy
    if policy == "split":
        # the pieces of each sample overlap by one token and together predict every token exactly once
        assert sum(len(t) - 1 for t, _ in slots) == sum(len(r["input_ids"]) - 1 for r in rows)
        assert sum(sum(m) for _, m in slots) == sum(sum(expected_label_mask(r)) for r in rows)
    elif policy == "truncate":
        assert len(slots) == len(rows)
        assert max(len(t) for t, _ in slots) == 101
    else:
        assert len(slots) == len(rows) - len(long_rows)
        assert res.metadata["oversize"]["dropped"] == len(long_rows)


def test_sft_text_round_trip_with_bundled_tokenizer(tmp_path, sample_sft):
    src = sample_sft / "validation.jsonl"
    tok = sample_sft / "tokenizer.json"
    res = pack_dataset(settings(tmp_path, src, capacity=512, tokenizer=tok), progress=False)
    sp = spool(src, tok)
    want = Counter()
    for i in range(sp.num_samples):
        ids, mask = sp.sample(i)
        want[(tuple(ids.tolist()), tuple(mask.tolist()))] += 1
    assert unpacked(res.train_path) == want
    # the answer (and EOS) are the targets: the mask is 1 exactly from the last prompt token on
    from tokenizers import Tokenizer

    t = Tokenizer.from_file(str(tok))
    import json

    first = json.loads(src.read_text().splitlines()[0])
    ctx = t.encode(first["input"], add_special_tokens=False).ids
    ans = t.encode(" " + first["output"], add_special_tokens=False).ids
    ids, mask = sp.sample(0)
    assert ids.tolist() == ctx + ans + [t.token_to_id("<eos>")]
    assert mask.tolist() == [0] * (len(ctx) - 1) + [1] * (len(ans) + 1) + [0]


def test_ensure_packed_and_tokenized_samples_agree(tmp_path, monkeypatch, tiny_recipe):
    monkeypatch.chdir(tmp_path)  # the recipe's output paths are relative to the working directory
    cfg = load_config([tiny_recipe])
    first = ensure_packed(cfg, progress=False)
    assert first.created and first.train_path.is_file()
    assert first.metadata["pack_size"] == 512 and first.metadata["seed"] == 1234
    again = ensure_packed(cfg, progress=False)
    assert not again.created and again.metadata["fingerprint"] == first.metadata["fingerprint"]
    forced = ensure_packed(cfg, progress=False, force=True)
    assert forced.created
    samples = tokenized_samples(cfg)
    assert len(samples) == first.metadata["samples"]
    want = Counter((tuple(i.tolist()), tuple(m.tolist())) for i, m in samples)
    assert unpacked(first.train_path) == want
    # a changed setting makes the existing file stale
    cfg2 = load_config([tiny_recipe], ["dataset.seed=7"])
    assert ensure_packed(cfg2, progress=False).created


def test_tokenized_samples_report_oversize_with_file_and_line(tmp_path):
    rows = random_token_rows(20, seed=3, max_len=60)
    src = write_jsonl(tmp_path / "training.jsonl", rows)
    cfg = {
        "dataset": {
            "dataset_root": str(tmp_path),
            "offline_packing_specs": {
                "packed_sequence_size": 32,
                "packed_train_data_path": str(tmp_path / "p.parquet"),
            },
        }
    }
    with pytest.raises(PackingError, match=r"training.jsonl:\d+: sample \d+ has length"):
        tokenized_samples(cfg)
    assert src.exists()


def test_streaming_uses_row_groups(tmp_path):
    rows = random_token_rows(400, seed=4, max_len=40)
    src = write_jsonl(tmp_path / "src.jsonl", rows)
    from packcfg.packing.api import make_plan
    from packcfg.packing.writer import write_packed

    s = settings(tmp_path, src, capacity=64)
    sp = spool(src, None, tmp_path / "spool")
    assert isinstance(sp.packed, np.memmap)  # on disk, not in memory
    p = make_plan(sp, s)
    write_packed(s.output, sp, p, 0, seed=0, rows_per_group=16)
    meta = pq.ParquetFile(s.output).metadata
    assert meta.num_row_groups == -(-p.num_packs // 16)


def test_dpo_pairs_are_adjacent_in_the_packed_rows(tmp_path):
    rows = random_token_rows(80, seed=8, max_len=50)
    for k in range(0, len(rows), 2):  # tag each pair: chosen and rejected share their first token
        rows[k + 1]["input_ids"][0] = rows[k]["input_ids"][0] = 100_000 + k
    src = write_jsonl(tmp_path / "dpo.jsonl", rows)
    res = pack_dataset(settings(tmp_path, src, capacity=128, pairs=True), progress=False)
    for row in read_packed(res.train_path):
        firsts = [int(ids[0]) for ids, _ in unpack_row(row)]
        assert len(firsts) % 2 == 0
        assert all(firsts[j] == firsts[j + 1] for j in range(0, len(firsts), 2))
    assert verify_packed(res.train_path, source=src).ok


def test_bundled_pretokenized_sample_matches_the_text_pipeline(tmp_path, sample_sft):
    """tokenized.jsonl (input_ids + answer_start_idx) packs to the same slots as its SFT text."""
    pre = sample_sft / "tokenized.jsonl"
    res = pack_dataset(settings(tmp_path, pre, capacity=512), progress=False)
    text = spool(sample_sft / "training.jsonl", sample_sft / "tokenizer.json")
    n = len(pre.read_text().splitlines())
    want = Counter()
    for i in range(n):
        ids, mask = text.sample(i)
        want[(tuple(ids.tolist()), tuple(mask.tolist()))] += 1
    assert unpacked(res.train_path) == want


# --------------------------------------------------------------------------- read-ahead and build-ahead


def test_prefetched_keeps_order_raises_in_place_and_stops_its_worker():
    import threading

    from packcfg.packing.sources import prefetched

    def items(n, fail_at=None):
        for i in range(n):
            if i == fail_at:
                raise PackingError(f"data.jsonl:{i + 1}: bad")
            yield i

    assert list(prefetched(items(50))) == list(range(50))
    got = []
    with pytest.raises(PackingError, match=r"^data.jsonl:8: bad$"):
        for x in prefetched(items(50, fail_at=7)):
            got.append(x)
    assert got == list(range(7))  # everything before the error, nothing after
    closed = threading.Event()

    def endless():
        try:
            i = 0
            while True:
                yield i
                i += 1
        finally:
            closed.set()

    for x in prefetched(endless()):
        if x == 3:
            break
    assert closed.wait(5)  # the consumer stopped: the worker closed the source
    assert not any(t.name == "packcfg-prefetch" for t in threading.enumerate())


def test_pipelined_writer_gives_the_rows_and_digest_of_one_row_group_at_a_time(tmp_path, token_jsonl):
    """Row groups built ahead in a thread: the same rows, in the same order, and the same samples_digest
    whatever the row-group size (1 row per group: every row crosses the thread hand-off)."""
    from packcfg.packing.planner import plan
    from packcfg.packing.writer import write_packed

    sp = spool(token_jsonl)
    p = plan(sp.runtime_lengths(), 512, align=4)
    tables, digests = [], []
    for rows in (1, 7, 10_000):
        meta: dict = {"fingerprint": "sha256:x"}
        write_packed(tmp_path / f"o{rows}.parquet", sp, p, 0, seed=3, rows_per_group=rows, file_metadata=meta)
        tables.append(pq.read_table(tmp_path / f"o{rows}.parquet"))
        digests.append(meta["samples_digest"])
    assert all(t.equals(tables[0]) for t in tables) and len(set(digests)) == 1
    assert pq.ParquetFile(tmp_path / "o1.parquet").metadata.num_row_groups == p.num_packs


def test_a_chunked_gather_from_the_spool_writes_the_same_file(tmp_path, token_jsonl, monkeypatch):
    """The rows are gathered from a memory-mapped spool in chunks, the mapped pages handed back after each
    (writer.GATHER_CHUNK_TOKENS; it keeps `pack`'s peak RSS off the spool's size): with chunks of 7 tokens the
    packed file is byte for byte the one written in one gather a row group, and the pages were handed back.
    Control: a gather that misplaces one chunk is caught by the same comparison."""
    from packcfg.packing import writer
    from packcfg.packing.planner import plan

    sp = spool(token_jsonl, None, tmp_path / "spool")
    assert isinstance(sp.packed, np.memmap) and sp.packed.mode == "r"
    p = plan(sp.runtime_lengths(), 512, align=4)
    released = []
    real_release = writer.release_mapped_pages
    monkeypatch.setattr(writer, "release_mapped_pages", lambda m: released.append(1) or real_release(m))

    def written(name: str) -> bytes:
        writer.write_packed(tmp_path / name, sp, p, 0, seed=3, rows_per_group=64)
        return (tmp_path / name).read_bytes()

    monkeypatch.setattr(writer, "GATHER_CHUNK_TOKENS", 1 << 40)
    whole = written("whole.parquet")
    assert not released
    monkeypatch.setattr(writer, "GATHER_CHUNK_TOKENS", 7)
    assert written("chunked.parquet") == whole and released
    real_gather = writer.gather_spool

    def misplaced(packed, gather):
        out = real_gather(packed, gather)
        out[:7] = np.roll(out[:7], 1)  # one chunk shifted by a token
        return out

    monkeypatch.setattr(writer, "gather_spool", misplaced)
    assert written("control.parquet") != whole
