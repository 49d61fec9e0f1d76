"""`verify` finds the metadata `pack` writes (and Bridge's) and, without the source, still finds dropped,
duplicated and altered samples, negative ids and broken rows; the packed Parquet is written with the
intended compression and dictionary settings (issues 10 and 14)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from packcfg.cli import main
from packcfg.packing import read_packed, verify, writer
from packcfg.packing.errors import PackingError
from packcfg.packing.planner import itemize
from packcfg.packing.sources import Batch, iter_batches, label_mask_from_input_mask, make_batch
from packcfg.packing.verify import verify_packed
from packcfg.packing.writer import COLUMNS, leaf, slot_hashes

from .conftest import random_token_rows, write_jsonl


def run_cli(capsys, *argv) -> tuple[int, str, str]:
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.fixture
def packed(tmp_path: Path, capsys) -> Path:
    """A data file packed with no --out/--metadata: writes data.packed.parquet + data.packed.metadata.json."""
    src = write_jsonl(tmp_path / "data.jsonl", random_token_rows(120, seed=5))
    rc, _, err = run_cli(capsys, "pack", src, "--capacity", "200", "-q")
    assert rc == 0, err
    out = tmp_path / "data.packed.parquet"
    assert out.is_file() and (tmp_path / "data.packed.metadata.json").is_file()
    return out


def rewrite(rows: list[dict], path: Path) -> Path:
    """The rows as another tool would write them back (no packcfg entry in the file)."""
    pq.write_table(
        pa.table(
            {
                "input_ids": pa.array([r["input_ids"].tolist() for r in rows], pa.list_(pa.int32())),
                "loss_mask": pa.array([r["loss_mask"].tolist() for r in rows], pa.list_(pa.int8())),
                "seq_start_id": pa.array([r["seq_start_id"].tolist() for r in rows], pa.list_(pa.int32())),
            }
        ),
        path,
    )
    return path


# --------------------------------------------------------------------------- finding the metadata


def test_verify_finds_the_metadata_pack_wrote(packed, capsys):
    rc, out, err = run_cli(capsys, "verify", packed)
    assert rc == 0, err
    assert "pack_size 200" in out and "samples digest matches" in out


def test_verify_uses_the_entry_inside_the_file_without_a_metadata_json(packed, capsys):
    packed.with_name("data.packed.metadata.json").unlink()
    rc, out, err = run_cli(capsys, "verify", packed)
    assert rc == 0, err
    assert "pack_size 200" in out and "samples digest matches" in out


def test_verify_finds_bridges_metadata_naming(packed, tmp_path, capsys):
    folder = tmp_path / "bridge"
    folder.mkdir()
    shutil.copy(packed, folder / "training_200.idx.parquet")
    entry = json.loads(packed.with_name("data.packed.metadata.json").read_text())
    (folder / "200_metadata.jsonl").write_text(json.dumps(entry))
    report = verify_packed(folder / "training_200.idx.parquet")
    assert report.metadata == folder / "200_metadata.jsonl" and report.capacity == 200 and report.ok


def test_metadata_of_another_packing_is_a_violation(packed, tmp_path, capsys):
    meta = packed.with_name("data.packed.metadata.json")
    entries = json.loads(meta.read_text())
    entries[0]["fingerprint"] = "sha256:" + "0" * 64
    meta.write_text(json.dumps(entries))
    rc, _, err = run_cli(capsys, "verify", packed)
    assert rc == 1 and "fingerprint differs" in err


# --------------------------------------------------------------------------- without --source


def test_without_source_a_duplicated_row_is_found(packed, capsys):
    rows = list(read_packed(packed))
    bad = rewrite(rows + rows[3:4], packed)  # metadata beside still describes the original
    rc, _, err = run_cli(capsys, "verify", bad)
    assert rc == 1
    assert f"{len(rows) + 1} rows, the metadata" in err and f"says {len(rows)} packs" in err
    assert f"row {len(rows)} is identical to row 3" in err


def test_without_source_a_dropped_row_is_found(packed, capsys):
    rows = list(read_packed(packed))
    rc, _, err = run_cli(capsys, "verify", rewrite(rows[1:], packed))
    assert rc == 1 and f"{len(rows) - 1} rows" in err


def test_without_source_a_sample_replaced_by_a_copy_of_another_is_found(packed, capsys):
    rows = [dict(r) for r in read_packed(packed)]
    # row 0's first sample overwritten with the start of row 1's first sample: counts all stay the same
    a, b = rows[0], rows[1]
    n = int(a["seq_start_id"][1]) if len(a["seq_start_id"]) > 1 else len(a["input_ids"])
    m = int(b["seq_start_id"][1]) if len(b["seq_start_id"]) > 1 else len(b["input_ids"])
    k = min(n, m)
    ids = a["input_ids"].copy()
    ids[:k] = b["input_ids"][:k]
    a["input_ids"] = ids
    rc, _, err = run_cli(capsys, "verify", rewrite(rows, packed))
    assert rc == 1 and "the samples differ from what pack wrote" in err


def test_without_source_negative_ids_are_found(packed, capsys):
    rows = [dict(r) for r in read_packed(packed)]
    ids = rows[2]["input_ids"].copy()
    ids[4] = -2147483648  # what a null became before ids were validated
    rows[2]["input_ids"] = ids
    rc, _, err = run_cli(capsys, "verify", rewrite(rows, packed))
    assert rc == 1 and "row 2: input_ids[4] is -2147483648: negative token id" in err


def test_without_source_broken_structure_is_found(packed, capsys):
    rows = [dict(r) for r in read_packed(packed)]
    many = next(i for i, r in enumerate(rows) if i > 0 and len(r["seq_start_id"]) > 2)
    rows[many]["seq_start_id"] = rows[many]["seq_start_id"][::-1].copy()
    rows[0]["loss_mask"] = rows[0]["loss_mask"][:-2].copy()
    last = len(rows) - 1
    rows[last]["seq_start_id"] = np.append(rows[last]["seq_start_id"], 10**6).astype(np.int32)
    rc, _, err = run_cli(capsys, "verify", rewrite(rows, packed))
    assert rc == 1
    assert f"row {many}: seq_start_id must start at 0" in err
    assert "row 0: loss_mask has" in err
    assert f"row {last}: seq_start_id not strictly increasing" in err or "outside the row" in err


def test_without_metadata_repeated_rows_are_only_a_warning(tmp_path, capsys):
    """A file from another packer (no digest) may repeat a sample legitimately: warn, do not fail."""
    rows = [
        {"input_ids": np.array([5, 6, 7], np.int32), "loss_mask": np.array([1, 1, 0], np.int8)},
        {"input_ids": np.array([5, 6, 7], np.int32), "loss_mask": np.array([1, 1, 0], np.int8)},
    ]
    for r in rows:
        r["seq_start_id"] = np.array([0], np.int32)
    path = rewrite(rows, tmp_path / "other.parquet")
    rc, _, err = run_cli(capsys, "verify", path)
    assert rc == 0 and "warning: " in err and "row 1 is identical to row 0" in err


def test_a_source_whose_every_sample_the_policy_drops_reports_every_slot(tmp_path, capsys):
    """Nothing expected from the source (all oversize under --oversize drop): every slot of the file is
    named as not found, exit 1 (this raised an IndexError)."""
    a = write_jsonl(tmp_path / "a.jsonl", [{"input_ids": list(range(1, 5 + i))} for i in range(20)])
    b = write_jsonl(tmp_path / "b.jsonl", [{"input_ids": list(range(1, 200))} for _ in range(5)])
    rc, _, err = run_cli(capsys, "pack", a, "--capacity", "16", "--oversize", "drop", "-q")
    assert rc == 0, err
    rc, _, err = run_cli(capsys, "verify", tmp_path / "a.packed.parquet", "--source", b)
    assert rc == 1 and "not found in" in err and "Error" not in err, err


def test_with_source_dropped_and_duplicated_samples_are_found(packed, tmp_path, capsys):
    src = tmp_path / "data.jsonl"
    rows = list(read_packed(packed))
    rc, _, err = run_cli(capsys, "verify", rewrite(rows[1:], tmp_path / "a.parquet"), "--source", src)
    assert rc == 1 and "sample missing" in err
    rc, _, err = run_cli(capsys, "verify", rewrite(rows + rows[:1], tmp_path / "b.parquet"), "--source", src)
    assert rc == 1 and "duplicate of source line" in err


# --------------------------------------------------------------------------- --source: hashing and reports


def _reference_expected(b, item_sample, item_start, item_length, align, pad_id):
    """The expected slot hashes as verify computed them before the chunked, two-thread source pass: one
    gather of the whole batch, then slot_hashes twice (full, and with a zero mask)."""
    real = (item_length + 1).astype(np.int64)
    slot = real + (-item_length) % align
    off = np.zeros(len(slot) + 1, dtype=np.int64)
    np.cumsum(slot, out=off[1:])
    pos = np.arange(int(off[-1]), dtype=np.int64) - np.repeat(off[:-1], slot)
    is_pad = pos >= np.repeat(real, slot)
    gather = np.repeat(b.offsets[item_sample] + item_start, slot) + pos
    gather[is_pad] = 0
    toks = b.values[gather].astype(np.int32)
    mask = b.mask[gather].astype(np.int8)
    toks[is_pad] = pad_id
    mask[is_pad] = 0
    mask[off[:-1] + real - 1] = 0
    return (
        slot_hashes(toks, mask, off),
        slot_hashes(toks, np.zeros(len(toks), np.int8), off),
        b.sample_lines()[item_sample],
    )


def _joined(parts):
    parts = list(parts)
    return tuple(np.concatenate([p[k] for p in parts]) for k in range(3))


def _batch(seed: int, n: int = 300, max_len: int = 90) -> Batch:
    rows = random_token_rows(n, seed=seed, max_len=max_len)
    ids = [np.asarray(r["input_ids"], np.int32) for r in rows]
    masks = [
        label_mask_from_input_mask(np.asarray(r["loss_mask"]), np.array([0, len(r["loss_mask"])]))
        for r in rows
    ]
    return make_batch(ids, masks, 7)  # first line 7: lines are carried through


def test_hash_caches_give_every_thread_long_enough_arrays(monkeypatch):
    """writer._powers and position_keys grow a shared cache; a thread that asked for n must get n even
    when another thread replaced the cache with a shorter one meanwhile (verify's two passes share them)."""
    from concurrent.futures import ThreadPoolExecutor

    monkeypatch.setattr(writer, "_POWERS", (np.ones(1, np.uint64), np.ones(1, np.uint64)))
    monkeypatch.setattr(writer, "_POSITION_KEYS", np.zeros(0, np.uint64))
    sizes = [int(x) for x in np.random.default_rng(5).integers(1, 300_000, 200)]
    with ThreadPoolExecutor(4) as pool:
        powers = list(pool.map(lambda n: len(writer._powers(n)[0]) >= n, sizes))
        keys = list(pool.map(lambda n: len(writer.position_keys(n)) >= n, sizes))
    assert all(powers) and all(keys)


def test_slot_hash_pair_is_slot_hashes_twice(monkeypatch):
    rng = np.random.default_rng(3)
    lens = rng.integers(0, 40, size=500)
    lens[[0, 7, 8, 499]] = 0  # empty slots, also first and last
    off = np.zeros(len(lens) + 1, np.int64)
    np.cumsum(lens, out=off[1:])
    toks = rng.integers(-(2**31), 2**31 - 1, size=int(off[-1]), dtype=np.int64).astype(np.int32)
    mask = rng.integers(0, 4, size=len(toks)).astype(np.int8)  # slot_hashes takes the low bit
    # writer's cache of powers too small: grown on the way (each caller gets arrays long enough)
    monkeypatch.setattr(writer, "_POWERS", (np.ones(1, np.uint64), np.ones(1, np.uint64)))
    ranges = ((0, len(lens)), (3, 200), (8, 9), (5, 5))
    got = [verify._slot_hash_pair(toks, mask, off[lo : hi + 1]) for lo, hi in ranges]
    assert len(writer._POWERS[0]) >= int(off[-1])
    for (lo, hi), (full, tok) in zip(ranges, got, strict=True):
        assert np.array_equal(full, slot_hashes(toks, mask, off[lo : hi + 1]))
        assert np.array_equal(tok, slot_hashes(toks, np.zeros(len(toks), np.int8), off[lo : hi + 1]))
    # and from the cache once it is large enough
    full, tok = verify._slot_hash_pair(toks, mask, off)
    assert np.array_equal(full, slot_hashes(toks, mask, off))
    assert np.array_equal(tok, slot_hashes(toks, np.zeros(len(toks), np.int8), off))


@pytest.mark.parametrize("chunk", [1, 100, 1000, 1 << 20])
def test_fast_path_and_general_path_give_the_same_expected_hashes(chunk):
    b = _batch(seed=11)
    n = len(b.offsets) - 1
    raw = np.diff(b.offsets) - 1
    want = _reference_expected(b, np.arange(n), np.zeros(n, np.int64), raw, 1, 0)
    fast = _joined(verify._sample_slots(b, chunk))
    general = _joined(verify._item_slots(b, np.arange(n), np.zeros(n, np.int64), raw, 1, 0, chunk))
    for got in (fast, general):
        for w, g in zip(want, got, strict=True):
            assert np.array_equal(w, g)
    # a reader's mask that does not end each sample with 0 is not relied on (nor written to)
    b.mask[b.offsets[1:] - 1] = 1
    before = b.mask.copy()
    assert np.array_equal(_joined(verify._sample_slots(b, chunk))[0], want[0])
    assert np.array_equal(b.mask, before)


@pytest.mark.parametrize(
    ("capacity", "align", "policy"),
    [
        (None, 1, "error"),
        (4096, 1, "error"),
        (4096, 8, "error"),
        (None, 4, "error"),
        (40, 1, "split"),
        (40, 8, "split"),
        (40, 1, "truncate"),
        (40, 4, "drop"),
    ],
)
@pytest.mark.parametrize("chunk", [64, 1 << 20])
def test_expected_hashes_as_before_with_and_without_splits_and_alignment(
    tmp_path, monkeypatch, capacity, align, policy, chunk
):
    rows = random_token_rows(400, seed=4, max_len=120)
    src = write_jsonl(tmp_path / "src.jsonl", rows)
    want = []
    for b in iter_batches(src):
        raw = np.diff(b.offsets) - 1
        items = (np.arange(len(raw)), np.zeros(len(raw), np.int64), raw)
        if capacity is not None:
            items = itemize(raw, capacity, align, policy)
        want.append(_reference_expected(b, *items, align, 5))
    want = tuple(np.concatenate([p[k] for p in want]) for k in range(3))
    # the fast path is taken exactly when every slot is a whole, unpadded sample
    calls = {"fast": 0, "general": 0}
    fast, general = verify._sample_slots, verify._item_slots

    def count(name, fn):
        def wrapped(*a, **k):
            calls[name] += 1
            return fn(*a, **k)

        return wrapped

    monkeypatch.setattr(verify, "_sample_slots", count("fast", fast))
    monkeypatch.setattr(verify, "_item_slots", count("general", general))
    got = _joined(verify._expected_batches(src, None, capacity, align, 5, policy, chunk_tokens=chunk))
    for w, g in zip(want, got, strict=True):
        assert np.array_equal(w, g)
    plain = policy == "error" and align == 1
    assert calls == {"fast": 1 if plain else 0, "general": 0 if plain else 1}
    assert len(got[0]) >= (400 if policy != "drop" else 1)


def _source_reports(packed: Path, tmp_path: Path) -> dict[str, tuple[int, str]]:
    """Exit code and stderr (tmp path as TMP) of `verify --source` on altered, missing, duplicated and
    mask-changed samples, and on unreadable inputs."""
    import contextlib
    import io

    src = tmp_path / "data.jsonl"
    rows = [dict(r) for r in read_packed(packed)]

    def cli(*argv) -> tuple[int, str]:
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            rc = main([str(a) for a in argv])
        return rc, err.getvalue().replace(str(tmp_path), "TMP")

    altered = [dict(r) for r in rows]
    altered[0]["input_ids"] = altered[0]["input_ids"].copy()
    altered[0]["input_ids"][1] += 1
    masked = [dict(r) for r in rows]
    masked[1]["loss_mask"] = masked[1]["loss_mask"].copy()
    masked[1]["loss_mask"][0] = 1 - masked[1]["loss_mask"][0]
    many = [dict(r) for r in rows]
    for r in many:
        r["input_ids"] = r["input_ids"] + 1
    many_masks = [dict(r) for r in rows]
    for r in many_masks:
        r["loss_mask"] = r["loss_mask"].copy()
        r["loss_mask"][r["seq_start_id"]] = 1 - r["loss_mask"][r["seq_start_id"]]  # every sample's first
    bad_src = tmp_path / "bad.jsonl"
    lines = src.read_text().splitlines(keepends=True)
    bad_src.write_text("".join(lines[:50]) + '{"input_ids": [5, -2, 7]}\n' + "".join(lines[50:]))
    not_parquet = tmp_path / "not.parquet"
    not_parquet.write_text("not a parquet file\n")
    twice = tmp_path / "twice.jsonl"  # every sample twice in the source
    twice.write_text(src.read_text() * 2)
    return {
        "ok": cli("verify", packed, "--source", src),
        "altered": cli("verify", rewrite(altered, tmp_path / "altered.parquet"), "--source", src),
        "mask": cli("verify", rewrite(masked, tmp_path / "mask.parquet"), "--source", src),
        "missing": cli("verify", rewrite(rows[1:], tmp_path / "missing.parquet"), "--source", src),
        "duplicate": cli("verify", rewrite(rows + rows[2:3], tmp_path / "dup.parquet"), "--source", src),
        "many": cli("verify", rewrite(many, tmp_path / "many.parquet"), "--source", src, "--max-errors", 3),
        "many masks": cli(
            "verify", rewrite(many_masks, tmp_path / "masks.parquet"), "--source", src, "--max-errors", 60
        ),
        "thrice of twice": cli(
            "verify",
            rewrite(rows + rows[2:3] + rows[:1] + rows[2:3], tmp_path / "thrice.parquet"),
            "--source",
            twice,
            "--max-errors",
            12,
        ),
        "metadata": cli("verify", rewrite(altered, packed), "--source", src),  # metadata beside: digest
        "bad source": cli("verify", tmp_path / "dup.parquet", "--source", bad_src),
        "no source": cli("verify", tmp_path / "dup.parquet", "--source", tmp_path / "nope.jsonl"),
        "no packed, bad source": cli("verify", tmp_path / "nope.parquet", "--source", bad_src),
        "not parquet, bad source": cli("verify", not_parquet, "--source", bad_src),
    }


# what these reported before the source pass ran beside the packed-file pass (packcfg 89ef28d)
_REPORTS_BEFORE: dict[str, tuple[int, str]] = {
    "altered": (
        1,
        "TMP/altered.parquet: row 0 sample 0: not found in TMP/data.jsonl (tokens altered or foreign)\n"
        "TMP/data.jsonl:103: sample missing from TMP/altered.parquet\n",
    ),
    "bad source": (
        2,
        "packcfg verify: error: TMP/bad.jsonl:51: input_ids[1] is -2: token ids must be integers in "
        "0..2147483647\n",
    ),
    "duplicate": (
        1,
        "TMP/dup.parquet: row 28 sample 0: duplicate of source line 119\n"
        "TMP/dup.parquet: row 28 sample 1: duplicate of source line 47\n"
        "TMP/dup.parquet: row 28 sample 2: duplicate of source line 36\n"
        "warning: TMP/dup.parquet: row 28 is identical to row 2 (no samples_digest in the metadata to "
        "tell a duplicate from a repeated source sample)\n",
    ),
    "many": (
        1,
        "TMP/many.parquet: row 0 sample 0: not found in TMP/data.jsonl (tokens altered or foreign)\n"
        "TMP/many.parquet: row 0 sample 1: not found in TMP/data.jsonl (tokens altered or foreign)\n"
        "TMP/many.parquet: row 0 sample 2: not found in TMP/data.jsonl (tokens altered or foreign)\n"
        "... and 237 more\n",
    ),
    "many masks": (
        1,
        "TMP/masks.parquet: row 0 sample 0: tokens match source line 103 but the loss_mask differs\n"
        "TMP/masks.parquet: row 0 sample 1: tokens match source line 43 but the loss_mask differs\n"
        "TMP/masks.parquet: row 0 sample 2: tokens match source line 76 but the loss_mask differs\n"
        "TMP/masks.parquet: row 0 sample 3: tokens match source line 44 but the loss_mask differs\n"
        "TMP/masks.parquet: row 1 sample 0: tokens match source line 34 but the loss_mask differs\n"
        "TMP/masks.parquet: row 1 sample 1: tokens match source line 8 but the loss_mask differs\n"
        "TMP/masks.parquet: row 1 sample 2: tokens match source line 84 but the loss_mask differs\n"
        "TMP/masks.parquet: row 2 sample 0: tokens match source line 119 but the loss_mask differs\n"
        "TMP/masks.parquet: row 2 sample 1: tokens match source line 47 but the loss_mask differs\n"
        "TMP/masks.parquet: row 2 sample 2: tokens match source line 36 but the loss_mask differs\n"
        "TMP/masks.parquet: row 3 sample 0: tokens match source line 101 but the loss_mask differs\n"
        "TMP/masks.parquet: row 3 sample 1: tokens match source line 9 but the loss_mask differs\n"
        "TMP/masks.parquet: row 3 sample 2: tokens match source line 40 but the loss_mask differs\n"
        "TMP/masks.parquet: row 4 sample 0: tokens match source line 48 but the loss_mask differs\n"
        "TMP/masks.parquet: row 4 sample 1: tokens match source line 109 but the loss_mask differs\n"
        "TMP/masks.parquet: row 4 sample 2: tokens match source line 7 but the loss_mask differs\n"
        "TMP/masks.parquet: row 4 sample 3: tokens match source line 73 but the loss_mask differs\n"
        "TMP/masks.parquet: row 4 sample 4: tokens match source line 63 but the loss_mask differs\n"
        "TMP/masks.parquet: row 4 sample 5: tokens match source line 5 but the loss_mask differs\n"
        "TMP/masks.parquet: row 4 sample 6: tokens match source line 23 but the loss_mask differs\n"
        "TMP/masks.parquet: row 4 sample 7: tokens match source line 46 but the loss_mask differs\n"
        "TMP/masks.parquet: row 4 sample 8: tokens match source line 90 but the loss_mask differs\n"
        "TMP/masks.parquet: row 4 sample 9: tokens match source line 112 but the loss_mask differs\n"
        "TMP/masks.parquet: row 5 sample 0: tokens match source line 91 but the loss_mask differs\n"
        "TMP/masks.parquet: row 5 sample 1: tokens match source line 26 but the loss_mask differs\n"
        "TMP/masks.parquet: row 5 sample 2: tokens match source line 45 but the loss_mask differs\n"
        "TMP/masks.parquet: row 5 sample 3: tokens match source line 2 but the loss_mask differs\n"
        "TMP/masks.parquet: row 6 sample 0: tokens match source line 87 but the loss_mask differs\n"
        "TMP/masks.parquet: row 6 sample 1: tokens match source line 96 but the loss_mask differs\n"
        "TMP/masks.parquet: row 6 sample 2: tokens match source line 102 but the loss_mask differs\n"
        "TMP/masks.parquet: row 6 sample 3: tokens match source line 108 but the loss_mask differs\n"
        "TMP/masks.parquet: row 6 sample 4: tokens match source line 12 but the loss_mask differs\n"
        "TMP/masks.parquet: row 6 sample 5: tokens match source line 20 but the loss_mask differs\n"
        "TMP/masks.parquet: row 6 sample 6: tokens match source line 19 but the loss_mask differs\n"
        "TMP/masks.parquet: row 6 sample 7: tokens match source line 94 but the loss_mask differs\n"
        "TMP/masks.parquet: row 6 sample 8: tokens match source line 17 but the loss_mask differs\n"
        "TMP/masks.parquet: row 6 sample 9: tokens match source line 54 but the loss_mask differs\n"
        "TMP/masks.parquet: row 7 sample 0: tokens match source line 116 but the loss_mask differs\n"
        "TMP/masks.parquet: row 7 sample 1: tokens match source line 13 but the loss_mask differs\n"
        "TMP/masks.parquet: row 7 sample 2: tokens match source line 3 but the loss_mask differs\n"
        "TMP/masks.parquet: row 8 sample 0: tokens match source line 110 but the loss_mask differs\n"
        "TMP/masks.parquet: row 8 sample 1: tokens match source line 58 but the loss_mask differs\n"
        "TMP/masks.parquet: row 8 sample 2: tokens match source line 10 but the loss_mask differs\n"
        "TMP/masks.parquet: row 8 sample 3: tokens match source line 89 but the loss_mask differs\n"
        "TMP/masks.parquet: row 9 sample 0: tokens match source line 85 but the loss_mask differs\n"
        "TMP/masks.parquet: row 9 sample 1: tokens match source line 75 but the loss_mask differs\n"
        "TMP/masks.parquet: row 9 sample 2: tokens match source line 68 but the loss_mask differs\n"
        "TMP/masks.parquet: row 9 sample 3: tokens match source line 4 but the loss_mask differs\n"
        "TMP/masks.parquet: row 9 sample 4: tokens match source line 93 but the loss_mask differs\n"
        "TMP/masks.parquet: row 9 sample 5: tokens match source line 52 but the loss_mask differs\n"
        "TMP/masks.parquet: row 10 sample 0: tokens match source line 51 but the loss_mask differs\n"
        "TMP/masks.parquet: row 10 sample 1: tokens match source line 22 but the loss_mask differs\n"
        "TMP/masks.parquet: row 10 sample 2: tokens match source line 29 but the loss_mask differs\n"
        "TMP/masks.parquet: row 11 sample 0: tokens match source line 16 but the loss_mask differs\n"
        "TMP/masks.parquet: row 11 sample 1: tokens match source line 86 but the loss_mask differs\n"
        "TMP/masks.parquet: row 11 sample 2: tokens match source line 107 but the loss_mask differs\n"
        "TMP/masks.parquet: row 11 sample 3: tokens match source line 35 but the loss_mask differs\n"
        "TMP/masks.parquet: row 12 sample 0: tokens match source line 53 but the loss_mask differs\n"
        "TMP/masks.parquet: row 12 sample 1: tokens match source line 56 but the loss_mask differs\n"
        "TMP/masks.parquet: row 12 sample 2: tokens match source line 42 but the loss_mask differs\n"
        "... and 180 more\n",
    ),
    "mask": (
        1,
        "TMP/mask.parquet: row 1 sample 0: tokens match source line 34 but the loss_mask differs\n"
        "TMP/data.jsonl:34: sample missing from TMP/mask.parquet\n",
    ),
    "metadata": (
        1,
        "TMP/data.packed.parquet: the samples differ from what pack wrote (samples_digest "
        "5c109e2c30e603ca, metadata 7e4c1ac65945d78c): a sample was dropped, duplicated or altered\n"
        "TMP/data.packed.parquet: row 0 sample 0: not found in TMP/data.jsonl (tokens altered or "
        "foreign)\n"
        "TMP/data.jsonl:103: sample missing from TMP/data.packed.parquet\n",
    ),
    "missing": (
        1,
        "TMP/data.jsonl:43: sample missing from TMP/missing.parquet\n"
        "TMP/data.jsonl:44: sample missing from TMP/missing.parquet\n"
        "TMP/data.jsonl:76: sample missing from TMP/missing.parquet\n"
        "TMP/data.jsonl:103: sample missing from TMP/missing.parquet\n",
    ),
    "no packed, bad source": (2, "packcfg verify: error: TMP/nope.parquet: no such file\n"),
    "no source": (2, "packcfg verify: error: TMP/nope.jsonl: no such file\n"),
    "not parquet, bad source": (
        2,
        "packcfg verify: error: TMP/not.parquet: not a readable Parquet file (Parquet "
        "magic bytes not found in footer. Either the file is corrupted or this is not a "
        "parquet file.)\n",
    ),
    "ok": (0, ""),
    "thrice of twice": (
        1,
        "TMP/thrice.parquet: row 30 sample 0: duplicate of source line 119\n"
        "TMP/thrice.parquet: row 30 sample 1: duplicate of source line 47\n"
        "TMP/thrice.parquet: row 30 sample 2: duplicate of source line 36\n"
        "TMP/twice.jsonl:1: sample missing from TMP/thrice.parquet\n"
        "TMP/twice.jsonl:2: sample missing from TMP/thrice.parquet\n"
        "TMP/twice.jsonl:3: sample missing from TMP/thrice.parquet\n"
        "TMP/twice.jsonl:4: sample missing from TMP/thrice.parquet\n"
        "TMP/twice.jsonl:5: sample missing from TMP/thrice.parquet\n"
        "TMP/twice.jsonl:6: sample missing from TMP/thrice.parquet\n"
        "TMP/twice.jsonl:7: sample missing from TMP/thrice.parquet\n"
        "TMP/twice.jsonl:8: sample missing from TMP/thrice.parquet\n"
        "TMP/twice.jsonl:9: sample missing from TMP/thrice.parquet\n"
        "warning: TMP/thrice.parquet: row 28 is identical to row 2 (no samples_digest in the "
        "metadata to tell a duplicate from a repeated source sample)\n"
        "warning: TMP/thrice.parquet: row 29 is identical to row 0 (no samples_digest in the "
        "metadata to tell a duplicate from a repeated source sample)\n"
        "... and 104 more\n",
    ),
}


def test_with_source_reports_are_as_before(packed, tmp_path):
    got = _source_reports(packed, tmp_path)
    assert got == _REPORTS_BEFORE


def test_a_packed_file_error_stops_the_source_pass(packed, tmp_path, monkeypatch):
    """The worker reading the source is stopped and joined when the packed file cannot be read."""
    import threading

    real = verify._expected_batches

    def waiting(*a, **k):
        a[6].wait(10)  # the stop event: a source that takes long to read
        yield from real(*a, **k)

    monkeypatch.setattr(verify, "_expected_batches", waiting)
    not_parquet = tmp_path / "not.parquet"
    not_parquet.write_text("not a parquet file\n")
    with pytest.raises(PackingError, match="not a readable Parquet file"):
        verify_packed(not_parquet, source=tmp_path / "data.jsonl")
    assert not any(t.name == "packcfg-verify-source" for t in threading.enumerate())


def _row_findings(tmp_path: Path) -> list[str]:
    """Label alignment, pack_size and pad_seq_to_mult findings of hand-made rows, some of them unsound."""
    i8, i32 = np.int8, np.int32

    def row(lens: list[int], last_mask: dict[int, int] | None = None, start0: int = 0) -> dict:
        ids = np.arange(3, 3 + sum(lens), dtype=i32)
        mask = np.ones(len(ids), i8)
        st = np.concatenate([[0], np.cumsum(lens)[:-1]]).astype(i32)
        mask[np.cumsum(lens) - 1] = 0
        for j, v in (last_mask or {}).items():
            mask[int(np.cumsum(lens)[j]) - 1] = v
        st[0] = start0
        return {"input_ids": ids, "loss_mask": mask, "seq_start_id": st}

    rows = [
        row([3, 5, 3]),  # fine: runtime 8, slots 2, 4, 2 (align 2)
        row([3, 5, 3], {1: 1}),  # sample 1 not label-aligned
        row([5, 5, 5]),  # runtime 12 > 10
        row([3, 4, 3]),  # sample 1 runtime 3: not a multiple of 2
        row([3, 3], start0=1),  # unsound: seq_start_id does not start at 0 (not checked further)
        row([7, 4, 3], {0: 1, 2: 1}),  # all three, sample 0 named first
        row([2, 2, 2, 2, 2, 2, 2], {6: 1}),  # runtime 7 (fine), last sample not label-aligned
        row([5, 7]),  # fine: runtime 10, exactly pack_size
    ]
    meta = tmp_path / "rows.metadata.json"
    meta.write_text(json.dumps([{"pack_size": 10, "pad_seq_to_mult": 2}]))
    out = []
    for some_unsound in (rows, rows[:4] + rows[5:]):  # the batch with and without an unsound row
        report = verify_packed(rewrite(some_unsound, tmp_path / "rows.parquet"), meta)
        out += [m.replace(str(tmp_path), "TMP") for m in report.errors] + [str(report.error_count)]
    return out


def test_row_findings_are_as_before(tmp_path):
    assert _row_findings(tmp_path) == _ROW_FINDINGS_BEFORE


# what _check_batch's per-row loop reported (packcfg 89ef28d)
_ROW_FINDINGS_BEFORE: list[str] = [
    "TMP/rows.parquet: row 4: seq_start_id must start at 0, got [1, 3, 0]",
    "TMP/rows.parquet: row 1: sample 1: loss_mask is not 0 at its last position (not label-aligned)",
    "TMP/rows.parquet: row 2: 12 runtime tokens exceed pack_size 10",
    "TMP/rows.parquet: row 3: a sample's runtime length is not a multiple of pad_seq_to_mult 2",
    "TMP/rows.parquet: row 5: sample 0: loss_mask is not 0 at its last position (not label-aligned)",
    "TMP/rows.parquet: row 5: 11 runtime tokens exceed pack_size 10",
    "TMP/rows.parquet: row 5: a sample's runtime length is not a multiple of pad_seq_to_mult 2",
    "TMP/rows.parquet: row 6: sample 6: loss_mask is not 0 at its last position (not label-aligned)",
    "TMP/rows.parquet: row 6: a sample's runtime length is not a multiple of pad_seq_to_mult 2",
    "9",
    "TMP/rows.parquet: row 1: sample 1: loss_mask is not 0 at its last position (not label-aligned)",
    "TMP/rows.parquet: row 2: 12 runtime tokens exceed pack_size 10",
    "TMP/rows.parquet: row 3: a sample's runtime length is not a multiple of pad_seq_to_mult 2",
    "TMP/rows.parquet: row 4: sample 0: loss_mask is not 0 at its last position (not label-aligned)",
    "TMP/rows.parquet: row 4: 11 runtime tokens exceed pack_size 10",
    "TMP/rows.parquet: row 4: a sample's runtime length is not a multiple of pad_seq_to_mult 2",
    "TMP/rows.parquet: row 5: sample 6: loss_mask is not 0 at its last position (not label-aligned)",
    "TMP/rows.parquet: row 5: a sample's runtime length is not a multiple of pad_seq_to_mult 2",
    "8",
]


# --------------------------------------------------------------------------- Parquet settings


def test_parquet_is_written_with_the_intended_compression_and_dictionary(packed):
    md = pq.ParquetFile(packed).metadata
    assert md.num_row_groups >= 1
    rg = md.row_group(0)
    cols = {rg.column(i).path_in_schema: rg.column(i) for i in range(rg.num_columns)}
    assert sorted(cols) == sorted(leaf(c) for c in COLUMNS)
    for c in COLUMNS:
        assert cols[leaf(c)].compression == "ZSTD", (c, cols[leaf(c)].compression)
    # ids and the 0/1 mask as dictionary codes; seq_start_id (a few values per row) plain
    assert "RLE_DICTIONARY" in cols[leaf("input_ids")].encodings, cols[leaf("input_ids")].encodings
    assert "RLE_DICTIONARY" in cols[leaf("loss_mask")].encodings, cols[leaf("loss_mask")].encodings
    assert "RLE_DICTIONARY" not in cols[leaf("seq_start_id")].encodings, cols[leaf("seq_start_id")].encodings
    assert md.created_by.startswith("packcfg version ")
    assert b"packcfg" in md.metadata


def test_packed_file_is_at_least_twice_smaller_than_plain(tmp_path, capsys):
    rng = np.random.default_rng(7)
    rows = [{"input_ids": rng.integers(3, 32000, size=int(n)).tolist()} for n in rng.integers(50, 400, 3000)]
    src = write_jsonl(tmp_path / "big.jsonl", rows)
    rc, _, err = run_cli(capsys, "pack", src, "--capacity", "2048", "-q")
    assert rc == 0, err
    out = tmp_path / "big.packed.parquet"
    plain = tmp_path / "plain.parquet"
    pq.write_table(pq.read_table(out), plain, compression="none", use_dictionary=False)
    assert out.stat().st_size * 2 <= plain.stat().st_size, (out.stat().st_size, plain.stat().st_size)
