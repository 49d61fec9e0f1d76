"""The launch flow as library calls (the CLI commands are thin wrappers over these, and tests call
them too): gate -> bundle -> backend -> job record."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from packcfg.launch import LaunchError
from packcfg.launch.backends import get_backend
from packcfg.launch.bundle import JobBundle, now_utc, render_bundle, source_date
from packcfg.launch.gate import GateResult, format_diagnostics, run_gate
from packcfg.launch.state import JobRecord, JobStore


class GateRefused(LaunchError):
    """The lint gate found errors that were not `--allow`ed."""

    def __init__(self, gate: GateResult, report: str) -> None:
        codes = sorted({d.code for d in gate.blocking})
        super().__init__(
            f"refusing to launch: {len(gate.blocking)} lint error(s) ({', '.join(codes)}); "
            "fix them, or pass --allow CODE for each rule you accept"
        )
        self.gate = gate
        self.report = report


class DuplicateJob(LaunchError):
    """The same config hash was submitted before (and `--force` was not given)."""


def _load(files: Sequence[str | Path], overrides: Sequence[str]) -> dict[str, Any]:
    from packcfg.core.config import ConfigError, load_config

    try:
        return load_config(list(files), list(overrides))
    except ConfigError as exc:
        raise LaunchError(str(exc)) from None


def effective_overrides(overrides: Sequence[str], backend: str | None) -> list[str]:
    """`--backend X` is the override `launch.backend=X`: it is part of the resolved config (and hash)."""
    return [*overrides, f"launch.backend={backend}"] if backend else list(overrides)


def gate_and_render(
    files: Sequence[str | Path],
    overrides: Sequence[str] = (),
    *,
    backend: str | None = None,
    allow: Sequence[str] = (),
    when: str | None = None,
    profile: str | None = None,
) -> tuple[JobBundle, GateResult]:
    """Lint (raises GateRefused on unallowed errors), then render the bundle in memory."""
    if not files:
        raise LaunchError("no config file given")
    for f in files:
        if not Path(f).is_file():
            raise LaunchError(f"{f}: no such file")
    all_overrides = effective_overrides(overrides, backend)
    gate = run_gate(files, all_overrides, allow=allow, when=when, profile=profile)
    if not gate.passed:
        raise GateRefused(gate, format_diagnostics(gate, files))
    config = _load(files, all_overrides)
    bundle = render_bundle(
        config,
        sources=files,
        overrides=all_overrides,
        allowed=gate.allowed,
        lint_summary=gate.summary(),
        created_at=when,
        backend=backend,
    )
    return bundle, gate


def render(
    files: Sequence[str | Path],
    out_dir: Path,
    overrides: Sequence[str] = (),
    *,
    backend: str | None = None,
    allow: Sequence[str] = (),
    profile: str | None = None,
) -> tuple[Path, JobBundle, GateResult]:
    """`packcfg render`: reproducible, so the only time in it is SOURCE_DATE_EPOCH (when set)."""
    bundle, gate = gate_and_render(
        files, overrides, backend=backend, allow=allow, when=source_date(), profile=profile
    )
    return bundle.write(out_dir), bundle, gate


@dataclass
class LaunchResult:
    record: JobRecord | None
    bundle: JobBundle
    gate: GateResult
    plan: list[list[str]] = field(default_factory=list)


def _job_id(store: JobStore, bundle: JobBundle, when: str) -> str:
    stamp = when.replace("-", "").replace(":", "").rstrip("Z")
    base = f"{bundle.spec.job_name}-{stamp}-{bundle.config_hash[:8]}"
    job_id, n = base, 1
    while store.path(job_id).exists():
        n += 1
        job_id = f"{base}-{n}"
    return job_id


def launch(
    files: Sequence[str | Path],
    overrides: Sequence[str] = (),
    *,
    backend: str | None = None,
    executor: str = "slurm",
    allow: Sequence[str] = (),
    force: bool = False,
    dry_run: bool = False,
    state_dir: Path | str | None = None,
    bundle_dir: Path | None = None,
    profile: str | None = None,
) -> LaunchResult:
    """`packcfg launch`: gate, render, refuse a duplicate, write the bundle, submit, record."""
    when = source_date() or now_utc()
    bundle, gate = gate_and_render(files, overrides, backend=backend, allow=allow, when=when, profile=profile)
    store = JobStore(state_dir)
    previous = store.with_hash(bundle.config_hash)
    if previous and not force and not dry_run:
        ids = ", ".join(f"{r.id} ({r.status})" for r in previous)
        raise DuplicateJob(
            f"this config (sha256 {bundle.config_hash[:12]}) was already submitted as {ids}; "
            "pass --force to submit it again"
        )
    chosen = bundle.spec.backend
    be = _backend(chosen, executor)
    if dry_run:
        target = bundle_dir.expanduser().resolve() if bundle_dir else Path("<bundle>")
        if bundle_dir:
            bundle.write(bundle_dir)
        return LaunchResult(None, bundle, gate, be.plan(target, bundle))
    job_id = _job_id(store, bundle, when)
    directory = bundle.write(bundle_dir or store.bundle_dir(job_id))
    record = JobRecord(
        id=job_id,
        backend=chosen,
        config_hash=bundle.config_hash,
        bundle_dir=str(directory),
        recipe=bundle.spec.job_name,
        created_at=when,
        updated_at=when,
        allowed=[a.to_dict() for a in gate.allowed],
    )
    store.save(record)  # recorded before submission: a crash mid-submit still leaves a trace
    try:
        be.submit(directory, bundle, record)
    except LaunchError as exc:
        record.status = "FAILED"
        record.native_state = f"submission failed: {exc}"
        record.updated_at = now_utc()
        store.save(record)
        raise
    record.updated_at = now_utc()
    store.save(record)
    result = LaunchResult(record, bundle, gate)
    result.plan = be.plan(directory, bundle)
    _BACKENDS[record.id] = be
    return result


# The backend object that submitted a job in this process (the local backend reaps its child).
_BACKENDS: dict[str, Any] = {}


def _backend(name: str, executor: str = "slurm") -> Any:
    if name == "nemo-run":
        from packcfg.launch.backends.nemo_run import NemoRunBackend

        return NemoRunBackend(executor)
    return get_backend(name)


def refresh(store: JobStore, record: JobRecord) -> JobRecord:
    """Ask the backend for the job's state and save the record when it changed."""
    if record.terminal:
        return record
    be = _BACKENDS.get(record.id) or _backend(record.backend, record.extra.get("executor", "slurm"))
    before = (record.status, record.native_state, record.exit_code)
    be.refresh(record)
    if (record.status, record.native_state, record.exit_code) != before:
        record.updated_at = now_utc()
        store.save(record)
    return record


def wait(
    store: JobStore,
    record: JobRecord,
    *,
    timeout: float | None = None,
    interval: float = 2.0,
    on_change: Callable[[JobRecord], None] | None = None,
) -> JobRecord:
    """Poll until the job reaches COMPLETED, FAILED or CANCELLED (or `timeout` seconds pass)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    last = None
    while True:
        refresh(store, record)
        if on_change and record.status != last:
            on_change(record)
            last = record.status
        if record.terminal:
            return record
        if deadline is not None and time.monotonic() > deadline:
            raise LaunchError(f"job {record.id} still {record.status} after {timeout:.0f} s")
        time.sleep(interval)


def cancel(store: JobStore, record: JobRecord) -> JobRecord:
    be = _BACKENDS.get(record.id) or _backend(record.backend, record.extra.get("executor", "slurm"))
    be.cancel(record)
    record.updated_at = now_utc()
    store.save(record)
    return record


def log_paths(record: JobRecord) -> list[Path]:
    be = _backend(record.backend, record.extra.get("executor", "slurm"))
    return [Path(p) for p in be.log_paths(record)]


def follow(store: JobStore, record: JobRecord, out: TextIO = sys.stdout, interval: float = 1.0) -> JobRecord:
    """Print the job's logs as they grow until the job is finished (`packcfg logs -f`)."""
    offsets: dict[Path, int] = {}
    while True:
        refresh(store, record)
        done = record.terminal
        for path in log_paths(record):
            if not path.is_file():
                continue
            with open(path, "rb") as fh:
                fh.seek(offsets.get(path, 0))
                chunk = fh.read()
                offsets[path] = fh.tell()
            if chunk:
                out.write(chunk.decode("utf-8", errors="replace"))
                out.flush()
        if done:
            return record
        time.sleep(interval)
