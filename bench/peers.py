#!/usr/bin/env python3
"""packcfg's `bfd` against the peer packers, like for like: the same global packing of the same lengths.

Every packer gets the same work: one list of sample lengths (clipped to the capacity), packed globally into
packs of at most `capacity` tokens, the result a list of packs of sample ids. Each peer runs its own packing
core, in a child process of the environment it is installed in (never copied into packcfg):

- Megatron Bridge 0.3.1 `first_fit_decreasing` (megatron.bridge.data.datasets.packing_utils, loaded by path)
  from the oracle venv /work/venvs/oracle-0.3.1;
- TRL's `_pack_bfd` (trl.data_utils: the BFD core that `pack_dataset(strategy="bfd")` maps over 1,000-row
  windows), called once on the whole table: global BFD, no `Dataset.map` windows. The token column is a
  list<null> column (offsets only, no token ids to build), but TRL's `pc.filter` of it still costs about 16
  bytes a token with pyarrow 26 (measured: 355M tokens took a child from 0.15 to 5.8 GB, and five rows of
  2.5G-10G tokens were killed out of memory on a 24 GB machine), so TRL is not run past TRL_MAX_TOKENS
  tokens (a child killed by a signal is reported so, and not run at a larger N);
- Axolotl 0.19 multipack `pack_parallel` (the numba first fit its MultipackBatchSampler calls) with
  group_size = N (one global group, not 100k windows), one process, on the lengths sorted descending (the
  sort is timed with it: first fit decreasing);
- LLaMA-Factory 0.9.5 `greedy_knapsack` (data/processor/processor_utils.py, loaded by path).

TRL, Axolotl and LLaMA-Factory come from PyPI into /work/venvs/peers (a venv with the system site packages,
so torch/numba/transformers are the ones installed here):
    python -m venv --system-site-packages /work/venvs/peers
    /work/venvs/peers/bin/pip install trl
    /work/venvs/peers/bin/pip install --no-deps axolotl==0.19.0 llamafactory==0.9.5

Timing, the same for every packer: warmed (imports done, numba compiled or loaded, one untimed call on the
first 2,000 lengths), then up to --runs timed calls (fewer once a packer has spent --budget seconds), the
median reported with the number of runs. Process CPU time, not wall: the box is shared, and every packer
here is single-threaded. Whatever a packer needs as input (a list, a pyarrow table) is built untimed before
each call. packcfg is timed in this process the same way (plan(...).order: the packs' sample ids). A peer
over --timeout seconds is stopped; a peer stopped at some N is not run at larger N with the same
distribution and capacity (it would only take longer).

Workloads: lognormal, uniform and realish lengths (bench/packing.py `long_lengths`) at 5k, 150k and 1M
samples and 4k, 32k and 128k capacity, and the real corpora of bench/packing.py (`real_corpora`). Printed
for each: CPU ms, x argsort (a NumPy argsort of the same lengths), packs over the lower bound (the largest
of ceil(sum / capacity), Martello-Toth's L2 and Fekete-Schepers' bound), and the peer's time over packcfg's.

Usage: python bench/peers.py [--n 5000,150000,1000000] [--caps 4096,32768,131072] [--runs 5]
       [--budget 5] [--timeout 60] [--peers-python PATH] [--oracle-python PATH] [--no-corpora]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.packing import long_lengths, packs_lower_bound, print_table, real_corpora  # noqa: E402
from packcfg.packing import plan  # noqa: E402
from packcfg.packing.planning.best_fit import load_kernel  # noqa: E402

# TRL's filter of the token column costs ~16 bytes a token (above): past this many tokens (~16 GB) it is not
# run (on the 24 GB machine of 2026-11-27 the largest row that ran had 765M tokens, the smallest killed 2.46G)
TRL_MAX_TOKENS = 1_000_000_000

_HARNESS = """
import json, sys, time
import numpy as np
a = np.load(sys.argv[1]); cap = int(sys.argv[2]); runs = int(sys.argv[3]); budget = float(sys.argv[4])
{setup}
run(prepare(a[:2000]))  # warm: imports, JIT compile or cache load, first call
times, packs = [], None
while len(times) < runs:
    x = prepare(a)
    t = time.process_time(); packs = run(x); times.append(time.process_time() - t)
    if sum(times) > budget:
        break
print(json.dumps({{"times": times, "packs": packs}}))
"""

_PEERS = {
    "bridge ffd": """
import glob, importlib.util
# by path: the megatron.bridge package __init__ imports transformer_engine
path = glob.glob(sys.prefix + "/lib/python3*/site-packages/megatron/bridge/data/datasets/packing_utils.py")[0]
spec = importlib.util.spec_from_file_location("bridge_packing_utils", path)
mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)
def prepare(a): return a.tolist()
def run(x): return len(mod.first_fit_decreasing(x, cap))
""",
    "trl bfd": """
import pyarrow as pa
from trl.data_utils import _pack_bfd
def prepare(a):
    offsets = np.zeros(len(a) + 1, dtype=np.int64); np.cumsum(a, out=offsets[1:])
    ids = pa.LargeListArray.from_arrays(pa.array(offsets), pa.nulls(int(offsets[-1])))
    return pa.table({"input_ids": ids})
def run(x): return _pack_bfd(x, cap).num_rows
""",
    "axolotl multipack": """
from axolotl.utils.samplers.multipack import pack_parallel
def prepare(a): return a
def run(a):
    d = a[np.argsort(-a, kind="stable")]
    return len(pack_parallel(d, cap, group_size=len(d), bin_size=cap, num_processes=1))
""",
    "llamafactory knapsack": """
import glob, importlib.util
# by path: the llamafactory package __init__ imports the trainer stack; this module needs the stdlib only
path = glob.glob(sys.prefix + "/lib/python3*/site-packages/llamafactory/data/processor/processor_utils.py")[0]
spec = importlib.util.spec_from_file_location("lf_processor_utils", path)
mod = importlib.util.module_from_spec(spec); sys.modules[spec.name] = mod; spec.loader.exec_module(mod)
def prepare(a): return a.tolist()
def run(x): return len(mod.greedy_knapsack(x, cap))
""",
}


def _run_peer(
    python: str, setup: str, npy: Path, cap: int, runs: int, budget: float, timeout: int
) -> dict | str:
    if not Path(python).exists():
        return f"not installed ({python} missing)"
    code = _HARNESS.format(setup=setup)
    try:
        r = subprocess.run(
            [python, "-c", code, str(npy), str(cap), str(runs), str(budget)],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return f"> {timeout} s"
    if r.returncode < 0:  # a signal: SIGKILL is most often the kernel's out-of-memory killer
        return f"killed by signal {-r.returncode}"
    if r.returncode != 0:
        last = (r.stderr.strip().splitlines() or ["?"])[-1]
        return f"did not run: {last[:80]}"
    return json.loads(r.stdout.strip().splitlines()[-1])


def _median_cpu(fn, runs: int, budget: float) -> tuple[float, int, object]:  # type: ignore[no-untyped-def]
    times, out = [], None
    while len(times) < runs:
        t = time.process_time()
        out = fn()
        times.append(time.process_time() - t)
        if sum(times) > budget:
            break
    return statistics.median(times), len(times), out


def _ms(t: float) -> str:
    return f"{1e3 * t:.1f}" if t < 10 else f"{1e3 * t:,.0f}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", default="5000,150000,1000000", help="sample counts, comma-separated")
    ap.add_argument("--caps", default="4096,32768,131072", help="capacities, comma-separated")
    ap.add_argument("--dists", default="lognormal,uniform,realish")
    ap.add_argument("--runs", type=int, default=5, help="timed runs per packer (median reported)")
    ap.add_argument("--budget", type=float, default=5.0, help="stop timing a packer after this many CPU s")
    ap.add_argument("--timeout", type=int, default=60, help="seconds per peer child process")
    ap.add_argument("--peers-python", default="/work/venvs/peers/bin/python")
    ap.add_argument("--oracle-python", default="/work/venvs/oracle-0.3.1/bin/python")
    ap.add_argument("--no-corpora", action="store_true", help="skip the real corpora")
    ap.add_argument(
        "--peers",
        default=",".join(_PEERS),
        help="which peers, comma-separated (bridge, trl, axolotl, llamafactory)",
    )
    args = ap.parse_args(argv)
    sizes = [int(x) for x in args.n.split(",")]
    caps = [int(x) for x in args.caps.split(",")]
    # a peer by its full name or its first word ("axolotl" for "axolotl multipack")
    by_word = {name.split()[0]: name for name in _PEERS}
    peers = [by_word.get(p.strip(), p.strip()) for p in args.peers.split(",") if p.strip()]
    unknown = [p for p in peers if p not in _PEERS]
    if unknown:
        ap.error(f"--peers: unknown {', '.join(map(repr, unknown))}; known: {', '.join(by_word)}")
    load_kernel()  # packcfg warm: the compiled kernel loaded, as every peer is warmed
    print(
        f"# bench/peers.py  {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, python "
        f"{platform.python_version()}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}; "
        f"CPU ms, median of up to {args.runs} warm runs (runs column), peers stopped after {args.timeout} s\n"
    )
    workloads: list[tuple[str, int, np.ndarray]] = []
    for dist in args.dists.split(","):
        for cap in caps:
            for n in sizes:
                workloads.append((dist, cap, long_lengths(dist, n, cap)))
    if not args.no_corpora:
        for name, lengths in real_corpora().items():
            for cap in caps:
                workloads.append((name, cap, np.minimum(lengths, cap)))
    rows = []
    worst: dict[str, float] = {}  # peer -> smallest (peer time / packcfg time) seen
    stopped: set[tuple[str, str, int]] = set()
    with tempfile.TemporaryDirectory() as tmp:
        for dist, cap, a in workloads:
            n = len(a)
            npy = Path(tmp) / "lengths.npy"
            np.save(npy, a)
            lb = packs_lower_bound(a, cap)  # the largest of the volume bound, L2 and Fekete-Schepers'
            t_sort, _, _ = _median_cpu(lambda a=a: np.argsort(a), args.runs, args.budget)
            t_me, k_me, p = _median_cpu(
                lambda a=a, cap=cap: plan(a, cap, "bfd").order, args.runs, args.budget
            )
            packs = plan(a, cap, "bfd").num_packs
            base = [dist, f"{n:,}", str(cap), f"{len(np.unique(a)):,}"]
            rows.append(
                [*base, "packcfg bfd", _ms(t_me), str(k_me), f"{t_me / t_sort:.2f}", f"{packs - lb:+d}", "1"]
            )
            for name in peers:
                if (name, dist, cap) in stopped:
                    rows.append([*base, name, "skipped (stopped at a smaller N)", "", "", "", ""])
                    continue
                if name.startswith("trl") and int(a.sum()) > TRL_MAX_TOKENS:
                    rows.append([*base, name, f"skipped ({int(a.sum()) / 1e6:,.0f}M tokens)", "", "", "", ""])
                    continue
                py = args.oracle_python if name.startswith("bridge") else args.peers_python
                res = _run_peer(py, _PEERS[name], npy, cap, args.runs, args.budget, args.timeout)
                if isinstance(res, str):
                    if res.startswith(("killed", "did not run")):  # no larger N either
                        stopped.add((name, dist, cap))
                    if res.startswith(">"):
                        stopped.add((name, dist, cap))
                        worst[name] = min(worst.get(name, float("inf")), args.timeout / t_me)
                    rows.append([*base, name, res, "", "", "", ""])
                    continue
                t = statistics.median(res["times"])
                worst[name] = min(worst.get(name, float("inf")), t / t_me)
                rows.append(
                    [
                        *base,
                        name,
                        _ms(t),
                        str(len(res["times"])),
                        f"{t / t_sort:.2f}",
                        f"{int(res['packs']) - lb:+d}",
                        f"{t / t_me:,.1f}",
                    ]
                )
            print(" | ".join(" ".join(r) for r in rows[-1 - len(peers) :]), file=sys.stderr, flush=True)
    print_table(
        [
            "lengths",
            "N",
            "cap",
            "distinct",
            "packer",
            "cpu ms",
            "runs",
            "x argsort",
            "packs - LB",
            "x packcfg",
        ],
        rows,
    )
    print(
        "\nx packcfg: the peer's median CPU time over packcfg's on the same lengths (> 1: packcfg is faster). "
        "Smallest over every workload: "
        + ", ".join(f"{k} {v:,.1f}x" for k, v in sorted(worst.items(), key=lambda kv: kv[1]))
        + (" (a stopped peer counts at its timeout)" if stopped else "")
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
