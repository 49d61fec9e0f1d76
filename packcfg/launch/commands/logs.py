"""`packcfg logs JOB [-f]`: print a job's logs (follow them with -f until the job ends)."""

from __future__ import annotations

import argparse
import sys

from packcfg.launch.commands._shared import EXIT_OK, add_state_argument, guarded, warn

DESCRIPTION = "Print a job's log files; -f follows them until the job finishes."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("job", metavar="JOB", help="a job id (or a unique prefix)")
    parser.add_argument("-f", "--follow", action="store_true", help="keep printing until the job finishes")
    add_state_argument(parser)


def run(args: argparse.Namespace) -> int:
    def body() -> int:
        from packcfg.launch import service
        from packcfg.launch.state import JobStore

        store = JobStore(args.state_dir)
        record = store.load(args.job, warn=warn)
        if args.follow:
            service.follow(store, record)
            return EXIT_OK
        text = service.read_logs(record)
        if text is not None:
            sys.stdout.write(text)
            return EXIT_OK
        paths = service.log_paths(record)
        shown = 0
        for path in paths:
            if not path.is_file():
                continue
            if len(paths) > 1:
                print(f"==> {path} <==")
            sys.stdout.write(path.read_text(encoding="utf-8", errors="replace"))
            shown += 1
        if not shown:
            print(f"packcfg: job {record.id} has no logs yet", file=sys.stderr)
        return EXIT_OK

    return guarded(body)
