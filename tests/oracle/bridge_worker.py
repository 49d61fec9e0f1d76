"""One worker of a rendered `engine: bridge` job, on CPU: Bridge's own run_recipe.py up to its first batch.

The oracle's stand-in `torchrun` (test_bridge_e2e.py) executes `python bridge_worker.py SCRIPT ARGS...` with
the words the bundle's torchrun.sh hands torchrun. This file then runs SCRIPT (Bridge's
scripts/training/run_recipe.py of the target version, from the Megatron Bridge mirror) as `__main__` with
those ARGS, in this process, as torchrun's worker would. Everything Bridge does runs as it is: argument
parsing, recipe load, the override merge, 0.6's runner sync steps, `finetune()`/`pretrain()`,
`runtime_config_update()` (validate()). One thing is replaced, because it needs CUDA from its first line:
`megatron.bridge.training.pretrain.setup` (process groups, model, optimizer). (On 0.6.x one import
that no Python 3.11 package satisfies is stood in for: `cpu_env.install_nvrx_standin`.) Its stand-in, `_first_batch`,
does the data part of Bridge's setup with Bridge's own functions, in the order setup does it:
`build_tokenizer(cfg.tokenizer)`, the dataset provider (`get_dataset_provider(cfg.dataset)`, bound to the
tokenizer as setup binds it), which builds Bridge's own packed train and validation datasets from the files
the config names, then `build_pretraining_data_loader(...)` with the arguments `data/loaders.py` passes for
data-parallel rank 0, and the first batch of each loader (Bridge's collate) and the pack rows it holds (the indices read, through the dataset's own samples_mapping). It saves them with what Bridge
was given (torch.save to $PACKCFG_E2E_OUT) and stops the job (exit 0).

Also recorded: every warning of Bridge's override code (`omegaconf_utils`: a key it skipped or could not
set or instantiate), the working directory Bridge ran in, and the files of the bundle and the data folder
before Bridge started, so the test can tell that Bridge read packcfg's packs and wrote none of its own.
Runs only inside an oracle venv (see .ci/oracle.sh) with the CPU stand-ins of scripts/bridge_data/cpu_env.py.
"""

from __future__ import annotations

import inspect
import logging
import os
import runpy
import sys
import tempfile
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


class _Reached(Exception):
    """Raised by the setup stand-in once the first batches are taken: the training loop is not run."""


class _Warnings(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def _data_parallel_size(cfg) -> int:
    world = int(os.environ.get("WORLD_SIZE", "1"))
    model = cfg.model
    per = model.tensor_model_parallel_size * model.pipeline_model_parallel_size * model.context_parallel_size
    return max(1, world // per)


class _Recording:
    """The dataset as Bridge's data loader sees it (length, indexing), recording the indices it reads."""

    def __init__(self, ds) -> None:
        self.ds, self.seen = ds, []

    def __len__(self) -> int:
        return len(self.ds)

    def __getitem__(self, index):
        self.seen.append(int(index))
        return self.ds[index]


def _loader_batch(samplers, ds, cfg, consumed: int):
    """The first batch of Bridge's own data loader for `ds`, data-parallel rank 0 (as data/loaders.py), and
    the pack rows it holds: the indices the loader read, through the dataset's own samples_mapping."""
    if ds is None:
        return None, None
    recording = _Recording(ds)
    loader = samplers.build_pretraining_data_loader(
        recording,
        consumed,
        cfg.dataset.dataloader_type,
        cfg.train.micro_batch_size,
        0,  # num_workers: the same batches, read in this process
        cfg.dataset.data_sharding,
        collate_fn=ds.collate_fn if hasattr(ds, "collate_fn") else None,
        pin_memory=False,
        persistent_workers=False,
        data_parallel_rank=0,
        data_parallel_size=_data_parallel_size(cfg),
        global_batch_size=cfg.train.global_batch_size,
    )
    batch = next(iter(loader))
    mapping = getattr(ds, "samples_mapping", None)
    rows = []
    for index in recording.seen:
        row = mapping[index] if mapping is not None else index
        row = row[0] if isinstance(row, tuple | list) or getattr(row, "ndim", 0) else row  # 0.3.1: (idx, ...)
        assert int(row) >= 0, f"padding sample {row} in the first batch"
        rows.append(int(row))
    return batch, rows


def main() -> None:
    out = Path(os.environ["PACKCFG_E2E_OUT"])
    script, argv = sys.argv[1], sys.argv[2:]
    sys.path.insert(0, str(ROOT / "scripts" / "bridge_data"))
    import cpu_env

    cpu_env.setup(Path(tempfile.mkdtemp(prefix="hf_home_")))
    nvrx_standin = cpu_env.install_nvrx_standin()  # 0.6 venv only: see its docstring
    import torch

    warnings = _Warnings()
    logging.getLogger("megatron.bridge.training.utils.omegaconf_utils").addHandler(warnings)

    import megatron.bridge.training.pretrain as pretrain_module
    from megatron.bridge.data import samplers

    result: dict = {}

    def _first_batch(state, provider, *args, **kwargs):
        cfg = state.cfg
        setup_module = sys.modules["megatron.bridge.training.setup"]
        tokenizer = setup_module.build_tokenizer(cfg.tokenizer)
        if hasattr(cfg.dataset, "tokenizer"):
            cfg.dataset.tokenizer = tokenizer
        bind = getattr(setup_module, "_bind_dataset_provider_context", None)
        if bind is not None:  # 0.6.x
            provider = bind(provider, tokenizer=tokenizer, pg_collection=None)
        elif "tokenizer" in inspect.signature(provider).parameters:  # 0.3.1
            provider = partial(provider, tokenizer=tokenizer)
        train = cfg.train
        samples = [train.train_iters * train.global_batch_size, train.global_batch_size, 0]
        train_ds, valid_ds, _ = provider(samples, cfg.dataset)
        train_batch, train_indices = _loader_batch(samplers, train_ds, cfg, 0)
        valid_batch, valid_indices = _loader_batch(samplers, valid_ds, cfg, 0)
        specs = getattr(cfg.dataset, "offline_packing_specs", None) or getattr(
            cfg.dataset, "packed_sequence_specs", None
        )
        result.update(
            train=train_batch,
            valid=valid_batch,
            train_indices=train_indices,
            valid_indices=valid_indices,
            info={
                "cwd": os.getcwd(),
                "tokenizer_class": type(tokenizer).__name__,
                "tokenizer_model": str(cfg.tokenizer.tokenizer_model),
                "eos_id": int(tokenizer.eod if hasattr(tokenizer, "eod") else tokenizer.eos_id),
                "vocab_size": int(tokenizer.vocab_size),
                "dataset_config": type(cfg.dataset).__name__,
                "train_dataset": type(train_ds).__name__,
                "valid_dataset": type(valid_ds).__name__ if valid_ds is not None else None,
                "train_len": len(train_ds),
                "valid_len": len(valid_ds) if valid_ds is not None else None,
                "dataset_root": str(cfg.dataset.dataset_root),
                "packed_train": str(specs.packed_train_data_path) if specs else None,
                "packed_val": str(specs.packed_val_data_path) if specs else None,
                "packed_sequence_size": specs.packed_sequence_size if specs else None,
                "pad_seq_to_mult": specs.pad_seq_to_mult if specs else None,
                "seq_length": cfg.dataset.seq_length,
                "model_seq_length": cfg.model.seq_length,
                "checkpoint_save": str(cfg.checkpoint.save),
                "checkpoint_load": str(cfg.checkpoint.load),
                "tensorboard_dir": str(cfg.logger.tensorboard_dir),
                "global_batch_size": train.global_batch_size,
                "micro_batch_size": train.micro_batch_size,
            },
        )
        raise _Reached

    pretrain_module.setup = _first_batch
    sys.argv = [script, *argv]
    try:
        runpy.run_path(script, run_name="__main__")
    except _Reached:
        pass
    else:
        raise SystemExit("bridge_worker: run_recipe.py returned without reaching Bridge's setup")
    result["override_warnings"] = warnings.messages
    result["nvrx_standin"] = nvrx_standin
    tmp = out.with_name(out.name + ".tmp")
    torch.save(result, tmp)
    os.replace(tmp, out)


if __name__ == "__main__":
    main()
