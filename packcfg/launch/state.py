"""Job records: one JSON file per job in the state directory, written atomically.

The state directory is `--state-dir`, else `$PACKCFG_STATE_DIR`, else `~/.local/state/packcfg`
(`$XDG_STATE_HOME/packcfg` when that is set). Layout: `jobs/<id>.json` (the record) and
`bundles/<id>/` (the bundle that was submitted).
"""

from __future__ import annotations

import json
import os
import re
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
TERMINAL = frozenset({COMPLETED, FAILED, CANCELLED})
_JOB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*\Z")


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

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> JobRecord:
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in data.items() if k in known})

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL


def default_state_dir() -> Path:
    if os.environ.get("PACKCFG_STATE_DIR"):
        return Path(os.environ["PACKCFG_STATE_DIR"]).expanduser()
    base = os.environ.get("XDG_STATE_HOME") or "~/.local/state"
    return Path(base).expanduser() / "packcfg"


class JobStore:
    """The job records of one state directory."""

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

    def save(self, record: JobRecord) -> None:
        try:
            atomic_write_text(self.path(record.id), json.dumps(record.to_dict(), indent=2) + "\n")
        except OSError as exc:
            raise LaunchError(
                f"cannot write the job record in {self.jobs_dir}: {exc.strerror or exc}"
            ) from None

    def load(self, job_id: str) -> JobRecord:
        path = self.path(job_id)
        if not path.is_file():
            # A unique prefix is enough, like git's short hashes.
            matches = [r for r in self.all() if r.id.startswith(job_id)]
            if len(matches) == 1:
                return matches[0]
            if matches:
                raise LaunchError(f"job {job_id!r} is ambiguous: {', '.join(r.id for r in matches)}")
            raise LaunchError(f"no job {job_id!r} in {self.jobs_dir}")
        return self._read(path)

    def _read(self, path: Path) -> JobRecord:
        try:
            return JobRecord.from_dict(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError, TypeError) as exc:
            raise LaunchError(f"{path}: unreadable job record ({exc})") from None

    def all(self) -> list[JobRecord]:
        if not self.jobs_dir.is_dir():
            return []
        records = []
        for path in sorted(self.jobs_dir.glob("*.json")):
            try:
                records.append(self._read(path))
            except LaunchError:
                continue  # one corrupt record must not hide the others
        return sorted(records, key=lambda r: (r.created_at or "", r.id))

    def with_hash(self, digest: str) -> list[JobRecord]:
        return [r for r in self.all() if r.config_hash == digest]
