"""The `slurm` backend: sbatch the bundle (data prep first when needed), read state with
squeue/scontrol, and sacct when the cluster keeps accounting."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

from packcfg.launch import LaunchError
from packcfg.launch.bundle import JobBundle
from packcfg.launch.state import CANCELLED, COMPLETED, FAILED, PENDING, RUNNING, UNKNOWN, JobRecord

_STATES = {
    "PENDING": PENDING,
    "CONFIGURING": PENDING,
    "REQUEUED": PENDING,
    "REQUEUE_HOLD": PENDING,
    "RESV_DEL_HOLD": PENDING,
    "SUSPENDED": RUNNING,
    "RUNNING": RUNNING,
    "COMPLETING": RUNNING,
    "STAGE_OUT": RUNNING,
    "SIGNALING": RUNNING,
    "COMPLETED": COMPLETED,
    "CANCELLED": CANCELLED,
    "FAILED": FAILED,
    "TIMEOUT": FAILED,
    "NODE_FAIL": FAILED,
    "OUT_OF_MEMORY": FAILED,
    "BOOT_FAIL": FAILED,
    "DEADLINE": FAILED,
    "PREEMPTED": FAILED,
    "REVOKED": FAILED,
    "SPECIAL_EXIT": FAILED,
}


def normalise(native: str) -> str:
    # sacct writes e.g. "CANCELLED by 0"; squeue/scontrol write the bare word.
    word = native.split()[0].rstrip("+") if native.strip() else ""
    return _STATES.get(word, UNKNOWN)


def _run(
    cmd: Sequence[str], cwd: Path | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    if shutil.which(cmd[0]) is None:
        raise LaunchError(f"{cmd[0]} not found: Slurm's client commands are not installed here")
    try:
        return subprocess.run(
            list(cmd), cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired:
        raise LaunchError(f"{' '.join(cmd)} did not answer in {timeout:.0f} s") from None


def sbatch(args: Sequence[str], cwd: Path) -> str:
    """Submit; returns the job id (`--parsable` prints `id[;cluster]`)."""
    cmd = ["sbatch", "--parsable", *args]
    out = _run(cmd, cwd=cwd)
    if out.returncode != 0:
        reason = (out.stderr or out.stdout).strip().splitlines()
        raise LaunchError(f"sbatch failed: {reason[-1] if reason else f'exit {out.returncode}'}")
    match = re.match(r"\s*(\d+)", out.stdout)
    if not match:
        raise LaunchError(f"sbatch printed no job id: {out.stdout.strip()!r}")
    return match.group(1)


def job_state(job_id: str) -> tuple[str, int | None]:
    """(native state, exit code or None): squeue while Slurm remembers the job, then sacct
    (accounting), then scontrol; `UNKNOWN` when none knows it."""
    out = _run(["squeue", "-h", "-t", "all", "-j", job_id, "-o", "%T"])
    if out.returncode == 0 and out.stdout.strip():
        state = out.stdout.split()[0]
        if normalise(state) not in (COMPLETED, FAILED, CANCELLED):
            return state, None
    if shutil.which("sacct"):
        out = _run(["sacct", "-n", "-P", "-X", "-j", job_id, "-o", "State,ExitCode"])
        if out.returncode == 0 and out.stdout.strip():
            state, _, code = out.stdout.strip().splitlines()[0].partition("|")
            return state, _exit_code(code)
    out = _run(["scontrol", "show", "job", "-o", job_id])
    if out.returncode == 0:
        state_match = re.search(r"\bJobState=(\S+)", out.stdout)
        code_match = re.search(r"\bExitCode=(\S+)", out.stdout)
        if state_match:
            return state_match.group(1), _exit_code(code_match.group(1) if code_match else "")
    return UNKNOWN, None


def _exit_code(text: str) -> int | None:
    head = text.split(":")[0].strip()
    return int(head) if head.isdigit() else None


def packed_missing(bundle_dir: Path, bundle: JobBundle) -> bool:
    return bundle.packed_data is not None and not (bundle_dir / bundle.packed_data).exists()


class SlurmBackend:
    name = "slurm"

    def plan(self, bundle_dir: Path, bundle: JobBundle) -> list[list[str]]:
        cmds = []
        dep: list[str] = []
        if packed_missing(bundle_dir, bundle):
            cmds.append(["sbatch", "--parsable", "pack.sbatch.sh"])
            dep = ["--dependency=afterok:<pack job id>"]
        cmds.append(["sbatch", "--parsable", *dep, "sbatch.sh"])
        return cmds

    def submit(self, bundle_dir: Path, bundle: JobBundle, record: JobRecord) -> None:
        # sbatch is run from the bundle: it becomes $SLURM_SUBMIT_DIR and the relative log paths' base,
        # and Slurm does not create the logs folder itself.
        (bundle_dir / "logs").mkdir(exist_ok=True)
        args: list[str] = []
        logs: list[str] = []
        commands: list[list[str]] = []
        if packed_missing(bundle_dir, bundle):
            pack_id = sbatch(["pack.sbatch.sh"], bundle_dir)
            record.pack_native_id = pack_id
            args.append(f"--dependency=afterok:{pack_id}")
            logs.append(str(bundle_dir / "logs" / f"pack-{pack_id}.out"))
            commands.append(["sbatch", "--parsable", "pack.sbatch.sh"])
        try:
            job_id = sbatch([*args, "sbatch.sh"], bundle_dir)
        except LaunchError:
            if record.pack_native_id:  # do not leave an orphan data-prep job behind
                _run(["scancel", record.pack_native_id])
            raise
        commands.append(["sbatch", "--parsable", *args, "sbatch.sh"])
        record.native_id = job_id
        record.status = PENDING
        record.native_state = "PENDING"
        record.log_paths = [*logs, str(bundle_dir / "logs" / f"train-{job_id}.out")]
        record.submit_command = [" ".join(c) for c in commands]

    def refresh(self, record: JobRecord) -> None:
        if not record.native_id:
            return
        state, code = job_state(record.native_id)
        if state == UNKNOWN and record.terminal:
            return  # Slurm forgot a finished job (no accounting): keep what we last saw
        record.native_state = state
        record.status = normalise(state)
        if code is not None:
            record.exit_code = code
        if record.status == CANCELLED and record.pack_native_id:
            # --kill-on-invalid-dep cancels the training job when its data prep failed: say so.
            pack_state, _ = job_state(record.pack_native_id)
            if normalise(pack_state) == FAILED:
                record.status = FAILED
                record.native_state = f"{state} (data prep job {record.pack_native_id} {pack_state})"

    def cancel(self, record: JobRecord) -> None:
        ids = [i for i in (record.native_id, record.pack_native_id) if i]
        if ids:
            out = _run(["scancel", *ids])
            if out.returncode != 0:
                raise LaunchError(f"scancel failed: {(out.stderr or out.stdout).strip()}")
        record.status = CANCELLED
        record.native_state = "CANCELLED"

    def log_paths(self, record: JobRecord) -> list[Path]:
        return [Path(p) for p in record.log_paths]
