"""`packcfg status [JOB]`: job records and their current state."""

from __future__ import annotations

import argparse
import json
import sys

from packcfg.launch.commands._shared import EXIT_OK, add_state_argument, guarded, warn

DESCRIPTION = "Show job records, refreshing the state of unfinished jobs from their backend."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "job", nargs="?", metavar="JOB", help="a job id (or a unique prefix); all jobs when absent"
    )
    parser.add_argument("--json", action="store_true", help="print the record(s) as JSON")
    add_state_argument(parser)


def run(args: argparse.Namespace) -> int:
    def body() -> int:
        from packcfg.launch import LaunchError, service
        from packcfg.launch.state import CLUSTER_MISMATCH, JobStore, printable

        store = JobStore(args.state_dir)
        # A corrupt record: one warning line naming its file, the others still listed (exit 0); the
        # asked-for job itself corrupt is exit 2.
        records = [store.load(args.job, warn=warn)] if args.job else store.all(warn=warn)
        for record in records:
            try:
                service.refresh(store, record)
            except LaunchError as exc:  # one unreachable backend must not hide the other jobs
                if args.job:
                    raise
                print(f"packcfg: {record.id}: state not refreshed ({exc})", file=sys.stderr)
                continue
            if (record.native_state or "").startswith(CLUSTER_MISMATCH):
                # The cluster asked is not the job's (or its job of that id is another job): the
                # record keeps its status.
                print(
                    f"packcfg: {record.id}: {printable(record.native_state)}; kept {record.status}",
                    file=sys.stderr,
                )
        if args.json:
            data = [r.to_dict() for r in records]
            print(json.dumps(data[0] if args.job else data, indent=2))
            return EXIT_OK
        if args.job:
            record = records[0]
            for key in (
                "id",
                "status",
                "native_state",
                "backend",
                "native_id",
                "pack_native_id",
                "cluster",
                "slurm_conf",
                "exit_code",
                "config_hash",
                "bundle_dir",
                "created_at",
                "updated_at",
            ):
                value = getattr(record, key)
                if key in ("cluster", "slurm_conf") and value is None:
                    continue  # not a Slurm job, or a record from before packcfg kept its cluster
                if key == "cluster" and record.cluster_flag:
                    value = f"{value} (-M)"
                print(f"{key:15} {printable(value)}")
            for path in record.log_paths:
                print(f"{'log':15} {printable(path)}")
            for allowed in record.allowed:
                print(
                    f"{'allowed':15} {printable(allowed.get('code'))} by {printable(allowed.get('by'))} "
                    f"at {printable(allowed.get('at'))}"
                )
            return EXIT_OK
        if not records:
            print(f"no jobs in {store.jobs_dir}")
            return EXIT_OK
        print(f"{'JOB':48} {'BACKEND':9} {'NATIVE':10} {'STATUS':10} CREATED")
        for r in records:
            print(
                f"{r.id:48} {printable(r.backend):9} {printable(r.native_id or '-'):10} {r.status:10} "
                f"{printable(r.created_at or '-')}"
            )
        return EXIT_OK

    return guarded(body)
