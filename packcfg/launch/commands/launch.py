"""`packcfg launch CONFIG`: lint gate, render, submit, record."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from packcfg.core.cli_args import add_out_argument
from packcfg.launch.commands._shared import (
    EXIT_OK,
    EXIT_REFUSED,
    add_config_arguments,
    add_state_argument,
    config_files,
    guarded,
    overrides_of,
    warn,
)

DESCRIPTION = (
    "Lint the experiment (errors refuse the launch unless --allow CODE), render the job bundle, "
    "submit it to the backend and keep a job record. The same config is refused a second time "
    "unless --force."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser)
    parser.add_argument(
        "--dry-run", action="store_true", help="gate and render, print what would run; submit nothing"
    )
    parser.add_argument(
        "--force", action="store_true", help="submit even if this config hash was submitted before"
    )
    parser.add_argument(
        "--executor",
        choices=("slurm", "local"),
        default="slurm",
        help="NeMo-Run executor for --backend nemo-run (default: slurm)",
    )
    add_out_argument(
        parser,
        "--bundle-dir",
        dest="bundle_dir",
        help="the bundle folder (default: one in the state dir)",
    )
    parser.add_argument(
        "--wait", action="store_true", help="wait for the job to finish; exit 1 unless COMPLETED"
    )
    parser.add_argument(
        "--timeout", type=float, metavar="SECONDS", help="with --wait: give up after this long"
    )
    add_state_argument(parser)


def run(args: argparse.Namespace) -> int:
    def body() -> int:
        from packcfg.launch import service

        try:
            with service.forward_signals():
                return _launch(args, service)
        except service.Interrupted as sig:
            print(f"packcfg: {sig}: launch interrupted", file=sys.stderr)
            return 128 + sig.signum

    return guarded(body)


def _launch(args: argparse.Namespace, service) -> int:  # type: ignore[no-untyped-def]
    from packcfg.launch.state import COMPLETED, JobStore

    result = service.launch(
        config_files(args),
        overrides_of(args),
        backend=args.backend,
        executor=args.executor,
        allow=args.allow,
        force=args.force,
        dry_run=args.dry_run,
        state_dir=args.state_dir,
        bundle_dir=Path(args.bundle_dir) if args.bundle_dir else None,
        profile=args.profile,
        warn=warn,
    )
    for code in result.gate.unused_allows:
        print(f"packcfg: --allow {code}: no such lint error in this config (not recorded)", file=sys.stderr)
    for allowed in result.gate.allowed:
        print(
            f"packcfg: allowed {allowed.code} ({len(allowed.messages)} finding(s)) by {allowed.by}",
            file=sys.stderr,
        )
    if result.record is None:
        print(f"dry run: config sha256 {result.bundle.config_hash}; would run:")
        for cmd in result.plan:
            print("  " + " ".join(cmd))
        return EXIT_OK
    record = result.record
    print(
        f"{record.id}: submitted to {record.backend} (native id {record.native_id}); "
        f"bundle {record.bundle_dir}",
        flush=True,
    )
    if not args.wait:
        print(f"follow it with: packcfg logs {record.id} -f")
        return EXIT_OK
    store = JobStore(args.state_dir)
    try:
        record = service.wait(
            store,
            record,
            timeout=args.timeout,
            on_change=lambda r: print(f"{r.id}: {r.status} ({r.native_state})", flush=True),
            progress=sys.stdout,  # the job's log (training steps) as it grows
        )
    except service.Interrupted as sig:
        if record.backend != "local":
            print(
                f"packcfg: {sig}: stopped waiting; job {record.id} keeps running "
                f"(packcfg cancel {record.id} stops it)",
                file=sys.stderr,
            )
            return 128 + sig.signum
        # The local job runs under this launch: the signal goes to its whole process tree (torchrun
        # and every rank), and launch waits until none of it is left.
        with service.signals_ignored():
            service.cancel(store, record)
        print(
            f"packcfg: {sig}: stopped job {record.id} (torchrun and its ranks); {record.status}",
            file=sys.stderr,
        )
        return 128 + sig.signum
    return EXIT_OK if record.status == COMPLETED else EXIT_REFUSED
