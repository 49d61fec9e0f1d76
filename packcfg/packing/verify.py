"""Check a packed Parquet file: row invariants, and against its source every sample exactly once, intact."""

from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from packcfg.packing.errors import PackingError
from packcfg.packing.planner import OVERSIZE_POLICIES, PlanError, itemize
from packcfg.packing.sources import detect_format, spool
from packcfg.packing.writer import iter_packed, read_metadata


@dataclass
class VerifyReport:
    path: Path
    rows: int = 0
    samples: int = 0
    tokens: int = 0
    capacity: int | None = None
    source_checked: bool = False
    errors: list[str] = field(default_factory=list)
    error_count: int = 0

    @property
    def ok(self) -> bool:
        return self.error_count == 0

    def add(self, message: str, limit: int) -> None:
        self.error_count += 1
        if len(self.errors) < limit:
            self.errors.append(message)


def find_metadata(packed: Path, metadata: Path | None) -> Path | None:
    if metadata is not None:
        return metadata
    guess = packed.with_name("metadata.json")
    return guess if guess.is_file() else None


def metadata_entry(meta_path: Path, packed: Path) -> dict[str, Any]:
    entries = read_metadata(meta_path)
    for e in entries:  # the entry written for this file, else the train split, else the only one
        if e.get("file") == packed.name:
            return e
    for e in entries:
        if e.get("split", "train") == "train":
            return e
    return entries[0] if entries else {}


def _slot_key(tokens: np.ndarray, mask: np.ndarray) -> tuple[bytes, bytes]:
    t = np.ascontiguousarray(tokens, dtype=np.int64).tobytes()
    m = np.ascontiguousarray(mask, dtype=np.int8).tobytes()
    return hashlib.blake2b(t, digest_size=16).digest(), hashlib.blake2b(t + m, digest_size=16).digest()


def verify_packed(
    packed: Path,
    metadata: Path | None = None,
    source: Path | None = None,
    tokenizer: Path | None = None,
    capacity: int | None = None,
    max_errors: int = 20,
) -> VerifyReport:
    """Row invariants always; with `source`, that every source sample is in exactly one slot, intact.

    Raises PackingError when the inputs cannot be read (exit 2); violations go into the report (exit 1).
    """
    packed = Path(packed)
    report = VerifyReport(packed)
    meta_path = find_metadata(packed, metadata)
    entry: dict[str, Any] = metadata_entry(meta_path, packed) if meta_path is not None else {}
    if capacity is None and entry.get("pack_size") is not None:
        capacity = int(entry["pack_size"])
    report.capacity = capacity
    align = int(entry.get("pad_seq_to_mult") or 1)
    pad_id = int(entry.get("pad_id") or 0)

    found: list[tuple[bytes, bytes]] = []
    where: list[tuple[int, int]] = []
    for r, row in enumerate(iter_packed(packed)):
        ids, mask, starts = row["input_ids"], row["loss_mask"], row["seq_start_id"]
        report.rows += 1
        n = len(ids)
        report.tokens += n
        prefix = f"{packed}: row {r}"
        if len(mask) != n:
            report.add(f"{prefix}: loss_mask has {len(mask)} values, input_ids {n}", max_errors)
            continue
        if len(starts) == 0 or starts[0] != 0:
            report.add(f"{prefix}: seq_start_id must start at 0, got {list(starts[:3])}", max_errors)
            continue
        if np.any(np.diff(starts) <= 0):
            report.add(f"{prefix}: seq_start_id not strictly increasing: {list(starts[:8])}", max_errors)
            continue
        if starts[-1] >= n:
            report.add(f"{prefix}: seq_start_id {int(starts[-1])} outside the row (length {n})", max_errors)
            continue
        if len(mask) and (mask.min() < 0 or mask.max() > 1):
            report.add(f"{prefix}: loss_mask values must be 0 or 1", max_errors)
            continue
        bounds = np.append(starts, n)
        if np.any(mask[bounds[1:] - 1] != 0):
            j = int(np.flatnonzero(mask[bounds[1:] - 1] != 0)[0])
            report.add(
                f"{prefix}: sample {j}: loss_mask is not 0 at its last position (not label-aligned)",
                max_errors,
            )
        runtime = n - len(starts)  # each sample gives up one token at runtime (input vs label)
        if capacity is not None and runtime > capacity:
            report.add(f"{prefix}: {runtime} runtime tokens exceed pack_size {capacity}", max_errors)
        if align > 1 and np.any((np.diff(bounds) - 1) % align):
            report.add(
                f"{prefix}: a sample's runtime length is not a multiple of pad_seq_to_mult {align}",
                max_errors,
            )
        report.samples += len(starts)
        if source is not None:
            for j in range(len(starts)):
                s, e = int(bounds[j]), int(bounds[j + 1])
                found.append(_slot_key(ids[s:e], mask[s:e]))
                where.append((r, j))
    if source is not None:
        _check_against_source(
            report,
            source,
            tokenizer or _meta_path(entry.get("tokenizer")),
            entry,
            align,
            pad_id,
            capacity,
            found,
            where,
            max_errors,
        )
    return report


def _meta_path(value: Any) -> Path | None:
    return Path(value) if isinstance(value, str) and value else None


def _check_against_source(
    report: VerifyReport,
    source: Path,
    tokenizer: Path | None,
    entry: dict[str, Any],
    align: int,
    pad_id: int,
    capacity: int | None,
    found: list[tuple[bytes, bytes]],
    where: list[tuple[int, int]],
    max_errors: int,
) -> None:
    fmt = detect_format(Path(source))
    sp = spool(Path(source), tokenizer if fmt == "text" else None)
    policy = (entry.get("oversize") or {}).get("policy", "error")
    if policy not in OVERSIZE_POLICIES:
        policy = "error"
    raw = sp.runtime_lengths()
    try:
        if capacity is None:
            item_sample, item_start, item_length = np.arange(len(raw)), np.zeros(len(raw), np.int64), raw
        else:
            item_sample, item_start, item_length = itemize(raw, capacity, align, policy)
    except PlanError as exc:
        raise PackingError(f"{source}: {exc}") from None
    expected: dict[bytes, list[int]] = {}
    tokens_only: dict[bytes, int] = {}
    for it in range(len(item_sample)):
        smp = int(item_sample[it])
        s = int(sp.offsets[smp] + item_start[it])
        length = int(item_length[it])
        pad = (-length) % align
        toks = np.concatenate([sp.tokens[s : s + length + 1], np.full(pad, pad_id, dtype=np.int32)])
        m = np.concatenate([sp.mask[s : s + length], np.zeros(pad + 1, dtype=np.int8)])
        tkey, fkey = _slot_key(toks, m)
        expected.setdefault(fkey, []).append(smp)
        tokens_only[tkey] = smp
    seen: Counter[bytes] = Counter()
    for (tkey, fkey), (r, j) in zip(found, where, strict=True):
        if fkey in expected:
            seen[fkey] += 1
            if seen[fkey] > len(expected[fkey]):
                smp = expected[fkey][0]
                report.add(
                    f"{report.path}: row {r} sample {j}: duplicate of source line {int(sp.lines[smp])}",
                    max_errors,
                )
        elif tkey in tokens_only:
            smp = tokens_only[tkey]
            report.add(
                f"{report.path}: row {r} sample {j}: tokens match source line {int(sp.lines[smp])} "
                "but the loss_mask differs",
                max_errors,
            )
        else:
            report.add(
                f"{report.path}: row {r} sample {j}: not found in {source} (tokens altered or foreign)",
                max_errors,
            )
    # samples the oversize policy dropped are not expected (itemize leaves them out)
    for fkey, samples in expected.items():
        missing = len(samples) - seen.get(fkey, 0)
        if missing > 0:
            report.add(f"{source}:{int(sp.lines[samples[0]])}: sample missing from {report.path}", max_errors)
    report.source_checked = True
