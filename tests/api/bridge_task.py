"""A Bridge-style training entry for the NeMo-Run plugin test, in a real module: NeMo-Run runs a Partial's
function on the node by importing it, so one defined in __main__ fails there (environment.md, NeMo-Run traps).

`finetune(config, forward_step_func)` has Megatron Bridge's `finetune` signature; it records the config it got in
the file named by PACKCFG_TEST_RAN, so the test can tell that the task ran, and with which values.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def forward_step(state: Any, data_iterator: Any, model: Any) -> None:
    """Stands for Bridge's `gpt_step.forward_step`; never called here."""
    raise NotImplementedError


def finetune(config: dict[str, Any], forward_step_func: Any) -> None:
    Path(os.environ["PACKCFG_TEST_RAN"]).write_text(
        json.dumps({"config": config, "forward_step_func": forward_step_func.__name__})
    )


def packed_config(micro_batch_size: int, global_batch_size: int = 64) -> dict[str, Any]:
    """An offline-packed SFT config mapping (PK110 unless micro_batch_size is 1); also used as a builder, as
    `run.Config(ConfigContainer, ...)` is: the plugin builds a run.Config argument before checking it."""
    return {
        "model": {"seq_length": 4096},
        "train": {"micro_batch_size": micro_batch_size, "global_batch_size": global_batch_size},
        "dataset": {
            "_target_": "megatron.bridge.training.config.FinetuningDatasetConfig",
            "seq_length": 4096,
            "enable_offline_packing": True,
            "offline_packing_specs": {"packed_sequence_size": 4096},
        },
    }
