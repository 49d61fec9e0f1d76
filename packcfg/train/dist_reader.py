"""Reading a `torch_dist` checkpoint without unpickling anything that is not on an allow-list.

A torch_dist checkpoint directory (megatron-core 0.16.1 `dist_checkpointing` over torch 2.13's
`torch.distributed.checkpoint`) holds:
    metadata.json   JSON: backend name and version (megatron reads it with `json`)
    .metadata       a pickle of torch's `Metadata`: every entry's shape, dtype and place in the files
    common.pt       `torch.save` of the state every rank shares
    __R_I.distcp    records: each tensor a `torch.save` of the tensor, each ShardedObject (a layer's
                    `_extra_state`, Bridge's RNG state) a `torch.save` of a Python object

What torch and megatron would unpickle without a check, and what packcfg does instead:

- `.metadata`: torch's `FileSystemReader.read_metadata` calls a bare `pickle.load`, and megatron-core's
  `TorchDistLoadShardedStrategy` calls it in `load`, `load_tensors_metadata` and `load_sharded_metadata`.
  packcfg reads the file once, before torch or megatron sees the folder, with `MetadataUnpickler`, whose
  `find_class` admits only `ALLOWED` (the classes torch writes into it: read from torch 2.13's
  `distributed/checkpoint/metadata.py` and `filesystem.py` and checked against the files packcfg and
  megatron-core write) and torch dtypes; then checks its structure (`check_metadata`). The checked
  `Metadata` is handed to `CheckedReader`, whose `read_metadata` returns it and never opens the file,
  and `CheckedTorchDistLoad` (megatron's torch_dist load strategy, its `load` rebuilt on megatron's own
  key-translation helpers) loads through that reader only. So no `pickle.load` of `.metadata` is left
  unchecked: the validated object is the one torch and megatron use, not a second read of the file.
- byte records in `*.distcp`: torch's `DefaultLoadPlanner.load_bytes` unpickles them with
  `weights_only=False`; only a storage reader's `read_data` calls it. packcfg asks for no byte record
  (`tensors_only` leaves ShardedObjects out of what it loads), and `CheckedReader.read_data` refuses one
  (a metadata that files a tensor as bytes) instead of handing it to the planner.
- tensor records: `torch.load(weights_only=True)` in `CheckedReader.read_data`, every failure one line
  naming the file.
- `common.pt`: `checkpoint.load_file` (`weights_only=True`), through `SafeCommonLoad` (dist_checkpoint.py).
- `_extra_state`: Transformer Engine's `set_extra_state` unpickles a non-empty one; packcfg never loads
  it from a checkpoint (it trains no FP8, where the state is empty), see `checkpoint.keep_own_extra_state`.
"""

from __future__ import annotations

import io
import pathlib
import pickle
from pathlib import Path
from typing import Any

import torch
from torch.distributed.checkpoint import FileSystemReader
from torch.distributed.checkpoint.filesystem import _StorageInfo
from torch.distributed.checkpoint.metadata import (
    _MEM_FORMAT_ENCODING,
    BytesStorageMetadata,
    ChunkStorageMetadata,
    Metadata,
    MetadataIndex,
    StorageMeta,
    TensorProperties,
    TensorStorageMetadata,
)
from torch.serialization import _get_layout

from packcfg.train.run_folder import CheckpointError

METADATA = ".metadata"

# (module, name) -> what it unpickles to. Nothing here runs code when called: dataclass constructors,
# an Enum lookup, torch.Size, a lookup of torch's layout objects by name, and a pure path.
ALLOWED: dict[tuple[str, str], Any] = {
    ("torch.distributed.checkpoint.metadata", "Metadata"): Metadata,
    ("torch.distributed.checkpoint.metadata", "TensorStorageMetadata"): TensorStorageMetadata,
    ("torch.distributed.checkpoint.metadata", "BytesStorageMetadata"): BytesStorageMetadata,
    ("torch.distributed.checkpoint.metadata", "ChunkStorageMetadata"): ChunkStorageMetadata,
    ("torch.distributed.checkpoint.metadata", "TensorProperties"): TensorProperties,
    ("torch.distributed.checkpoint.metadata", "MetadataIndex"): MetadataIndex,
    ("torch.distributed.checkpoint.metadata", "StorageMeta"): StorageMeta,
    ("torch.distributed.checkpoint.metadata", "_MEM_FORMAT_ENCODING"): _MEM_FORMAT_ENCODING,
    ("torch.distributed.checkpoint.filesystem", "_StorageInfo"): _StorageInfo,
    ("torch", "Size"): torch.Size,
    ("torch.serialization", "_get_layout"): _get_layout,  # TensorProperties.layout (copyreg in torch)
    # StorageMeta.checkpoint_id: the save folder as a path (pathlib._local on Python 3.13)
    ("pathlib", "PosixPath"): pathlib.PurePosixPath,
    ("pathlib", "PurePosixPath"): pathlib.PurePosixPath,
    ("pathlib._local", "PosixPath"): pathlib.PurePosixPath,
    ("pathlib._local", "PurePosixPath"): pathlib.PurePosixPath,
}


class _Refused(pickle.UnpicklingError):
    def __init__(self, what: str) -> None:
        super().__init__(what)
        self.what = what


class MetadataUnpickler(pickle.Unpickler):
    """`pickle.Unpickler` that resolves only `ALLOWED` globals and torch dtypes (`torch.float32`, ...)."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in ALLOWED:
            return ALLOWED[module, name]
        if module == "torch" and isinstance(getattr(torch, name, None), torch.dtype):
            return getattr(torch, name)
        raise _Refused(f"{module}.{name}")


def read_metadata(directory: Path) -> Metadata:
    """The checkpoint's `.metadata`, read with `MetadataUnpickler` and checked; one-line CheckpointError
    otherwise (a global off the allow-list is named)."""
    path = directory / METADATA
    if not path.is_file():
        raise CheckpointError(f"{directory}: incomplete torch_dist checkpoint (no {METADATA} file)")
    try:
        with open(path, "rb") as fh:
            metadata = MetadataUnpickler(fh).load()
    except _Refused as exc:
        raise CheckpointError(
            f"{path}: refused: it holds {exc.what}, which is not torch checkpoint metadata and could run "
            "code when loaded; packcfg reads .metadata with an allow-list"
        ) from None
    except OSError as exc:
        raise CheckpointError(f"{path}: cannot read ({exc.strerror or exc})") from None
    except Exception as exc:  # noqa: BLE001 - any malformed pickle is one line
        first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
        raise CheckpointError(
            f"{path}: unreadable torch_dist metadata (truncated or corrupt? {first})"
        ) from None
    check_metadata(metadata, path)
    if metadata.storage_meta is None:  # as torch's read_metadata does
        metadata.storage_meta = StorageMeta()
    return metadata


def _is_size(value: Any) -> bool:
    return isinstance(value, torch.Size) and all(isinstance(n, int) and n >= 0 for n in value)


def check_metadata(metadata: Any, path: Path) -> None:
    """The structure torch's loader relies on: tensor or bytes entries, and storage records that are
    byte ranges of `.distcp` files in the checkpoint's own folder."""

    def bad(what: str) -> CheckpointError:
        return CheckpointError(f"{path}: not torch_dist metadata ({what})")

    if not isinstance(metadata, Metadata):
        raise bad(f"holds a {type(metadata).__name__}, not a Metadata")
    if not isinstance(metadata.state_dict_metadata, dict):
        raise bad("state_dict_metadata is not a mapping")
    for key, entry in metadata.state_dict_metadata.items():
        if not isinstance(key, str):
            raise bad(f"entry key {key!r} is not a string")
        if isinstance(entry, BytesStorageMetadata):
            continue
        if not isinstance(entry, TensorStorageMetadata):
            raise bad(f"entry {key} is a {type(entry).__name__}")
        if not (
            isinstance(entry.properties, TensorProperties)
            and isinstance(entry.properties.dtype, torch.dtype)
            and _is_size(entry.size)
            and isinstance(entry.chunks, list)
            and all(
                isinstance(c, ChunkStorageMetadata) and _is_size(c.offsets) and _is_size(c.sizes)
                for c in entry.chunks
            )
        ):
            raise bad(f"entry {key} has a malformed shape, dtype or chunk list")
    if not isinstance(metadata.storage_data, dict):
        raise bad("storage_data is not a mapping")
    for index, info in metadata.storage_data.items():
        if not isinstance(index, MetadataIndex) or not isinstance(info, _StorageInfo):
            raise bad("a storage record is not a MetadataIndex -> _StorageInfo pair")
        name = info.relative_path
        if not (
            isinstance(name, str)
            and name == Path(name).name
            and name.endswith(".distcp")
            and not name.startswith(".")
            and "\\" not in name
        ):
            raise bad(f"record {index.fqn} points at {name!r}, not a .distcp file in the checkpoint folder")
        if not all(
            isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in (info.offset, info.length)
        ):
            raise bad(f"record {index.fqn} has a malformed byte range")
    if metadata.storage_meta is not None and not isinstance(metadata.storage_meta, StorageMeta):
        raise bad("storage_meta is not a StorageMeta")


class CheckedReader(FileSystemReader):
    """torch's FileSystemReader over metadata already read by `read_metadata`: never unpickles
    `.metadata` again, loads tensor records weights-only and refuses byte records (pickled objects)."""

    def __init__(self, directory: Path, metadata: Metadata) -> None:
        super().__init__(str(directory))
        self.directory = Path(directory)
        self.checked = metadata

    def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
        assert self.checked.storage_meta is not None
        self.checked.storage_meta.load_id = self.load_id
        return self.checked

    def read_data(self, plan: Any, planner: Any) -> Any:
        from torch.distributed._shard._utils import narrow_tensor_by_index
        from torch.distributed.checkpoint.planner import LoadItemType
        from torch.futures import Future

        from packcfg.train.checkpoint_files import load_file

        per_file: dict[str, list[Any]] = {}
        for item in plan.items:
            if item.type == LoadItemType.BYTE_IO:
                raise CheckpointError(
                    f"{self.directory / METADATA}: entry {item.storage_index.fqn} is a pickled object "
                    "record; packcfg loads tensors only from .distcp files"
                )
            per_file.setdefault(self.storage_data[item.storage_index].relative_path, []).append(item)
        for name, items in per_file.items():
            path = self.directory / name
            if not path.is_file():
                raise CheckpointError(f"{path}: missing (named by {self.directory / METADATA})")
            with open(path, "rb") as fh:
                for item in items:
                    info = self.storage_data[item.storage_index]
                    fh.seek(info.offset)
                    data = fh.read(info.length)
                    if len(data) != info.length:
                        raise CheckpointError(
                            f"{path}: truncated (record {item.storage_index.fqn} ends past the file)"
                        )
                    try:  # torch's registered stream transforms (none unless a writer asked for one)
                        data = self.transforms.transform_load_stream(
                            item, info.transform_descriptors or (), io.BytesIO(data)
                        ).read()
                    except Exception as exc:  # noqa: BLE001 - an unknown or corrupt transform is one line
                        raise CheckpointError(
                            f"{path}: record {item.storage_index.fqn}: cannot undo its transform "
                            f"{info.transform_descriptors!r} ({type(exc).__name__})"
                        ) from None
                    tensor = load_file(path, io.BytesIO(data), record=item.storage_index.fqn)
                    if not isinstance(tensor, torch.Tensor):
                        raise CheckpointError(
                            f"{path}: record {item.storage_index.fqn} is a {type(tensor).__name__}, not a tensor"
                        )
                    try:
                        tensor = narrow_tensor_by_index(tensor, item.storage_offsets, item.lengths)
                    except (RuntimeError, IndexError):
                        raise CheckpointError(
                            f"{path}: record {item.storage_index.fqn} is smaller than {METADATA} says"
                        ) from None
                    target = planner.resolve_tensor(item).detach()
                    if target.size() != tensor.size():
                        raise CheckpointError(
                            f"{path}: record {item.storage_index.fqn} has shape {tuple(tensor.size())}, "
                            f"the model's slice {tuple(target.size())}"
                        )
                    target.copy_(tensor)
                    planner.commit_tensor(item, target)
        done: Future = Future()
        done.set_result(None)
        return done


def tensors_only(sharded: dict[str, Any]) -> dict[str, Any]:
    """A model's sharded state dict without its ShardedObjects (layers' `_extra_state`): what packcfg
    loads, so no byte record of a .distcp file is ever read."""
    from megatron.core.dist_checkpointing.mapping import ShardedObject

    return {k: v for k, v in sharded.items() if not isinstance(v, ShardedObject)}


def checked_load_strategy(directory: Path, metadata: Metadata) -> Any:
    """megatron-core's torch_dist load strategy reading through `CheckedReader` only."""
    from megatron.core.dist_checkpointing.dict_utils import nested_values
    from megatron.core.dist_checkpointing.mapping import ShardedObject, ShardedTensor
    from megatron.core.dist_checkpointing.strategies.torch import (
        MCoreLoadPlanner,
        TorchDistLoadShardedStrategy,
        _replace_sharded_keys_with_state_dict_keys,
        _replace_state_dict_keys_with_sharded_keys,
        _restore_dict_types,
        _unwrap_pyt_sharded_tensor,
        mcore_to_pyt_state_dict,
    )
    from torch.distributed import checkpoint as dcp

    class CheckedTorchDistLoad(TorchDistLoadShardedStrategy):
        """`TorchDistLoadShardedStrategy.load` of megatron-core 0.16.1 (strategies/torch.py), step for
        step, with `CheckedReader` in place of its `_get_filesystem_reader` (a bare pickle.load)."""

        def load(self, sharded_state_dict: Any, checkpoint_dir: Any) -> Any:
            tensors = [t for t in nested_values(sharded_state_dict) if isinstance(t, ShardedTensor)]
            for t in tensors:  # torch's planner would read the record as bytes and unpickle it
                if isinstance(metadata.state_dict_metadata.get(t.key), BytesStorageMetadata):
                    raise CheckpointError(
                        f"{directory / METADATA}: entry {t.key} is a pickled object record where the model "
                        "has a tensor; packcfg loads tensors only from .distcp files"
                    )
            original = sharded_state_dict
            sharded, flat_mapping, rename_mapping = _replace_state_dict_keys_with_sharded_keys(
                sharded_state_dict
            )
            pyt_state_dict = mcore_to_pyt_state_dict(sharded, True)
            reader = CheckedReader(directory, metadata)
            dcp.load_state_dict(
                pyt_state_dict,
                reader,
                planner=MCoreLoadPlanner(
                    shapes_validation_sharded_tensors=[t for t in tensors if not t.allow_shape_mismatch],
                    allow_shape_mismatch_sharded_tensors={
                        t.key: t for t in tensors if t.allow_shape_mismatch
                    },
                ),
            )
            self.cached_global_metadata = reader.read_metadata()
            loaded = {k: _unwrap_pyt_sharded_tensor(v) for k, v in pyt_state_dict.items()}
            loaded = _replace_sharded_keys_with_state_dict_keys(loaded, flat_mapping, rename_mapping)
            _restore_dict_types(loaded, original)
            return loaded

        def load_tensors_metadata(self, checkpoint_dir: Any, metadata_: Metadata | None = None) -> Any:
            return super().load_tensors_metadata(checkpoint_dir, metadata_ or metadata)

        def load_sharded_metadata(self, checkpoint_dir: Any) -> Any:
            out = {}
            for key, entry in metadata.state_dict_metadata.items():
                if isinstance(entry, BytesStorageMetadata):
                    obj = ShardedObject.empty_from_unique_key(key)
                    out[obj.unique_key] = obj
            out.update(self.load_tensors_metadata(checkpoint_dir, metadata))
            return out

    return CheckedTorchDistLoad()
