"""What both checkpoint formats (`checkpoint`: per-TP-rank files; `dist_checkpoint`: megatron-core
torch_dist) share: weights-only file reading, the iteration folder's name, per-rank RNG state and the resume
record. Neither format module imports the other's internals; both import this one.

Nothing read from a checkpoint runs code: every file is loaded with `torch.load(weights_only=True)` (tensors,
numbers, strings and containers only), so the RNG states are stored in those types too. A file that would
need more (a pickle carrying code) is refused with a one-line `CheckpointError`.
"""

from __future__ import annotations

import pickle
import random
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from packcfg.train.run_folder import CheckpointError


def load_file(path: Path, source: Any = None, *, record: str | None = None) -> Any:
    """`torch.load(path, weights_only=True)`, with every failure as one line naming the file.

    `source`: a stream holding one record of `path` (a .distcp tensor record, named by `record`)."""
    where = f"{path}" if record is None else f"{path} (record {record})"
    try:
        return torch.load(path if source is None else source, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        text = str(exc)
        # torch's message advises retrying with weights_only=False: never repeat that advice to a user
        unsafe = re.search(r"Unsupported global: GLOBAL ([\w.]+)", text)
        if unsafe:
            raise CheckpointError(
                f"{where}: refused: it holds {unsafe.group(1)}, which would run code when loaded; packcfg loads "
                "checkpoints as plain tensors only"
            ) from None
        raise CheckpointError(
            f"{where}: unreadable checkpoint file (not a torch checkpoint, or corrupt)"
        ) from None
    except (EOFError, RuntimeError, OSError, ValueError, TypeError, AttributeError, KeyError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CheckpointError(
            f"{where}: unreadable checkpoint file (truncated or corrupt? {first[:200]})"
        ) from None


def iteration_dir(root: Path, iteration: int) -> Path:
    return root / f"iter_{iteration:07d}"


def rng_state() -> dict[str, Any]:
    """RNG states in types `weights_only` loading accepts (numpy's key array as a tensor)."""
    kind, key, pos, has_gauss, cached = np.random.get_state()
    numpy_state = {
        "kind": str(kind),
        "key": torch.from_numpy(np.asarray(key, dtype=np.int64)),
        "pos": int(pos),
        "has_gauss": int(has_gauss),
        "cached_gaussian": float(cached),
    }
    state = {"python": random.getstate(), "numpy": numpy_state, "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    n = state["numpy"]
    np.random.set_state(
        (n["kind"], n["key"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["cached_gaussian"])
    )
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])


def save_rank_rng(directory: Path, rank: int) -> None:
    """This rank's RNG states, one small file per global rank (they differ between ranks, so they are
    neither one rank's "common" state nor a sharded tensor)."""
    torch.save(rng_state(), directory / f"rng_rank{rank:05d}.pt")


def restore_rank_rng(directory: Path, rank: int) -> bool:
    """This rank's RNG states as saved, if the checkpoint has them (False when resuming on a different
    world size: seeds stay as set at start)."""
    path = directory / f"rng_rank{rank:05d}.pt"
    if not path.is_file():
        return False
    set_rng_state(load_file(path))
    return True


@dataclass(frozen=True)
class Resumed:
    iteration: int
    consumed_units: int
