"""Tensors in and out of HF folders (safetensors only), and the layout changes between HF and megatron.

Reading weights never runs code: only `*.safetensors` (one file, or shards listed in
`model.safetensors.index.json`) are read; a folder holding only pickled `pytorch_model*.bin` weights is
refused with a message.

Layouts, as megatron-core stores them and Megatron Bridge converts them (`merge_qkv_weights`,
`split_qkv_weights`, `GatedMLPMapping` in `src/megatron/bridge/models/conversion/param_mapping.py`, commit
067f987): `linear_qkv` rows are grouped per query group, `[q heads of group 0, k0, v0, q heads of group 1,
k1, v1, ...]`; `linear_fc1` rows are `[gate; up]`. Under tensor parallelism each column-parallel weight
is cut into TP contiguous row blocks (whole query groups for QKV), except `linear_fc1`, where rank r holds
`[gate_r; up_r]`; row-parallel weights (`linear_proj`, `linear_fc2`) are cut along columns.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch
from torch import Tensor

from packcfg.train.hf.config import HFConfigError

INDEX = "model.safetensors.index.json"


def read_safetensors(folder: Path) -> dict[str, Tensor]:
    """Every tensor of an HF folder, by name (safetensors only; shards through the index)."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    index = folder / INDEX
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise HFConfigError(f"{index}: not a safetensors index ({exc})") from None
        files = sorted(set(weight_map.values()))
        for name in files:
            if not isinstance(name, str) or Path(name).name != name or not name.endswith(".safetensors"):
                raise HFConfigError(f"{index}: shard name {name!r} is not a .safetensors file in the folder")
    else:
        files = sorted(p.name for p in folder.glob("*.safetensors"))
    if not files:
        pickled = sorted(p.name for p in folder.glob("*.bin")) + sorted(p.name for p in folder.glob("*.pt"))
        if pickled:
            raise HFConfigError(
                f"{folder}: only pickled weights ({pickled[0]}); packcfg reads safetensors only "
                "(convert with transformers: save_pretrained(..., safe_serialization=True))"
            )
        raise HFConfigError(f"{folder}: no *.safetensors weights")
    tensors: dict[str, Tensor] = {}
    for name in files:
        path = folder / name
        try:
            part = load_file(str(path), device="cpu")
        except (OSError, SafetensorError) as exc:
            raise HFConfigError(f"{path}: cannot read safetensors ({exc})") from None
        tensors.update(part)
    return tensors


def write_safetensors(tensors: dict[str, Tensor], folder: Path, shard_bytes: int = 4 << 30) -> list[str]:
    """Write tensors as `model.safetensors`, or as shards plus `model.safetensors.index.json` when they
    exceed `shard_bytes` (the layout `from_pretrained` reads). Returns the file names written."""
    from safetensors.torch import save_file

    names = sorted(tensors)
    shards: list[list[str]] = [[]]
    size = 0
    for name in names:
        n = tensors[name].numel() * tensors[name].element_size()
        if shards[-1] and size + n > shard_bytes:
            shards.append([])
            size = 0
        shards[-1].append(name)
        size += n
    meta = {"format": "pt"}
    if len(shards) == 1:
        save_file(
            {k: tensors[k].contiguous() for k in names}, str(folder / "model.safetensors"), metadata=meta
        )
        return ["model.safetensors"]
    files, weight_map = [], {}
    for i, shard in enumerate(shards, 1):
        file = f"model-{i:05d}-of-{len(shards):05d}.safetensors"
        save_file({k: tensors[k].contiguous() for k in shard}, str(folder / file), metadata=meta)
        files.append(file)
        weight_map.update(dict.fromkeys(shard, file))
    total = sum(t.numel() * t.element_size() for t in tensors.values())
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (folder / INDEX).write_text(json.dumps(index, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return [*files, INDEX]


def merge_qkv(q: Tensor, k: Tensor, v: Tensor, heads: int, groups: int, head_dim: int) -> Tensor:
    """HF q/k/v projections (weights `[out, hidden]` or biases `[out]`) -> megatron's `linear_qkv`."""
    per_group = heads // groups
    tail = q.shape[1:]
    qg = q.reshape(groups, per_group * head_dim, *tail)
    kg = k.reshape(groups, head_dim, *tail)
    vg = v.reshape(groups, head_dim, *tail)
    return torch.cat([qg, kg, vg], dim=1).reshape(-1, *tail)


def split_qkv(qkv: Tensor, heads: int, groups: int, head_dim: int) -> tuple[Tensor, Tensor, Tensor]:
    """megatron's `linear_qkv` -> HF q, k, v (the inverse of `merge_qkv`)."""
    per_group = heads // groups
    tail = qkv.shape[1:]
    g = qkv.reshape(groups, (per_group + 2) * head_dim, *tail)
    q, k, v = torch.split(g, [per_group * head_dim, head_dim, head_dim], dim=1)
    return (
        q.reshape(heads * head_dim, *tail).contiguous(),
        k.reshape(groups * head_dim, *tail).contiguous(),
        v.reshape(groups * head_dim, *tail).contiguous(),
    )


# ---- tensor parallelism: which megatron parameters are cut, and along which dimension

_COLUMN = (
    "linear_qkv.weight",
    "linear_qkv.bias",
    "linear_fc1.weight",
    "word_embeddings.weight",
    "output_layer.weight",
)
_ROW = ("linear_proj.weight", "linear_fc2.weight")


def partition_dim(name: str) -> int | None:
    """0 for column-parallel (and vocab-parallel) weights, 1 for row-parallel ones, None if replicated."""
    if name.endswith(_COLUMN):
        return 0
    if name.endswith(_ROW):
        return 1
    return None


def _gated(name: str) -> bool:
    return name.endswith("linear_fc1.weight")


def tp_slice(name: str, full: Tensor, tp: int, rank: int) -> Tensor:
    """This TP rank's part of a full (TP 1 layout) megatron parameter."""
    dim = partition_dim(name)
    if tp == 1 or dim is None:
        return full
    if full.shape[dim] % (2 * tp if _gated(name) else tp):
        raise HFConfigError(f"{name}: dimension {full.shape[dim]} does not split over TP {tp}")
    if _gated(name):
        gate, up = full.chunk(2, dim=0)
        return torch.cat([gate.chunk(tp, dim=0)[rank], up.chunk(tp, dim=0)[rank]], dim=0)
    return full.chunk(tp, dim=dim)[rank]


def tp_merge(name: str, parts: list[Tensor]) -> Tensor:
    """The full (TP 1 layout) parameter from every TP rank's part, in rank order."""
    dim = partition_dim(name)
    if len(parts) == 1 or dim is None:
        return parts[0]
    if _gated(name):
        halves = [p.chunk(2, dim=0) for p in parts]
        return torch.cat([h[0] for h in halves] + [h[1] for h in halves], dim=0)
    return torch.cat(parts, dim=dim)


def fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
