"""`packcfg export-hf CONFIG --out DIR`: a run's newest checkpoint as a Hugging Face folder.

The config (with the same `-c` files and overrides as `packcfg train`) gives the model's shape (from its
HF folder when it started from one) and `checkpoint.save`; the newest checkpoint there (or `--checkpoint
DIR`, a checkpoint root or an `iter_*` folder) is merged over its TP ranks and written as config.json +
safetensors that `transformers.AutoModelForCausalLM.from_pretrained` loads. Standard-library imports
only at the top (the CLI builds every parser).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from packcfg.core.cli_args import add_merge_arguments, add_out_argument

DESCRIPTION = "Export a run's newest checkpoint as a Hugging Face folder (config.json + safetensors)."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", help="the run's experiment YAML")
    add_merge_arguments(parser, legacy_config_file=True)
    add_out_argument(parser, help="the Hugging Face folder to write", required=True)
    parser.add_argument(
        "--checkpoint", metavar="DIR", help="checkpoint root or iter_* folder (default: checkpoint.save)"
    )
    parser.add_argument(
        "--dtype", choices=["float32", "bfloat16"], default="float32", help="weights' dtype (default float32)"
    )
    parser.add_argument("--force", action="store_true", help="replace an existing folder not written by packcfg")  # fmt: skip


def run(args: argparse.Namespace) -> int:
    from packcfg.core.config import ConfigError, load_config

    try:
        config = load_config([args.config, *args.config_files], args.overrides)
    except ConfigError as exc:
        print(f"packcfg export-hf: {exc}", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    try:
        written, checkpoint, family = export_from_config(config, args)
    except (ValueError, OSError) as exc:
        print(f"packcfg export-hf: {exc}", file=sys.stderr)
        return 2
    print(
        f"exported {checkpoint} as Hugging Face {family} to {args.out_dir} "
        f"({', '.join(written)}) in {time.perf_counter() - t0:.1f} s"
    )
    return 0


def export_from_config(config: dict, args: argparse.Namespace) -> tuple[list[str], object, str]:
    from pathlib import Path

    import torch

    from packcfg.resources import resolve_path
    from packcfg.train.checkpoint import resolve_checkpoint
    from packcfg.train.hf.config import family_of
    from packcfg.train.hf.convert import export_hf
    from packcfg.train.settings import ModelSettings

    settings = ModelSettings.from_config(config)
    root = args.checkpoint or (config.get("checkpoint") or {}).get("save")
    if not root:
        raise ValueError("no checkpoint: set checkpoint.save or pass --checkpoint DIR")
    root = resolve_path(str(root))
    checkpoint = resolve_checkpoint(root)
    if checkpoint is None:
        raise FileNotFoundError(
            f"{root}: no checkpoint (no latest_checkpointed_iteration.txt or iter_* folder)"
        )
    from packcfg.train.dist_checkpoint import is_dist_checkpoint

    if is_dist_checkpoint(Path(checkpoint)):
        full, iteration = _dist_full_state(Path(checkpoint), settings)
    else:
        full, iteration = _torch_full_state(Path(checkpoint))
    family = family_of(settings)
    written = export_hf(
        full,
        settings,
        family,
        Path(args.out_dir),
        dtype=getattr(torch, args.dtype),
        force=args.force,
        source={"checkpoint": str(checkpoint), "iteration": iteration},
        base_folder=settings.hf_dir,
    )
    return written, checkpoint, family


def _dist_full_state(checkpoint: Path, settings: Any) -> tuple[dict[str, Any], int]:
    """The full (TP 1) model state of a torch_dist checkpoint: dist_checkpointing reshards on load."""
    import dataclasses

    from packcfg.train.checkpoint import load_weights
    from packcfg.train.model import build_model
    from packcfg.train.parallel import distributed

    single = dataclasses.replace(settings, tp=1, cp=1, sequence_parallel=False)
    with distributed(tp=1, cp=1) as layout:
        model = build_model(single, seed=0)
        iteration = load_weights(checkpoint, layout, model)
        return model.state_dict(), iteration


def _torch_full_state(checkpoint: Path) -> tuple[dict[str, Any], int]:
    """The full model state of a ckpt_format: torch checkpoint (one file per TP rank, merged), each file
    read weights-only (`checkpoint.load_file`: nothing in it can run code)."""
    from packcfg.train.checkpoint import load_file
    from packcfg.train.hf.convert import merge_tp_states

    files = sorted(checkpoint.glob("model_optim_tp*.pt"))
    if not files:
        raise FileNotFoundError(f"{checkpoint}: no model_optim_tp*.pt files")
    states = []
    for path in files:
        saved = load_file(path)
        if not isinstance(saved, dict) or not isinstance(saved.get("model"), dict):
            raise ValueError(f"{path}: not a packcfg checkpoint (expected a model entry)")
        states.append(saved)
    tp = states[0].get("tp", len(states))
    if not isinstance(tp, int) or len(states) != tp:
        raise ValueError(f"{checkpoint}: {len(states)} model_optim_tp*.pt files for TP {tp}")
    try:
        full = merge_tp_states([s["model"] for s in states])
    except (KeyError, RuntimeError, TypeError, IndexError) as exc:
        first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
        raise ValueError(
            f"{checkpoint}: its TP ranks' files do not merge ({type(exc).__name__}: {first})"
        ) from None
    iteration = states[0].get("iteration", 0)
    return full, int(iteration) if isinstance(iteration, int) else 0
