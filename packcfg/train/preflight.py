"""What `packcfg train` checks before megatron-core starts, beyond lint: facts of the resolved run that lint
cannot see (the tokenizer file) or that megatron would only report as a raw traceback on every rank.

Standard library only (plus `tokenizers` when a tokenizer file is named), so the parent process of a torchrun
job runs these checks without importing torch.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

from packcfg.resources import resolve_path
from packcfg.train.settings import ModelSettings


def model_problems(model: ModelSettings, kv_channels_set: bool = True) -> list[str]:
    """Shapes megatron-core would reject (or silently mis-build) on every rank."""
    out: list[str] = []
    heads, groups, tp = model.num_attention_heads, model.num_query_groups, model.tp
    if heads % groups:
        out.append(f"model.num_attention_heads {heads} is not divisible by model.num_query_groups {groups}")
    if heads % tp or groups % tp:
        out.append(
            f"model.num_attention_heads {heads} and model.num_query_groups {groups} must both divide by "
            f"tensor_model_parallel_size {tp}"
        )
    if not kv_channels_set and model.hidden_size % heads:
        out.append(
            f"model.hidden_size {model.hidden_size} is not divisible by model.num_attention_heads {heads} "
            "(set model.kv_channels to use another head size)"
        )
    if model.vocab_size % tp:
        out.append(f"model.vocab_size {model.vocab_size} is not divisible by tensor_model_parallel_size {tp}")
    return out


def tokenizer_vocab_size(config: dict[str, Any], base: Path | None = None) -> tuple[Path, int] | None:
    """(tokenizer.json, its vocabulary size incl. added tokens), when the config names a local one."""
    name = (config.get("tokenizer") or {}).get("tokenizer_model")
    if not isinstance(name, str) or not name:
        return None
    path = resolve_path(name, base)
    if path.is_dir():
        path = path / "tokenizer.json"
    if not path.is_file():
        return None  # a hub id or a path on the cluster: nothing to check here
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: unreadable tokenizer ({exc})") from None
    ids = list(((data.get("model") or {}).get("vocab") or {}).values()) if isinstance(data, dict) else []
    ids += [t.get("id") for t in (data.get("added_tokens") or []) if isinstance(t, dict)]
    ids = [i for i in ids if isinstance(i, int)]
    return (path, max(ids) + 1) if ids else None


def vocab_problems(config: dict[str, Any], model: ModelSettings, base: Path | None = None) -> list[str]:
    found = tokenizer_vocab_size(config, base)
    if found is None:
        return []
    path, size = found
    if model.vocab_size < size:
        return [
            f"model.vocab_size {model.vocab_size} is smaller than the tokenizer's vocabulary ({size} ids in "
            f"{path}): token ids >= {model.vocab_size} would index past the embedding"
        ]
    return []


def logger_problems(config: dict[str, Any]) -> list[str]:
    """A logger the config turns on whose package is missing: one line naming the extra to install, so the
    run fails here and not after the model is built (packcfg.train.metrics.open_sinks)."""
    from packcfg.core.extras import EXTRAS, missing_modules

    logger = config.get("logger") or {}
    out = []
    for key, extra in (("tensorboard_dir", "tensorboard"), ("wandb_project", "wandb")):
        if isinstance(logger, dict) and logger.get(key) not in (None, ""):
            missing = missing_modules(EXTRAS[extra])
            if missing:
                out.append(
                    f"logger.{key} is set but {', '.join(missing)} is not installed: "
                    f"pip install 'packcfg[{extra}]'"
                )
    return out


# Config fields that make the executor write or read weights files, which it cannot do under PP yet.
_PP_WEIGHT_FILES = (
    ("checkpoint", "save"),
    ("checkpoint", "load"),
    ("checkpoint", "pretrained_checkpoint"),
    ("model", "hf_path"),
)


# Pipeline layouts megatron-core knows and the executor's 1F1B schedule does not run (it splits the layers
# evenly, `get_num_layers_to_build`, one model chunk per stage).
_PP_LAYOUT_KEYS = (
    "virtual_pipeline_model_parallel_size",
    "pipeline_model_parallel_layout",
    "num_layers_in_first_pipeline_stage",
    "num_layers_in_last_pipeline_stage",
)


def pipeline_problems(config: dict[str, Any], model: ModelSettings) -> list[str]:
    """Pipeline parallelism trains (even split, non-interleaved 1F1B), but checkpoints are per TP rank
    only (every stage would write and read the same file) and Hugging Face weights load into a whole
    model: refuse those fields, and uneven or interleaved layouts, under PP."""
    if model.pp <= 1:
        return []
    section = config.get("model") or {}
    out = []
    for key in _PP_LAYOUT_KEYS:
        value = section.get(key)
        unused = (
            value in (None, "", 1) if key == "virtual_pipeline_model_parallel_size" else value in (None, "")
        )
        if not unused:
            out.append(
                f"model.{key}: {value!r}: the packcfg executor splits the layers evenly over the pipeline "
                "stages without interleaving; unset it"
            )
    for section, key in _PP_WEIGHT_FILES:
        value = (config.get(section) or {}).get(key)
        if value:
            out.append(
                f"{section}.{key}: {value!r} with model.pipeline_model_parallel_size {model.pp}: the packcfg "
                f"executor does not save or load weights under pipeline parallelism yet; unset {section}.{key} "
                "or train with pipeline_model_parallel_size 1"
            )
    return out


def preflight(config: dict[str, Any], base: Path | None = None) -> list[str]:
    """Every problem found, one line each (empty: the run may start)."""
    model = ModelSettings.from_config(config)
    kv_set = (config.get("model") or {}).get("kv_channels") is not None
    return (
        model_problems(model, kv_set)
        + attention_problems(model)
        + pipeline_problems(config, model)
        + vocab_problems(config, model, base)
        + logger_problems(config)
        + mode_problems(config, model)
    )


def attention_problems(model: ModelSettings) -> list[str]:
    """An explicit model.attention_backend that cannot run whatever the device (packcfg.train.varlen; the
    device-dependent half, e.g. flash on a machine without CUDA, is refused when the model is built)."""
    te = model.transformer_impl == "transformer_engine" and importlib.util.find_spec("transformer_engine")
    if model.attention_backend == "fused" and not te:
        return [
            "model.attention_backend: fused is Transformer Engine's fused attention (model.transformer_impl "
            "transformer_engine, with TE installed); the packcfg executor's own attention takes auto, flash or unfused"
        ]
    if model.attention_backend == "flash" and not te and not model.bf16:
        return ["model.attention_backend: flash needs bf16 compute (set model.bf16: true) or use auto"]
    return []


def mode_problems(config: dict[str, Any], model: ModelSettings) -> list[str]:
    """Layouts the executor cannot train in the recipe's mode (DPO: packcfg.train.dpo)."""
    if (config.get("recipe") or {}).get("mode") == "vlm_sft" and model.pp > 1:
        return [
            f"recipe.mode vlm_sft: model.pipeline_model_parallel_size {model.pp} is not supported yet; set it to 1"
        ]
    if (config.get("recipe") or {}).get("mode") == "dpo":
        pp = (
            [
                f"recipe.mode dpo: model.pipeline_model_parallel_size {model.pp} is not supported yet; set it to 1"
            ]
            if model.pp > 1
            else []
        )
        return dpo_refusals(model.cp, "packed" if _offline_packed(config) else "unpacked") + pp
    return []


def _offline_packed(config: dict[str, Any]) -> bool:
    return (config.get("dataset") or {}).get("enable_offline_packing") is True


def dpo_refusals(cp: int, batching: str) -> list[str]:
    """Why a DPO run cannot start with this layout (empty: it can)."""
    out = []
    if cp > 1:
        out.append(
            f"recipe.mode dpo: model.context_parallel_size {cp} is not supported (a sample's log-probability "
            "is summed on one rank; the CP split spreads it over ranks); set model.context_parallel_size: 1"
        )
    if batching != "packed":
        out.append(
            f"recipe.mode dpo: {batching} batches are not supported; DPO trains on offline packs of whole pairs "
            "(dataset.enable_offline_packing: true)"
        )
    return out
