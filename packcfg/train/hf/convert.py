"""Import an HF folder into a built GPTModel (this rank's TP slice), and export full weights to an HF folder.

The family's table (`families`) says which HF tensor(s) make each megatron parameter; `weights` does
the layout changes. Every parameter of the model must be found in the folder, and every tensor of the
folder must be used (tied `lm_head.weight` and persisted RoPE buffers aside), so a mismatched table
or a truncated download is an error, not a silently random layer.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor

from packcfg.core.atomic import OutputRefused, temp_dir, temp_name
from packcfg.train.hf import families
from packcfg.train.hf.config import HFConfigError, hf_config_dict, read_hf_config
from packcfg.train.hf.families import QKV, GatedMLP, Rename
from packcfg.train.hf.weights import (
    merge_qkv,
    read_safetensors,
    split_qkv,
    tp_merge,
    tp_slice,
    write_safetensors,
)

EXPORT_MARKER = "packcfg_export.json"  # written into every export: marks a folder packcfg may replace
# Files of the starting HF folder copied into an export (data, never code): tokenizer and generation settings.
COMPANION_FILES = (
    "generation_config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
    "tokenizer.model", "vocab.json", "merges.txt", "chat_template.jinja", "chat_template.json",
)  # fmt: skip
# config.json keys of the starting folder that the export does not keep (ours, or stale after conversion).
_NOT_KEPT = {"rope_scaling", "rope_parameters", "rope_theta", "torch_dtype", "dtype", "transformers_version"}


def _attention_shape(config: Any) -> tuple[int, int, int]:
    heads = int(config.num_attention_heads)
    groups = int(config.num_query_groups or heads)
    head_dim = int(config.kv_channels or config.hidden_size // heads)
    return heads, groups, head_dim


def hf_to_megatron(
    tensors: dict[str, Tensor], family: str, names: list[str], shape: tuple[int, int, int], where: Path
) -> dict[str, Tensor]:
    """Full (TP 1 layout) megatron tensors for `names` from an HF state dict; checks nothing is left over."""
    table = families.TABLES[family]
    used: set[str] = set()
    out: dict[str, Tensor] = {}
    for name in names:
        entry = families.lookup(table, name)
        if entry is None:
            raise HFConfigError(f"{where}: no {family} mapping for megatron parameter {name}")
        missing = [n for n in families.hf_names(entry) if n not in tensors]
        if missing:
            raise HFConfigError(f"{where}: tensor {missing[0]} is missing (needed for {name})")
        used.update(families.hf_names(entry))
        if isinstance(entry, Rename):
            out[name] = tensors[entry.hf]
        elif isinstance(entry, QKV):
            out[name] = merge_qkv(tensors[entry.q], tensors[entry.k], tensors[entry.v], *shape)
        else:
            out[name] = torch.cat([tensors[entry.gate], tensors[entry.up]], dim=0)
    left = [
        n for n in tensors
        if n not in used and not n.endswith(families.IGNORED_HF_SUFFIXES)
        and not (n == "lm_head.weight" and "output_layer.weight" not in names)
    ]  # fmt: skip
    if left:
        raise HFConfigError(
            f"{where}: tensor {sorted(left)[0]} has no place in the {family} model ({len(left)} unused)"
        )
    return out


def megatron_to_hf(state: dict[str, Tensor], family: str, shape: tuple[int, int, int]) -> dict[str, Tensor]:
    """HF tensors from a full (TP 1 layout) megatron state dict (parameters only)."""
    table = families.TABLES[family]
    out: dict[str, Tensor] = {}
    for name, value in state.items():
        if name.endswith("_extra_state"):
            continue
        entry = families.lookup(table, name)
        if entry is None:
            raise HFConfigError(f"no {family} mapping for megatron parameter {name}")
        if isinstance(entry, Rename):
            out[entry.hf] = value
        elif isinstance(entry, QKV):
            out[entry.q], out[entry.k], out[entry.v] = split_qkv(value, *shape)
        elif isinstance(entry, GatedMLP):
            out[entry.gate], out[entry.up] = (t.contiguous() for t in value.chunk(2, dim=0))
    return out


def check_fits(tensors: dict[str, Tensor], config: dict[str, Any]) -> None:
    """Refuse an export whose tensors are not exactly the model its config.json describes.

    The judge is `transformers` itself: the config's model is built on the meta device (no memory, no
    weights) and its state dict names and shapes are compared, so a checkpoint trained from another
    folder (another family, vocab or width) is an error here, not a folder that loads with random or
    missing layers."""
    from transformers import AutoConfig, AutoModelForCausalLM

    hf_config = AutoConfig.for_model(**config)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(hf_config)
    expected = {n: tuple(t.shape) for n, t in model.state_dict().items()}
    if config.get("tie_word_embeddings"):
        expected.pop("lm_head.weight", None)
    what = f"the {config.get('model_type')} model the config describes"
    hint = " (was the checkpoint trained from another model.hf_path or model shape?)"
    for name, shape in sorted(expected.items()):
        if name not in tensors:
            raise HFConfigError(f"export: the checkpoint has no tensor for {name}, which {what} needs{hint}")
        if tuple(tensors[name].shape) != shape:
            raise HFConfigError(
                f"export: {name} has shape {tuple(tensors[name].shape)}, {what} needs {shape}{hint}"
            )
    extra = sorted(set(tensors) - set(expected))
    if extra:
        raise HFConfigError(f"export: tensor {extra[0]} has no place in {what}{hint}")


def _tp() -> tuple[int, int]:
    from packcfg.train.mcore_compat import parallel_state

    if not parallel_state.model_parallel_is_initialized():
        return 1, 0
    return (
        parallel_state.get_tensor_model_parallel_world_size(),
        parallel_state.get_tensor_model_parallel_rank(),
    )


@torch.no_grad()
def load_hf_weights(folder: Path, model: torch.nn.Module, master: Any = None) -> str:
    """Copy an HF folder's weights into `model` (this TP rank's slice of each); returns the family.

    `master`: the bf16 run's `MasterWeights`, whose fp32 copies get the folder's full-precision values
    (copying them from the bf16 model would round them)."""
    hf = read_hf_config(folder)
    params = dict(model.named_parameters())
    masters: dict[str, torch.nn.Parameter] = {}
    if master is not None:
        trainable = [n for n, p in model.named_parameters() if p.requires_grad]
        masters = dict(zip(trainable, master.master_params, strict=True))
    full = hf_to_megatron(
        read_safetensors(folder), hf.family, list(params), _attention_shape(model.config), folder
    )
    tp, rank = _tp()
    for name, param in params.items():
        part = tp_slice(name, full[name], tp, rank)
        if tuple(part.shape) != tuple(param.shape):
            raise HFConfigError(
                f"{folder}: {name} has shape {tuple(part.shape)} for TP rank {rank}, the model {tuple(param.shape)}"
            )
        param.copy_(part.to(dtype=param.dtype, device=param.device))
        if name in masters:
            masters[name].copy_(part.to(dtype=masters[name].dtype, device=masters[name].device))
    return hf.family


@torch.no_grad()
def full_state(model: torch.nn.Module) -> dict[str, Tensor]:
    """Every parameter at full size (TP shards gathered over the TP group), on CPU."""
    from packcfg.train.mcore_compat import parallel_state

    tp, _ = _tp()
    group = parallel_state.get_tensor_model_parallel_group() if tp > 1 else None
    out = {}
    for name, p in model.named_parameters():
        value = p.detach()
        if tp > 1 and getattr(p, "tensor_model_parallel", False):
            parts = [torch.empty_like(value) for _ in range(tp)]
            dist.all_gather(parts, value.contiguous(), group=group)
            value = tp_merge(name, parts)
        out[name] = value.float().cpu() if value.dtype != torch.float32 else value.cpu()
    return out


def merge_tp_states(states: list[dict[str, Any]]) -> dict[str, Tensor]:
    """Full tensors from per-TP-rank state dicts (rank order), `_extra_state` entries dropped."""
    names = [n for n, v in states[0].items() if isinstance(v, Tensor) and not n.endswith("_extra_state")]
    return {n: tp_merge(n, [s[n] for s in states]) for n in names}


def export_hf(
    state: dict[str, Tensor],
    settings: Any,
    family: str,
    out_dir: Path,
    *,
    dtype: torch.dtype = torch.float32,
    force: bool = False,
    source: dict[str, Any] | None = None,
    base_folder: Path | None = None,
) -> list[str]:
    """Write `state` (full megatron parameters) and its config.json as an HF folder at `out_dir`.

    `base_folder`: the HF folder the run started from; its config.json keys that are not the model's
    shape or RoPE (token ids, max_position_embeddings, ...) are kept, and its tokenizer and generation
    files (`COMPANION_FILES`, plain files only) are copied. Written into a temporary folder beside
    `out_dir` and renamed into place when complete. An existing `out_dir` is replaced only when it is
    empty or an earlier packcfg export, or with `force`."""
    out_dir = Path(out_dir)
    if out_dir.is_symlink() or (out_dir.exists() and not out_dir.is_dir()):
        raise OutputRefused(f"export folder {out_dir}: exists and is not a folder; refusing to replace it")
    if out_dir.is_dir() and any(out_dir.iterdir()) and not (out_dir / EXPORT_MARKER).is_file() and not force:
        raise OutputRefused(
            f"export folder {out_dir}: exists and was not written by packcfg; refusing to overwrite it "
            "(pass --force to replace it)"
        )
    shape = (settings.num_attention_heads, settings.num_query_groups, settings.kv_channels)
    tensors = {k: v.to(dtype) for k, v in megatron_to_hf(state, family, shape).items()}
    config = hf_config_dict(settings, family, dtype=str(dtype).removeprefix("torch."))
    check_fits(tensors, config)
    companions: list[Path] = []
    if base_folder is not None:
        base = read_hf_config(base_folder).raw
        kept = {k: v for k, v in base.items() if k not in _NOT_KEPT}
        config = {
            **kept,
            **config,
            "max_position_embeddings": base.get("max_position_embeddings", config["max_position_embeddings"]),
        }
        companions = [
            base_folder / n for n in COMPANION_FILES
            if (base_folder / n).is_file() and not (base_folder / n).is_symlink()
        ]  # fmt: skip
    with temp_dir(out_dir) as tmp:
        files = write_safetensors(tensors, tmp)
        for path in companions:
            shutil.copyfile(path, tmp / path.name)
            files.append(path.name)
        for name in files:
            os.chmod(tmp / name, 0o644)
        (tmp / "config.json").write_text(
            json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8"
        )
        marker = {"family": family, "files": files, **(source or {})}
        (tmp / EXPORT_MARKER).write_text(
            json.dumps(marker, indent=2, sort_keys=True) + "\n", encoding="utf-8"
        )
        os.chmod(tmp, 0o755)
        old = None
        if out_dir.exists():
            old = temp_name(out_dir)
            os.rename(out_dir, old)
        os.rename(tmp, out_dir)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    return ["config.json", *files, EXPORT_MARKER]
