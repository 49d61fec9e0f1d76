"""Job records: one JSON file per job in the state directory, written atomically.

The state directory is `--state-dir`, else `$PACKCFG_STATE_DIR`, else `~/.local/state/packcfg`
(`$XDG_STATE_HOME/packcfg` when that is set). Layout: `jobs/<id>.json` (the record) and
`bundles/<id>/` (the bundle that was submitted).
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from packcfg.core.atomic import atomic_write_text
from packcfg.launch import LaunchError

# Normalised states; `native_state` keeps the backend's own word (e.g. Slurm's OUT_OF_MEMORY).
PENDING, RUNNING, COMPLETED, FAILED, CANCELLED, UNKNOWN = (
    "PENDING",
    "RUNNING",
    "COMPLETED",
    "FAILED",
    "CANCELLED",
    "UNKNOWN",
)
STATES = (PENDING, RUNNING, COMPLETED, FAILED, CANCELLED, UNKNOWN)
TERMINAL = frozenset({COMPLETED, FAILED, CANCELLED})
# The native state of a record whose cluster answered about another job (or was another cluster):
# the record keeps its status.
CLUSTER_MISMATCH = "unknown: cluster mismatch"
_JOB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*\Z")
_CLUSTER = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*\Z")


@dataclass
class JobRecord:
    id: str
    backend: str
    config_hash: str
    bundle_dir: str
    status: str = PENDING
    native_id: str | None = None  # local: pid; slurm: job id; nemo-run: Slurm job id or experiment id
    native_state: str | None = None
    pack_native_id: str | None = None  # the data-prep job the training job depends on
    recipe: str | None = None
    created_at: str | None = None
    updated_at: str | None = None
    exit_code: int | None = None
    log_paths: list[str] = field(default_factory=list)
    submit_command: list[str] = field(default_factory=list)
    allowed: list[dict[str, Any]] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)
    # Where a Slurm job went (slurm, and nemo-run with its Slurm executor): the cluster's name
    # (`ClusterName`, or the one `sbatch -M`/SBATCH_CLUSTERS named), the SLURM_CONF in force at
    # submission, and whether every command for the job must pass `-M cluster`. status, logs and cancel
    # ask that cluster; None in records written before packcfg kept them (they ask the cluster of the
    # current environment, as before).
    cluster: str | None = None
    slurm_conf: str | None = None
    cluster_flag: bool = False
    submitted_at: str | None = None  # UTC time of the sbatch (Slurm's SubmitTime must be near it)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Any) -> JobRecord:
        """A record from its JSON; ValueError (one line, naming the field) when the data is not one."""
        if not isinstance(data, dict):
            raise ValueError(f"expected a JSON object, got {type(data).__name__}")
        known = {f for f in cls.__dataclass_fields__}
        fields = {k: v for k, v in data.items() if k in known}
        for key in ("id", "backend", "config_hash", "bundle_dir"):
            if not isinstance(fields.get(key), str) or not fields[key]:
                raise ValueError(f"field {key!r} missing or not a string")
        if not _JOB_ID.match(fields["id"]):
            raise ValueError(f"id {fields['id']!r} is not a job id")
        if fields.get("status", PENDING) not in STATES:
            raise ValueError(f"status {fields.get('status')!r} is not one of {', '.join(STATES)}")
        for key in (
            "native_id",
            "native_state",
            "pack_native_id",
            "recipe",
            "created_at",
            "updated_at",
            "cluster",
            "slurm_conf",
            "submitted_at",
        ):
            if fields.get(key) is not None and not isinstance(fields[key], str):
                raise ValueError(f"field {key!r} is not a string")
        if not isinstance(fields.get("cluster_flag", False), bool):
            raise ValueError("field 'cluster_flag' is not true or false")
        # Passed to Slurm's commands (`-M NAME`, SLURM_CONF=FILE): a plain name and an absolute path.
        if fields.get("cluster") is not None and not _CLUSTER.match(fields["cluster"]):
            raise ValueError(f"cluster {fields['cluster']!r} is not a Slurm cluster name")
        conf = fields.get("slurm_conf")
        if conf is not None and (not conf.startswith("/") or not conf.isprintable()):
            raise ValueError(f"slurm_conf {conf!r} is not an absolute file path")
        code = fields.get("exit_code")
        if code is not None and (isinstance(code, bool) or not isinstance(code, int)):
            raise ValueError("field 'exit_code' is not an integer")
        for key in ("log_paths", "submit_command"):
            value = fields.get(key, [])
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise ValueError(f"field {key!r} is not a list of strings")
        allowed = fields.get("allowed", [])
        if not isinstance(allowed, list) or not all(isinstance(a, dict) for a in allowed):
            raise ValueError("field 'allowed' is not a list of objects")
        if not isinstance(fields.get("extra", {}), dict):
            raise ValueError("field 'extra' is not an object")
        return cls(**fields)

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL

    @property
    def active(self) -> bool:
        """Counts as a submission of its config: queued, running, finished well, or not known to have
        ended (a FAILED or CANCELLED job, or a failed submission, does not block a retry)."""
        return self.status not in (FAILED, CANCELLED)


def default_state_dir() -> Path:
    if os.environ.get("PACKCFG_STATE_DIR"):
        return Path(os.environ["PACKCFG_STATE_DIR"]).expanduser()
    base = os.environ.get("XDG_STATE_HOME") or "~/.local/state"
    return Path(base).expanduser() / "packcfg"


@dataclass(frozen=True)
class CorruptRecord:
    """A file in `jobs/` that is not a readable job record; `message` is one line naming the file."""

    path: Path
    reason: str

    @property
    def message(self) -> str:
        return f"{printable(self.path)}: unreadable job record ({self.reason}); skipped"


def printable(value: object) -> str:
    """`value` as one line of plain text: control characters (a newline in a file name, an escape
    sequence) are shown escaped, never passed to the terminal."""
    text = str(value)
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


class JobStore:
    """The job records of one state directory.

    Concurrency: `lock()` is an exclusive `fcntl.flock` on `<state dir>/jobs/.lock`. `packcfg launch`
    holds it around the duplicate check and the write of the new record, so concurrent launches of one
    config submit once; it is held for milliseconds (never during a submission), so launches of
    different configs do not wait on each other. Records are written atomically (temporary file, fsync,
    rename), so a reader sees the old record or the new one, never half of one.
    """

    LOCK_NAME = ".lock"

    def __init__(self, root: Path | str | None = None) -> None:
        self.root = Path(root).expanduser() if root else default_state_dir()

    @property
    def jobs_dir(self) -> Path:
        return self.root / "jobs"

    def bundle_dir(self, job_id: str) -> Path:
        return self.root / "bundles" / job_id

    def path(self, job_id: str) -> Path:
        if not _JOB_ID.match(job_id):
            raise LaunchError(f"{job_id!r} is not a job id")
        return self.jobs_dir / f"{job_id}.json"

    @contextmanager
    def lock(self, timeout: float = 60.0) -> Iterator[None]:
        """Exclusive lock on the store (blocks up to `timeout` seconds, then a LaunchError)."""
        import fcntl

        lock_path = self.jobs_dir / self.LOCK_NAME
        try:
            self.jobs_dir.mkdir(parents=True, exist_ok=True)
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise LaunchError(f"cannot open the job store lock {lock_path}: {exc.strerror or exc}") from None
        try:
            deadline = time.monotonic() + timeout
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        raise LaunchError(
                            f"the job store {self.jobs_dir} stayed locked for {timeout:.0f} s "
                            "(another packcfg launch?)"
                        ) from None
                    time.sleep(0.01)
            yield
        finally:
            os.close(fd)  # closing the descriptor releases the lock

    def save(self, record: JobRecord) -> None:
        from packcfg.core.atomic import clean_stale_temps

        try:
            clean_stale_temps(self.jobs_dir, self.path(record.id).name)  # a killed writer's leftover
            atomic_write_text(self.path(record.id), json.dumps(record.to_dict(), indent=2) + "\n", 0o600)
        except OSError as exc:
            raise LaunchError(
                f"cannot write the job record in {self.jobs_dir}: {exc.strerror or exc}"
            ) from None

    def load(self, job_id: str, warn: Callable[[str], None] | None = None) -> JobRecord:
        """The record of `job_id` (or of the one job whose id starts with it). A corrupt record of that
        job is a LaunchError naming the file; corrupt records of other jobs go to `warn`."""
        path = self.path(job_id)
        if not path.exists():
            # A unique prefix is enough, like git's short hashes.
            records, corrupt = self.scan()
            for problem in corrupt:
                if problem.path.stem.startswith(job_id):
                    raise LaunchError(problem.message.removesuffix("; skipped"))
                if warn:
                    warn(problem.message)
            matches = [r for r in records if r.id.startswith(job_id)]
            if len(matches) == 1:
                return matches[0]
            if matches:
                raise LaunchError(f"job {job_id!r} is ambiguous: {', '.join(r.id for r in matches)}")
            raise LaunchError(f"no job {job_id!r} in {self.jobs_dir}")
        return self._read(path)

    def _read(self, path: Path) -> JobRecord:
        try:
            text = path.read_text(encoding="utf-8")
            if not text.strip():
                raise ValueError("empty file")
            record = JobRecord.from_dict(json.loads(text))
        except (OSError, ValueError, TypeError, RecursionError) as exc:
            raise LaunchError(f"{printable(path)}: unreadable job record ({_reason(exc)})") from None
        if record.id != path.stem:
            raise LaunchError(f"{printable(path)}: unreadable job record (its id is {record.id!r})")
        return record

    def scan(self) -> tuple[list[JobRecord], list[CorruptRecord]]:
        """Every readable record (oldest first) and every unreadable one: one corrupt record never
        hides the others."""
        if not self.jobs_dir.is_dir():
            return [], []
        records: list[JobRecord] = []
        corrupt: list[CorruptRecord] = []
        for path in sorted(self.jobs_dir.glob("*.json")):
            try:
                records.append(self._read(path))
            except LaunchError as exc:
                reason = str(exc).partition("unreadable job record (")[2].removesuffix(")")
                corrupt.append(CorruptRecord(path, reason or str(exc)))
        return sorted(records, key=lambda r: (r.created_at or "", r.id)), corrupt

    def all(self, warn: Callable[[str], None] | None = None) -> list[JobRecord]:
        records, corrupt = self.scan()
        if warn:
            for problem in corrupt:
                warn(problem.message)
        return records

    def with_hash(self, digest: str) -> list[JobRecord]:
        return [r for r in self.all() if r.config_hash == digest]

    def active_with_hash(self, digest: str) -> list[JobRecord]:
        """Records that count as a submission of this config (see `JobRecord.active`)."""
        return [r for r in self.with_hash(digest) if r.active]


def _reason(exc: BaseException) -> str:
    if isinstance(exc, OSError):
        return exc.strerror or str(exc)
    if isinstance(exc, json.JSONDecodeError):
        return f"not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
    if isinstance(exc, UnicodeDecodeError):
        return "not UTF-8 text"
    if isinstance(exc, RecursionError):
        return "nested too deeply"
    return printable(" ".join(str(exc).split())[:200])
