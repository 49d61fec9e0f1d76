"""Checkpoints: model, optimizer, LR schedule, RNG and data position, written atomically.

Layout under `checkpoint.save`:
    iter_0000020/model_optim_tp00.pt   one per TP rank (written by the DP x CP rank 0 of each TP rank)
    iter_0000020/rng_rank00000.pt      one per global rank
    latest_checkpointed_iteration.txt  the newest complete iteration (Megatron's file name)
Every rank writes into `.tmp_iter_...`; rank 0 renames it into place after a barrier, then updates
`latest`: a crash mid-save leaves the previous checkpoint as the latest one.
"""

from __future__ import annotations

import random
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from packcfg.core.atomic import atomic_write_text
from packcfg.train.optim import LrSchedule, MasterWeights
from packcfg.train.parallel import Layout

LATEST = "latest_checkpointed_iteration.txt"


def iteration_dir(root: Path, iteration: int) -> Path:
    return root / f"iter_{iteration:07d}"


def _rng_state() -> dict[str, Any]:
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def _set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])


def _barrier() -> None:
    if dist.is_initialized() and dist.get_world_size() > 1:
        dist.barrier()


def save_checkpoint(
    root: Path,
    iteration: int,
    layout: Layout,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    schedule: LrSchedule,
    consumed_units: int,
    master: MasterWeights | None = None,
) -> Path:
    """Save after `iteration` completed steps; returns the final directory."""
    final = iteration_dir(root, iteration)
    tmp = root / f".tmp_{final.name}"
    if layout.is_main:
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
    _barrier()
    if layout.dp_rank == 0 and layout.cp_rank == 0:
        torch.save(
            {
                "iteration": iteration,
                "consumed_units": consumed_units,
                "tp": layout.tp,
                "model": model.state_dict(),
                "optimizer": optimizer.state_dict(),
                "schedule": schedule.state_dict(),
                "master": master.state_dict() if master is not None else None,
            },
            tmp / f"model_optim_tp{layout.tp_rank:02d}.pt",
        )
    torch.save(_rng_state(), tmp / f"rng_rank{layout.rank:05d}.pt")
    _barrier()
    if layout.is_main:
        if final.exists():
            shutil.rmtree(final)
        tmp.rename(final)
        atomic_write_text(root / LATEST, f"{iteration}\n")
    _barrier()
    return final


def resolve_checkpoint(path: Path) -> Path | None:
    """A checkpoint root (uses its `latest` file) or an `iter_*` directory; None if there is none yet."""
    if (path / LATEST).is_file():
        return iteration_dir(path, int((path / LATEST).read_text().strip()))
    if path.name.startswith("iter_") and path.is_dir():
        return path
    return None


@dataclass(frozen=True)
class Resumed:
    iteration: int
    consumed_units: int


def _model_file(directory: Path, layout: Layout) -> dict[str, Any]:
    path = directory / f"model_optim_tp{layout.tp_rank:02d}.pt"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: missing (saved with a different tensor-parallel size?)")
    state = torch.load(path, map_location="cpu", weights_only=False)
    if state["tp"] != layout.tp:
        raise ValueError(f"{directory}: saved with TP {state['tp']}, this run has TP {layout.tp}")
    return state


def load_checkpoint(
    directory: Path,
    layout: Layout,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    schedule: LrSchedule,
    master: MasterWeights | None = None,
) -> Resumed:
    """Restore everything `save_checkpoint` wrote; the run continues at the saved iteration."""
    state = _model_file(directory, layout)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    schedule.load_state_dict(state["schedule"])
    if master is not None:
        if state.get("master") is None:
            raise ValueError(
                f"{directory}: saved without bf16 master weights; resume with the same precision"
            )
        master.load_state_dict(state["master"])
    rng = directory / f"rng_rank{layout.rank:05d}.pt"
    if rng.is_file():  # absent when resuming on a different world size: seeds stay as set at start
        _set_rng_state(torch.load(rng, map_location="cpu", weights_only=False))
    return Resumed(int(state["iteration"]), int(state["consumed_units"]))


def load_weights(directory: Path, layout: Layout, model: torch.nn.Module) -> int:
    """Initial weights only (checkpoint.pretrained_checkpoint); returns the checkpoint's iteration."""
    state = _model_file(directory, layout)
    model.load_state_dict(state["model"])
    return int(state["iteration"])
