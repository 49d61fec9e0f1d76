"""A run's folders (checkpoint.save, the metrics folder) belong to one run: `packcfg train` never writes over
another run's results unless told to (`--resume` continues it, `--force` starts fresh and removes them).

Standard library only: the parent process of a torchrun job checks this before any rank starts.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from packcfg.train.settings import TrainSettings

LATEST = "latest_checkpointed_iteration.txt"  # Megatron's file name
METRICS = "metrics.jsonl"


class CheckpointError(ValueError):
    """A checkpoint that cannot be used: unsafe, truncated, from another layout, or a bad `latest` file."""


class RunFolderError(ValueError):
    """The run folder holds another run's results."""


def read_latest(root: Path) -> int | None:
    """The iteration `latest_checkpointed_iteration.txt` names; None when there is no such file."""
    path = root / LATEST
    if not path.is_file():
        return None
    try:
        text = path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise CheckpointError(f"{path}: unreadable ({exc})") from None
    if not text.isdigit():
        shown = repr(text[:40]) if text else "empty"
        raise CheckpointError(f"{path}: expected an iteration number, found {shown}")
    return int(text)


def _results(save: Path | None, out: Path) -> list[Path]:
    found: list[Path] = []
    if save is not None and save.is_dir():
        found += [
            p
            for p in sorted(save.iterdir())
            if p.name == LATEST or p.name.startswith(("iter_", ".tmp_iter_"))
        ]
    metrics = out / METRICS
    if metrics.is_file() and metrics.stat().st_size > 0:
        found.append(metrics)
    return found


def prepare_run_folder(
    config: dict[str, Any], batching: Any, output_dir: Any, *, resume: bool, force: bool
) -> str | None:
    """Check (and with `force`, clear) the run's folders before training. Returns a description of the
    finished run when `--resume` finds nothing left to do, else None. Raises RunFolderError / CheckpointError."""
    s = TrainSettings.from_config(config, batching=batching, output_dir=output_dir)
    if resume or s.load_dir is not None:
        root = s.load_dir or s.save_dir
        latest = read_latest(root) if root is not None else None
        if resume and latest is not None and latest >= s.train_iters:
            return f"step {latest} of train.train_iters {s.train_iters} is saved in {root}"
        return None
    found = _results(s.save_dir, s.output_dir)
    if not found:
        return None
    shown = ", ".join(str(p) for p in found[:3]) + (f" and {len(found) - 3} more" if len(found) > 3 else "")
    if not force:
        raise RunFolderError(
            f"the run folder holds another run's results ({shown}); pass --resume to continue that run, "
            "--force to start fresh (removes them), or set checkpoint.save / --out elsewhere"
        )
    for path in found:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
    print(f"packcfg train: --force: starting fresh; removed {shown}")
    return None
