"""`torch_dist` checkpoints through megatron-core `dist_checkpointing`, resharded when TP changes.

Layout under `checkpoint.save`, as Megatron Bridge writes it (src/megatron/bridge/training/checkpointing.py,
v0.3.1: `iter_{:07d}` directories, the Megatron-LM tracker file `latest_checkpointed_iteration.txt`, the
model's `sharded_state_dict()` under the key "model"):
    iter_0000020/  metadata.json, common.pt, __*.distcp   (megatron-core's torch_dist backend)
                   rng_rank00000.pt ...                    (packcfg: each global rank's RNG states)
    latest_checkpointed_iteration.txt

Sharded (each tensor keyed and sliced like its parameter, so a different TP size reshards on load):
"model" (GPTModel.sharded_state_dict()), "optimizer.exp_avg" / "optimizer.exp_avg_sq" (AdamW moments) and
"optimizer.master" (bf16's fp32 master weights). Common (rank 0's, in common.pt): iteration,
consumed units, LR schedule, AdamW step counts, and the model's shape fields (so a mismatch is
reported by config field). RNG states differ per rank, so they are not common state (megatron would compare
every rank's common dict with rank 0's and print the whole difference at each save): each rank writes its
own `rng_rank*.pt` beside megatron's files (older checkpoints kept rank 0's in common.pt; still read).

Nothing read runs code (packcfg.train.dist_reader says how, file by file): `.metadata` is read once with
an allow-list unpickler, before torch or megatron sees the folder, and that checked object is the one
megatron's load uses (`checked_load_strategy`); tensor records are read weights-only; no pickled object
record (ShardedObject, e.g. a layer's `_extra_state`) is loaded; common.pt is read by
`checkpoint_files.load_file` (`torch.load(weights_only=True)`) through `SafeCommonLoad`.
"""

from __future__ import annotations

import re
import shutil
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
    set_rng_state,
)
from packcfg.train.dist_reader import checked_load_strategy, read_metadata, tensors_only
from packcfg.train.mcore_compat import cpu_checkpointing
from packcfg.train.optim import LrSchedule, MasterWeights, adam_step
from packcfg.train.parallel import Layout, barrier
from packcfg.train.run_folder import LATEST, CheckpointError, read_latest

# The ModelSettings fields that decide tensor shapes, checked by name before any tensor is read.
SHAPE_FIELDS = (
    "num_layers",
    "hidden_size",
    "ffn_hidden_size",
    "num_attention_heads",
    "num_query_groups",
    "kv_channels",
    "vocab_size",
)


def _shape_fields(model: torch.nn.Module) -> dict[str, int | None]:
    config = model.config  # type: ignore[attr-defined]
    out = {f: getattr(config, f, None) for f in SHAPE_FIELDS if f != "vocab_size"}
    out["vocab_size"] = getattr(model, "vocab_size", None)
    return out


def _common_strategy() -> Any:
    from megatron.core.dist_checkpointing.strategies.common import TorchCommonLoadStrategy

    class SafeCommonLoad(TorchCommonLoadStrategy):
        """megatron's common-state loader with every read weights-only (its own calls a bare torch.load)."""

        def load_common(self, checkpoint_dir: str | Path) -> Any:
            path = Path(checkpoint_dir) / "common.pt"
            if not path.is_file():
                raise CheckpointError(f"{checkpoint_dir}: incomplete torch_dist checkpoint (no common.pt)")
            return load_file(path)

        def load_sharded_objects(self, sharded_objects_state_dict: Any, checkpoint_dir: Any) -> Any:
            raise CheckpointError(f"{checkpoint_dir}: holds ShardedObjects, which packcfg does not load")

    return SafeCommonLoad()


def _sync_save_strategy() -> Any:
    """megatron-core's `torch_dist` save strategy with the write done by torch's synchronous
    `torch.distributed.checkpoint.save` and `FileSystemWriter`, instead of its async writer (forked
    writer processes and a spawned Manager, which hang on this CPU setup). The key translation and the
    planner are megatron-core 0.16.1's own (`strategies/torch.py` `async_save`), so the files are the
    same torch_dist format: metadata.json names backend torch_dist version 1."""
    import torch.distributed.checkpoint as dcp
    from megatron.core.dist_checkpointing.strategies.torch import (
        MCoreSavePlanner,
        TorchDistSaveShardedStrategy,
        _replace_state_dict_keys_with_sharded_keys,
        mcore_to_pyt_state_dict,
    )

    class SyncTorchDistSave(TorchDistSaveShardedStrategy):
        def save(self, sharded_state_dict: Any, checkpoint_dir: Path) -> None:
            sharded, _, _ = _replace_state_dict_keys_with_sharded_keys(
                sharded_state_dict, self.keep_only_main_replica
            )
            dcp.save(
                mcore_to_pyt_state_dict(sharded, False),
                storage_writer=dcp.FileSystemWriter(str(checkpoint_dir), thread_count=1),
                planner=MCoreSavePlanner(
                    dedup_replicated_tensors=not self.keep_only_main_replica, flatten_state_dict=False
                ),
            )

    return SyncTorchDistSave("torch_dist", 1)


def _sharded(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    master: MasterWeights | None,
    with_optimizer: bool,
    for_load: bool = False,
) -> dict[str, Any]:
    """The sharded state dict: model, and the optimizer's per-parameter tensors sharded like their
    parameter (`make_sharded_optimizer_tensor`, megatron-core dist_checkpointing/optimizer.py).
    `for_load`: without the model's ShardedObjects (saved for Bridge, never loaded: see dist_reader)."""
    from megatron.core.dist_checkpointing.optimizer import make_sharded_optimizer_tensor

    model_sd = model.sharded_state_dict()  # type: ignore[attr-defined]
    state: dict[str, Any] = {"model": tensors_only(model_sd) if for_load else model_sd}
    if not with_optimizer:
        return state
    names = [n for n, p in model.named_parameters() if p.requires_grad]
    opt_params = master.master_params if master is not None else [p for _, p in _named(model)]
    moments: dict[str, dict[str, Any]] = {"exp_avg": {}, "exp_avg_sq": {}}
    for name, p in zip(names, opt_params, strict=True):
        slot = optimizer.state[p]
        for moment in moments:
            if moment not in slot:  # before the first step: allocate, so the load has a target
                slot[moment] = torch.zeros_like(p, memory_format=torch.preserve_format)
            moments[moment][name] = make_sharded_optimizer_tensor(
                model_sd[name], slot[moment], f"optimizer.{moment}"
            )
    state["optimizer"] = moments
    if master is not None:
        state["master"] = {
            name: make_sharded_optimizer_tensor(model_sd[name], copy, "optimizer.master")
            for name, copy in zip(names, master.master_params, strict=True)
        }
    return state


def _named(model: torch.nn.Module) -> list[tuple[str, torch.nn.Parameter]]:
    return [(n, p) for n, p in model.named_parameters() if p.requires_grad]


def save_dist_checkpoint(
    root: Path,
    iteration: int,
    layout: Layout,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    schedule: LrSchedule,
    consumed_units: int,
    master: MasterWeights | None = None,
) -> Path:
    """Save after `iteration` completed steps; every rank calls it. Written into `.tmp_iter_*`, renamed
    into place by rank 0 after a barrier; `latest` is updated last and never moves back."""
    from megatron.core import dist_checkpointing

    final = iteration_dir(root, iteration)
    tmp = root / f".tmp_{final.name}"
    if layout.is_main:
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
    barrier()
    state = _sharded(model, optimizer, master, with_optimizer=True)
    names = [n for n, _ in _named(model)]
    opt_params = master.master_params if master is not None else [p for _, p in _named(model)]
    state.update(
        iteration=iteration,
        consumed_units=consumed_units,
        schedule=schedule.state_dict(),
        adam_step={
            n: float(optimizer.state[p].get("step", 0.0)) for n, p in zip(names, opt_params, strict=True)
        },
        shape=_shape_fields(model),
        packcfg_format="torch_dist",
    )
    with cpu_checkpointing():
        dist_checkpointing.save(state, str(tmp), sharded_strategy=_sync_save_strategy())
    # after the save: megatron-core warns "Overwriting old incomplete / corrupted checkpoint" into a non-empty folder
    save_rank_rng(tmp, layout.rank)
    barrier()
    if layout.is_main:
        if final.exists():
            shutil.rmtree(final)
        tmp.rename(final)
        latest = read_latest(root)
        if latest is None or latest <= iteration:
            atomic_write_text(root / LATEST, f"{iteration}\n")
    barrier()
    return final


def is_dist_checkpoint(directory: Path) -> bool:
    return (directory / "metadata.json").is_file()


def _check(directory: Path, model: torch.nn.Module) -> tuple[dict[str, Any], Any]:
    """The checkpoint's common state and its checked `.metadata`, after checking it is complete and shaped
    like this model. `.metadata` is read first, with the allow-list unpickler (dist_reader)."""
    if not is_dist_checkpoint(directory):
        raise CheckpointError(
            f"{directory}: not a complete torch_dist checkpoint (no metadata.json; partial save, or another format?)"
        )
    metadata = read_metadata(directory)
    common = _common_strategy().load_common(directory)
    if not isinstance(common, dict):
        raise CheckpointError(f"{directory / 'common.pt'}: not a megatron common state (expected a dict)")
    saved = common.get("shape")
    if isinstance(saved, dict):
        for field, value in _shape_fields(model).items():
            if saved.get(field) is not None and saved.get(field) != value:
                raise CheckpointError(
                    f"{directory}: checkpoint has model.{field}={saved[field]}, this config gives {value}"
                )
    return common, metadata


def _load(directory: Path, state: dict[str, Any], metadata: Any) -> dict[str, Any]:
    from megatron.core import dist_checkpointing
    from megatron.core.dist_checkpointing.core import CheckpointingException
    from torch.distributed.checkpoint.api import CheckpointException as DcpCheckpointException

    try:
        with cpu_checkpointing():
            return dist_checkpointing.load(
                state,
                str(directory),
                sharded_strategy=checked_load_strategy(directory, metadata),
                common_strategy=_common_strategy(),
            )
    except DcpCheckpointException as exc:  # torch wraps each rank's failure: our own one-line error first
        failures = [failure for failure, _ in exc.failures.values()]
        for failure in failures:
            if isinstance(failure, CheckpointError):
                raise CheckpointError(str(failure)) from None
        raise _does_not_fit(directory, failures[0] if failures else exc) from None
    except CheckpointingException as exc:
        first = str(exc).strip().splitlines()[0][:300]
        raise CheckpointError(f"{directory}: does not fit this model ({first})") from None
    except KeyError as exc:
        raise _does_not_fit(directory, exc) from None


def _does_not_fit(directory: Path, exc: BaseException) -> CheckpointError:
    # megatron's shape validation names a tensor this model has and the checkpoint lacks (a KeyError,
    # which torch.distributed.checkpoint wraps)
    missing = re.search(r"([\w.]+) from model not in state dict", str(exc))
    what = f"it has no tensor {missing.group(1)}" if missing else str(exc).strip().splitlines()[0][:300]
    return CheckpointError(
        f"{directory}: does not fit this model: {what} (trained with another model shape or family?)"
    )


def load_dist_checkpoint(
    directory: Path,
    layout: Layout,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    schedule: LrSchedule,
    master: MasterWeights | None = None,
) -> Resumed:
    """Restore everything `save_dist_checkpoint` wrote, resharded to this run's TP size."""
    common, metadata = _check(directory, model)
    if common.get("packcfg_format") != "torch_dist":
        raise CheckpointError(
            f"{directory}: not a packcfg torch_dist checkpoint (no optimizer state to resume); "
            "use it as checkpoint.pretrained_checkpoint"
        )
    loaded = _load(
        directory, _sharded(model, optimizer, master, with_optimizer=True, for_load=True), metadata
    )
    model.load_state_dict(loaded["model"], strict=False)
    names = [n for n, _ in _named(model)]
    opt_params = master.master_params if master is not None else [p for _, p in _named(model)]
    for name, p in zip(names, opt_params, strict=True):
        slot = optimizer.state[p]
        for moment in ("exp_avg", "exp_avg_sq"):
            slot[moment].copy_(loaded["optimizer"][moment][name])
        slot["step"] = adam_step(optimizer, p, common["adam_step"][name])
    if master is not None:
        if "master" not in loaded:
            raise CheckpointError(
                f"{directory}: saved without bf16 master weights; resume with the same precision"
            )
        with torch.no_grad():
            for name, copy in zip(names, master.master_params, strict=True):
                copy.copy_(loaded["master"][name])
        master.master_to_model()
    schedule.load_state_dict(common["schedule"])
    if not restore_rank_rng(directory, layout.rank) and "rng" in common:
        set_rng_state(common["rng"])  # saved before per-rank RNG files: rank 0's states
    return Resumed(int(common["iteration"]), int(common["consumed_units"]))


def load_dist_weights(
    directory: Path, layout: Layout, model: torch.nn.Module, master: MasterWeights | None = None
) -> int:
    """Model weights only, from any torch_dist checkpoint whose "model" entry is a GPTModel's sharded
    state dict (packcfg's, or one Megatron Bridge / Megatron-LM wrote); returns its iteration (0 if none)."""
    common, metadata = _check(directory, model)
    loaded = _load(directory, {"model": tensors_only(model.sharded_state_dict())}, metadata)  # type: ignore[attr-defined]
    model.load_state_dict(loaded["model"], strict=False)
    if master is not None:
        with torch.no_grad():
            for copy, p in zip(master.master_params, master.model_params, strict=True):
                copy.copy_(p.float())
    return int(common.get("iteration", 0) or 0)
