"""Run one parallel equivalence case under torchrun and save rank 0's results.

    python -m torch.distributed.run --nproc-per-node 2 tests/train/harness.py CASE OUT.pt [FAULT ...]

Saves {variant: LossAndGrads} for "none" and each named fault (see tests/train/cases.py).
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

warnings.filterwarnings("ignore")
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from tests.train.cases import run_case, run_dpo_case  # noqa: E402


def main() -> None:
    case, out, faults = sys.argv[1], Path(sys.argv[2]), sys.argv[3:]
    dist.init_process_group("gloo")
    try:
        variants = ["none", *faults]
        if case.startswith("dpo"):  # "dpo" (DP over the world) or "dpo_tp" (TP over the world)
            results = run_dpo_case(variants, tp_case=case == "dpo_tp")
        else:
            results = run_case(case, variants)
        if dist.get_rank() == 0:
            torch.save(results, out)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
