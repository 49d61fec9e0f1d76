"""What every backend provides to the launch commands."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from packcfg.launch.bundle import JobBundle
from packcfg.launch.state import JobRecord


class Backend(Protocol):
    name: str

    def plan(self, bundle_dir: Path, bundle: JobBundle) -> list[list[str]]:
        """The commands `submit` would run (printed by `--dry-run`)."""
        ...

    def submit(self, bundle_dir: Path, bundle: JobBundle, record: JobRecord) -> None:
        """Start the job; fills `record` (native id, status, log paths, submit command)."""
        ...

    def refresh(self, record: JobRecord) -> None:
        """Update `record.status` (and native state, exit code) from the system."""
        ...

    def cancel(self, record: JobRecord) -> None: ...

    def log_paths(self, record: JobRecord) -> list[Path]:
        """The job's log files (`logs -f` follows them). A backend whose system prints logs itself
        may also define `read_logs(record) -> str`, which `packcfg logs` then prints instead."""
        ...
