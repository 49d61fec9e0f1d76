"""Two-node Slurm runs on the cluster of .ci/slurm-two-node.sh: two slurmd, each in its own network and
UTS namespace on this machine, torchrun's c10d rendezvous and gloo across them.

Skipped, with the reason, when that cluster is not up (CI's `.ci/run` starts only the single-node one):
    bash .ci/slurm-up.sh && bash .ci/slurm-two-node.sh
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from packcfg.launch.state import JobStore

from .conftest import SHORT_RUN, TINY, packcfg
from .test_bridge_engine import _launch_standin, _recorded_ranks, _words

pytestmark = [pytest.mark.slow, pytest.mark.torchrun]

CONF = "/etc/slurm-2n/slurm.conf"
ENV = {"SLURM_CONF": CONF}
# One torchrun process per node: a world of 2 forms only when both nodes' agents meet at the rendezvous.
TWO_NODES = ["launch.device=cpu", "launch.nodes=2", "launch.gpus_per_node=1", "launch.partition=two"]


def two_node_problem() -> str | None:
    if shutil.which("sinfo") is None or not Path(CONF).is_file():
        return f"{CONF} missing (start it with .ci/slurm-two-node.sh)"
    try:
        out = subprocess.run(
            ["sinfo", "-h", "-N", "-o", "%N %T"],
            capture_output=True,
            text=True,
            timeout=20,
            env={**os.environ, **ENV},
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return f"the two-node controller does not answer: {exc}"
    nodes = dict(line.split() for line in out.stdout.splitlines() if len(line.split()) == 2)
    usable = [n for n, s in nodes.items() if s.rstrip("*~#") in ("idle", "mixed", "allocated")]
    if sorted(usable) != ["node1", "node2"]:
        return f"two-node cluster not up (sinfo: {out.stdout.strip() or out.stderr.strip() or 'no answer'})"
    return None


@pytest.fixture(scope="module")
def slurm_two_node() -> None:
    problem = two_node_problem()
    if problem:
        pytest.skip(problem)


def _nodes_of(job_id: str) -> str:
    out = subprocess.run(
        ["scontrol", "show", "job", "-o", job_id],
        capture_output=True,
        text=True,
        env={**os.environ, **ENV},
    ).stdout
    found = re.findall(r"\bNodeList=(\S+)", out)
    return next((n for n in found if n != "(null)"), "")


def test_packcfg_trains_across_two_nodes(tmp_path: Path, slurm_two_node: None) -> None:
    state = tmp_path / "state"
    args = [a for o in (*SHORT_RUN, *TWO_NODES) for a in ("-o", o)]
    out = packcfg(
        "launch", str(TINY), *args, "--backend", "slurm", "--state-dir", str(state), "--wait", "--timeout", "500",
        env=ENV, timeout=560,
    )  # fmt: skip
    (rec,) = JobStore(state).all()
    logs = packcfg("logs", rec.id, "--state-dir", str(state), env=ENV).stdout
    assert out.returncode == 0 and rec.status == "COMPLETED", f"{out.stdout}\n{out.stderr}\n{logs}"
    assert _nodes_of(str(rec.native_id)) == "node[1-2]"
    assert "world 2 (TP 1, CP 1, PP 1, DP 2)" in logs
    rows = (Path(rec.bundle_dir) / "output" / "metrics.jsonl").read_text().splitlines()
    losses = [json.loads(r)["loss"] for r in rows if '"loss"' in r]
    assert len(losses) == 4 and losses[-1] < losses[0]


def test_bridge_standin_across_two_nodes(tmp_path: Path, slurm_two_node: None) -> None:
    """engine: bridge on two nodes: the data-prep job packs, then torchrun starts the stand-in on one rank
    per node, each with Bridge's arguments and the packs in reach."""
    launch = {"nodes": 2, "gpus_per_node": 1, "partition": "two"}
    out, state, recorded, config = _launch_standin(
        tmp_path, "slurm", "--wait", "--timeout", "400", launch=launch, env=ENV
    )
    (rec,) = JobStore(state).all()
    assert rec.status == "COMPLETED", rec
    _recorded_ranks(recorded, _words(config))
    hosts = {json.loads((recorded / f"rank{r}.json").read_text())["host"] for r in (0, 1)}
    assert hosts == {"node1", "node2"}
