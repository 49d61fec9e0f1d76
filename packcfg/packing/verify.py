"""Check a packed Parquet file: row invariants, and against its source every sample exactly once, intact."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from packcfg.packing.errors import PackingError
from packcfg.packing.planner import OVERSIZE_POLICIES, PlanError, itemize
from packcfg.packing.sources import TOKENIZED_FORMATS, detect_format, iter_batches
from packcfg.packing.writer import (
    _M1,
    _mix,
    _position_keys,
    digest_add,
    parquet_entry,
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
    Memory: one record batch of rows plus 8 bytes per sample.
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
        row_h = _mix(np.arange(r0, r0 + nrows, dtype=np.uint64) + _M1)  # unique for unreadable rows
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
            h = slot_hashes(slot_ids, slot_mask, flat_off)
            slot_hash_parts.append(h)
            slot_row_parts.append((slot_rows + r0).astype(np.int64))
            with np.errstate(over="ignore"):  # a row's hash: its slots' hashes in order
                keyed = h * _position_keys(int(counts.max()))[j_in_row]
                row_h[good] = _mix(np.add.reduceat(keyed, cum - counts) + counts.astype(np.uint64) * _M1)
            report.samples += int(cum[-1])
            if source is not None:  # tokens-only hashes tell "loss mask differs" from "not found"
                slot_tok_parts.append(slot_hashes(slot_ids, np.zeros(len(slot_ids), np.int8), flat_off))
                slot_j_parts.append(j_in_row.astype(np.int32))
        row_hash_parts.append(row_h)
        report.rows += nrows
        report.tokens += int(ids_off[-1])
        r0 += nrows
    slot_h = np.concatenate(slot_hash_parts) if slot_hash_parts else np.zeros(0, np.uint64)
    slot_row = np.concatenate(slot_row_parts) if slot_row_parts else np.zeros(0, np.int64)
    row_h = np.concatenate(row_hash_parts) if row_hash_parts else np.zeros(0, np.uint64)
    _check_against_metadata(report, entry, meta_path or packed, slot_h, slot_row, row_h, max_errors)
    if source is not None:
        import pyarrow as pa

        # the packed file's read buffers stay in pyarrow's pool (mimalloc/jemalloc) unless handed back:
        # ~50 MB of peak RSS while the source streams (1M samples)
        getattr(pa.default_memory_pool(), "release_unused", lambda: None)()
        _check_against_source(
            report,
            source,
            tokenizer or _meta_path(entry.get("tokenizer")),
            entry,
            align,
            pad_id,
            capacity,
            _Slots(
                slot_h,
                np.concatenate(slot_tok_parts) if slot_tok_parts else np.zeros(0, np.uint64),
                slot_row,
                np.concatenate(slot_j_parts) if slot_j_parts else np.zeros(0, np.int32),
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
    # per-slot checks on the rows whose structure is sound
    for r in np.flatnonzero(ok):
        row_ids_n = int(n[r])
        starts = st[st_off[r] : st_off[r + 1]].astype(np.int64)
        m = mask[mask_off[r] : mask_off[r + 1]]
        bounds = np.append(starts, row_ids_n)
        if np.any(m[bounds[1:] - 1] != 0):
            j = int(np.flatnonzero(m[bounds[1:] - 1] != 0)[0])
            report.add(
                f"{packed}: row {r0 + r}: sample {j}: loss_mask is not 0 at its last position "
                "(not label-aligned)",
                max_errors,
            )
        runtime = row_ids_n - len(starts)  # each sample gives up one token at runtime (input vs label)
        if capacity is not None and runtime > capacity:
            report.add(
                f"{packed}: row {r0 + r}: {runtime} runtime tokens exceed pack_size {capacity}", max_errors
            )
        if align > 1 and np.any((np.diff(bounds) - 1) % align):
            report.add(
                f"{packed}: row {r0 + r}: a sample's runtime length is not a multiple of pad_seq_to_mult "
                f"{align}",
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


def _expected_batches(
    source: Path, tokenizer: Path | None, capacity: int | None, align: int, pad_id: int, policy: str
) -> Any:
    """Stream the source: per batch, (full hashes, tokens-only hashes, source line) of every slot the
    packer makes from it (oversize policy, alignment padding, label-aligned mask). One batch in memory."""
    fmt = detect_format(Path(source))
    for b in iter_batches(Path(source), tokenizer if fmt in TOKENIZED_FORMATS else None, fmt=fmt):
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
        yield (
            slot_hashes(toks, mask, off),
            slot_hashes(toks, np.zeros(len(toks), np.int8), off),
            b.sample_lines()[item_sample],
        )


def _check_against_source(
    report: VerifyReport,
    source: Path,
    tokenizer: Path | None,
    entry: dict[str, Any],
    align: int,
    pad_id: int,
    capacity: int | None,
    slots: _Slots,
    max_errors: int,
) -> None:
    """Every source sample (as the packer slots it) in exactly one slot of the file, and nothing else.

    Streams the source batch by batch and compares 64-bit slot hashes as sorted arrays: memory is one
    source batch plus ~30 bytes per sample, whatever the size of the data."""
    policy = (entry.get("oversize") or {}).get("policy", "error")
    if policy not in OVERSIZE_POLICIES:
        policy = "error"
    parts = list(_expected_batches(source, tokenizer, capacity, align, pad_id, policy))
    exp_full = np.concatenate([p[0] for p in parts]) if parts else np.zeros(0, np.uint64)
    exp_tok = np.concatenate([p[1] for p in parts]) if parts else np.zeros(0, np.uint64)
    exp_line = np.concatenate([p[2] for p in parts]) if parts else np.zeros(0, np.int64)
    del parts
    order = np.argsort(exp_full, kind="stable")
    e_sorted = exp_full[order]
    e_uniq, e_first, e_count = np.unique(e_sorted, return_index=True, return_counts=True)
    tok_sorted = np.sort(exp_tok)
    tok_order = np.argsort(exp_tok, kind="stable")

    f = slots.full
    idx = np.minimum(np.searchsorted(e_uniq, f), max(len(e_uniq) - 1, 0))
    present = (e_uniq[idx] == f) if len(e_uniq) else np.zeros(len(f), dtype=bool)
    # rank of each slot among the file's slots with the same hash (file order): beyond the expected count
    # it is a duplicate
    f_order = np.argsort(f, kind="stable")
    f_sorted = f[f_order]
    group_start = np.searchsorted(f_sorted, f_sorted, side="left")
    rank = np.empty(len(f), dtype=np.int64)
    rank[f_order] = np.arange(len(f)) - group_start
    dup = present & (rank >= np.where(present, e_count[idx], 0))
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
            line = int(exp_line[order[e_first[idx[k]]]])
            report.add(f"{path}: row {r} sample {j}: duplicate of source line {line}", max_errors)
        else:
            t = np.searchsorted(tok_sorted, slots.tokens[k])
            if t < len(tok_sorted) and tok_sorted[t] == slots.tokens[k]:
                line = int(exp_line[tok_order[t]])
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
    f_uniq, f_count = np.unique(f, return_counts=True)
    if len(e_uniq):
        have = np.zeros(len(e_uniq), dtype=np.int64)
        if len(f_uniq):
            at = np.minimum(np.searchsorted(f_uniq, e_uniq), len(f_uniq) - 1)
            have = np.where(f_uniq[at] == e_uniq, f_count[at], 0)
        short = np.flatnonzero(have < e_count)
        lines = np.sort(exp_line[order[e_first[short]]])
        for n_shown, line in enumerate(lines):
            if n_shown >= max_errors:
                report.error_count += len(lines) - n_shown
                break
            report.add(f"{source}:{int(line)}: sample missing from {path}", max_errors)
    report.source_checked = True
