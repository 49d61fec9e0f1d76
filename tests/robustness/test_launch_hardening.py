"""Launch hardening (issue 22, items 5-7), against the real Slurm where it matters.

5. A job record keeps the cluster its job went to; status, logs and cancel ask that cluster, and a record
   never moves on another cluster's answer (a second real slurmctld, with a job of the same id, is the
   other cluster).
6. Every rendered job script checks its Python environment first: one line naming each missing module
   and the install command; `launch --backend local` refuses up front when this install cannot run it.
7. The gate and lint locate every value where it was set: the file, a -c file, an override on the
   command line, a base recipe; only a value nobody set is a default.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from packcfg.launch import LaunchError, service
from packcfg.launch.backends.slurm import SlurmBackend
from packcfg.launch.bundle import now_utc
from packcfg.launch.state import JobRecord, JobStore

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "recipes" / "tiny_cpu_sft.yaml"


def packcfg(
    *args: str, env: dict[str, str] | None = None, timeout: float = 180
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "packcfg", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=timeout,
        cwd=ROOT,
    )


# --- 5. the cluster a job went to ------------------------------------------------------------------


def _slurm_problem() -> str | None:
    from launch.conftest import slurm_problem  # tests/launch/conftest.py: sinfo + scontrol ping

    return slurm_problem()


def _require(problem: str | None, what: str) -> None:
    from launch.conftest import require

    require(problem, what)


@pytest.fixture
def slurm() -> None:
    _require(_slurm_problem(), "Slurm")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class OtherCluster:
    """A second real Slurm controller on this machine (cluster `pcother`, own ports and state), whose
    first job gets a chosen id: the same id as a job of the test cluster, as after an id reset or on
    another cluster of a site. Its one node never comes up, so its jobs stay queued until cancelled."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.conf = root / "slurm.conf"
        self.pid_file = root / "slurmctld.pid"

    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def start(self, first_job_id: int) -> None:
        (self.root / "state").mkdir(parents=True, exist_ok=True)
        self.conf.write_text(
            f"""ClusterName=pcother
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort={_free_port()}
SlurmdPort={_free_port()}
SlurmUser=root
AuthType=auth/munge
StateSaveLocation={self.root}/state
SlurmdSpoolDir={self.root}/spool
SlurmctldPidFile={self.pid_file}
SlurmctldLogFile={self.root}/slurmctld.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SwitchType=switch/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=100
MinJobAge=600
MessageTimeout=5
FirstJobId={first_job_id}
NodeName=ghostnode NodeAddr=127.0.0.1 CPUs=2 RealMemory=1000 State=UNKNOWN
PartitionName=debug Nodes=ghostnode Default=YES MaxTime=INFINITE State=UP
"""
        )
        subprocess.run(["/usr/sbin/slurmctld", "-i"], env=self.env(), check=True, timeout=30)
        for _ in range(100):
            ping = subprocess.run(["scontrol", "ping"], env=self.env(), capture_output=True, text=True)
            if "UP" in ping.stdout:
                return
            time.sleep(0.1)
        raise AssertionError(f"the second slurmctld did not come up: {ping.stdout} {ping.stderr}")

    def sbatch(self, script: Path) -> str:
        out = subprocess.run(
            ["sbatch", "--parsable", script.name],
            cwd=script.parent,
            env=self.env(),
            capture_output=True,
            text=True,
            check=True,
        )
        return out.stdout.strip()

    def stop(self) -> None:
        try:
            pid = int(self.pid_file.read_text())
        except (OSError, ValueError):
            return
        try:
            os.kill(pid, 15)
        except ProcessLookupError:
            return
        for _ in range(50):
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.1)


@pytest.fixture
def other_cluster(tmp_path: Path, slurm: None) -> Iterator[OtherCluster]:
    problem = None
    if os.geteuid() != 0:
        problem = "a second slurmctld needs root"
    elif not Path("/usr/sbin/slurmctld").is_file():
        problem = "slurmctld is not installed (.ci/slurm-up.sh installs it)"
    _require(problem, "a second Slurm controller")
    cluster = OtherCluster(tmp_path / "pcother")
    try:
        yield cluster
    finally:
        cluster.stop()


def probe_script(folder: Path, name: str, seconds: int = 600) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "logs").mkdir(exist_ok=True)
    script = folder / "sbatch.sh"
    script.write_text(
        f"#!/bin/bash\n#SBATCH --job-name={name}\n#SBATCH --output=logs/train-%j.out\n"
        f"#SBATCH --time=15\nsleep {seconds}\n"
    )
    return script


def submit_probe(tmp_path: Path, name: str, env: dict[str, str] | None = None) -> tuple[JobStore, JobRecord]:
    """A real sbatch job through the Slurm backend (a sleeping script in place of a bundle's sbatch.sh),
    recorded as `packcfg launch` records it."""
    bundle = tmp_path / f"bundle-{name}"
    probe_script(bundle, name)
    store = JobStore(tmp_path / "state")
    record = JobRecord(
        id=f"{name}-20261126T000000-0000",
        backend="slurm",
        config_hash="0" * 64,
        bundle_dir=str(bundle.resolve()),
        recipe=name,
        created_at=now_utc(),
    )
    saved = dict(os.environ)
    try:
        os.environ.update(env or {})
        SlurmBackend().submit(bundle.resolve(), SimpleNamespace(packed_data=None), record)  # type: ignore[arg-type]
    finally:
        os.environ.clear()
        os.environ.update(saved)
    store.save(record)
    return store, record


def squeue_state(job_id: str, env: dict[str, str] | None = None, settle: bool = False) -> str:
    """The job's state as squeue shows it; with `settle`, once it is past COMPLETING (up to 30 s)."""
    for _ in range(300):
        out = subprocess.run(
            ["squeue", "-h", "-t", "all", "-j", job_id, "-o", "%T"], capture_output=True, text=True, env=env
        )
        state = out.stdout.strip()
        if not settle or state != "COMPLETING":
            return state
        time.sleep(0.1)
    return state


def status_json(store: JobStore, job: str, env: dict[str, str] | None = None) -> tuple[dict, str]:
    out = packcfg("status", job, "--json", "--state-dir", str(store.root), env=env)
    assert out.returncode == 0, out.stderr
    assert "Traceback" not in out.stderr
    return json.loads(out.stdout), out.stderr


def test_record_keeps_the_cluster_and_never_moves_on_another_clusters_answer(
    tmp_path: Path, other_cluster: OtherCluster
) -> None:
    store, record = submit_probe(tmp_path, "pcprobe")
    job_id = record.native_id
    assert job_id and job_id.isdigit()
    try:
        # The record names the cluster and the SLURM_CONF in force at submission.
        assert record.cluster == "packcfg" and record.slurm_conf and Path(record.slurm_conf).is_file()
        assert record.cluster_flag is False and record.submitted_at
        # The other cluster: its own job of the same id, in another folder, cancelled (a final state).
        other_cluster.start(int(job_id))
        theirs = other_cluster.sbatch(probe_script(tmp_path / "elsewhere", "pcprobe"))
        assert theirs == job_id
        subprocess.run(["scancel", theirs], env=other_cluster.env(), check=True)
        assert squeue_state(theirs, other_cluster.env(), settle=True) == "CANCELLED"
        assert squeue_state(job_id) in ("PENDING", "RUNNING")  # ours, on the test cluster

        # A shell whose SLURM_CONF names the other cluster: status asks the record's cluster.
        data, err = status_json(store, record.id, other_cluster.env())
        assert data["status"] in ("PENDING", "RUNNING"), (data, err)
        assert data["cluster"] == "packcfg"

        # An old record (no cluster kept) asks the cluster of the environment, as before; the answer is
        # about another job of that id (another work dir): not taken.
        old = json.loads(store.path(record.id).read_text())
        for key in ("cluster", "slurm_conf", "cluster_flag", "submitted_at"):
            old.pop(key)
        old["status"], old["native_state"] = "RUNNING", "RUNNING"
        store.path(record.id).write_text(json.dumps(old))
        data, err = status_json(store, record.id, other_cluster.env())
        assert data["status"] == "RUNNING", (data, err)
        assert data["native_state"].startswith("unknown: cluster mismatch (job ")
        assert "runs in" in data["native_state"] and str(tmp_path / "elsewhere") in data["native_state"]
        assert err.count("\n") == 1 and "unknown: cluster mismatch" in err and "kept RUNNING" in err
        # Without -json the one line is on stderr as well; the record is unchanged by it.
        out = packcfg("status", "--state-dir", str(store.root), env=other_cluster.env())
        assert out.returncode == 0 and "RUNNING" in out.stdout and "unknown: cluster mismatch" in out.stderr

        # The recorded SLURM_CONF now reaches another cluster: never asked about the job, state kept.
        rec = store.load(record.id).to_dict()
        rec.update(cluster="packcfg", slurm_conf=str(other_cluster.conf), status="RUNNING")
        store.path(record.id).write_text(json.dumps(rec))
        data, err = status_json(store, record.id)
        assert data["status"] == "RUNNING"
        assert data["native_state"] == (
            f"unknown: cluster mismatch ({other_cluster.conf} now reaches cluster pcother; "
            "the job went to packcfg)"
        )
        # cancel refuses rather than scancel another cluster's job of the same id; logs -f stops.
        out = packcfg("cancel", record.id, "--state-dir", str(store.root))
        assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
        assert "not cancelled: unknown: cluster mismatch" in out.stderr
        out = packcfg("logs", record.id, "-f", "--state-dir", str(store.root), timeout=60)
        assert (
            out.returncode == 2
            and "unknown: cluster mismatch" in out.stderr
            and "Traceback" not in out.stderr
        )
        assert squeue_state(job_id) in ("PENDING", "RUNNING")  # nothing was cancelled

        # The record's own cluster again: status and cancel ask it, from any shell.
        rec.update(slurm_conf=record.slurm_conf)
        store.path(record.id).write_text(json.dumps(rec))
        out = packcfg("cancel", record.id, "--state-dir", str(store.root), env=other_cluster.env())
        assert out.returncode == 0 and out.stdout.strip().endswith("CANCELLED"), out.stderr
        assert squeue_state(job_id, settle=True) == "CANCELLED"
    finally:
        subprocess.run(["scancel", job_id], capture_output=True)


def test_a_reused_job_id_on_the_same_cluster_is_not_the_recorded_job(tmp_path: Path, slurm: None) -> None:
    """Same cluster, same id, same name and folder, but submitted long before or after packcfg's sbatch
    (a reset id counter): another job."""
    store, record = submit_probe(tmp_path, "pcreuse")
    try:
        rec = store.load(record.id).to_dict()
        rec["submitted_at"] = "2020-01-01T00:00:00Z"
        store.path(record.id).write_text(json.dumps(rec))
        data, err = status_json(store, record.id)
        assert data["status"] == "PENDING" and data["native_state"].startswith("unknown: cluster mismatch")
        assert "submitted at" in data["native_state"], data
        out = packcfg("cancel", record.id, "--state-dir", str(store.root))
        assert out.returncode == 2 and squeue_state(record.native_id) in ("PENDING", "RUNNING")
    finally:
        subprocess.run(["scancel", record.native_id], capture_output=True)


def test_sbatch_sent_with_clusters_is_asked_with_minus_m(tmp_path: Path, slurm: None) -> None:
    """SBATCH_CLUSTERS (sbatch -M) routes through accounting: sbatch prints `id;cluster`, and every
    later command for the job passes -M that cluster."""
    if (
        shutil.which("sacctmgr") is None
        or "packcfg"
        not in subprocess.run(
            ["sacctmgr", "-n", "-P", "list", "cluster", "format=cluster"], capture_output=True, text=True
        ).stdout.split()
    ):
        _require("no accounting (slurmdbd) for -M", "Slurm accounting")
    store, record = submit_probe(tmp_path, "pcflag", env={"SBATCH_CLUSTERS": "packcfg"})
    try:
        assert (record.cluster, record.cluster_flag) == ("packcfg", True)
        out = packcfg("status", record.id, "--state-dir", str(store.root))
        assert out.returncode == 0 and "cluster         packcfg (-M)" in out.stdout, out.stdout + out.stderr
        assert "mismatch" not in out.stdout + out.stderr
        out = packcfg("cancel", record.id, "--state-dir", str(store.root))
        assert out.returncode == 0 and squeue_state(record.native_id, settle=True) == "CANCELLED"
    finally:
        subprocess.run(["scancel", record.native_id], capture_output=True)


def test_unreachable_cluster_keeps_the_state(tmp_path: Path, slurm: None) -> None:
    """The recorded SLURM_CONF reaches no controller: one line, state not refreshed, record unchanged."""
    store, record = submit_probe(tmp_path, "pcgone")
    try:
        dead = tmp_path / "dead.conf"
        text = Path(record.slurm_conf).read_text()
        port = _free_port()
        dead.write_text(text + f"SlurmctldPort={port}\nMessageTimeout=1\n")
        rec = store.load(record.id).to_dict()
        rec.update(slurm_conf=str(dead), status="RUNNING")
        store.path(record.id).write_text(json.dumps(rec))
        before = store.path(record.id).read_text()
        out = packcfg("status", "--state-dir", str(store.root), timeout=120)
        assert out.returncode == 0 and "RUNNING" in out.stdout
        assert (
            f"{record.id}: state not refreshed (cluster packcfg (SLURM_CONF={dead}) does not answer"
            in out.stderr
        )
        assert store.path(record.id).read_text() == before
    finally:
        subprocess.run(["scancel", record.native_id], capture_output=True)


def test_old_records_without_a_cluster_still_load_and_bad_cluster_fields_are_one_line(tmp_path: Path) -> None:
    store = JobStore(tmp_path)
    store.jobs_dir.mkdir(parents=True)
    old = {"id": "old-1", "backend": "slurm", "config_hash": "ab", "bundle_dir": "/x", "status": "COMPLETED"}
    store.path("old-1").write_text(json.dumps(old))
    record = store.load("old-1")
    assert (record.cluster, record.slurm_conf, record.cluster_flag) == (None, None, False)
    bad = {**old, "id": "bad-1", "cluster_flag": "yes"}
    store.path("bad-1").write_text(json.dumps(bad))
    out = packcfg("status", "--state-dir", str(tmp_path))
    assert out.returncode == 0 and "old-1" in out.stdout
    assert (
        "bad-1.json: unreadable job record (field 'cluster_flag' is not true or false); skipped" in out.stderr
    )
    out = packcfg("status", "old-1", "--state-dir", str(tmp_path))
    assert "cluster" not in out.stdout  # a record from before packcfg kept it: nothing invented
    # What reaches Slurm's commands from a record is checked when it is read: never a traceback.
    for key, value, why in (
        ("cluster", "-x evil", "is not a Slurm cluster name"),
        ("slurm_conf", "relative.conf", "is not an absolute file path"),
        ("slurm_conf", "/etc/slurm/slurm.conf\u0000x", "is not an absolute file path"),
    ):
        store.path("bad-1").write_text(json.dumps({**old, "id": "bad-1", key: value}))
        out = packcfg("status", "bad-1", "--state-dir", str(tmp_path))
        assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
        assert only_line(out.stderr).startswith(f"packcfg: {store.path('bad-1')}: unreadable job record (")
        assert why in out.stderr


def test_answers_are_parsed_whatever_the_work_dir_holds(monkeypatch) -> None:
    """Work dirs with spaces (scontrol's one-line format) or `|` (squeue/sacct's separator) are read whole,
    so a job in such a bundle is recognised as itself, and another folder is still another job."""
    from packcfg.launch.backends import slurm as backend

    odd = "/data/my bundle|x"
    answers = {
        "squeue": subprocess.CompletedProcess([], 0, f"RUNNING|exp|2026-11-26T05:00:00|{odd}\n", ""),
        "scontrol": subprocess.CompletedProcess(
            [],
            0,
            f"JobId=5 JobName=exp JobState=TIMEOUT SubmitTime=2026-11-26T05:00:00 WorkDir={odd} StdErr=x\n",
            "",
        ),
        "sacct": subprocess.CompletedProcess([], 1, "", "no accounting"),
    }
    monkeypatch.setattr(backend, "_run", lambda cmd, cwd=None, timeout=60, env=None: answers[cmd[0]])
    answer = backend.job_answer("5")
    assert (answer.state, answer.name, answer.work_dir) == ("RUNNING", "exp", odd)
    answers["squeue"] = subprocess.CompletedProcess([], 0, "", "")
    answer = backend.job_answer("5")
    assert (answer.state, answer.name, answer.work_dir, answer.source) == ("TIMEOUT", "exp", odd, "scontrol")
    record = JobRecord(id="j", backend="slurm", config_hash="0", bundle_dir=odd, recipe="exp", native_id="5")
    target = backend.Cluster()
    assert backend.answer_mismatch(record, answer, "5", "exp", target) is None
    record.bundle_dir = "/data/my bundle"
    assert "runs in /data/my bundle|x" in backend.answer_mismatch(record, answer, "5", "exp", target)
    # the data-prep job is `<job name>-pack`
    assert backend._job_names(
        JobRecord(
            id="j",
            backend="slurm",
            config_hash="0",
            bundle_dir="/b",
            recipe="exp",
            native_id="5",
            pack_native_id="4",
        )
    ) == {"5": "exp", "4": "exp-pack"}


def test_a_controller_that_does_not_answer_is_never_read_as_the_job_gone(monkeypatch) -> None:
    from packcfg.launch.backends import slurm as backend

    down = subprocess.CompletedProcess(
        [], 1, "", "slurm_load_jobs error: Unable to contact slurm controller\n"
    )
    monkeypatch.setattr(backend, "_run", lambda cmd, cwd=None, timeout=60, env=None: down)
    record = JobRecord(
        id="j", backend="slurm", config_hash="0", bundle_dir="/b", native_id="5", status="RUNNING"
    )
    with pytest.raises(
        LaunchError, match="^squeue -j 5 on cluster [?] .*Unable to contact slurm controller$"
    ):
        SlurmBackend().refresh(record)
    assert record.status == "RUNNING"


# --- 6. the job's Python is checked first ---------------------------------------------------------


def hide_modules(tmp_path: Path, *modules: str) -> dict[str, str]:
    """An environment whose Python cannot import `modules` (a sitecustomize that blocks them, as if they
    were not installed); the job script puts its own lib/ before this PYTHONPATH."""
    folder = tmp_path / "hide"
    folder.mkdir(exist_ok=True)
    (folder / "sitecustomize.py").write_text(
        "import sys\n" + "".join(f"sys.modules[{m!r}] = None\n" for m in modules)
    )
    return {"PYTHONPATH": str(folder)}


def only_line(text: str) -> str:
    lines = text.strip().splitlines()
    assert len(lines) == 1, text
    return lines[0]


def test_torchrun_script_without_numpy_fails_with_one_line(tmp_path: Path) -> None:
    """Old: a 35-line traceback from the data prep. Now the script's first step names what is missing."""
    directory, bundle, _ = service.render([TINY], tmp_path / "b")
    env = {**os.environ, **hide_modules(tmp_path, "numpy")}
    proc = subprocess.run(
        ["bash", str(directory / "torchrun.sh")], capture_output=True, text=True, env=env, timeout=120
    )
    assert proc.returncode == 2
    line = only_line(proc.stdout + proc.stderr)
    assert line.startswith("packcfg: this job's Python (") and line.endswith(
        " lacks numpy: pip install 'packcfg[train]'"
    ), line
    assert not (directory / bundle.packed_data).exists() and not (directory / "output").exists()


def test_every_missing_module_is_named_with_its_install_command(tmp_path: Path) -> None:
    config = yaml.safe_load(TINY.read_text())
    config["logger"]["tensorboard_dir"] = "tb"
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    directory, _, _ = service.render([path], tmp_path / "b")
    env = {**os.environ, **hide_modules(tmp_path, "numpy", "torch", "tensorboard")}
    proc = subprocess.run(
        ["bash", str(directory / "torchrun.sh")], capture_output=True, text=True, env=env, timeout=120
    )
    assert proc.returncode == 2
    line = only_line(proc.stdout + proc.stderr)
    assert line.endswith(
        "lacks numpy, torch (pip install 'packcfg[train]'); tensorboard (pip install 'packcfg[tensorboard]')"
    ), line


def test_sbatch_job_without_numpy_fails_with_one_line(tmp_path: Path, slurm: None) -> None:
    """A real Slurm job of a rendered bundle, in an environment without numpy: its log is one line."""
    directory, _, _ = service.render([TINY], tmp_path / "b", backend="slurm")
    env = {**os.environ, **hide_modules(tmp_path, "numpy")}
    out = subprocess.run(
        ["sbatch", "--parsable", "sbatch.sh"],
        cwd=directory,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    job_id = out.stdout.strip().split(";")[0]
    try:
        for _ in range(600):
            if squeue_state(job_id) in ("FAILED", "COMPLETED", "CANCELLED", ""):
                break
            time.sleep(0.2)
        assert squeue_state(job_id) in ("FAILED", ""), squeue_state(job_id)
        log = (directory / "logs" / f"train-{job_id}.out").read_text()
        line = only_line(log)
        assert line.startswith("packcfg: this job's Python (") and line.endswith(
            "lacks numpy: pip install 'packcfg[train]'"
        ), log
    finally:
        subprocess.run(["scancel", job_id], capture_output=True)


@pytest.mark.parametrize("engine", ["packcfg", "bridge"])
def test_every_rendered_script_checks_its_python_before_anything(tmp_path: Path, engine: str) -> None:
    overrides = (
        []
        if engine == "packcfg"
        else ["launch.engine=bridge", "+launch.bridge={recipe: llama32_1b_sft_config}"]
    )
    directory, _, _ = service.render([TINY], tmp_path / "b", overrides, backend="nemo-run")
    check = "python3 -m packcfg.launch.jobenv "
    for name in ("torchrun.sh", "sbatch.sh", "pack.sbatch.sh"):
        lines = [x.strip() for x in (directory / name).read_text().splitlines()]
        first = next(i for i, x in enumerate(lines) if x.startswith(check))
        runs = [
            i
            for i, x in enumerate(lines)
            if x.startswith(("python3 -m packcfg ", "torchrun", "exec torchrun"))
        ]
        assert runs and first < min(runs), name
    driver = (directory / "nemo_run_driver.py").read_text()
    if engine == "bridge":
        # NeMo-Run's data-prep task checks first (Bridge's training task runs on the same executor),
        # for Megatron Bridge too when Bridge's own script runs.
        steps = driver[driver.index("PREP_STEPS = (") :]
        assert steps.index(check) < steps.index("python3 -m packcfg pack")
        assert "megatron-bridge==0.3.1:torch,megatron.core,megatron.bridge" in steps
    else:
        assert 'run.Script(path=str(BUNDLE / "torchrun.sh")' in driver  # the task is torchrun.sh


def test_local_launch_refuses_up_front_without_the_train_extra(tmp_path: Path) -> None:
    """Old: submitted a job that failed at once. Now: one line, exit 2, nothing recorded or started."""
    code = (
        "import sys; sys.modules['torch'] = None; sys.modules['megatron.core'] = None\n"
        "from packcfg.cli import main\n"
        f"sys.exit(main(['launch', {str(TINY)!r}, '--backend', 'local', '--state-dir', {str(tmp_path / 's')!r}]))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 2 and proc.stdout == ""
    line = only_line(proc.stderr)
    assert (
        line.startswith("packcfg: --backend local: cannot run this job here: this installation (")
        and "lacks torch, megatron.core: pip install 'packcfg[train]'" in line
    ), line
    assert not (tmp_path / "s").exists()


def test_local_launch_refuses_when_the_jobs_python3_lacks_modules(tmp_path: Path) -> None:
    """The job runs the `python3` on PATH: a different interpreter without packcfg's dependencies is
    checked as the job would check it."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    wrapper = bin_dir / "python3"
    wrapper.write_text(f'#!/bin/sh\nexec {sys.executable} -S "$@"\n')  # no site-packages
    wrapper.chmod(0o755)
    torchrun = shutil.which("torchrun")
    if torchrun:
        (bin_dir / "torchrun").symlink_to(torchrun)
    env = {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    out = packcfg("launch", str(TINY), "--backend", "local", "--state-dir", str(tmp_path / "s"), env=env)
    assert out.returncode == 2
    line = only_line(out.stderr)
    assert line.startswith("packcfg: --backend local: cannot run this job here: this job's Python (")
    assert (
        "lacks yaml, ruamel.yaml, pydantic, jinja2, numpy, torch" in line
        and "pip install 'packcfg[train]'" in line
    )
    assert not (tmp_path / "s").exists()


def test_jobenv_bad_arguments_are_one_line() -> None:
    from packcfg.launch import jobenv

    assert jobenv.main(["packcfg[train]:numpy"]) == 0
    proc = subprocess.run(
        [sys.executable, "-m", "packcfg.launch.jobenv", "nocolon"], capture_output=True, text=True, cwd=ROOT
    )
    assert proc.returncode == 2 and only_line(proc.stderr) == (
        "packcfg: jobenv: expected INSTALL:MODULE[,MODULE...], got 'nocolon'"
    )


# --- 7. provenance: every value located where it was set ------------------------------------------


def exp_without_launch(tmp_path: Path, **model: object) -> Path:
    config = yaml.safe_load(TINY.read_text())
    del config["launch"]
    config["model"].update(model)
    config["dataset"]["offline_packing_specs"]["pad_seq_to_mult"] = 8  # CP and TP up to 2 (CP203)
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def line_of(path: Path, text: str) -> int:
    return path.read_text().splitlines().index(text) + 1


def world_line(*args: str, state: Path) -> str:
    out = packcfg("launch", *args, "--backend", "slurm", "--dry-run", "--state-dir", str(state))
    assert out.returncode == 2 and out.stdout == "", out.stdout + out.stderr
    return only_line(out.stderr)


def test_world_size_line_locates_each_value_where_it_was_set(tmp_path: Path) -> None:
    state = tmp_path / "s"
    # Old: "CP 2 (default)" for a CP the file sets (the check looked up context_model_parallel_size).
    exp = exp_without_launch(tmp_path, tensor_model_parallel_size=2, context_parallel_size=2)
    line = world_line(str(exp), state=state)
    tp, cp = line_of(exp, "  tensor_model_parallel_size: 2"), line_of(exp, "  context_parallel_size: 2")
    assert f"TP 2 ({exp}:{tp}:3), CP 2 ({exp}:{cp}:3)" in line, line
    assert "launch.nodes 1 (not set: default) x launch.gpus_per_node 1 (not set: default)" in line
    assert "(default)" not in line
    # A -c file.
    plain = exp_without_launch(tmp_path)
    extra = tmp_path / "cluster.yaml"
    extra.write_text("model:\n  context_parallel_size: 2\n")
    line = world_line(str(plain), "-c", str(extra), state=state)
    assert f"CP 2 ({extra}:2:3)" in line, line
    # Overrides on the command line: positional and -o.
    line = world_line(str(plain), "model.pipeline_model_parallel_size=2", state=state)
    assert "PP 2 (command line: model.pipeline_model_parallel_size=2)" in line, line
    line = world_line(str(plain), "-o", "model.tensor_model_parallel_size=2", state=state)
    assert "TP 2 (command line: model.tensor_model_parallel_size=2)" in line, line
    # The base recipe's own values: located in its snapshot; the file's own value in the file.
    based = tmp_path / "based.yaml"
    based.write_text(
        "recipe:\n  name: b70\n  base: llama31_70b_sft_config\nmodel:\n  pipeline_model_parallel_size: 2\n"
    )
    line = world_line(str(based), state=state)
    assert "TP 8 (<bridge recipe llama31_70b_sft_config>:" in line, line
    assert f"PP 2 ({based}:5:3)" in line, line


def test_lint_locates_each_value_where_it_was_set(tmp_path: Path) -> None:
    from packcfg.lint.engine import lint_config

    def located(files: list[str], overrides: list[str] = ()) -> list[tuple[str, str, int, int]]:
        return [
            (d.code, d.file, d.line, d.column)
            for d in lint_config(files, list(overrides))
            if d.code in ("PL601", "PL602", "PK110")
        ]

    config = yaml.safe_load(TINY.read_text())
    bad = copy.deepcopy(config)
    bad["train"]["global_batch_size"] = 9
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(bad, sort_keys=False))
    assert located([str(path)]) == [("PL602", str(path), line_of(path, "  global_batch_size: 9"), 3)]
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    extra = tmp_path / "c.yaml"
    extra.write_text("train:\n  micro_batch_size: 2\n")
    assert located([str(path), str(extra)]) == [("PK110", str(extra), 2, 3)]
    assert located([str(path)], ["train.global_batch_size=9"]) == [
        ("PL602", "train.global_batch_size=9 (command line)", 1, 1)
    ]
    # A value nobody set (gpus_per_node: default 1) is reported at the section the user wrote.
    no_gpn = copy.deepcopy(config)
    del no_gpn["launch"]["gpus_per_node"]
    no_gpn["model"]["tensor_model_parallel_size"] = 2
    path.write_text(yaml.safe_dump(no_gpn, sort_keys=False))
    assert located([str(path)]) == [("PL601", str(path), line_of(path, "launch:"), 1)]
    # The CLI prints the same places, positional overrides included.
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    out = packcfg("lint", str(path), "train.global_batch_size=9")
    assert out.returncode == 1 and "train.global_batch_size=9 (command line): PL602" in out.stdout, out.stdout
