"""Check a packed Parquet file: row invariants, and against its source every sample exactly once, intact."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from packcfg.core.inputs import check_input
from packcfg.packing import writer as _writer
from packcfg.packing.errors import PackingError
from packcfg.packing.planner import OVERSIZE_POLICIES, PlanError, itemize
from packcfg.packing.sources import (
    TOKENIZED_FORMATS,
    Batch,
    detect_format,
    iter_batches,
)
from packcfg.packing.sources.spooling import release_memory
from packcfg.packing.writer import (
    GOLD,
    M1,
    digest_add,
    mix,
    parquet_entry,
    position_keys,
    read_metadata,
    slot_hashes,
)


@dataclass
class VerifyReport:
    path: Path
    rows: int = 0
    samples: int = 0
    tokens: int = 0
    capacity: int | None = None
    metadata: Path | None = None  # the metadata JSON used (None: none found)
    digest_checked: bool = False  # the samples were checked against the pack-time samples_digest
    source_checked: bool = False
    errors: list[str] = field(default_factory=list)
    error_count: int = 0
    warnings: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.error_count == 0

    def add(self, message: str, limit: int) -> None:
        self.error_count += 1
        if len(self.errors) < limit:
            self.errors.append(message)


_BRIDGE_PACKED = re.compile(r"^(?:training|validation|test)_(\d+)\.idx\.parquet$")


def metadata_candidates(packed: Path) -> list[Path]:
    """Where a packed file's metadata JSON may be, in order: `X.metadata.json` (what `pack` writes for a
    data file), `metadata.json` beside it (packcfg's default for a config without packed_metadata_path),
    and Megatron Bridge's `<pack size>_metadata.jsonl` beside `training_<pack size>.idx.parquet`
    (GPTSFTDatasetBuilder.pack_metadata, Megatron Bridge main)."""
    out = [packed.with_name(packed.stem + ".metadata.json"), packed.with_name("metadata.json")]
    m = _BRIDGE_PACKED.match(packed.name)
    if m:
        out.append(packed.with_name(f"{m.group(1)}_metadata.jsonl"))
    return out


def find_metadata(packed: Path, metadata: Path | None) -> Path | None:
    if metadata is not None:
        return metadata
    return next((c for c in metadata_candidates(packed) if c.is_file()), None)


def metadata_entry(meta_path: Path, packed: Path) -> dict[str, Any]:
    entries = read_metadata(meta_path)
    for e in entries:  # the entry written for this file, else the train split, else the only one
        if e.get("file") == packed.name:
            return e
    for e in entries:
        if e.get("split", "train") == "train":
            return e
    return entries[0] if entries else {}


def _batches(packed: Path, batch_rows: int = 0) -> Any:
    """Record batches of the packed file as flat numpy arrays: (ids, ids_off, mask, mask_off, st, st_off)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    check_input(packed, error=PackingError)
    try:
        # no pre-buffering, no read-ahead threads: memory stays at one row group
        pf = pq.ParquetFile(packed, pre_buffer=False, buffer_size=1 << 20)
    except FileNotFoundError:
        raise PackingError(f"{packed}: no such file") from None
    except (OSError, pa.ArrowException) as exc:
        raise PackingError(f"{packed}: not a readable Parquet file ({exc})") from None
    names = pf.schema_arrow.names
    want = ["input_ids", "loss_mask", "seq_start_id"]
    missing = [c for c in want if c not in names]
    if missing:
        raise PackingError(f"{packed}: missing column(s) {', '.join(missing)} (columns: {', '.join(names)})")
    if batch_rows <= 0:  # one row group at a time (pack writes ~1M tokens per group)
        groups = pf.metadata.num_row_groups
        batch_rows = max(16, min(4096, pf.metadata.row_group(0).num_rows if groups else 16))
    try:
        for rb in pf.iter_batches(batch_size=batch_rows, columns=want, use_threads=False):
            out = []
            for c in want:
                arr = rb.column(c)
                if arr.null_count or (len(arr) and arr.flatten().null_count):
                    raise PackingError(f"{packed}: column {c} holds nulls")
                off = np.asarray(arr.offsets, dtype=np.int64)
                vals = arr.flatten().to_numpy(zero_copy_only=False) if len(arr) else np.zeros(0, np.int64)
                out += [vals, off - off[0]]
            yield tuple(out)
    except pa.ArrowException as exc:
        raise PackingError(f"{packed}: cannot read ({exc})") from None


def verify_packed(
    packed: Path,
    metadata: Path | None = None,
    source: Path | None = None,
    tokenizer: Path | None = None,
    capacity: int | None = None,
    max_errors: int = 20,
) -> VerifyReport:
    """Row invariants always, and the samples against the metadata (counts, and the pack-time digest of
    every sample: dropped, duplicated or altered samples are found without the source); with `source`,
    that every source sample is in exactly one slot, intact.

    Raises PackingError when the inputs cannot be read (exit 2); violations go into the report (exit 1).
    Memory: one record batch of rows plus ~16 bytes per sample (a slot's hash and row; with `source`, see
    _check_against_source).

    With `source`, the source is read and hashed in a worker thread while this one reads the packed file
    (pyarrow, numpy and the JSONL kernel release the GIL); the two meet only for the final comparison. An
    error of the packed file is raised first, as when the source was read after it; then one of the source.
    """
    packed = Path(packed)
    report = VerifyReport(packed)
    meta_path = find_metadata(packed, metadata)
    report.metadata = meta_path
    entry: dict[str, Any] = metadata_entry(meta_path, packed) if meta_path is not None else {}
    file_entry = parquet_entry(packed) if packed.is_file() else None
    if file_entry is not None:
        if not entry:
            entry = file_entry  # the file carries its own entry
        elif entry.get("fingerprint") and entry.get("fingerprint") != file_entry.get("fingerprint"):
            report.add(
                f"{meta_path}: its entry does not describe {packed} (fingerprint differs from the one in "
                "the file: metadata of another packing?)",
                max_errors,
            )
    if capacity is None and entry.get("pack_size") is not None:
        capacity = int(entry["pack_size"])
    report.capacity = capacity
    align = int(entry.get("pad_seq_to_mult") or 1)
    pad_id = int(entry.get("pad_id") or 0)

    expected: _Background | None = None
    if source is not None:
        policy = (entry.get("oversize") or {}).get("policy", "error")
        if policy not in OVERSIZE_POLICIES:
            policy = "error"
        import pyarrow.parquet  # noqa: F401 - imported here, not in two threads at once

        expected = _Background(
            _expected_slots,
            Path(source),
            tokenizer or _meta_path(entry.get("tokenizer")),
            capacity,
            align,
            pad_id,
            policy,
        )
    try:
        return _verify_packed(packed, report, entry, meta_path, source, capacity, align, expected, max_errors)
    finally:
        if expected is not None:
            expected.cancel()  # the packed file failed: stop reading the source (a no-op once done)


def _verify_packed(
    packed: Path,
    report: VerifyReport,
    entry: dict[str, Any],
    meta_path: Path | None,
    source: Path | None,
    capacity: int | None,
    align: int,
    expected: _Background | None,
    max_errors: int,
) -> VerifyReport:
    slot_j_parts: list[np.ndarray] = []
    slot_tok_parts: list[np.ndarray] = []
    slot_hash_parts: list[np.ndarray] = []
    slot_row_parts: list[np.ndarray] = []
    row_hash_parts: list[np.ndarray] = []
    r0 = 0
    for ids, ids_off, mask, mask_off, st, st_off in _batches(packed):
        nrows = len(ids_off) - 1
        rows = _check_batch(report, r0, ids, ids_off, mask, mask_off, st, st_off, capacity, align, max_errors)
        # the slots of the rows that passed the structural checks
        good = np.flatnonzero(rows)
        row_h = mix(np.arange(r0, r0 + nrows, dtype=np.uint64) + M1)  # unique for unreadable rows
        if len(good):
            counts = np.diff(st_off)[good]  # samples per good row
            cum = np.cumsum(counts)
            j_in_row = np.arange(int(cum[-1])) - np.repeat(cum - counts, counts)
            slot_rows = np.repeat(good, counts)
            if len(good) == nrows:  # the usual case: every row sound, the slots tile the batch
                bounds = np.empty(len(st) + 1, dtype=np.int64)
                bounds[:-1] = st + np.repeat(ids_off[:-1], counts)
                bounds[-1] = ids_off[-1]
                slot_ids, slot_mask, flat_off = ids, mask, bounds
            else:
                rel_starts = st[np.repeat(st_off[good], counts) + j_in_row].astype(np.int64)
                rel_ends = np.empty_like(rel_starts)
                rel_ends[:-1] = rel_starts[1:]
                rel_ends[cum - 1] = np.diff(ids_off)[good]  # a row's last slot ends with the row
                lens = rel_ends - rel_starts
                within = np.arange(int(lens.sum())) - np.repeat(np.cumsum(lens) - lens, lens)
                base = np.repeat(rel_starts, lens) + within
                gi = base + np.repeat(ids_off[slot_rows], lens)
                gm = base + np.repeat(mask_off[slot_rows], lens)
                flat_off = np.zeros(len(lens) + 1, dtype=np.int64)
                np.cumsum(lens, out=flat_off[1:])
                slot_ids, slot_mask = ids[gi], mask[gm]
            if source is not None:  # tokens-only hashes tell "loss mask differs" from "not found"
                h, h_tok = _slot_hash_pair(slot_ids, slot_mask, flat_off)
                slot_tok_parts.append(h_tok)
                slot_j_parts.append(j_in_row.astype(np.int32))
            else:
                h = slot_hashes(slot_ids, slot_mask, flat_off)
            slot_hash_parts.append(h)
            slot_row_parts.append((slot_rows + r0).astype(np.int64))
            with np.errstate(over="ignore"):  # a row's hash: its slots' hashes in order
                keyed = h * position_keys(int(counts.max()))[j_in_row]
                row_h[good] = mix(np.add.reduceat(keyed, cum - counts) + counts.astype(np.uint64) * M1)
            report.samples += int(cum[-1])
        row_hash_parts.append(row_h)
        report.rows += nrows
        report.tokens += int(ids_off[-1])
        r0 += nrows
    # joined part by part, each part freed as it is copied (no second copy of every array at once)
    slot_h = _join(slot_hash_parts, np.uint64)
    slot_row = _join(slot_row_parts, np.int64)
    row_h = _join(row_hash_parts, np.uint64)
    _check_against_metadata(report, entry, meta_path or packed, slot_h, slot_row, row_h, max_errors)
    if source is not None and expected is not None:
        del slot_hash_parts, slot_row_parts, row_hash_parts, row_h
        release_memory()  # the packed file's read buffers, while the source may still stream
        _check_against_source(
            report,
            source,
            expected.result,
            _Slots(
                slot_h,
                _join(slot_tok_parts, np.uint64),
                slot_row,
                _join(slot_j_parts, np.int32),
            ),
            max_errors,
        )
    return report


def _check_batch(
    report: VerifyReport,
    r0: int,
    ids: np.ndarray,
    ids_off: np.ndarray,
    mask: np.ndarray,
    mask_off: np.ndarray,
    st: np.ndarray,
    st_off: np.ndarray,
    capacity: int | None,
    align: int,
    max_errors: int,
) -> np.ndarray:
    """Row invariants of one batch; returns a bool per row: its samples can be read (structure ok)."""
    packed = report.path
    nrows = len(ids_off) - 1
    n = np.diff(ids_off)
    ok = np.ones(nrows, dtype=bool)
    mlen = np.diff(mask_off)
    for r in np.flatnonzero(mlen != n)[: max_errors + 1]:
        report.add(
            f"{packed}: row {r0 + r}: loss_mask has {int(mlen[r])} values, input_ids {int(n[r])}", max_errors
        )
    ok &= mlen == n
    nst = np.diff(st_off)
    first = np.where(nst > 0, st[np.minimum(st_off[:-1], max(len(st) - 1, 0))] if len(st) else -1, -1)
    bad = ok & ((nst == 0) | (first != 0))
    for r in np.flatnonzero(bad)[: max_errors + 1]:
        got = st[st_off[r] : st_off[r] + 3].tolist()
        report.add(f"{packed}: row {r0 + r}: seq_start_id must start at 0, got {got}", max_errors)
    ok &= ~bad
    if len(st) > 1:
        inc = np.diff(st.astype(np.int64)) <= 0
        inc[st_off[1:-1] - 1] = False  # pairs across a row boundary
        inc = inc[: len(st) - 1]
        bad_rows = np.zeros(nrows, dtype=bool)
        bad_rows[np.searchsorted(st_off, np.flatnonzero(inc), side="right") - 1] = True
        bad_rows &= ok
        for r in np.flatnonzero(bad_rows)[: max_errors + 1]:
            got = st[st_off[r] : st_off[r] + 8].tolist()
            report.add(f"{packed}: row {r0 + r}: seq_start_id not strictly increasing: {got}", max_errors)
        ok &= ~bad_rows
    last = np.where(nst > 0, st[np.maximum(st_off[1:] - 1, 0)] if len(st) else 0, 0)
    bad = ok & (last >= n)
    for r in np.flatnonzero(bad)[: max_errors + 1]:
        report.add(
            f"{packed}: row {r0 + r}: seq_start_id {int(last[r])} outside the row (length {int(n[r])})",
            max_errors,
        )
    ok &= ~bad
    if len(ids):
        neg = np.flatnonzero(ids < 0)
        if len(neg):
            rows = np.searchsorted(ids_off, neg, side="right") - 1
            for r in np.unique(rows)[: max_errors + 1]:
                k = int(neg[np.searchsorted(rows, r)])
                report.add(
                    f"{packed}: row {r0 + r}: input_ids[{k - int(ids_off[r])}] is {int(ids[k])}: "
                    "negative token id",
                    max_errors,
                )
    if len(mask) and (mask.min() < 0 or mask.max() > 1):
        badm = np.flatnonzero((mask < 0) | (mask > 1))
        rows = np.unique(np.searchsorted(mask_off, badm, side="right") - 1)
        for r in rows[: max_errors + 1]:
            report.add(f"{packed}: row {r0 + r}: loss_mask values must be 0 or 1", max_errors)
        okm = np.ones(nrows, dtype=bool)
        okm[rows] = False
        ok &= okm
    # per-slot checks on the rows whose structure is sound (at least one slot each, starts strictly
    # increasing from 0 inside the row, mask as long as the ids), vectorised over the batch; the rows
    # with a finding are then reported in row order, each row's findings in the order below
    sound = np.flatnonzero(ok)
    if len(sound):
        cnt = nst[sound].astype(np.int64)
        cum = np.cumsum(cnt)
        first_slot = cum - cnt
        if len(sound) == nrows:  # the usual case: every slot of the batch
            starts = st.astype(np.int64)
        else:
            starts = st[np.repeat(st_off[sound] - first_slot, cnt) + np.arange(int(cum[-1]))].astype(np.int64)
        ends = np.empty_like(starts)
        ends[:-1] = starts[1:]
        ends[cum - 1] = n[sound]  # a row's last slot ends with the row
        slot_rows = np.repeat(sound, cnt)
        not_aligned = mask[mask_off[slot_rows] + ends - 1] != 0  # the last position of every slot
        bad_label = np.logical_or.reduceat(not_aligned, first_slot)
        runtime = n[sound] - cnt  # each sample gives up one token at runtime (input vs label)
        bad_cap = runtime > capacity if capacity is not None else np.zeros(len(sound), dtype=bool)
        if align > 1:
            bad_align = np.logical_or.reduceat((ends - starts - 1) % align != 0, first_slot)
        else:
            bad_align = np.zeros(len(sound), dtype=bool)
        for k in np.flatnonzero(bad_label | bad_cap | bad_align).tolist():
            row = r0 + int(sound[k])
            if bad_label[k]:
                j = int(np.flatnonzero(not_aligned[first_slot[k] : cum[k]])[0])
                report.add(
                    f"{packed}: row {row}: sample {j}: loss_mask is not 0 at its last position "
                    "(not label-aligned)",
                    max_errors,
                )
            if bad_cap[k]:
                report.add(
                    f"{packed}: row {row}: {int(runtime[k])} runtime tokens exceed pack_size {capacity}",
                    max_errors,
                )
            if bad_align[k]:
                report.add(
                    f"{packed}: row {row}: a sample's runtime length is not a multiple of "
                    f"pad_seq_to_mult {align}",
                    max_errors,
                )
    return ok


def _check_against_metadata(
    report: VerifyReport,
    entry: dict[str, Any],
    meta: Path,
    slot_h: np.ndarray,
    slot_row: np.ndarray,
    row_h: np.ndarray,
    max_errors: int,
) -> None:
    """Counts and the samples digest against what `pack` recorded; duplicates named when they explain it."""
    packed = report.path
    packs, samples = entry.get("packs"), entry.get("items_packed")
    if samples is None and not (entry.get("oversize") or {}).get("split_pieces"):
        samples = entry.get("samples_packed")  # metadata from before items_packed; no split pieces
    suspicious = False
    if isinstance(packs, int) and packs != report.rows:
        report.add(f"{packed}: {report.rows:,} rows, the metadata ({meta}) says {packs:,} packs", max_errors)
        suspicious = True
    if isinstance(samples, int) and samples != report.samples and report.error_count == 0:
        report.add(
            f"{packed}: {report.samples:,} samples, the metadata ({meta}) says {samples:,} were packed",
            max_errors,
        )
        suspicious = True
    want = entry.get("samples_digest")
    if isinstance(want, str) and report.error_count == 0:
        got = f"{digest_add(0, slot_h):016x}"
        report.digest_checked = True
        if got != want:
            report.add(
                f"{packed}: the samples differ from what pack wrote (samples_digest {got}, metadata {want}): "
                "a sample was dropped, duplicated or altered",
                max_errors,
            )
            suspicious = True
    if not (suspicious or not isinstance(want, str)):
        return
    # name duplicated rows (and samples) when the metadata says something is wrong, else warn
    uniq, first, counts = np.unique(row_h, return_index=True, return_counts=True)
    for h in uniq[counts > 1][: max_errors + 1]:
        rows = np.flatnonzero(row_h == h)
        msg = f"{packed}: row {int(rows[1])} is identical to row {int(rows[0])}"
        if suspicious:
            report.add(f"{msg} (duplicated row)", max_errors)
        else:
            report.warnings.append(
                f"{msg} (no samples_digest in the metadata to tell a duplicate from a repeated source sample)"
            )
    if suspicious:
        uniq, counts = np.unique(slot_h, return_counts=True)
        dup = uniq[counts > 1]
        if len(dup) and len(dup) <= max_errors:
            for h in dup:
                rows = slot_row[slot_h == h]
                if len(np.unique(rows)) > 1:
                    report.add(
                        f"{packed}: row {int(rows[1])} repeats a sample of row {int(rows[0])} (duplicated "
                        "sample, or a repeated sample in the source)",
                        max_errors,
                    )


def _meta_path(value: Any) -> Path | None:
    return Path(value) if isinstance(value, str) and value else None


@dataclass
class _Slots:
    """Every sample slot of the file: full hash, tokens-only hash, row and position in the row."""

    full: np.ndarray
    tokens: np.ndarray
    row: np.ndarray
    j: np.ndarray


# The source pass works on at most about this many tokens at a time (whole samples; one longer sample is
# taken alone): its per-token temporaries stay ~2 MB (whole samples: a uint64 per token) or ~8 MB (pieces or
# padding: the gather, ~30 bytes per token) whatever the size of a source batch.
_CHUNK_TOKENS = 1 << 18
# Token-id JSONL is parsed in blocks of this many bytes, as pack reads it (sources.token_jsonl.JSONL_BLOCK_BYTES).
# A block's text, its copies and the parser's output are ~6x the block while it is parsed, and glibc keeps
# much of that once freed: 16 MiB blocks cost ~100 MiB more peak RSS than 4 MiB ones (1M samples: 325 vs
# 225 MiB for reading alone), for no speed. A line longer than a block makes its block that long.
_JSONL_BLOCK_BYTES = 4 << 20


def _slot_hash_pair(
    tokens: np.ndarray, mask: np.ndarray, slot_offsets: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(slot_hashes(tokens, mask, o), slot_hashes(tokens, zeros, o)) in one pass and one uint64 buffer.

    slot_hashes sums (2 * token | mask bit) * R**i per slot; that is the tokens' sum plus the mask bits'
    sum (bit 0 of 2 * token is 0, and multiplication by R**-s distributes mod 2**64), and the tokens-only
    hash is the tokens' sum alone, so both come from two reductions instead of two full slot_hashes."""
    n = len(slot_offsets) - 1
    if n <= 0:
        return np.zeros(0, dtype=np.uint64), np.zeros(0, dtype=np.uint64)
    off = np.asarray(slot_offsets, dtype=np.int64)
    lo, hi = int(off[0]), int(off[-1])
    lens = np.diff(off)
    tok = np.zeros(n, dtype=np.uint64)
    msk = np.zeros(n, dtype=np.uint64)
    if hi > lo:
        fwd, inv = _writer._powers(hi - lo)  # thread-safe: a caller always gets arrays long enough
        f = fwd[: hi - lo]
        nonempty = lens > 0
        every = bool(nonempty.all())
        starts = off[:-1] - lo if every else off[:-1][nonempty] - lo
        v = np.empty(hi - lo, dtype=np.uint64)
        with np.errstate(over="ignore"):
            np.copyto(v, tokens[lo:hi], casting="unsafe")  # ids are >= 0; as slot_hashes' astype
            v <<= np.uint64(1)
            v *= f
            t = np.add.reduceat(v, starts)
            np.copyto(v, mask[lo:hi], casting="unsafe")
            v &= np.uint64(1)
            v *= f
            m = np.add.reduceat(v, starts)
            del v
            s_inv = inv[starts]
            t *= s_inv
            m *= s_inv
        if every:
            tok, msk = t, m
        else:
            tok[nonempty], msk[nonempty] = t, m
    with np.errstate(over="ignore"):
        tok += lens.astype(np.uint64) * GOLD
        msk += tok
        return mix(msk), mix(tok)


def _chunks(offsets: np.ndarray, limit: int) -> Iterator[tuple[int, int]]:
    """[i, j) ranges of the slots bounded by `offsets` (len n+1, increasing), each at most `limit` tokens
    or a single slot."""
    n = len(offsets) - 1
    i = 0
    while i < n:
        j = int(np.searchsorted(offsets, offsets[i] + limit, side="right")) - 1
        j = min(max(j, i + 1), n)
        yield i, j
        i = j


def _expected_batches(
    source: Path,
    tokenizer: Path | None,
    capacity: int | None,
    align: int,
    pad_id: int,
    policy: str,
    stop: threading.Event | None = None,
    chunk_tokens: int = _CHUNK_TOKENS,
) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Stream the source: (full hashes, tokens-only hashes, source line) of every slot the packer makes
    from it (oversize policy, alignment padding, label-aligned mask), chunk by chunk of `chunk_tokens`.
    One source batch in memory, and per-token temporaries for one chunk. Stops early once `stop` is set.

    When the slots are the samples themselves (nothing split, truncated or padded: the usual case) they
    are hashed in place; else each chunk of slots is gathered (pieces, padding) and then hashed."""
    fmt = detect_format(Path(source))
    # token-id JSONL in 4 MiB blocks (see _JSONL_BLOCK_BYTES), and one reader thread: this
    # pass already runs beside the packed-file pass, and a second reader only adds a batch to the peak
    batches = iter_batches(
        Path(source),
        tokenizer if fmt in TOKENIZED_FORMATS else None,
        fmt=fmt,
        jsonl_block_bytes=_JSONL_BLOCK_BYTES,
        workers=1,
    )
    for b in batches:
        if stop is not None and stop.is_set():
            return
        raw = np.diff(b.offsets) - 1
        try:
            if capacity is None:
                item_sample, item_start, item_length = np.arange(len(raw)), np.zeros(len(raw), np.int64), raw
            else:
                item_sample, item_start, item_length = itemize(raw, capacity, align, policy)
        except PlanError as exc:
            raise PackingError(f"{source}: {exc} (in the batch from line {b.first_line})") from None
        if len(item_sample) == 0:
            continue
        if (
            len(item_sample) == len(raw)
            and not item_start.any()
            and np.array_equal(item_length, raw)
            and (align == 1 or not (raw % align).any())
            and np.array_equal(item_sample, np.arange(len(raw)))
        ):
            yield from _sample_slots(b, chunk_tokens, stop)
        else:
            yield from _item_slots(b, item_sample, item_start, item_length, align, pad_id, chunk_tokens, stop)


def _sample_slots(
    b: Batch, chunk_tokens: int, stop: threading.Event | None = None
) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """The fast path of _expected_batches, when every slot is a whole sample, unpadded: the slots' tokens
    and mask are the batch's own (no gather), except that a slot's last mask position is 0 (the readers'
    label-aligned masks already are)."""
    lines = b.sample_lines()
    mask = b.mask
    ends = b.offsets[1:] - 1
    if mask[ends].any():
        mask = mask.copy()  # never the reader's arrays: a tokenized batch may be cached
        mask[ends] = 0
    for i, j in _chunks(b.offsets, chunk_tokens):
        if stop is not None and stop.is_set():
            return
        full, tok = _slot_hash_pair(b.values, mask, b.offsets[i : j + 1])
        yield full, tok, lines[i:j]


def _item_slots(
    b: Batch,
    item_sample: np.ndarray,
    item_start: np.ndarray,
    item_length: np.ndarray,
    align: int,
    pad_id: int,
    chunk_tokens: int,
    stop: threading.Event | None = None,
) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """The general path of _expected_batches: each chunk of items (split pieces, truncated samples,
    padding to `align`) gathered into slots as the packer writes them, then hashed."""
    lines = b.sample_lines()
    real = (item_length + 1).astype(np.int64)
    slot = real + (-item_length) % align
    off = np.zeros(len(slot) + 1, dtype=np.int64)
    np.cumsum(slot, out=off[1:])
    first = b.offsets[item_sample] + item_start  # where each slot's tokens begin in the batch
    for i, j in _chunks(off, chunk_tokens):
        if stop is not None and stop.is_set():
            return
        o = off[i : j + 1] - off[i]
        sl, re_ = slot[i:j], real[i:j]
        pos = np.arange(int(o[-1]), dtype=np.int64) - np.repeat(o[:-1], sl)
        is_pad = pos >= np.repeat(re_, sl)
        gather = np.repeat(first[i:j], sl)
        gather += pos
        del pos
        gather[is_pad] = 0
        toks = b.values[gather].astype(np.int32)
        mask = b.mask[gather].astype(np.int8)
        del gather
        toks[is_pad] = pad_id
        mask[is_pad] = 0
        mask[o[:-1] + re_ - 1] = 0
        full, tok = _slot_hash_pair(toks, mask, o)
        yield full, tok, lines[item_sample[i:j]]


@dataclass
class _Expected:
    """The slots the source makes: their distinct full hashes sorted, with their count and the source line
    of the first, and every slot's tokens-only hash and line in source order (looked up rarely)."""

    uniq: np.ndarray  # uint64, sorted distinct full hashes
    count: np.ndarray  # int64, how many expected slots have each
    line: np.ndarray  # int64, the source line of the first (source order) of each
    tokens: np.ndarray  # uint64, every slot's tokens-only hash, source order
    lines: np.ndarray  # int64, every slot's source line
    _tok_sorted: tuple[np.ndarray, np.ndarray] | None = None
    _lookups: int = 0

    def tokens_line(self, h: np.uint64) -> int | None:
        """The source line of the first slot (source order) whose tokens-only hash is h, else None.

        Only a slot of the file that matches no source slot is looked up (at most --max-errors of them):
        a few are scanned for, more sort the hashes once (a stable argsort: the first among equal ones)."""
        self._lookups += 1
        if self._tok_sorted is None and self._lookups <= 32:
            at = np.flatnonzero(self.tokens == h)
            return int(self.lines[at[0]]) if len(at) else None
        if self._tok_sorted is None:
            order = np.argsort(self.tokens, kind="stable")
            self._tok_sorted = (self.tokens[order], self.lines[order])
        tok_sorted, tok_line = self._tok_sorted
        t = np.searchsorted(tok_sorted, h)
        return int(tok_line[t]) if t < len(tok_sorted) and tok_sorted[t] == h else None


def _join(parts: list[np.ndarray], dtype: Any) -> np.ndarray:
    """np.concatenate(parts), emptying the list (so each part is freed once copied)."""
    if not parts:
        return np.zeros(0, dtype)
    out = np.empty(sum(len(p) for p in parts), dtype=dtype)
    at = 0
    parts.reverse()
    while parts:
        p = parts.pop()
        out[at : at + len(p)] = p
        at += len(p)
    return out


def _expected_slots(
    source: Path,
    tokenizer: Path | None,
    capacity: int | None,
    align: int,
    pad_id: int,
    policy: str,
    stop: threading.Event | None = None,
) -> _Expected | None:
    """_expected_batches gathered and sorted (None when stopped early)."""
    full_parts: list[np.ndarray] = []
    tok_parts: list[np.ndarray] = []
    line_parts: list[np.ndarray] = []
    for full, tok, line in _expected_batches(source, tokenizer, capacity, align, pad_id, policy, stop):
        full_parts.append(full)
        tok_parts.append(tok)
        line_parts.append(line)
    if stop is not None and stop.is_set():
        return None
    release_memory()  # what reading the source freed, before the sorting below
    # one column at a time, each list freed as it is joined: ~8 bytes per sample less at the peak
    exp_line = _join(line_parts, np.int64)
    exp_full = _join(full_parts, np.uint64)
    order = np.argsort(exp_full, kind="stable")
    e_sorted = exp_full[order]
    del exp_full
    # np.unique(e_sorted, return_index=True, return_counts=True), on an array already sorted
    new = np.ones(len(e_sorted), dtype=bool)
    if len(e_sorted):
        np.not_equal(e_sorted[1:], e_sorted[:-1], out=new[1:])
    first = np.flatnonzero(new)
    del new
    uniq = e_sorted[first]
    del e_sorted
    count = np.diff(np.append(first, len(order)))
    line = exp_line[order[first]]
    del order, first
    return _Expected(uniq, count, line, _join(tok_parts, np.uint64), exp_line)


class _Background:
    """fn(*args, stop=event) in a daemon thread; result() joins and returns it or raises its exception
    (the same exception object, so a PackingError reads the same); cancel() sets the event and joins."""

    def __init__(self, fn: Callable[..., Any], *args: Any) -> None:
        self._stop = threading.Event()
        self._value: Any = None
        self._error: BaseException | None = None

        def run() -> None:
            try:
                self._value = fn(*args, stop=self._stop)
            except BaseException as exc:  # noqa: BLE001 - raised in the caller's thread by result()
                self._error = exc

        self._thread = threading.Thread(target=run, name="packcfg-verify-source", daemon=True)
        self._thread.start()

    def result(self) -> Any:
        self._thread.join()
        if self._error is not None:
            error, self._error = self._error, None
            raise error
        return self._value

    def cancel(self) -> None:
        self._stop.set()
        self._thread.join()


def _check_against_source(
    report: VerifyReport,
    source: Path,
    expected: _Expected | Callable[[], _Expected],
    slots: _Slots,
    max_errors: int,
) -> None:
    """Every source sample (as the packer slots it) in exactly one slot of the file, and nothing else.

    `expected`: _expected_slots of the source, or a callable giving it (the worker computing it beside the
    packed-file pass: the file's own sorting is done before waiting for it).

    The source is streamed batch by batch and the 64-bit slot hashes compared as sorted arrays: memory is
    one source batch (its per-token work in chunks of ~256k tokens) plus ~90 bytes per sample (the file's
    slot hashes, tokens-only hashes, rows and positions, and its distinct hashes with their counts, ~45; the
    source's distinct hashes, counts and lines, and every slot's tokens-only hash and line, ~40; a few
    bytes more while they are compared), whatever the size of the data."""
    f = slots.full
    # np.unique(f, return_counts=True), from one sorted copy
    f_sorted = np.sort(f)
    new = np.ones(len(f_sorted), dtype=bool)
    if len(f_sorted):
        np.not_equal(f_sorted[1:], f_sorted[:-1], out=new[1:])
    f_first = np.flatnonzero(new)
    f_uniq = f_sorted[f_first]
    f_count = np.diff(np.append(f_first, len(f_sorted)))
    del new, f_first, f_sorted
    # rank of each slot among the file's slots with the same hash (file order): beyond the expected count
    # it is a duplicate. Only slots whose hash the file holds more than once can have a rank above 0:
    # ranked among themselves (usually none), not the whole file
    if len(f_uniq) < len(f):
        repeated = f_uniq[f_count > 1]
        at = np.minimum(np.searchsorted(repeated, f), len(repeated) - 1)
        multi = np.flatnonzero(repeated[at] == f)
        fm = f[multi]
        m_order = np.argsort(fm, kind="stable")
        m_sorted = fm[m_order]
        m_rank = np.empty(len(fm), dtype=np.int64)
        m_rank[m_order] = np.arange(len(fm)) - np.searchsorted(m_sorted, m_sorted, side="left")
        del at, fm, m_order, m_sorted
    else:
        multi = m_rank = np.zeros(0, dtype=np.int64)

    exp = expected() if callable(expected) else expected
    release_memory()  # what the worker freed, before the comparison's arrays
    e_uniq, e_count = exp.uniq, exp.count
    idx = np.minimum(np.searchsorted(e_uniq, f), max(len(e_uniq) - 1, 0))
    present = (e_uniq[idx] == f) if len(e_uniq) else np.zeros(len(f), dtype=bool)
    limit = np.where(present, e_count[idx], 0) if len(e_uniq) else np.zeros(len(f), dtype=np.int64)
    dup = np.zeros(len(f), dtype=bool)
    dup[multi] = present[multi] & (m_rank >= limit[multi])
    del limit
    missing_in_file = ~present
    bad = np.flatnonzero(dup | missing_in_file)  # file order
    path = report.path
    shown = 0
    for k in bad:
        if shown >= max_errors:
            report.error_count += len(bad) - shown
            break
        r, j = int(slots.row[k]), int(slots.j[k])
        if dup[k]:
            line = int(exp.line[idx[k]])
            report.add(f"{path}: row {r} sample {j}: duplicate of source line {line}", max_errors)
        else:
            tok_line = exp.tokens_line(slots.tokens[k])
            if tok_line is not None:
                line = tok_line
                report.add(
                    f"{path}: row {r} sample {j}: tokens match source line {line} but the loss_mask differs",
                    max_errors,
                )
            else:
                report.add(
                    f"{path}: row {r} sample {j}: not found in {source} (tokens altered or foreign)",
                    max_errors,
                )
        shown += 1
    # expected slots the file does not hold (often enough); samples the oversize policy dropped are not
    # expected (itemize leaves them out)
    if len(e_uniq):
        have = np.zeros(len(e_uniq), dtype=np.int64)
        if len(f_uniq):
            at = np.minimum(np.searchsorted(f_uniq, e_uniq), len(f_uniq) - 1)
            have = np.where(f_uniq[at] == e_uniq, f_count[at], 0)
        short = np.flatnonzero(have < e_count)
        lines = np.sort(exp.line[short])
        for n_shown, line in enumerate(lines):
            if n_shown >= max_errors:
                report.error_count += len(lines) - n_shown
                break
            report.add(f"{source}:{int(line)}: sample missing from {path}", max_errors)
    report.source_checked = True
