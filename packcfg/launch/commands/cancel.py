"""`packcfg cancel JOB`: stop a job (scancel, or SIGTERM to the local process group)."""

from __future__ import annotations

import argparse

from packcfg.launch.commands._shared import EXIT_OK, add_state_argument, guarded, warn

DESCRIPTION = "Cancel a job and mark its record CANCELLED."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("job", metavar="JOB", help="a job id (or a unique prefix)")
    add_state_argument(parser)


def run(args: argparse.Namespace) -> int:
    def body() -> int:
        from packcfg.launch import service
        from packcfg.launch.state import JobStore

        store = JobStore(args.state_dir)
        record = store.load(args.job, warn=warn)
        service.refresh(store, record)
        if record.terminal:
            print(f"{record.id}: already {record.status}")
            return EXIT_OK
        service.cancel(store, record)
        print(f"{record.id}: {record.status}")
        return EXIT_OK

    return guarded(body)
