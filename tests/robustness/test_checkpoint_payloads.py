"""No checkpoint file runs code (issue 22): a payload planted in every file of every format packcfg reads,
on every entry point, never runs, and each refusal is one line naming the file; real checkpoints still
load and resume exactly; an HF config.json too large for this machine is refused with the estimate.

The payload is a pickle whose `__reduce__` opens (creates) a marker file; the controls below show that the
same bytes do create it when torch's or megatron's own loaders unpickle them, so "nothing ran" is a real
assertion. Entry points: `train --resume` (load_checkpoint), `checkpoint.pretrained_checkpoint`
(load_weights), `export-hf` and the DPO reference model (the run's initial weights, rebuilt on resume).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from packcfg.train.data import PackedParquet, write_packed_parquet
from packcfg.train.run_folder import CheckpointError
from tests.train.cases import REPO_ROOT, greedy_packs, synthetic_samples, tiny_config

SAVE_AT, STEPS = 2, 4
ITER = f"iter_{SAVE_AT:07d}"
ENV = {**os.environ, "PYTHONWARNINGS": "ignore", "OMP_NUM_THREADS": "1"}


class Payload:
    """Unpickling this creates `marker` (what a crafted checkpoint file would do)."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def torch_payload(marker: Path, wrap=lambda p: {"x": p}) -> bytes:
    buf = io.BytesIO()
    torch.save(wrap(Payload(marker)), buf)
    return buf.getvalue()


def _config(save: Path, iters: int, fmt: str = "torch_dist", bf16: bool = False, **checkpoint):
    config = tiny_config(
        train={"train_iters": iters, "global_batch_size": 4},
        scheduler={"lr_warmup_iters": 1, "lr_decay_iters": STEPS},
        checkpoint={"save": str(save), "save_interval": SAVE_AT, "ckpt_format": fmt, **checkpoint},
    )
    config["model"]["bf16"] = bf16
    return config


def _train(config, data: Path, out: Path, **options):
    from packcfg.train.loop import TrainOptions, train

    return train(config, TrainOptions(units=PackedParquet(data), output_dir=out, progress=False, **options))


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """Clean 2-step checkpoints (torch_dist fp32 and bf16, torch), the data, and a straight 4-step run."""
    root = tmp_path_factory.mktemp("saved")
    data = write_packed_parquet(root / "train.parquet", greedy_packs(synthetic_samples(40, seed=7), 64))
    for name, fmt, bf16 in (("torch_dist", "torch_dist", False), ("bf16", "torch_dist", True), ("torch", "torch", False)):  # fmt: skip
        _train(_config(root / name, SAVE_AT, fmt, bf16), data, root / f"out_{name}")
    straight = _train(_config(root / "straight", STEPS), data, root / "out_straight").losses
    return {"root": root, "data": data, "straight": straight}


def _copy(saved, name: str, dest: Path) -> Path:
    shutil.copytree(saved["root"] / name, dest)
    return dest


# ---- planting: each returns the file that now holds the payload


def _rewrite_metadata(directory: Path, change) -> None:
    path = directory / ".metadata"
    with open(path, "rb") as fh:
        metadata = pickle.load(fh)  # the test's own clean file
    change(metadata)
    with open(path, "wb") as fh:
        pickle.dump(metadata, fh)


def _append_record(directory: Path, blob: bytes) -> tuple[str, int]:
    distcp = next(directory.glob("*.distcp"))
    offset = distcp.stat().st_size
    with open(distcp, "ab") as fh:
        fh.write(blob)
    return distcp.name, offset


def _point(metadata, fqn_end: str, name: str, offset: int, length: int) -> str:
    for index, info in metadata.storage_data.items():
        if index.fqn.endswith(fqn_end):
            info.relative_path, info.offset, info.length = name, offset, length
            return index.fqn
    raise AssertionError(f"no record ending {fqn_end}")


def plant_metadata_whole(d: Path, marker: Path) -> Path:
    (d / ".metadata").write_bytes(pickle.dumps(Payload(marker)))
    return d / ".metadata"


def plant_metadata_nested(d: Path, marker: Path) -> Path:
    def change(md):
        md.storage_meta.save_id = Payload(marker)  # a valid Metadata carrying one object off the list

    _rewrite_metadata(d, change)
    return d / ".metadata"


def plant_common_pt(d: Path, marker: Path) -> Path:
    (d / "common.pt").write_bytes(torch_payload(marker, lambda p: {"iteration": SAVE_AT, "x": p}))
    return d / "common.pt"


def plant_distcp_tensor_record(d: Path, marker: Path) -> Path:
    """A tensor's record in the .distcp file replaced by a pickle carrying code."""
    blob = torch_payload(marker, lambda p: p)
    name, offset = _append_record(d, blob)
    _rewrite_metadata(d, lambda md: _point(md, "word_embeddings.weight", name, offset, len(blob)))
    return d / name


def plant_distcp_bytes_for_tensor(d: Path, marker: Path) -> Path:
    """.metadata files a tensor as a pickled-object record (torch's planner would unpickle it unchecked)."""
    from torch.distributed.checkpoint.metadata import BytesStorageMetadata

    blob = torch_payload(marker, lambda p: p)
    name, offset = _append_record(d, blob)

    def change(md):
        fqn = _point(md, "word_embeddings.weight", name, offset, len(blob))
        md.state_dict_metadata[fqn] = BytesStorageMetadata()

    _rewrite_metadata(d, change)
    return d / ".metadata"


def plant_distcp_object_record(d: Path, marker: Path) -> Path:
    """A layer's `_extra_state` object record (a pickle torch would load with weights_only=False)."""
    blob = torch_payload(marker, lambda p: [p])
    name, offset = _append_record(d, blob)
    _rewrite_metadata(d, lambda md: _point(md, "linear_proj._extra_state/shard_0_2", name, offset, len(blob)))
    return d / name


def plant_model_file(d: Path, marker: Path) -> Path:
    path = d / "model_optim_tp00.pt"
    path.write_bytes(torch_payload(marker, lambda p: {"tp": 1, "iteration": SAVE_AT, "model": {"x": p}}))
    return path


def plant_rng_file(d: Path, marker: Path) -> Path:
    path = d / "rng_rank00000.pt"
    path.write_bytes(torch_payload(marker, lambda p: {"python": p}))
    return path


def plant_extra_state(d: Path, marker: Path) -> Path:
    """A non-empty `_extra_state` tensor holding a pickle: what Transformer Engine's set_extra_state unpickles."""
    path = d / "model_optim_tp00.pt"
    state = torch.load(path, weights_only=True)
    key = next(k for k in state["model"] if k.endswith("_extra_state"))
    state["model"][key] = torch.frombuffer(bytearray(pickle.dumps(Payload(marker))), dtype=torch.uint8)
    torch.save(state, path)
    return path


RESUME, PRETRAINED, EXPORT, DPO_REFERENCE = "resume", "pretrained", "export-hf", "dpo-reference"
EVERY = (RESUME, PRETRAINED, EXPORT, DPO_REFERENCE)
# plant -> (checkpoint format, the entry points that must refuse; the others load it and nothing runs)
PLANTS = {
    plant_metadata_whole: ("torch_dist", EVERY),
    plant_metadata_nested: ("torch_dist", EVERY),
    plant_common_pt: ("torch_dist", EVERY),
    plant_distcp_tensor_record: ("torch_dist", EVERY),
    plant_distcp_bytes_for_tensor: ("torch_dist", EVERY),
    plant_distcp_object_record: ("torch_dist", ()),  # never requested: loads, nothing runs
    plant_model_file: ("torch", EVERY),
    plant_rng_file: ("torch", (RESUME,)),  # only a resume reads the RNG files
    plant_extra_state: ("torch", ()),  # loaded as data, never handed to set_extra_state
}


@pytest.fixture
def te_like_extra_state(monkeypatch):
    """megatron's linear layers' set_extra_state made to behave as Transformer Engine's (a bare
    pickle.loads of a non-empty uint8 tensor), so handing it a checkpoint's _extra_state would show."""
    from megatron.core.tensor_parallel import layers

    def set_extra_state(self, state):
        if isinstance(state, torch.Tensor) and state.numel():
            pickle.loads(state.numpy().tobytes())

    for cls in (layers.ColumnParallelLinear, layers.RowParallelLinear):
        monkeypatch.setattr(cls, "set_extra_state", set_extra_state)
    return set_extra_state


def _enter(entry: str, saved, ckpt: Path, fmt: str, tmp: Path) -> None:
    """Run one entry point on the (planted) checkpoint root `ckpt`."""
    data = saved["data"]
    if entry == RESUME:
        _train(_config(ckpt, SAVE_AT + 1, fmt), data, tmp / "out_resume", resume=True)
    elif entry == PRETRAINED:
        _train(_config(tmp / "fresh", 1, fmt, pretrained_checkpoint=str(ckpt)), data, tmp / "out_pre")
    elif entry == EXPORT:
        from packcfg.train.hf.command import export_from_config

        args = argparse.Namespace(checkpoint=str(ckpt), out_dir=str(tmp / "hf"), dtype="float32", force=False)
        export_from_config(_config(ckpt, 1, fmt), args)
    elif entry == DPO_REFERENCE:  # the reference the DPO loop builds: loop.frozen_reference(_initial_model)
        from packcfg.train.dpo import frozen_reference
        from packcfg.train.loop import _initial_model
        from packcfg.train.parallel import distributed
        from packcfg.train.settings import TrainSettings

        config = _config(tmp / "fresh", 1, fmt, pretrained_checkpoint=str(ckpt))
        with distributed(tp=1, cp=1) as layout:
            frozen_reference(lambda: _initial_model(TrainSettings.from_config(config), layout))


@pytest.mark.parametrize("entry", EVERY)
@pytest.mark.parametrize("plant", list(PLANTS), ids=lambda f: f.__name__.removeprefix("plant_"))
def test_payload_never_runs_and_refusal_is_one_line(plant, entry, saved, tmp_path, te_like_extra_state):
    fmt, refusing = PLANTS[plant]
    marker = tmp_path / "payload_ran"
    ckpt = _copy(saved, "torch_dist" if fmt == "torch_dist" else "torch", tmp_path / "ckpt")
    planted = plant(ckpt / ITER, marker)
    if entry in refusing:
        with pytest.raises((CheckpointError, ValueError)) as info:
            _enter(entry, saved, ckpt, fmt, tmp_path)
        message = str(info.value)
        assert "\n" not in message and str(planted) in message, message
        assert "does not fit" not in message
    else:
        _enter(entry, saved, ckpt, fmt, tmp_path)
    assert not marker.exists()


def test_refusals_name_the_global(saved, tmp_path):
    from packcfg.train.dist_reader import read_metadata

    whole = plant_metadata_whole(_copy(saved, "torch_dist", tmp_path / "a") / ITER, tmp_path / "m")
    with pytest.raises(CheckpointError, match=r"\.metadata: refused: it holds io\.open, which is not torch"):
        read_metadata(whole.parent)
    nested = plant_metadata_nested(_copy(saved, "torch_dist", tmp_path / "b") / ITER, tmp_path / "m")
    with pytest.raises(CheckpointError, match=r"\.metadata: refused: it holds io\.open"):
        read_metadata(nested.parent)
    assert not (tmp_path / "m").exists()


def test_controls_the_payloads_run_under_torch_and_megatron_own_loaders(saved, tmp_path, te_like_extra_state):
    """Without packcfg's reader the same planted files do run: torch's FileSystemReader.read_metadata,
    megatron's dist_checkpointing.load of a model's sharded state dict (byte records through torch's
    planner), and a set_extra_state like Transformer Engine's."""
    from megatron.core import dist_checkpointing
    from torch.distributed.checkpoint import FileSystemReader

    from packcfg.train.mcore_compat import cpu_checkpointing
    from packcfg.train.model import build_model
    from packcfg.train.parallel import distributed
    from packcfg.train.settings import TrainSettings

    d = _copy(saved, "torch_dist", tmp_path / "a") / ITER
    plant_metadata_whole(d, tmp_path / "ran_metadata")
    with contextlib.suppress(Exception):  # it runs the payload, then may fail on what that returned
        FileSystemReader(str(d)).read_metadata()
    assert (tmp_path / "ran_metadata").exists()

    d = _copy(saved, "torch_dist", tmp_path / "b") / ITER
    plant_distcp_object_record(d, tmp_path / "ran_distcp")
    settings = TrainSettings.from_config(_config(tmp_path, 1))
    with distributed(tp=1, cp=1), cpu_checkpointing():
        model = build_model(settings.model, seed=0)
        dist_checkpointing.load({"model": model.sharded_state_dict()}, str(d))
    assert (tmp_path / "ran_distcp").exists()

    d = _copy(saved, "torch", tmp_path / "c") / ITER
    state = torch.load(plant_extra_state(d, tmp_path / "ran_extra"), weights_only=True)["model"]
    blob = next(v for k, v in state.items() if k.endswith("_extra_state") and v is not None)
    te_like_extra_state(None, blob)
    assert (tmp_path / "ran_extra").exists()


def test_torch_and_megatron_never_read_metadata_or_byte_records_themselves(saved, tmp_path, monkeypatch):
    """On every entry point, the only read of .metadata is packcfg's: torch's FileSystemReader.read_metadata
    (a bare pickle.load) and its planner's load_bytes (weights_only=False) are never called."""
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner

    def never(*args, **kwargs):
        raise AssertionError("an unchecked unpickling path was taken")

    monkeypatch.setattr(FileSystemReader, "read_metadata", never)
    monkeypatch.setattr(DefaultLoadPlanner, "load_bytes", never)
    for entry in EVERY:
        ckpt = _copy(saved, "torch_dist", tmp_path / entry / "ckpt")
        _enter(entry, saved, ckpt, "torch_dist", tmp_path / entry)


def test_reader_refuses_a_byte_record(saved):
    """CheckedReader never hands a pickled-object record to torch's planner (which unpickles it unchecked)."""
    from torch.distributed.checkpoint.planner import LoadItemType, LoadPlan, ReadItem

    from packcfg.train.dist_reader import CheckedReader, read_metadata

    d = saved["root"] / "torch_dist" / ITER
    metadata = read_metadata(d)
    index = next(i for i in metadata.storage_data if i.fqn.endswith("_extra_state/shard_0_2"))
    empty = torch.Size([])
    item = ReadItem(LoadItemType.BYTE_IO, index, empty, index, empty, empty)
    reader = CheckedReader(d, metadata)
    reader.set_up_storage_reader(metadata, True)
    with pytest.raises(CheckpointError, match=rf"entry {index.fqn} is a pickled object record"):
        reader.read_data(LoadPlan([item]), planner=None)


@pytest.mark.parametrize("name", [".metadata", "__0_0.distcp"])
def test_truncated_torch_dist_file_is_one_line_naming_it(saved, tmp_path, name):
    ckpt = _copy(saved, "torch_dist", tmp_path / "ckpt")
    path = ckpt / ITER / name
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(CheckpointError) as info:
        _enter(RESUME, saved, ckpt, "torch_dist", tmp_path)
    message = str(info.value)
    assert "\n" not in message and str(path) in message and "does not fit" not in message, message


def test_metadata_pointing_outside_the_folder_is_refused(saved, tmp_path):
    from packcfg.train.dist_reader import read_metadata

    d = _copy(saved, "torch_dist", tmp_path / "ckpt") / ITER
    _rewrite_metadata(d, lambda md: _point(md, "word_embeddings.weight", "../../../etc/passwd", 0, 10))
    with pytest.raises(CheckpointError, match=r"points at '\.\./\.\./\.\./etc/passwd', not a \.distcp file"):
        read_metadata(d)


# ---- real checkpoints still load, and resume exactly


@pytest.mark.parametrize("name", ["torch_dist", "bf16"])
def test_allow_list_reads_real_metadata_as_pickle_does(saved, name):
    """Every class torch and megatron-core write into packcfg's .metadata (fp32, and bf16 with fp32
    masters) is on the list: the checked read equals a plain pickle.load of the same (clean) file."""
    from packcfg.train.dist_reader import read_metadata

    d = saved["root"] / name / ITER
    with open(d / ".metadata", "rb") as fh:
        plain = pickle.load(fh)
    checked = read_metadata(d)
    assert checked.state_dict_metadata == plain.state_dict_metadata
    assert checked.storage_data == plain.storage_data
    assert checked.planner_data == plain.planner_data
    assert {type(e).__name__ for e in checked.state_dict_metadata.values()} == {
        "TensorStorageMetadata",
        "BytesStorageMetadata",  # the layers' _extra_state ShardedObjects: saved, never loaded
    }


@pytest.mark.parametrize("fmt", ["torch_dist", "torch"])
def test_resume_is_exact(saved, tmp_path, fmt):
    ckpt = _copy(saved, fmt, tmp_path / "ckpt")
    resumed = _train(_config(ckpt, STEPS, fmt), saved["data"], tmp_path / "out", resume=True).losses
    assert resumed == saved["straight"][SAVE_AT:]


def test_bf16_resume_and_pretrained_and_export_load(saved, tmp_path):
    from packcfg.train.hf.command import export_from_config

    ckpt = _copy(saved, "bf16", tmp_path / "ckpt")
    assert (
        len(_train(_config(ckpt, STEPS, bf16=True), saved["data"], tmp_path / "o", resume=True).losses) == 2
    )
    pre = _config(tmp_path / "fresh", 1, bf16=True, pretrained_checkpoint=str(ckpt))
    assert len(_train(pre, saved["data"], tmp_path / "o2").losses) == 1
    args = argparse.Namespace(
        checkpoint=str(ckpt), out_dir=str(tmp_path / "hf"), dtype="float32", force=False
    )
    written, _, family = export_from_config(_config(ckpt, 1), args)
    assert family == "llama" and "model.safetensors" in written


def test_pretrained_weights_are_the_saved_ones(saved, tmp_path):
    """torch_dist without its ShardedObjects still gives every parameter (and the torch format too)."""
    from packcfg.train.checkpoint import load_weights
    from packcfg.train.model import build_model
    from packcfg.train.parallel import distributed
    from packcfg.train.settings import TrainSettings

    settings = TrainSettings.from_config(_config(tmp_path, 1))
    with distributed(tp=1, cp=1) as layout:
        dist, torch_fmt = build_model(settings.model, seed=1), build_model(settings.model, seed=2)
        assert load_weights(saved["root"] / "torch_dist" / ITER, layout, dist) == SAVE_AT
        assert load_weights(saved["root"] / "torch" / ITER, layout, torch_fmt) == SAVE_AT
        fresh = build_model(settings.model, seed=1)
    a, b, c = (dict(m.named_parameters()) for m in (dist, torch_fmt, fresh))
    assert all(torch.equal(a[n], b[n]) for n in a)  # the same trained weights, from both formats
    assert any(not torch.equal(a[n], c[n]) for n in a)  # and not the seed's


# ---- HF folders: only safetensors are read; a config.json too large for this machine is refused


# A tiny Llama config.json (no head_dim: derived from hidden_size / heads).
TINY_HF = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 160, "num_hidden_layers": 2,
           "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 128}  # fmt: skip


def _hf_folder(folder: Path) -> Path:
    pytest.importorskip("transformers")
    from packcfg.train.hf.tiny import make_tiny_hf_model

    make_tiny_hf_model("llama", folder, 128, seed=0)
    return folder


def _hf_config(folder: Path, save: Path, iters: int = 1):
    config = _config(save, iters)
    for key in ("num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads", "num_query_groups",
                "kv_channels", "vocab_size"):  # fmt: skip
        config["model"].pop(key)
    config["model"]["hf_path"] = str(folder)
    return config


def test_hf_folder_pickles_are_never_read(saved, tmp_path):
    """Pickled files beside the safetensors (as Hub folders have them) never load, on any entry point
    that reads an HF folder: train from it, the DPO reference, export-hf's base folder."""
    from packcfg.train.dpo import frozen_reference
    from packcfg.train.hf.command import export_from_config
    from packcfg.train.loop import _initial_model
    from packcfg.train.parallel import distributed
    from packcfg.train.settings import TrainSettings

    marker = tmp_path / "payload_ran"
    folder = _hf_folder(tmp_path / "hf")
    for name in ("pytorch_model.bin", "training_args.bin", "optimizer.pt", "rng_state.pth", "scheduler.pt"):
        (folder / name).write_bytes(torch_payload(marker))
    config = _hf_config(folder, tmp_path / "ckpt", iters=SAVE_AT)
    _train(config, saved["data"], tmp_path / "out")
    with distributed(tp=1, cp=1) as layout:
        frozen_reference(lambda: _initial_model(TrainSettings.from_config(config), layout))
    args = argparse.Namespace(checkpoint=None, out_dir=str(tmp_path / "export"), dtype="float32", force=False)
    export_from_config(config, args)
    assert not marker.exists()
    assert not any(p.suffix in (".bin", ".pt", ".pth") for p in (tmp_path / "export").iterdir())

    (folder / "model.safetensors").write_bytes(torch_payload(marker))  # a pickle under the safetensors name
    with pytest.raises(ValueError) as info:
        _train(_hf_config(folder, tmp_path / "ckpt2"), saved["data"], tmp_path / "out2")
    assert "\n" not in str(info.value) and str(folder / "model.safetensors") in str(info.value)
    assert not marker.exists()


def test_parameter_estimate_is_the_built_models_count(tmp_path):
    """The estimate behind the memory refusal counts exactly the parameters megatron builds."""
    from packcfg.train.hf.config import parameter_count, read_hf_config
    from packcfg.train.model import build_model
    from packcfg.train.parallel import distributed
    from packcfg.train.settings import TrainSettings

    base = {**TINY_HF, "head_dim": 16}
    variants = {
        "llama": {},
        "llama_tied": {"tie_word_embeddings": True},
        "qwen2": {"model_type": "qwen2"},  # QKV bias
        "qwen3": {"model_type": "qwen3"},  # q/k norms
    }
    for name, change in variants.items():
        folder = tmp_path / name
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps({**base, **change}))
        config = _hf_config(folder, tmp_path / "unused")
        with distributed(tp=1, cp=1):
            model = build_model(TrainSettings.from_config(config).model, seed=0)
        built = sum(p.numel() for p in model.parameters())
        assert parameter_count(read_hf_config(folder).model) == built, name


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("vocab_size", 10**12),
        ("hidden_size", 10**7),
        ("num_hidden_layers", 10**7),
        ("intermediate_size", 2**40),
    ],
)
def test_absurd_hf_config_is_refused_with_the_estimate(tmp_path, field, value):
    from packcfg.train.hf.config import HFConfigError, model_section

    (tmp_path / "config.json").write_text(json.dumps({**TINY_HF, field: value}))
    with pytest.raises(HFConfigError) as info:
        model_section({"model": {"hf_path": str(tmp_path)}})
    message = str(info.value)
    assert message.startswith(
        f"{tmp_path / 'config.json'}: {field} {value} describes a model that needs at least"
    )
    assert "this machine has; refused before allocating anything" in message and "\n" not in message


def test_memory_estimate_boundary(tmp_path):
    from packcfg.train.hf.config import HFConfigError, check_fits_memory, parameter_count, read_hf_config

    (tmp_path / "config.json").write_text(json.dumps(TINY_HF))
    hf = read_hf_config(tmp_path)
    needed = 4 * parameter_count(hf.model)
    check_fits_memory(hf, 1, available=needed)  # fits exactly
    check_fits_memory(hf, 2, available=needed // 2)  # TP x PP 2: half per process
    with pytest.raises(HFConfigError, match=r"needs at least .* more than the 1\.0 KiB this machine has"):
        check_fits_memory(hf, 1, available=1024)


@pytest.mark.parametrize(
    ("value", "shown"), [(-1, "-1"), (0, "0"), ("4096", "'4096'"), (True, "True"), (1.5, "1.5")]
)
def test_hf_shape_fields_must_be_positive_integers(tmp_path, value, shown):
    from packcfg.train.hf.config import HFConfigError, read_hf_config

    (tmp_path / "config.json").write_text(json.dumps({**TINY_HF, "vocab_size": value}))
    with pytest.raises(
        HFConfigError, match=rf"config\.json: vocab_size must be a positive integer, got {shown}$"
    ):
        read_hf_config(tmp_path)


# ---- the command line: one line, exit 2, no traceback, on every entry point

RECIPE = REPO_ROOT / "recipes" / "tiny_cpu_sft.yaml"
DPO_RECIPE = REPO_ROOT / "recipes" / "tiny_cpu_dpo.yaml"
ONE = ["--nproc-per-node", "1"]


def packcfg_subprocess(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    """The real command in a child process."""
    return subprocess.run(
        [sys.executable, "-m", "packcfg", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env=ENV,
    )


def packcfg(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    """`packcfg ARGS` in `cwd` through the console script's own `main`, in this process: a child would spend
    most of its time importing torch and megatron again. With `--nproc-per-node 1` the command trains in its
    own process anyway; test_cli_refuses_absurd_hf_config and tests/train/test_train_cli.py run the real
    command in a child."""
    from packcfg.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.chdir(cwd), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(list(args))
        except SystemExit as stop:  # argparse's exit
            rc = stop.code if isinstance(stop.code, int) else 1
    return subprocess.CompletedProcess(["packcfg", *args], rc, out.getvalue(), err.getvalue())


@pytest.fixture(scope="module")
def cli_run(tmp_path_factory):
    """`packcfg train` of the tiny recipe for 2 steps: its run folder (packed data, torch_dist checkpoint)."""
    cwd = tmp_path_factory.mktemp("cli")
    proc = packcfg(cwd, "train", str(RECIPE), *ONE, "train.train_iters=2", "checkpoint.save_interval=2")
    assert proc.returncode == 0, proc.stderr
    return cwd / "runs"


def _one_line_refusal(proc: subprocess.CompletedProcess, planted: Path, marker: Path) -> None:
    """Exit 2, one stderr line naming the planted file (as the config spells its folder: relative to the
    run's directory, or absolute), nothing ran."""
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, proc.stderr
    names = {str(planted), str(planted.relative_to(planted.parents[4]))}
    assert len(lines) == 1 and any(n in lines[0] for n in names) and "refused" in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr and "does not fit" not in proc.stderr
    assert not marker.exists()


@pytest.mark.parametrize("entry", [RESUME, PRETRAINED, EXPORT])
def test_cli_refuses_planted_metadata(cli_run, tmp_path, entry):
    shutil.copytree(cli_run, tmp_path / "runs")
    ckpt = tmp_path / "runs" / "tiny_cpu_sft" / "checkpoints"
    marker = tmp_path / "payload_ran"
    planted = plant_metadata_whole(ckpt / ITER, marker).resolve()
    if entry == RESUME:
        proc = packcfg(tmp_path, "train", str(RECIPE), *ONE, "train.train_iters=3", "--resume")
    elif entry == PRETRAINED:
        proc = packcfg(tmp_path, "train", str(RECIPE), *ONE, "train.train_iters=1", "checkpoint.save=fresh",
                       f"checkpoint.pretrained_checkpoint={ckpt}", "--out", "fresh_out")  # fmt: skip
    else:
        proc = packcfg(tmp_path, "export-hf", str(RECIPE), "--out", "hf")
    _one_line_refusal(proc, planted, marker)


def test_cli_dpo_reference_refuses_planted_metadata(cli_run, tmp_path):
    """A DPO run resumed from a clean checkpoint rebuilds its reference from checkpoint.pretrained_checkpoint:
    a payload planted there after the first run is refused when the reference loads."""
    shutil.copytree(cli_run, tmp_path / "runs")
    pretrained = tmp_path / "runs" / "tiny_cpu_sft" / "checkpoints"
    common = [
        str(DPO_RECIPE),
        *ONE,
        f"checkpoint.pretrained_checkpoint={pretrained}",
        "checkpoint.save_interval=2",
    ]
    first = packcfg(tmp_path, "train", *common, "train.train_iters=2")
    assert first.returncode == 0, first.stderr
    marker = tmp_path / "payload_ran"
    planted = plant_metadata_whole(pretrained / ITER, marker)
    proc = packcfg(tmp_path, "train", *common, "train.train_iters=3", "--resume")
    _one_line_refusal(proc, planted, marker)


def test_cli_refuses_absurd_hf_config(tmp_path):
    folder = tmp_path / "hf"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({**TINY_HF, "vocab_size": 10**13}))
    recipe = REPO_ROOT / "recipes" / "tiny_hf_sft.yaml"
    proc = packcfg_subprocess(tmp_path, "train", str(recipe), *ONE, f"model.hf_path={folder}")
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert f"{folder / 'config.json'}: vocab_size {10**13} describes a model that needs at least" in lines[0]
    assert "Traceback" not in proc.stderr and "MemoryError" not in proc.stderr
