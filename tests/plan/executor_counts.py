"""Count the executor's real model: parameters, gradients and optimizer state per rank.

Builds the model exactly as `packcfg train` does (`packcfg.train.model.build_model` from the config's
`ModelSettings`), on the meta device unless `optimizer=True` (then for real, and one AdamW step makes
the optimizer state exist). Run under torchrun for TP/PP > 1:

    python -m torch.distributed.run --nproc-per-node 2 tests/plan/executor_counts.py CASES.json OUT.json

CASES.json: a list of {"config": PATH, "overrides": [...], "tp": N, "pp": N}; OUT.json: per case, one
{"tp_rank", "pp_rank", "params", "grads"} per rank.
"""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path
from typing import Any

warnings.filterwarnings("ignore")
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def executor_counts(
    config_path: str, overrides: list[str], tp: int = 1, pp: int = 1, optimizer: bool = False
) -> dict[str, Any]:
    """This rank's counts for the config at (tp, pp); call inside a world of tp * pp ranks."""
    import torch

    from packcfg.core.config import load_config
    from packcfg.train.model import build_model
    from packcfg.train.optim import MasterWeights, build_optimizer
    from packcfg.train.parallel import distributed
    from packcfg.train.settings import ModelSettings, OptimSettings

    layout_overrides = [
        f"++model.tensor_model_parallel_size={tp}",
        f"++model.pipeline_model_parallel_size={pp}",
        f"++model.sequence_parallel={'true' if tp > 1 else 'false'}",
    ]
    config = load_config([config_path], [*overrides, *layout_overrides])
    settings = ModelSettings.from_config(config)
    with distributed(tp, 1, pp) as layout:
        if optimizer:
            model = build_model(settings, 1234)
        else:
            with torch.device("meta"):
                model = build_model(settings, 1234)
        params = [p for p in model.parameters() if p.requires_grad]
        out: dict[str, Any] = {
            "tp_rank": layout.tp_rank,
            "pp_rank": layout.pp_rank,
            "params": sum(p.numel() for p in model.parameters()),
            "grads": sum(p.numel() for p in params),
        }
        if optimizer:  # the executor's optimizer set-up (packcfg.train.loop), then one step
            trained = params
            master = None
            if settings.bf16:
                model.bfloat16()
                master = MasterWeights(params, grad_reduce_in_fp32=True)
                trained = master.master_params
            opt = build_optimizer(model, OptimSettings.from_config(config, 10), trained)
            for p in trained:
                p.grad = torch.zeros_like(p)
            opt.step()
            state = sum(
                t.numel()
                for s in opt.state.values()
                for k, t in s.items()
                if k != "step" and isinstance(t, torch.Tensor)
            )
            out["optimizer_states"] = state + (sum(m.numel() for m in master.master_params) if master else 0)
        return out


def main() -> None:
    import torch.distributed as dist

    cases = json.loads(Path(sys.argv[1]).read_text())
    results = []
    for case in cases:
        mine = executor_counts(case["config"], case["overrides"], case["tp"], case["pp"])
        gathered: list[Any] = [None] * dist.get_world_size()
        dist.all_gather_object(gathered, mine)
        results.append(gathered)
    if dist.get_rank() == 0:
        Path(sys.argv[2]).write_text(json.dumps(results))
    dist.destroy_process_group()


if __name__ == "__main__":
    import torch.distributed as dist

    dist.init_process_group("gloo")
    main()
