"""The `slurm` backend: sbatch the bundle (data prep first when needed), read state with
squeue/scontrol, and sacct when the cluster keeps accounting."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from packcfg.launch import LaunchError
from packcfg.launch.bundle import JobBundle
from packcfg.launch.state import (
    CANCELLED,
    CLUSTER_MISMATCH,
    COMPLETED,
    FAILED,
    PENDING,
    RUNNING,
    UNKNOWN,
    JobRecord,
)

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
    cmd: Sequence[str],
    cwd: Path | None = None,
    timeout: float = 60,
    env: Mapping[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    if shutil.which(cmd[0]) is None:
        raise LaunchError(f"{cmd[0]} not found: Slurm's client commands are not installed here")
    try:
        return subprocess.run(
            list(cmd),
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            env=dict(env) if env is not None else None,
        )
    except subprocess.TimeoutExpired:
        raise LaunchError(f"{' '.join(cmd)} did not answer in {timeout:.0f} s") from None


def _last_line(out: subprocess.CompletedProcess[str]) -> str:
    lines = (out.stderr or out.stdout or "").strip().splitlines()
    return lines[-1].strip() if lines else f"exit {out.returncode}"


# --- which cluster ------------------------------------------------------------------------------


# Slurm's SubmitTime must lie this close to the time packcfg ran sbatch (clock skew between this host
# and the controller); a job of the same id submitted at another time is another job.
SUBMIT_SKEW_S = 600


@dataclass(frozen=True)
class Cluster:
    """The cluster a record's Slurm commands ask: SLURM_CONF set to the recorded file, and `-M NAME`
    when the job was submitted with it. The empty target (a record written before packcfg kept the
    cluster) asks whatever cluster the current environment names, as before."""

    name: str | None = None
    conf: str | None = None
    flag: bool = False

    @classmethod
    def of(cls, record: JobRecord) -> Cluster:
        return cls(record.cluster, record.slurm_conf, record.cluster_flag)

    def env(self) -> dict[str, str] | None:
        if not self.conf:
            return None
        return {**os.environ, "SLURM_CONF": self.conf}

    def args(self) -> list[str]:
        return ["-M", self.name] if self.flag and self.name else []

    def run(self, tool: str, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        env = self.env()
        if env is None:
            return _run([tool, *self.args(), *args], cwd=cwd)
        return _run([tool, *self.args(), *args], cwd=cwd, env=env)

    def where(self) -> str:
        conf = f"SLURM_CONF={self.conf}" if self.conf else "the SLURM_CONF of this environment"
        return f"cluster {self.name or '?'} ({conf}{', -M' if self.flag else ''})"


def cluster_config(target: Cluster = Cluster()) -> tuple[str | None, str | None]:
    """(ClusterName, SLURM_CONF) as the controller `target` reaches reports them (`scontrol show
    config`); LaunchError when it does not answer."""
    out = target.run("scontrol", "show", "config")
    if out.returncode != 0:
        raise LaunchError(f"scontrol show config: {_last_line(out)}")
    name = re.search(r"^ClusterName\s*=\s*(\S+)", out.stdout, re.MULTILINE)
    conf = re.search(r"^SLURM_CONF\s*=\s*(\S.*?)\s*$", out.stdout, re.MULTILINE)
    return (name.group(1) if name else None, conf.group(1) if conf else None)


def cluster_mismatch(target: Cluster) -> str | None:
    """Why the cluster `target` reaches is not the one the job went to (None: it is, or the record does
    not say). `-M NAME` is answered by that cluster itself; otherwise the controller the recorded
    SLURM_CONF reaches is asked its ClusterName. LaunchError when it does not answer."""
    if not target.name or target.flag:
        return None
    try:
        name, _ = cluster_config(target)
    except LaunchError as exc:
        raise LaunchError(f"{target.where()} does not answer ({exc})") from None
    if name and name != target.name:
        return f"{target.conf or 'SLURM_CONF'} now reaches cluster {name}; the job went to {target.name}"
    return None


def submission_cluster() -> Cluster:
    """The cluster an sbatch from this environment goes to (recorded before submitting): its name and
    the SLURM_CONF in force (the variable, made absolute, else the file scontrol reports)."""
    from_env = os.environ.get("SLURM_CONF")
    try:
        name, conf = cluster_config()
    except LaunchError:
        name, conf = None, None  # sbatch will say what is wrong
    if from_env:
        conf = os.path.abspath(os.path.expanduser(from_env))
    return Cluster(name, conf)


# --- what Slurm says about a job ----------------------------------------------------------------


@dataclass(frozen=True)
class JobAnswer:
    """One job as squeue, sacct or scontrol describes it (fields None where the tool did not say)."""

    state: str
    exit_code: int | None = None
    name: str | None = None
    work_dir: str | None = None
    submit: str | None = None  # SubmitTime as Slurm prints it (local time, no zone)
    cluster: str | None = None
    source: str = ""


def job_answer(job_id: str, target: Cluster = Cluster()) -> JobAnswer:
    """What the cluster `target` says about `job_id`: squeue while Slurm remembers the job, then sacct
    (accounting), then scontrol; state `UNKNOWN` when none knows it. LaunchError when the controller
    does not answer (a non-answer is never read as "the job is gone")."""
    out = target.run("squeue", "-h", "-t", "all", "-j", job_id, "-o", "%T|%j|%V|%Z")
    lines = [x for x in out.stdout.splitlines() if x.strip() and not x.startswith("CLUSTER:")]
    if out.returncode == 0 and lines:  # (-M prints a `CLUSTER: name` heading on some versions)
        state, name, submit, work_dir = _fields(lines[0], 4)
        if state and normalise(state) not in (COMPLETED, FAILED, CANCELLED):
            return JobAnswer(state, None, name, work_dir, submit, source="squeue")
    elif out.returncode != 0 and "invalid job id" not in (out.stderr + out.stdout).lower():
        raise LaunchError(f"squeue -j {job_id} on {target.where()}: {_last_line(out)}")
    if shutil.which("sacct"):
        out = target.run(
            "sacct", "-n", "-P", "-X", "-j", job_id, "-o", "State,ExitCode,JobName,Submit,Cluster,WorkDir"
        )
        if out.returncode == 0 and out.stdout.strip():
            line = out.stdout.strip().splitlines()[0]
            state, code, name, submit, cluster, work_dir = _fields(line, 6)
            return JobAnswer(state, _exit_code(code or ""), name, work_dir, submit, cluster, "sacct")
    out = target.run("scontrol", "show", "job", "-o", job_id)
    if out.returncode == 0:
        text = out.stdout

        def field_of(key: str) -> str | None:
            match = re.search(rf"(?:^|\s){key}=(.*?)(?=\s+[A-Za-z:/]+=|\s*$)", text)
            return match.group(1) if match and match.group(1) not in ("", "(null)") else None

        state = field_of("JobState")
        if state:
            code = field_of("ExitCode")
            return JobAnswer(
                state,
                _exit_code(code or ""),
                field_of("JobName"),
                field_of("WorkDir"),
                field_of("SubmitTime"),
                source="scontrol",
            )
    return JobAnswer(UNKNOWN)


def _fields(line: str, n: int) -> list[str | None]:
    """`n` `|`-separated fields, the last taking any `|` left (a work dir may hold one); missing
    ones None."""
    parts: list[str | None] = list(line.split("|", n - 1))
    parts += [None] * (n - len(parts))
    return [p if p not in ("", None) else None for p in parts]


def job_state(job_id: str, target: Cluster = Cluster()) -> tuple[str, int | None]:
    """(native state, exit code or None) of `job_id` (see `job_answer`)."""
    answer = job_answer(job_id, target)
    return answer.state, answer.exit_code


def _epoch(text: str) -> float | None:
    """A time as Slurm prints it (local, no zone) or as packcfg records it (UTC, `Z`), in seconds."""
    from datetime import datetime

    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return when.timestamp()  # a naive time is taken as local time, as Slurm's clients print it


def _same_dir(a: str, b: str) -> bool:
    if os.path.normpath(a) == os.path.normpath(b):
        return True
    return os.path.realpath(a) == os.path.realpath(b)


def answer_mismatch(
    record: JobRecord, answer: JobAnswer, job_id: str, name: str | None, target: Cluster
) -> str | None:
    """Why `answer` is not about the job this record submitted (None: nothing says so): another
    cluster, another job name, another working directory (every packcfg job runs in its bundle), or a
    submit time far from the sbatch (a reused job id)."""
    if answer.state == UNKNOWN:
        return None
    if answer.cluster and target.name and answer.cluster != target.name:
        return f"job {job_id} was answered by cluster {answer.cluster}; the job went to {target.name}"
    if name and answer.name and answer.name != name:
        return f"job {job_id} there is named {answer.name!r}, not {name!r}"
    if answer.work_dir and record.bundle_dir and not _same_dir(answer.work_dir, record.bundle_dir):
        return f"job {job_id} there runs in {answer.work_dir}, not in the bundle {record.bundle_dir}"
    if answer.submit and record.submitted_at:
        seen, sent = _epoch(answer.submit), _epoch(record.submitted_at)
        if seen is not None and sent is not None and abs(seen - sent) > SUBMIT_SKEW_S:
            return f"job {job_id} there was submitted at {answer.submit}, packcfg's at {record.submitted_at}"
    return None


def _exit_code(text: str) -> int | None:
    head = text.split(":")[0].strip()
    return int(head) if head.isdigit() else None


def sbatch(args: Sequence[str], cwd: Path) -> tuple[str, str | None]:
    """Submit; returns the job id and, when sbatch was sent to a named cluster (`-M`, SBATCH_CLUSTERS),
    that cluster (`--parsable` prints `id[;cluster]`)."""
    cmd = ["sbatch", "--parsable", *args]
    out = _run(cmd, cwd=cwd)
    if out.returncode != 0:
        raise LaunchError(f"sbatch failed: {_last_line(out)}")
    match = re.match(r"\s*(\d+)(?:;(\S+))?", out.stdout)
    if not match:
        raise LaunchError(f"sbatch printed no job id: {out.stdout.strip()!r}")
    return match.group(1), match.group(2)


def packed_missing(bundle_dir: Path, bundle: JobBundle) -> bool:
    return bundle.packed_data is not None and not (bundle_dir / bundle.packed_data).exists()


def _job_names(record: JobRecord) -> dict[str, str | None]:
    """The Slurm job name each of the record's jobs was submitted under (`#SBATCH --job-name`)."""
    names: dict[str, str | None] = {}
    if record.native_id:
        names[record.native_id] = record.recipe
    if record.pack_native_id:
        names[record.pack_native_id] = f"{record.recipe}-pack" if record.recipe else None
    return names


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
        from packcfg.launch.bundle import now_utc

        # sbatch is run from the bundle: it becomes $SLURM_SUBMIT_DIR and the relative log paths' base,
        # and Slurm does not create the logs folder itself.
        (bundle_dir / "logs").mkdir(exist_ok=True)
        # The cluster the job goes to, recorded before submitting: status, logs and cancel ask it.
        target = submission_cluster()
        record.cluster, record.slurm_conf, record.cluster_flag = target.name, target.conf, False
        record.submitted_at = now_utc()
        args: list[str] = []
        logs: list[str] = []
        commands: list[list[str]] = []
        if packed_missing(bundle_dir, bundle):
            pack_id, named = sbatch(["pack.sbatch.sh"], bundle_dir)
            self._sent_to(record, named)
            record.pack_native_id = pack_id
            args.append(f"--dependency=afterok:{pack_id}")
            logs.append(str(bundle_dir / "logs" / f"pack-{pack_id}.out"))
            commands.append(["sbatch", "--parsable", "pack.sbatch.sh"])
        try:
            job_id, named = sbatch([*args, "sbatch.sh"], bundle_dir)
        except LaunchError:
            if record.pack_native_id:  # do not leave an orphan data-prep job behind
                Cluster.of(record).run("scancel", record.pack_native_id)
            raise
        self._sent_to(record, named)
        commands.append(["sbatch", "--parsable", *args, "sbatch.sh"])
        record.native_id = job_id
        record.status = PENDING
        record.native_state = "PENDING"
        record.log_paths = [*logs, str(bundle_dir / "logs" / f"train-{job_id}.out")]
        record.submit_command = [" ".join(c) for c in commands]

    @staticmethod
    def _sent_to(record: JobRecord, named: str | None) -> None:
        """sbatch named the cluster it submitted to (`-M`, SBATCH_CLUSTERS): every later command for
        the job passes `-M` that cluster."""
        if named:
            record.cluster, record.cluster_flag = named, True

    def _mismatch(self, record: JobRecord, target: Cluster) -> tuple[str | None, dict[str, JobAnswer]]:
        """Why the answers `target` gives are not about this record's jobs (None: they are), with the
        answers (training job, data-prep job) when they were asked."""
        problem = cluster_mismatch(target)
        answers: dict[str, JobAnswer] = {}
        if problem:
            return problem, answers
        for job_id, name in _job_names(record).items():
            answers[job_id] = answer = job_answer(job_id, target)
            problem = answer_mismatch(record, answer, job_id, name, target)
            if problem:
                return problem, answers
        return None, answers

    def refresh(self, record: JobRecord) -> None:
        if not record.native_id:
            return
        target = Cluster.of(record)
        problem, answers = self._mismatch(record, target)
        if problem:
            # Another cluster's job of the same id (or the id reused): its state is not this job's.
            # The record keeps its status; `status` shows why it was not refreshed.
            record.native_state = f"{CLUSTER_MISMATCH} ({problem})"
            return
        answer = answers[record.native_id]
        state, code = answer.state, answer.exit_code
        if state == UNKNOWN and record.terminal:
            return  # Slurm forgot a finished job (no accounting): keep what we last saw
        record.native_state = state
        record.status = normalise(state)
        if code is not None:
            record.exit_code = code
        if record.status == CANCELLED and record.pack_native_id:
            # --kill-on-invalid-dep cancels the training job when its data prep failed: say so.
            pack_state = answers[record.pack_native_id].state
            if normalise(pack_state) == FAILED:
                record.status = FAILED
                record.native_state = f"{state} (data prep job {record.pack_native_id} {pack_state})"

    def cancel(self, record: JobRecord) -> None:
        ids = [i for i in (record.native_id, record.pack_native_id) if i]
        if ids:
            target = Cluster.of(record)
            problem, _ = self._mismatch(record, target)
            if problem:
                # scancel there would stop another cluster's job of the same id.
                raise LaunchError(f"job {record.id} not cancelled: {CLUSTER_MISMATCH} ({problem})")
            out = target.run("scancel", *ids)
            if out.returncode != 0:
                raise LaunchError(f"scancel failed: {(out.stderr or out.stdout).strip()}")
        record.status = CANCELLED
        record.native_state = "CANCELLED"

    def log_paths(self, record: JobRecord) -> list[Path]:
        return [Path(p) for p in record.log_paths]
