"""A Parquet writer for the packed format's list columns, with row groups encoded in parallel.

pyarrow's Parquet writer encodes one column of one row group at a time on one thread: 3.5 s of CPU per 75M
packed tokens (the repetition and definition levels alone ~1 s per list column), which was 85% of `pack`
from Parquet. The packed format is three list<int> columns with a fixed shape, so this module writes it
directly: every row group is encoded by numpy and pyarrow's zstd codec (both release the GIL) in worker
threads, and the file is assembled in order. What it writes is plain Parquet, read by any reader (the tests
read it back with pyarrow, and compare with pyarrow's own writer); the layout follows the Parquet format
specification (apache/parquet-format, Encodings.md and parquet.thrift):

- one column chunk per column per row group: [dictionary page] data page(s), V1 pages, no statistics, no CRC,
  no page index; pages split at row boundaries beyond ~1M values.
- the schema pyarrow gives `list<int32>`/`list<int8>`: an optional LIST group, a repeated `list` group, an
  optional `element` (int8 as INT32 with the INT(8, signed) logical type), so levels are 1 bit (repetition)
  and 2 bits (definition), RLE/bit-packed hybrid. A row's first value has repetition level 0.
- dictionary columns: a PLAIN dictionary page of the distinct values, most frequent first, and indices
  bit-packed at a byte-friendly width (1, 2, 4, 8, 16, 24 or 32 bits: any width up to 32 is valid and
  8/16/24/32 are a byte copy; zstd takes up the unused high bits). Frequency order puts the common token ids
  in small codes, which zstd compresses better (measured: 1.15 MB instead of 1.20 MB per 1M tokens).
- the Arrow schema under `ARROW:schema`, as pyarrow stores it, so pyarrow reads back the same types.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any, BinaryIO

import numpy as np

MAGIC = b"PAR1"
PAGE_VALUES = 1 << 20  # a data page ends at the first row boundary past this many values
MAX_DICTIONARY = 1 << 18  # distinct values (a 1 MiB dictionary page of int32, pyarrow's default limit)

# parquet.thrift enums
_INT32 = 1
_REQUIRED, _OPTIONAL, _REPEATED = 0, 1, 2
_CONVERTED_LIST, _CONVERTED_INT_8 = 3, 15
_PLAIN, _RLE, _RLE_DICTIONARY = 0, 3, 8
_DATA_PAGE, _DICTIONARY_PAGE = 0, 2
CODECS = {"none": 0, "snappy": 1, "gzip": 2, "brotli": 4, "lz4": 7, "zstd": 6}


# --------------------------------------------------------------------------------------------- thrift


class _Thrift:
    """Thrift's compact protocol, the subset Parquet's footer and page headers use.

    A struct is a list of (field id, type, value) in increasing field id order, `None` values omitted.
    Types: "i32", "i64", "bin" (bytes or str), "bool", "struct" (a nested field list), "list" as
    ("list", element type) with a Python list value.
    """

    _TYPE = {"bool": 1, "i8": 3, "i16": 4, "i32": 5, "i64": 6, "bin": 8, "list": 9, "struct": 12}

    @staticmethod
    def varint(n: int, out: bytearray) -> None:
        while n > 0x7F:
            out.append((n & 0x7F) | 0x80)
            n >>= 7
        out.append(n)

    @classmethod
    def _value(cls, kind: Any, value: Any, out: bytearray) -> None:
        if kind == "i8":  # a byte as it is
            out.append(value & 0xFF)
        elif kind in ("i16", "i32", "i64"):
            cls.varint((value << 1) ^ (value >> 63), out)  # zigzag
        elif kind == "bin":
            data = value.encode() if isinstance(value, str) else bytes(value)
            cls.varint(len(data), out)
            out += data
        elif kind == "struct":
            cls.struct(value, out)
        elif isinstance(kind, tuple) and kind[0] == "list":
            elem = kind[1]
            code = 1 if elem == "bool" else cls._TYPE[elem if isinstance(elem, str) else elem[0]]
            if len(value) < 15:
                out.append((len(value) << 4) | code)
            else:
                out.append(0xF0 | code)
                cls.varint(len(value), out)
            for v in value:
                if elem == "bool":
                    out.append(1 if v else 2)
                else:
                    cls._value(elem, v, out)
        else:  # pragma: no cover - a programming error
            raise TypeError(f"thrift type {kind!r}")

    @classmethod
    def struct(cls, fields: Sequence[tuple[int, Any, Any]], out: bytearray | None = None) -> bytearray:
        out = bytearray() if out is None else out
        last = 0
        for fid, kind, value in fields:
            if value is None:
                continue
            if kind == "bool":
                code = 1 if value else 2
            else:
                code = cls._TYPE[kind if isinstance(kind, str) else kind[0]]
            delta = fid - last
            if 0 < delta <= 15:
                out.append((delta << 4) | code)
            else:
                out.append(code)
                cls.varint((fid << 1) ^ (fid >> 63), out)
            if kind != "bool":
                cls._value(kind, value, out)
            last = fid
        out.append(0)  # stop
        return out


# --------------------------------------------------------------------------------------------- encoding


def _uleb(n: int) -> bytes:
    out = bytearray()
    _Thrift.varint(n, out)
    return bytes(out)


def _width_dtype(width: int) -> Any:
    """The unsigned type that holds codes of `width` bits (24 bits travel in 32)."""
    return {1: np.uint8, 2: np.uint8, 4: np.uint8, 8: np.uint8, 16: np.dtype("<u2")}.get(
        width, np.dtype("<u4")
    )


def bitpack(values: np.ndarray, width: int) -> np.ndarray:
    """Parquet's bit-packing (LSB first, values padded with 0 to a multiple of 8) for width 1, 2, 4, 8, 16,
    24 or 32: the bytes of ceil(n / 8) groups of 8 values. Widths 8, 16 and 32 are the little-endian values
    themselves; 24 drops every fourth byte of 32; 1 is numpy's packbits."""
    n = len(values)
    full = -(-n // 8) * 8
    if width == 1:
        return np.packbits(np.asarray(values) != 0, bitorder="little")
    if width not in (2, 4, 8, 16, 24, 32):
        raise ValueError(f"bit width {width} is not packed here")
    padded = np.empty(full, dtype=_width_dtype(width))
    padded[:n] = values
    padded[n:] = 0
    if width in (2, 4):
        lanes = padded.reshape(-1, 8 // width)
        byte = lanes[:, 0].copy()
        for k in range(1, 8 // width):
            byte |= lanes[:, k] << np.uint8(k * width)
        return byte
    raw = padded.view(np.uint8)
    return raw.reshape(-1, 4)[:, :3].reshape(-1) if width == 24 else raw


def index_width(distinct: int) -> int:
    """The byte-friendly bit width for dictionary indices 0..distinct-1."""
    need = max(1, int(distinct - 1).bit_length())
    return next(w for w in (1, 2, 4, 8, 16, 24, 32) if w >= need)


def _hybrid_bitpacked(values: np.ndarray, width: int) -> list[bytes | np.ndarray]:
    """One bit-packed run of the RLE/bit-packed hybrid: header (groups of 8 << 1 | 1), then the bits."""
    return [_uleb((-(-len(values) // 8) << 1) | 1), bitpack(values, width)]


def _repetition_levels(row_starts: np.ndarray, n: int) -> list[bytes | np.ndarray]:
    """Repetition levels (1 bit: 0 at each row's first entry, 1 elsewhere) as one bit-packed run, built
    on the packed bytes directly."""
    packed = np.full(-(-n // 8), 0xFF, dtype=np.uint8)
    if n % 8:
        packed[-1] = (1 << (n % 8)) - 1  # padding bits 0
    starts = np.asarray(row_starts, dtype=np.int64)
    np.bitwise_and.at(packed, starts >> 3, ~(np.left_shift(1, starts & 7).astype(np.uint8)))
    return [_uleb((len(packed) << 1) | 1), packed]


def _levels(parts: list[bytes | np.ndarray]) -> list[bytes | np.ndarray]:
    """Levels in a V1 data page: a 4-byte little-endian length, then the hybrid-encoded levels."""
    size = sum(len(p) if isinstance(p, bytes) else p.nbytes for p in parts)
    return [size.to_bytes(4, "little"), *parts]


@dataclass
class ColumnChunk:
    """One encoded column chunk: its bytes (page headers and pages, in order) and its footer entry."""

    parts: list[Any]  # bytes-like pieces, written one after the other
    num_values: int
    uncompressed: int  # page headers included, as the format counts it
    compressed: int
    dictionary_bytes: int  # the dictionary page's size with its header (0: no dictionary)
    encodings: tuple[int, ...]


@dataclass
class RowGroup:
    num_rows: int
    columns: list[ColumnChunk]


@dataclass(frozen=True)
class ListColumn:
    """A list<int8|int32> column of the file: its name, value type and whether it is dictionary-encoded."""

    name: str
    dtype: Any  # np.int32 or np.int8
    dictionary: bool

    @property
    def path(self) -> str:
        return f"{self.name}.list.element"


@dataclass
class Compressor:
    codec: str = "zstd"
    level: int | None = 1
    _codec: Any = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.codec not in CODECS:
            raise ValueError(f"compression {self.codec!r}: one of {', '.join(CODECS)}")
        if self.codec != "none":
            import pyarrow as pa

            self._codec = pa.Codec(self.codec, compression_level=self.level)

    def __call__(self, parts: list[Any]) -> tuple[Any, int]:
        """The pieces compressed as one (pyarrow's codec; it releases the GIL), and their raw size."""
        raw = b"".join(parts)  # bytes and contiguous numpy arrays alike (the buffer protocol)
        if self._codec is None:
            return raw, len(raw)
        return self._codec.compress(raw, asbytes=False), len(raw)


def _page(
    kind: int, header: list[tuple[int, Any, Any]], body: list[Any], compress: Compressor
) -> tuple[list[Any], int, int]:
    """A page: its header and compressed body; returns (pieces, uncompressed size, compressed size)."""
    data, raw = compress(body)
    size = data.size if hasattr(data, "size") else len(data)
    head = _Thrift.struct([(1, "i32", kind), (2, "i32", raw), (3, "i32", size), *header])
    return [bytes(head), data], len(head) + raw, len(head) + size


def _dictionary(values: np.ndarray) -> tuple[np.ndarray, np.ndarray, int] | None:
    """(dictionary values, codes, bit width) for dictionary encoding, most frequent value first (ties:
    the smaller value); None where it does not apply (values over a range wider than 2**24, or more than
    MAX_DICTIONARY distinct). One or two consecutive values (a 0/1 loss mask) need no counting: both are
    present, in value order, and the codes are the values less the smaller."""
    lo, hi = int(values.min()), int(values.max())
    span = hi - lo + 1
    if span > 1 << 24:
        return None
    if span <= 2:
        codes = (
            values.view(np.uint8)
            if lo == 0 and values.dtype.itemsize == 1
            else (values - lo).astype(np.uint8)
        )
        return np.arange(lo, hi + 1, dtype="<i4"), codes, 1
    shifted = values if lo == 0 else values.astype(np.int64) - lo
    count = np.bincount(shifted, minlength=span)
    present = np.flatnonzero(count)
    if len(present) > MAX_DICTIONARY:
        return None
    ranked = present[np.argsort(-count[present], kind="stable")]
    width = index_width(len(ranked))
    table = np.empty(span, dtype=_width_dtype(width))
    table[ranked] = np.arange(len(ranked))
    return (ranked + lo).astype("<i4"), np.take(table, shifted), width


def encode_column(
    column: ListColumn,
    values: np.ndarray,
    offsets: np.ndarray,
    compress: Compressor,
    levels: dict[Any, Any] | None = None,
) -> ColumnChunk:
    """A list column of rows (`values[offsets[i]:offsets[i+1]]` is row i) as one column chunk.

    No nulls: every row is a list and every element a value; an empty list is written as one (definition
    level 1) so that the levels count it. `levels`: a cache shared by columns with the same row offsets."""
    values = np.asarray(values)
    key = id(offsets)  # the caller's array: alive (and unchanged) while its row group is encoded
    offsets = np.asarray(offsets, dtype=np.int64)
    levels = {} if levels is None else levels
    rows = len(offsets) - 1
    lengths = np.diff(offsets)
    parts: list[Any] = []
    uncompressed = compressed = dictionary_bytes = 0
    encodings: tuple[int, ...] = (_RLE, _PLAIN)
    codes, width = values, 0
    found = _dictionary(values) if column.dictionary and len(values) else None
    if found is not None:
        dict_values, codes, width = found
        pieces, raw, size = _page(
            _DICTIONARY_PAGE,
            [(7, "struct", [(1, "i32", len(dict_values)), (2, "i32", _PLAIN)])],
            [dict_values],
            compress,
        )
        parts += pieces
        uncompressed += raw
        compressed += size
        dictionary_bytes = size
        encodings = (_PLAIN, _RLE, _RLE_DICTIONARY)
    # pages end at the first row boundary past PAGE_VALUES level entries (an empty list is one entry)
    if key not in levels:
        empty = lengths == 0
        entries = np.zeros(rows + 1, dtype=np.int64)
        np.cumsum(np.maximum(lengths, 1), out=entries[1:])
        cuts = [0]
        while cuts[-1] < rows:
            nxt = int(np.searchsorted(entries, entries[cuts[-1]] + PAGE_VALUES, side="left"))
            cuts.append(min(rows, max(nxt, cuts[-1] + 1)))
        pages = []
        for a, b in pairwise(cuts):
            n_entries = int(entries[b] - entries[a])
            starts = entries[a:b] - entries[a]
            if empty[a:b].any():  # definition: 3 for a value, 1 for an empty list
                dfn = np.full(n_entries, 3, dtype=np.uint8)
                dfn[starts[empty[a:b]]] = 1
                def_parts: list[Any] = _hybrid_bitpacked(dfn, 2)
            else:
                def_parts = [_uleb(n_entries << 1), b"\x03"]  # one RLE run of 3s
            pages.append(
                (a, b, n_entries, [*_levels(_repetition_levels(starts, n_entries)), *_levels(def_parts)])
            )
        levels[key] = (int(entries[-1]), pages)
    num_values, pages = levels[key]
    for a, b, n_entries, level_parts in pages:
        page_values = codes[int(offsets[a]) : int(offsets[b])]
        if width:
            body_values: list[Any] = [bytes([width]), *_hybrid_bitpacked(page_values, width)]
            encoding = _RLE_DICTIONARY
        else:
            body_values = [np.ascontiguousarray(page_values, dtype="<i4")]
            encoding = _PLAIN
        pieces, raw, size = _page(
            _DATA_PAGE,
            [
                (
                    5,
                    "struct",
                    [(1, "i32", n_entries), (2, "i32", encoding), (3, "i32", _RLE), (4, "i32", _RLE)],
                )
            ],
            [*level_parts, *body_values],
            compress,
        )
        parts += pieces
        uncompressed += raw
        compressed += size
    return ColumnChunk(parts, num_values, uncompressed, compressed, dictionary_bytes, encodings)


def encode_row_group(
    columns: Sequence[ListColumn], data: Sequence[tuple[np.ndarray, np.ndarray]], compress: Compressor
) -> RowGroup:
    """A row group: `data[i]` is column i's (values, row offsets); every column has the same rows."""
    rows = {len(offsets) - 1 for _, offsets in data}
    if len(rows) != 1 or len(data) != len(columns):
        raise ValueError("every column of a row group needs the same number of rows")
    levels: dict[Any, Any] = {}  # columns with the same row offsets share their levels
    chunks = [encode_column(c, v, o, compress, levels) for c, (v, o) in zip(columns, data, strict=True)]
    return RowGroup(rows.pop(), chunks)


def _schema_elements(columns: Sequence[ListColumn]) -> list[list[tuple[int, Any, Any]]]:
    """The flattened Parquet schema: root, then per column its LIST group, `list` and `element`."""
    out: list[list[tuple[int, Any, Any]]] = [
        [(3, "i32", _REQUIRED), (4, "bin", "schema"), (5, "i32", len(columns))]
    ]
    for c in columns:
        out.append(
            [
                (3, "i32", _OPTIONAL),
                (4, "bin", c.name),
                (5, "i32", 1),
                (6, "i32", _CONVERTED_LIST),
                (10, "struct", [(3, "struct", [])]),  # LogicalType LIST
            ]
        )
        out.append([(3, "i32", _REPEATED), (4, "bin", "list"), (5, "i32", 1)])
        element: list[tuple[int, Any, Any]] = [
            (1, "i32", _INT32),
            (3, "i32", _OPTIONAL),
            (4, "bin", "element"),
        ]
        if np.dtype(c.dtype) == np.int8:  # INT(8, signed) on INT32
            element += [
                (6, "i32", _CONVERTED_INT_8),
                (10, "struct", [(10, "struct", [(1, "i8", 8), (2, "bool", True)])]),
            ]
        out.append(element)
    return out


class ListParquetWriter:
    """Writes a Parquet file of list<int> columns to an open binary file, one encoded row group at a time.

    Row groups come from `encode_row_group` (in any thread); `write` appends them in call order and
    `close` writes the footer (and key-value metadata). The file handle stays the caller's."""

    def __init__(
        self,
        fh: BinaryIO,
        columns: Sequence[ListColumn],
        codec: str = "zstd",
        arrow_schema: Any = None,
        created_by: str = "packcfg",
    ) -> None:
        self.fh = fh
        self.columns = tuple(columns)
        self.codec = codec
        self.arrow_schema = arrow_schema
        self.created_by = created_by
        self._groups: list[list[tuple[int, Any, Any]]] = []
        self._rows = 0
        fh.write(MAGIC)
        self._pos = len(MAGIC)

    def write(self, group: RowGroup) -> None:
        chunks = []
        start = self._pos
        for col, chunk in zip(self.columns, group.columns, strict=True):
            offset = self._pos
            for part in chunk.parts:
                self.fh.write(part)
            self._pos += chunk.compressed
            meta = [
                (1, "i32", _INT32),
                (2, ("list", "i32"), list(chunk.encodings)),
                (3, ("list", "bin"), col.path.split(".")),
                (4, "i32", CODECS[self.codec]),
                (5, "i64", chunk.num_values),
                (6, "i64", chunk.uncompressed),
                (7, "i64", chunk.compressed),
                (9, "i64", offset + chunk.dictionary_bytes),
                (11, "i64", offset if chunk.dictionary_bytes else None),
            ]
            chunks.append([(2, "i64", 0), (3, "struct", meta)])
        ordinal = len(self._groups)
        self._groups.append(
            [
                (1, ("list", "struct"), chunks),
                (2, "i64", sum(c.uncompressed for c in group.columns)),
                (3, "i64", group.num_rows),
                (5, "i64", start),
                (6, "i64", self._pos - start),
                (7, "i16", ordinal if ordinal < 1 << 15 else None),
            ]
        )
        self._rows += group.num_rows

    def close(self, key_value: dict[str, str] | None = None) -> None:
        kv = dict(key_value or {})
        if self.arrow_schema is not None:  # what pyarrow stores: its IPC schema message, base64
            kv["ARROW:schema"] = base64.b64encode(self.arrow_schema.serialize().to_pybytes()).decode()
        footer = _Thrift.struct(
            [
                (1, "i32", 2),
                (2, ("list", "struct"), _schema_elements(self.columns)),
                (3, "i64", self._rows),
                (4, ("list", "struct"), self._groups),
                (5, ("list", "struct"), [[(1, "bin", k), (2, "bin", v)] for k, v in kv.items()] or None),
                (6, "bin", self.created_by),
            ]
        )
        self.fh.write(footer)
        self.fh.write(len(footer).to_bytes(4, "little"))
        self.fh.write(MAGIC)
        self._pos += len(footer) + 8
