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
from packcfg.packing import read_packed
from packcfg.packing.verify import verify_packed
from packcfg.packing.writer import COLUMNS, leaf

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


def test_with_source_dropped_and_duplicated_samples_are_found(packed, tmp_path, capsys):
    src = tmp_path / "data.jsonl"
    rows = list(read_packed(packed))
    rc, _, err = run_cli(capsys, "verify", rewrite(rows[1:], tmp_path / "a.parquet"), "--source", src)
    assert rc == 1 and "sample missing" in err
    rc, _, err = run_cli(capsys, "verify", rewrite(rows + rows[:1], tmp_path / "b.parquet"), "--source", src)
    assert rc == 1 and "duplicate of source line" in err


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
