"""Checkpoints: model, optimizer, LR schedule, RNG and data position, written atomically.

Layout under `checkpoint.save`:
    iter_0000020/model_optim_tp00.pt   one per TP rank (written by the DP x CP rank 0 of each TP rank)
    iter_0000020/rng_rank00000.pt      one per global rank
    latest_checkpointed_iteration.txt  the newest complete iteration (Megatron's file name)
Every rank writes into `.tmp_iter_...`; rank 0 renames it into place after a barrier, then updates
`latest`: a crash mid-save leaves the previous checkpoint as the latest one, and `latest` never moves back.

Nothing read from a checkpoint runs code: every file is loaded with `torch.load(weights_only=True)` (tensors,
numbers, strings and containers only), so the RNG states are stored in those types too. A file that would
need more (a pickle carrying code) is refused with a one-line `CheckpointError`.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from packcfg.core.atomic import atomic_write_text
from packcfg.train.checkpoint_files import (
    Resumed,
    iteration_dir,
    load_file,
    restore_rank_rng,
    save_rank_rng,
)
from packcfg.train.optim import LrSchedule, MasterWeights
from packcfg.train.parallel import Layout, barrier
from packcfg.train.run_folder import LATEST, CheckpointError, read_latest


@contextlib.contextmanager
def _fits(path: Path) -> Iterator[None]:
    """Restoring from `path`'s contents: a value that does not fit the run (a missing entry, a wrong shape
    or type) is one line naming the file, not a traceback."""
    try:
        yield
    except CheckpointError:
        raise
    except (RuntimeError, KeyError, TypeError, ValueError, IndexError, AttributeError) as exc:
        first = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else type(exc).__name__
        raise CheckpointError(f"{path}: does not fit this run ({type(exc).__name__}: {first})") from None


def keep_own_extra_state(saved: dict[str, Any], model: torch.nn.Module) -> dict[str, Any]:
    """`saved` (a model state dict read from a checkpoint) with every `_extra_state` entry replaced by the
    model's own. Transformer Engine's `set_extra_state` unpickles a non-empty one (its FP8 scaling state, a
    pickle in a uint8 tensor) with a bare `pickle.loads`; packcfg trains no FP8, where that state is
    empty, so nothing is lost by never handing a checkpoint's to the model."""
    own = model.state_dict()
    return {k: (own.get(k) if k.endswith("_extra_state") else v) for k, v in saved.items()}


def save_checkpoint(
    root: Path,
    iteration: int,
    layout: Layout,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    schedule: LrSchedule,
    consumed_units: int,
    master: MasterWeights | None = None,
    ckpt_format: str = "torch",
) -> Path:
    """Save after `iteration` completed steps in `ckpt_format` ("torch_dist": megatron-core
    dist_checkpointing, see packcfg.train.dist_checkpoint; "torch": per-TP-rank files); returns the final
    directory."""
    if ckpt_format == "torch_dist":
        from packcfg.train.dist_checkpoint import save_dist_checkpoint

        return save_dist_checkpoint(
            root, iteration, layout, model, optimizer, schedule, consumed_units, master
        )
    final = iteration_dir(root, iteration)
    tmp = root / f".tmp_{final.name}"
    if layout.is_main:
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
    barrier()
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
    save_rank_rng(tmp, layout.rank)
    barrier()
    if layout.is_main:
        if final.exists():
            shutil.rmtree(final)
        tmp.rename(final)
        latest = read_latest(root)
        if latest is None or latest <= iteration:  # never move `latest` back to an older iteration
            atomic_write_text(root / LATEST, f"{iteration}\n")
    barrier()
    return final


def resolve_checkpoint(path: Path) -> Path | None:
    """A checkpoint root (uses its `latest` file) or an `iter_*` directory; None if there is none yet."""
    latest = read_latest(path)
    if latest is not None:
        directory = iteration_dir(path, latest)
        if not directory.is_dir():
            raise CheckpointError(f"{path / LATEST}: names iteration {latest}, but {directory} is missing")
        return directory
    if path.name.startswith("iter_") and path.is_dir():
        return path
    return None


def _model_file(directory: Path, layout: Layout) -> dict[str, Any]:
    path = directory / f"model_optim_tp{layout.tp_rank:02d}.pt"
    if not path.is_file():
        if not any(directory.glob("model_optim_tp*.pt")):
            raise CheckpointError(
                f"{directory}: not a checkpoint (neither torch_dist metadata.json nor model_optim_tp*.pt; "
                "partial save?)"
            )
        raise CheckpointError(
            f"{path}: missing (a ckpt_format: torch checkpoint saved with a different TP size; "
            "torch_dist checkpoints reshard)"
        )
    state = load_file(path)
    if (
        not isinstance(state, dict)
        or not {"tp", "model", "iteration"} <= set(state)
        or not isinstance(state["model"], dict)
    ):
        raise CheckpointError(f"{path}: not a packcfg checkpoint (expected model, iteration and tp entries)")
    if state["tp"] != layout.tp:
        raise CheckpointError(f"{directory}: saved with TP {state['tp']}, this run has TP {layout.tp}")
    return state


def load_checkpoint(
    directory: Path,
    layout: Layout,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    schedule: LrSchedule,
    master: MasterWeights | None = None,
) -> Resumed:
    """Restore everything `save_checkpoint` wrote, in either format (told apart by the directory's
    files); the run continues at the saved iteration."""
    from packcfg.train.dist_checkpoint import is_dist_checkpoint, load_dist_checkpoint

    if is_dist_checkpoint(directory):
        return load_dist_checkpoint(directory, layout, model, optimizer, schedule, master)
    state = _model_file(directory, layout)
    with _fits(directory / f"model_optim_tp{layout.tp_rank:02d}.pt"):
        model.load_state_dict(keep_own_extra_state(state["model"], model))
        optimizer.load_state_dict(state["optimizer"])
        schedule.load_state_dict(state["schedule"])
        if master is not None:
            if state.get("master") is None:
                raise CheckpointError(
                    f"{directory}: saved without bf16 master weights; resume with the same precision"
                )
            master.load_state_dict(state["master"])
        resumed = Resumed(int(state["iteration"]), int(state["consumed_units"]))
    with _fits(directory / f"rng_rank{layout.rank:05d}.pt"):
        restore_rank_rng(directory, layout.rank)
    return resumed


def load_weights(
    directory: Path, layout: Layout, model: torch.nn.Module, master: MasterWeights | None = None
) -> int:
    """Initial weights only (checkpoint.pretrained_checkpoint); returns the checkpoint's iteration.

    With bf16 (`master` given) the fp32 master copies get the weights too: the checkpoint's own fp32 masters
    when it has them, else the loaded model values (otherwise the first step would write the random init back).
    A torch_dist directory (packcfg's, Megatron Bridge's or Megatron-LM's) loads through dist_checkpointing."""
    from packcfg.train.dist_checkpoint import is_dist_checkpoint, load_dist_weights

    if is_dist_checkpoint(directory):
        return load_dist_weights(directory, layout, model, master)
    state = _model_file(directory, layout)
    with _fits(directory / f"model_optim_tp{layout.tp_rank:02d}.pt"):
        model.load_state_dict(keep_own_extra_state(state["model"], model))
        if master is not None:
            if state.get("master") is not None:
                master.load_state_dict(state["master"])
            else:
                with torch.no_grad():
                    for copy, p in zip(master.master_params, master.model_params, strict=True):
                        copy.copy_(p.float())
        return int(state["iteration"])
