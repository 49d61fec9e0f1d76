#!/usr/bin/env python3
"""packcfg's `bfd` side by side with the peer packers that install here, each in its own environment.

Each peer runs in a child process of the environment it is installed in (never copied into packcfg):
- Megatron Bridge's `first_fit_decreasing` (megatron.bridge.data.datasets.packing_utils) from the oracle
  venv (/work/main/.venv-oracle, megatron-bridge 0.3.1),
- TRL's `pack_dataset(..., strategy="bfd")` from the bench-only venv /tmp/peers-venv (`pip install trl`),
- Axolotl's multipack (`pack_parallel`, as its MultipackBatchSampler calls it) and LLaMA-Factory's
  `greedy_knapsack` from the same venv (`pip install --no-deps axolotl==0.19.0 llamafactory==0.9.5`, plus
  numba, torch 2.13.0 CPU and what TRL pulls in: transformers, accelerate).
The lengths go to each child as a .npy file; the child reports wall time of the packing call alone and the
number of packs. A peer that does not import is listed as such.

Usage: python bench/peers.py [--n N] [--capacity C] [--peers-python PATH] [--oracle-python PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.packing import long_lengths, print_table  # noqa: E402
from packcfg.packing import plan  # noqa: E402

_CHILD = {
    "bridge ffd": """
import glob, importlib.util, json, sys, time, numpy as np
# load the module by path: the megatron.bridge package __init__ imports transformer_engine
path = glob.glob(sys.prefix + "/lib/python3*/site-packages/megatron/bridge/data/datasets/packing_utils.py")[0]
spec = importlib.util.spec_from_file_location("bridge_packing_utils", path)
mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)
first_fit_decreasing = mod.first_fit_decreasing
a = np.load(sys.argv[1]).tolist(); cap = int(sys.argv[2])
t = time.perf_counter(); bins = first_fit_decreasing(a, cap); t = time.perf_counter() - t
print(json.dumps({"time": t, "packs": len(bins)}))
""",
    "trl bfd": """
import json, sys, time, numpy as np
import pyarrow as pa
from datasets import Dataset
from trl.data_utils import pack_dataset
a = np.load(sys.argv[1]); cap = int(sys.argv[2])
offsets = pa.array(np.concatenate([[0], np.cumsum(a)]).astype(np.int64))
ids = pa.LargeListArray.from_arrays(offsets, pa.array(np.ones(int(a.sum()), dtype=np.int32)))
ds = Dataset(pa.table({"input_ids": ids}))
t = time.perf_counter(); out = pack_dataset(ds, cap, strategy="bfd"); t = time.perf_counter() - t
print(json.dumps({"time": t, "packs": len(out)}))
""",
    "axolotl multipack": """
import json, sys, time, numpy as np
# Axolotl 0.19's MultipackBatchSampler.generate_batches (non-sequential): pack_parallel over the lengths in
# sampler order, groups of 100k, bin_size = batch_max_len, one process; numba compiles outside the timing
from axolotl.utils.samplers.multipack import pack_parallel
a = np.load(sys.argv[1]); cap = int(sys.argv[2])
pack_parallel(a[:10], cap, group_size=100_000, bin_size=cap, num_processes=1)
t = time.perf_counter(); bins = pack_parallel(a, cap, group_size=100_000, bin_size=cap, num_processes=1)
t = time.perf_counter() - t
print(json.dumps({"time": t, "packs": len(bins)}))
""",
    "llamafactory knapsack": """
import glob, importlib.util, json, sys, time, numpy as np
# LLaMA-Factory 0.9.5: greedy_knapsack in data/processor/processor_utils.py, loaded by path (the package
# __init__ imports transformers and the trainer stack; the module itself needs the standard library only)
path = glob.glob(sys.prefix + "/lib/python3*/site-packages/llamafactory/data/processor/processor_utils.py")[0]
spec = importlib.util.spec_from_file_location("lf_processor_utils", path)
mod = importlib.util.module_from_spec(spec); sys.modules[spec.name] = mod; spec.loader.exec_module(mod)
a = np.load(sys.argv[1]).tolist(); cap = int(sys.argv[2])
t = time.perf_counter(); bins = mod.greedy_knapsack(a, cap); t = time.perf_counter() - t
print(json.dumps({"time": t, "packs": len(bins)}))
""",
}


def _run_peer(python: str, code: str, npy: Path, cap: int, timeout: int) -> dict | str:
    if not Path(python).exists():
        return f"not installed ({python} missing)"
    try:
        r = subprocess.run(
            [python, "-c", code, str(npy), str(cap)], capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        return f"> {timeout} s (stopped)"
    if r.returncode != 0:
        last = (r.stderr.strip().splitlines() or ["?"])[-1]
        return f"did not run: {last[:80]}"
    return json.loads(r.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--n", type=int, default=5_000, help="samples per distribution (default 5k: TRL needs the tokens)"
    )
    ap.add_argument("--capacity", type=int, default=32_768)
    ap.add_argument("--peers-python", default="/tmp/peers-venv/bin/python")
    ap.add_argument("--oracle-python", default="/work/main/.venv-oracle/bin/python")
    ap.add_argument("--timeout", type=int, default=120, help="seconds per peer run")
    args = ap.parse_args(argv)
    cap = args.capacity
    plan(np.arange(1, 2001), 4096)  # load the compiled kernel outside the timings
    print(f"# bench/peers.py  N = {args.n:,}, capacity {cap:,}, load average {os.getloadavg()[0]:.1f}\n")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for dist in ("lognormal", "uniform", "realish"):
            a = long_lengths(dist, args.n, cap)
            npy = Path(tmp) / f"{dist}.npy"
            np.save(npy, a)
            lb = -(-int(a.sum()) // cap)
            t = float("inf")
            for _ in range(3):  # best of 3 wall times: the machine is shared (peers run once each)
                t0 = time.perf_counter()
                packs = plan(a, cap, "bfd").num_packs
                t = min(t, time.perf_counter() - t0)
            rows.append([dist, "packcfg bfd", f"{t:.3f}", f"{packs:,}", f"{packs - lb:+d}"])
            for name, code in _CHILD.items():
                py = args.oracle_python if name.startswith("bridge") else args.peers_python
                res = _run_peer(py, code, npy, cap, args.timeout)
                if isinstance(res, str):
                    rows.append([dist, name, res, "-", "-"])
                else:
                    p = int(res["packs"])
                    rows.append([dist, name, f"{res['time']:.3f}", f"{p:,}", f"{p - lb:+d}"])
    print_table(["dist", "packer", "time s", "packs", "vs LB"], rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
