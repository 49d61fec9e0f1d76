"""The launch flow as library calls (the CLI commands are thin wrappers over these, and tests call
them too): gate -> bundle -> backend -> job record."""

from __future__ import annotations

import copy
import os
import signal
import socket
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from packcfg.launch import LaunchError
from packcfg.launch.backends import get_backend
from packcfg.launch.bundle import JobBundle, now_utc, render_bundle, source_date
from packcfg.launch.gate import GateResult, format_diagnostics, run_gate
from packcfg.launch.spec import launch_spec
from packcfg.launch.state import FAILED, JobRecord, JobStore


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


class Interrupted(BaseException):  # noqa: N818 (like KeyboardInterrupt: not an error of the code)
    """SIGTERM or SIGINT arrived while `forward_signals` was active."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@contextmanager
def forward_signals() -> Iterator[None]:
    """Within the block, SIGTERM and SIGINT raise `Interrupted` (main thread only), so `launch` can
    stop the job it started (the local backend: the whole torchrun process tree) before it exits."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def raise_interrupted(signum: int, frame: object) -> None:
        raise Interrupted(signum)

    old = {sig: signal.signal(sig, raise_interrupted) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


@contextmanager
def signals_ignored() -> Iterator[None]:
    """Clean-up that must finish (stopping a job) is not interrupted by a second Ctrl-C."""
    old = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


def _load(files: Sequence[str | Path], overrides: Sequence[str]) -> Any:
    """The merged config with where each value was set (`LocatedConfig`); LaunchError when unreadable."""
    from packcfg.core.config import ConfigError, load_located

    try:
        located = load_located(list(files), list(overrides))
    except ConfigError as exc:
        raise LaunchError(str(exc)) from None
    for file, problem in located.problems:
        if problem.fatal:
            raise LaunchError(f"{file}:{problem.line}:{problem.column}: {problem.code} {problem.message}")
    return located


def _where(located: Any, path: Sequence[str]) -> str:
    """Where the setting at `path` was made: `file:line:col` (a config file, or a base recipe's snapshot
    `<bridge recipe NAME>:line:col`), or `command line: KEY=VALUE` for an override (`-o`, `--set` or a
    positional `KEY=VALUE`); "" when nothing set it (a default)."""
    from packcfg.core.config import is_override_source, override_words

    pos = located.sources.exact(tuple(path))
    if pos is None:
        return ""
    if is_override_source(pos.file):
        return f"command line: {override_words(pos.file)}"
    return f"{pos.file}:{pos.line}:{pos.column}"


def check_secrets(located: Any) -> None:
    """Refuse literal secret-looking values anywhere in the config (see `packcfg.launch.secrets`)."""
    from packcfg.core.secret_names import words
    from packcfg.launch.secrets import literal_secrets

    found = list(literal_secrets(located.data))
    if not found:
        return
    path, _ = found[0]
    key = path[-1]
    var = "_".join(w.upper() for w in words(key))
    where = _where(located, path)
    hint = (
        f"launch.env: {{{key}: ${{{var}}}}} or launch.env_from: [{key}]"
        if tuple(path[:2]) == ("launch", "env")
        else f"{key}: ${{oc.env:{var}}}"
    )
    more = (
        f" (and {len(found) - 1} more: {', '.join('.'.join(p) for p, _ in found[1:4])})"
        if len(found) > 1
        else ""
    )
    raise LaunchError(
        f"{where + ': ' if where else ''}{'.'.join(path)} holds a literal secret-looking value{more}; "
        f"refusing to write it into the job bundle: read it from the environment ({hint})"
    )


# The model-parallel sizes the world size must divide, as (label, key under `model`).
PARALLEL_SIZES = (
    ("TP", "tensor_model_parallel_size"),
    ("PP", "pipeline_model_parallel_size"),
    ("CP", "context_parallel_size"),
)


def _model_setting(config: Mapping[str, Any], key: str) -> tuple[Any, tuple[str, ...]]:
    """`model.<key>` and the path it was read at: a Bridge dump nests the transformer's fields under
    `model.transformer` (packcfg.core.normalize.read_dump), where lint reads them too."""
    from packcfg.core.config import get_path

    for path in (("model", key), ("model", "transformer", key)):
        value = get_path(config, path)
        if value is not None:
            return value, path
    return None, ("model", key)


def check_world_size(located: Any, config: Mapping[str, Any], spec: Any, backend: str | None) -> None:
    """The job's world size is what the bundle asks for: `launch.nodes` x `launch.gpus_per_node` (each 1
    when the config does not set it; on CPU, gpus_per_node counts processes). It must be divisible by
    TP*PP*CP. Plain lint checks this as PL601 when the config has a `launch` section; this covers the
    job a backend flag (or the launch defaults) makes of a config without one, and says where each
    number came from (the file and line, the override, the base recipe), so the message never points
    at a line the user did not write and never calls a value the user set a default."""
    sizes: list[tuple[str, int, str]] = []  # (label, value, where it was set)
    for label, key in PARALLEL_SIZES:
        value, path = _model_setting(config, key)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            value = 1
        sizes.append((label, value, _where(located, path) or "not set: default"))
    mp = 1
    for _, value, _ in sizes:
        mp *= value
    world = spec.nodes * spec.gpus_per_node
    if world % mp == 0:
        return

    def origin(key: str, value: int) -> str:
        where = _where(located, ("launch", key))
        return f"launch.{key} {value} ({where})" if where else f"launch.{key} {value} (not set: default)"

    parts = [f"{label} {value} ({where})" for label, value, where in sizes if value > 1]
    via = f"--backend {backend}" if backend else f"launch.backend {spec.backend}"
    raise LaunchError(
        f"{via}: the job would start {world} process(es): world size = {origin('nodes', spec.nodes)} x "
        f"{origin('gpus_per_node', spec.gpus_per_node)}, which is not divisible by TP*PP*CP = {mp} "
        f"({', '.join(parts)}); set launch.nodes and launch.gpus_per_node in the config"
    )


def gate_and_render(
    files: Sequence[str | Path],
    overrides: Sequence[str] = (),
    *,
    backend: str | None = None,
    allow: Sequence[str] = (),
    when: str | None = None,
    profile: str | None = None,
    directory: Path | None = None,
) -> tuple[JobBundle, GateResult]:
    """Lint (raises GateRefused on unallowed errors), then render the bundle in memory.

    The gate lints exactly what plain `packcfg lint FILES -o OVERRIDES` lints: `--backend` is a flag,
    not an override, so it neither adds findings nor moves them. The bundle's config then records the
    backend (`launch.backend`), and the world size the chosen backend will start is checked."""
    if not files:
        raise LaunchError("no config file given")
    for f in files:
        if not Path(f).is_file():
            raise LaunchError(f"{f}: no such file")
    gate = run_gate(files, list(overrides), allow=allow, when=when, profile=profile)
    if not gate.passed:
        raise GateRefused(gate, format_diagnostics(gate, files))
    located = _load(files, overrides)
    check_secrets(located)
    config = copy.deepcopy(located.data)
    if backend:
        launch = config.get("launch")
        if not isinstance(launch, dict):
            launch = config["launch"] = {}
        launch["backend"] = backend
    spec = launch_spec(config, backend)
    if not any(a.code == "PL601" for a in gate.allowed):
        check_world_size(located, config, spec, backend)
    bundle = render_bundle(
        config,
        sources=files,
        overrides=list(overrides),
        allowed=gate.allowed,
        lint_summary=gate.summary(),
        created_at=when,
        backend=backend,
        directory=directory.expanduser().resolve() if directory is not None else None,
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
    force: bool = False,
) -> tuple[Path, JobBundle, GateResult]:
    """`packcfg render`: reproducible, so the only time in it is SOURCE_DATE_EPOCH (when set). Never
    writes over an input of the command; a folder holding other files is refused unless `force`."""
    bundle, gate = gate_and_render(
        files, overrides, backend=backend, allow=allow, when=source_date(), profile=profile, directory=out_dir
    )
    return bundle.write(out_dir, force=force, inputs=list(files)), bundle, gate


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


SUBMITTING = "submitting"


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
    on_started: Callable[[JobRecord, Any], None] | None = None,
    warn: Callable[[str], None] | None = None,
) -> LaunchResult:
    """`packcfg launch`: gate, render, refuse a duplicate, write the bundle, submit, record."""
    when = source_date() or now_utc()
    bundle, gate = gate_and_render(
        files, overrides, backend=backend, allow=allow, when=when, profile=profile, directory=bundle_dir
    )
    store = JobStore(state_dir)
    be = _backend(bundle.spec.backend, executor)
    if not dry_run and (
        bundle.spec.backend == "local" or (bundle.spec.backend == "nemo-run" and executor == "local")
    ):
        check_runs_here(bundle)
    if dry_run:
        target = bundle_dir.expanduser().resolve() if bundle_dir else Path("<bundle>")
        if bundle_dir:
            bundle.write(bundle_dir, inputs=list(files))
        return LaunchResult(None, bundle, gate, be.plan(target, bundle))
    record = submit(
        store,
        bundle,
        be,
        when=when,
        force=force,
        bundle_dir=bundle_dir,
        inputs=files,
        on_started=on_started,
        warn=warn,
    )
    return LaunchResult(record, bundle, gate, be.plan(Path(record.bundle_dir), bundle))


def check_runs_here(bundle: JobBundle) -> None:
    """A job that runs on this machine (the local backend, NeMo-Run's LocalExecutor) is refused before
    anything is recorded or started when this installation, or the `python3`/`torchrun` the job script
    runs, lacks what the job imports: one line naming each module and the install command."""
    from packcfg.launch import jobenv
    from packcfg.launch.bundle import packed_data_path

    reqs = jobenv.requirements(bundle.config, bundle.spec, packed_data_path(bundle.config))
    problem = jobenv.check_local(reqs)
    if problem:
        raise LaunchError(f"--backend {bundle.spec.backend}: cannot run this job here: {problem}")


def submit(
    store: JobStore,
    bundle: JobBundle,
    be: Any,
    *,
    when: str | None = None,
    force: bool = False,
    bundle_dir: Path | None = None,
    inputs: Sequence[str | Path] = (),
    on_started: Callable[[JobRecord, Any], None] | None = None,
    warn: Callable[[str], None] | None = None,
) -> JobRecord:
    """Refuse a duplicate, record, write the bundle and submit it through backend `be`.

    Under the store's lock: the duplicate check (only records that count as a submission: not FAILED,
    not CANCELLED) and the write of the new record, marked `submitting`, so a concurrent launch of the
    same config sees it. The lock is released before the bundle is written and the job submitted:
    launches of different configs do not wait on each other's submissions."""
    when = when or now_utc()
    if warn is not None:
        for problem in store.scan()[1]:  # its config hash is unknown: it cannot count as a duplicate
            warn(problem.message)
    for earlier in store.with_hash(bundle.config_hash):  # best effort, outside the lock (may be slow)
        if not earlier.terminal:
            try:
                refresh(store, earlier)
            except LaunchError:
                pass
    with store.lock():
        previous = store.active_with_hash(bundle.config_hash)
        if previous and not force:
            ids = ", ".join(f"{r.id} ({r.status})" for r in previous)
            raise DuplicateJob(
                f"this config (sha256 {bundle.config_hash[:12]}) was already submitted as {ids}; "
                "pass --force to submit it again"
            )
        job_id = _job_id(store, bundle, when)
        directory = (bundle_dir or store.bundle_dir(job_id)).expanduser().resolve()
        record = JobRecord(
            id=job_id,
            backend=be.name,
            config_hash=bundle.config_hash,
            bundle_dir=str(directory),
            recipe=bundle.spec.job_name,
            created_at=when,
            updated_at=when,
            native_state=SUBMITTING,
            allowed=[a.to_dict() for a in (bundle.render_args.get("allowed") or ())],
            extra={"submitter": {"pid": os.getpid(), "host": socket.gethostname()}},
        )
        store.save(record)  # recorded before submission: a crash mid-submit still leaves a trace
    try:
        bundle.write(directory, inputs=list(inputs))
        be.submit(directory, bundle, record)
        if record.native_state == SUBMITTING:  # a backend that reports no native state of its own
            record.native_state = record.status
        if on_started is not None:
            on_started(record, be)
    except BaseException as exc:  # a refusal, a failed sbatch, or a signal: never left `submitting`
        if isinstance(exc, Interrupted | KeyboardInterrupt) and record.native_id:
            # The job started before the signal: stop it rather than leave it behind unannounced.
            with signals_ignored():
                try:
                    be.cancel(record)
                except LaunchError:
                    pass
            record.native_state = f"cancelled: launch interrupted by {exc}"
        else:
            record.status = FAILED
            reason = str(exc) or exc.__class__.__name__
            record.native_state = f"submission failed: {reason}"
        record.updated_at = now_utc()
        store.save(record)
        raise
    record.updated_at = now_utc()
    store.save(record)
    _BACKENDS[record.id] = be
    return record


# The backend object that submitted a job in this process (the local backend reaps its child).
_BACKENDS: dict[str, Any] = {}


def _backend(name: str, executor: str = "slurm") -> Any:
    if name == "nemo-run":
        from packcfg.launch.backends.nemo_run import NemoRunBackend

        return NemoRunBackend(executor)
    return get_backend(name)


def _submitter_gone(record: JobRecord) -> bool:
    """A record left `submitting` by a launch that died before it could record the outcome."""
    info = record.extra.get("submitter")
    if not isinstance(info, dict) or info.get("host") != socket.gethostname():
        return False
    pid = info.get("pid")
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return True
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def refresh(store: JobStore, record: JobRecord, backend: Any = None) -> JobRecord:
    """Ask the backend for the job's state and save the record when it changed."""
    if record.terminal:
        return record
    before = (record.status, record.native_state, record.exit_code)
    if record.native_id is None and record.native_state == SUBMITTING:
        if _submitter_gone(record):
            record.status = FAILED
            record.native_state = "submission interrupted (the launching process is gone)"
    else:
        be = (
            backend
            or _BACKENDS.get(record.id)
            or _backend(record.backend, record.extra.get("executor", "slurm"))
        )
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
    progress: TextIO | None = None,
) -> JobRecord:
    """Poll until the job reaches COMPLETED, FAILED or CANCELLED (or `timeout` seconds pass); with
    `progress`, the job's log lines (training steps) are copied there as they are written."""
    deadline = None if timeout is None else time.monotonic() + timeout
    last = None
    offsets: dict[Path, int] = {}
    while True:
        refresh(store, record)
        if progress is not None:
            _copy_new_log_lines(record, offsets, progress)
        if on_change and record.status != last:
            on_change(record)
            last = record.status
        if record.terminal:
            return record
        if deadline is not None and time.monotonic() > deadline:
            raise LaunchError(f"job {record.id} still {record.status} after {timeout:.0f} s")
        time.sleep(interval)


def _copy_new_log_lines(record: JobRecord, offsets: dict[Path, int], out: TextIO) -> None:
    """Write what the job's logs gained since the last call (whole lines only)."""
    try:
        paths = log_paths(record)
    except LaunchError:
        return
    for path in paths:
        try:
            with open(path, "rb") as fh:
                fh.seek(offsets.get(path, 0))
                chunk = fh.read()
        except OSError:
            continue
        if not chunk:
            continue
        if not record.terminal:
            chunk = chunk[: chunk.rfind(b"\n") + 1]  # a partial last line waits for its end
        offsets[path] = offsets.get(path, 0) + len(chunk)
        if chunk:
            out.write(chunk.decode("utf-8", errors="replace"))
            out.flush()


def cancel(store: JobStore, record: JobRecord, backend: Any = None) -> JobRecord:
    """Stop the job and mark it CANCELLED; a job already finished is left as it is (idempotent)."""
    if record.terminal:
        return record
    be = (
        backend or _BACKENDS.get(record.id) or _backend(record.backend, record.extra.get("executor", "slurm"))
    )
    be.cancel(record)
    record.updated_at = now_utc()
    store.save(record)
    return record


def log_paths(record: JobRecord) -> list[Path]:
    be = _backend(record.backend, record.extra.get("executor", "slurm"))
    return [Path(p) for p in be.log_paths(record)]


def read_logs(record: JobRecord) -> str | None:
    """The job's logs as its backend's own tool prints them (NeMo-Run's `Experiment.logs`), or None
    when the backend has no such tool and its log files are the logs."""
    be = _backend(record.backend, record.extra.get("executor", "slurm"))
    reader = getattr(be, "read_logs", None)
    return reader(record) if reader is not None else None


def follow(store: JobStore, record: JobRecord, out: TextIO = sys.stdout, interval: float = 1.0) -> JobRecord:
    """Print the job's logs as they grow until the job is finished (`packcfg logs -f`)."""
    from packcfg.launch.state import CLUSTER_MISMATCH

    offsets: dict[Path, int] = {}
    while True:
        refresh(store, record)
        if (record.native_state or "").startswith(CLUSTER_MISMATCH):
            # Following would never end: the cluster asked cannot say when this job finishes.
            raise LaunchError(f"job {record.id}: {record.native_state}; state kept {record.status}")
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
