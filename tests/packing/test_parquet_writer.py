"""packcfg's Parquet writer (packcfg/packing/parquet.py) against pyarrow, a reader nobody here wrote.

Every file is read back by pyarrow and compared value for value with what was written, and with what
pyarrow's own writer gives for the same table (schema included)."""

from __future__ import annotations

import io

import numpy as np
import pytest

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

from packcfg.packing import parquet as P  # noqa: E402

COLUMNS = (
    P.ListColumn("input_ids", np.int32, dictionary=True),
    P.ListColumn("loss_mask", np.int8, dictionary=True),
    P.ListColumn("seq_start_id", np.int32, dictionary=False),
)
SCHEMA = pa.schema(
    [
        ("input_ids", pa.list_(pa.int32())),
        ("loss_mask", pa.list_(pa.int8())),
        ("seq_start_id", pa.list_(pa.int32())),
    ]
)


def _rows(rng, n_rows, max_len, id_range, allow_empty):
    lo = 0 if allow_empty else 1
    lens = rng.integers(lo, max_len + 1, n_rows)
    off = np.zeros(n_rows + 1, np.int64)
    np.cumsum(lens, out=off[1:])
    ids = rng.integers(id_range[0], id_range[1], int(off[-1]), dtype=np.int64).astype(np.int32)
    mask = rng.integers(-3 if allow_empty else 0, 2, int(off[-1])).astype(np.int8)
    st_lens = rng.integers(lo, 4, n_rows)
    st_off = np.zeros(n_rows + 1, np.int64)
    np.cumsum(st_lens, out=st_off[1:])
    st = rng.integers(0, 1 << 20, int(st_off[-1])).astype(np.int32)
    return [(ids, off), (mask, off), (st, st_off)]


def _write(groups, codec="zstd", key_value=None):
    buf = io.BytesIO()
    w = P.ListParquetWriter(buf, COLUMNS, codec, arrow_schema=SCHEMA, created_by="packcfg version test")
    comp = P.Compressor(codec, 1 if codec == "zstd" else None)
    for data in groups:
        w.write(P.encode_row_group(COLUMNS, data, comp))
    w.close(key_value)
    return buf.getvalue()


def _expected(groups):
    cols = {c.name: [] for c in COLUMNS}
    for data in groups:
        for c, (v, o) in zip(COLUMNS, data, strict=True):
            cols[c.name] += [v[o[i] : o[i + 1]].tolist() for i in range(len(o) - 1)]
    return pa.table(cols, schema=SCHEMA)


CASES = {
    # (rows per group, groups, max row length, id range, empty lists)
    "packed-like": (30, 3, 300, (0, 32000), False),
    "few distinct ids": (20, 2, 50, (7, 9), False),
    "one id": (5, 1, 40, (4, 5), False),
    "empty lists": (40, 2, 6, (0, 300), True),
    "negative and large ids": (10, 2, 30, (-(2**31), 2**31 - 1), False),  # range > 2**24: plain
    "one row": (1, 1, 1, (0, 10), False),
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("codec", ["zstd", "none", "snappy"])
def test_pyarrow_reads_back_what_was_written(case, codec):
    rows, n_groups, max_len, id_range, empty = CASES[case]
    rng = np.random.default_rng(sorted(CASES).index(case))
    groups = [_rows(rng, rows, max_len, id_range, empty) for _ in range(n_groups)]
    raw = _write(groups, codec, {"packcfg": '{"x": 1}'})
    f = pq.ParquetFile(io.BytesIO(raw))
    got = f.read()
    assert got.equals(_expected(groups)), case
    assert f.metadata.num_row_groups == n_groups
    assert f.metadata.metadata[b"packcfg"] == b'{"x": 1}'
    # the same types pyarrow's own writer gives back for this table
    ref = io.BytesIO()
    pq.write_table(_expected(groups), ref)
    assert f.schema_arrow == pq.ParquetFile(io.BytesIO(ref.getvalue())).schema_arrow
    assert f.schema.to_arrow_schema() == pq.ParquetFile(io.BytesIO(ref.getvalue())).schema.to_arrow_schema()
    assert f.schema.equals(pq.ParquetFile(io.BytesIO(ref.getvalue())).schema)
    # and row group by row group, batch by batch (how verify and Bridge read)
    for i, data in enumerate(groups):
        assert f.read_row_group(i).equals(_expected([data]))


def test_pages_split_at_row_boundaries(monkeypatch):
    monkeypatch.setattr(P, "PAGE_VALUES", 100)
    rng = np.random.default_rng(3)
    groups = [_rows(rng, 50, 80, (0, 1000), True) for _ in range(2)]
    raw = _write(groups)
    assert pq.read_table(io.BytesIO(raw)).equals(_expected(groups))
    # several data pages per chunk: the chunk is much bigger than one page's share
    chunk = P.encode_row_group(COLUMNS, groups[0], P.Compressor("none", None)).columns[0]
    headers = sum(1 for part in chunk.parts if isinstance(part, bytes) and len(part) < 64)
    assert headers > 10


def test_too_many_distinct_values_fall_back_to_plain(monkeypatch):
    monkeypatch.setattr(P, "MAX_DICTIONARY", 16)
    rng = np.random.default_rng(4)
    groups = [_rows(rng, 20, 100, (0, 5000), False)]
    raw = _write(groups)
    md = pq.read_metadata(io.BytesIO(raw))
    assert "RLE_DICTIONARY" not in md.row_group(0).column(0).encodings  # ids: plain
    assert "RLE_DICTIONARY" in md.row_group(0).column(1).encodings  # the mask: 2 values
    assert pq.read_table(io.BytesIO(raw)).equals(_expected(groups))


@pytest.mark.parametrize("width", [1, 2, 4, 8, 16, 24, 32])
def test_bitpack_matches_the_format_definition(width):
    """Values LSB first, one after the other, padded with zeros to a multiple of 8 values."""
    rng = np.random.default_rng(width)
    values = rng.integers(0, 2**width, 37, dtype=np.uint64)
    bits = "".join(format(int(v), f"0{width}b")[::-1] for v in values) + "0" * ((-37 % 8) * width)
    expected = bytes(int(bits[i : i + 8][::-1], 2) for i in range(0, len(bits), 8))
    assert P.bitpack(values, width).tobytes() == expected


def test_dictionary_puts_frequent_values_first():
    values = np.array([9, 5, 5, 7, 5, 9, 3], dtype=np.int32)
    dictionary, codes, width = P._dictionary(values)
    assert dictionary.tolist() == [5, 9, 3, 7]  # by count, ties by value
    assert dictionary[codes].tolist() == values.tolist()
    assert width == 2


def test_thrift_field_ids_beyond_a_delta_of_15_and_long_lists():
    """The compact protocol's long forms, read back by pyarrow: 20 columns (list header over 15 items)."""
    cols = tuple(P.ListColumn(f"c{i}", np.int32, dictionary=i % 2 == 0) for i in range(20))
    schema = pa.schema([(c.name, pa.list_(pa.int32())) for c in cols])
    buf = io.BytesIO()
    w = P.ListParquetWriter(buf, cols, "zstd", arrow_schema=schema)
    off = np.array([0, 2, 3])
    data = [(np.array([i, i + 1, i + 2], np.int32), off) for i in range(20)]
    w.write(P.encode_row_group(cols, data, P.Compressor()))
    w.close({f"k{i}": str(i) for i in range(17)})
    t = pq.read_table(io.BytesIO(buf.getvalue()))
    assert t.column("c19").to_pylist() == [[19, 20], [21]]
    assert len(pq.read_metadata(io.BytesIO(buf.getvalue())).metadata) == 18  # 17 + ARROW:schema


def test_row_groups_need_equal_rows():
    with pytest.raises(ValueError, match="same number of rows"):
        P.encode_row_group(
            COLUMNS[:2],
            [(np.zeros(2, np.int32), np.array([0, 1, 2])), (np.zeros(1, np.int8), np.array([0, 1]))],
            P.Compressor(),
        )


def test_an_independent_reader_reads_what_was_written(tmp_path, monkeypatch):
    """arro3's Parquet reader (the Rust arrow-rs crate, not pyarrow's C++) reads the same rows and list element
    types: empty lists, dictionary and plain columns, several row groups and pages split at row boundaries."""
    arro3_io = pytest.importorskip("arro3.io")
    monkeypatch.setattr(P, "PAGE_VALUES", 200)
    rng = np.random.default_rng(9)
    groups = [_rows(rng, 40, 60, (0, 3000), True), _rows(rng, 25, 80, (-(2**31), 2**31 - 1), False)]
    path = tmp_path / "f.parquet"
    path.write_bytes(_write(groups))
    expected = _expected(groups).to_pydict()
    table = arro3_io.read_parquet(str(path)).read_all()
    types = [str(field.type) for field in table.schema]
    assert [t.split("<", 1)[1].split(",", 1)[0] for t in types] == ["List(Int32", "List(Int8", "List(Int32"]
    got = {c.name: table.column(c.name).to_pylist() for c in COLUMNS}
    assert got == expected


def test_columns_with_equal_row_counts_but_different_offsets_keep_their_own_levels():
    """The level cache is per offsets array: int32 offsets (converted on the way in) never mix."""
    ids = np.arange(6, dtype=np.int32)
    data = [
        (ids, np.array([0, 1, 6], dtype=np.int32)),
        (np.zeros(6, np.int8), np.array([0, 5, 6], dtype=np.int32)),
        (np.arange(4, dtype=np.int32), np.array([0, 2, 4], dtype=np.int32)),
    ]
    buf = io.BytesIO()
    w = P.ListParquetWriter(buf, COLUMNS, "zstd", arrow_schema=SCHEMA)
    w.write(P.encode_row_group(COLUMNS, data, P.Compressor()))
    w.close()
    t = pq.read_table(io.BytesIO(buf.getvalue()))
    assert t.column("input_ids").to_pylist() == [[0], [1, 2, 3, 4, 5]]
    assert t.column("loss_mask").to_pylist() == [[0] * 5, [0]]
    assert t.column("seq_start_id").to_pylist() == [[0, 1], [2, 3]]


def test_a_file_without_row_groups_is_valid():
    t = pq.read_table(io.BytesIO(_write([])))
    assert t.num_rows == 0 and t.schema == SCHEMA


@pytest.mark.parametrize("values", [[0, 1, 1, 0, 1], [1, 1, 1], [0, 0], [-1, -2, -1], [5, 6, 6]])
def test_one_or_two_values_are_coded_without_counting(values):
    arr = np.array(values, dtype=np.int8)
    dictionary, codes, width = P._dictionary(arr)
    assert width == 1 and dictionary[codes].tolist() == values
    assert dictionary.tolist() == list(range(min(values), max(values) + 1))
