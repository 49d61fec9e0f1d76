"""Does Megatron Bridge 0.3.1 read what `packcfg pack` writes? (issue 13)

Found (megatron-bridge 0.3.1, src/megatron/bridge/data/datasets/): 0.3.1 reads packed data only as `.npy`.
`PackedSequenceSpecs.__post_init__` asserts the suffix, and `create_sft_dataset` sends any other suffix to
the unpacked JSONL reader (`GPTSFTDataset`). Packed Parquet is read from 0.4.0 on
(`datasets/packed_parquet.py`, `GPTSFTPackedParquetDataset`). The first two tests pin that boundary.

The rows themselves are Bridge's: `packcfg pack --bridge-npy` (`packcfg.packing.writer.write_bridge_npy`) writes
packcfg's Parquet again as 0.3.1's object-array `.npy`. 0.3.1's own `GPTSFTPackedDataset` and `collate_fn` read it, and every pack must
give exactly the tokens, labels, loss mask, position ids and cu_seqlens that packcfg's executor builds
from the Parquet (`PackedParquet` + `build_micro_batch`). The control runs packcfg's side with
`Faults(mask_across_samples=True)` and `Faults(no_position_reset=True)` (tests/train/faults.py), and each must then differ.

Run in the oracle venv: `.venv-oracle/bin/python -m pytest tests/oracle/test_bridge_packed_data.py`.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from bridge_side import LINE

pytestmark = pytest.mark.skipif(LINE != "0.3", reason="Bridge 0.3.1's .npy packed reader (0.6 reads Parquet)")

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "recipes" / "tiny_cpu_sft.yaml"


@pytest.fixture(scope="module")
def packed(tmp_path_factory) -> Path:
    """`packcfg pack --bridge-npy` of the tiny CPU recipe (512-token packs), run from a fresh folder: the
    Parquet and metadata, and the packs again as `train.npy` (what an engine-bridge job's data prep runs)."""
    folder = tmp_path_factory.mktemp("pack")
    npy = folder / "runs" / "tiny_cpu_sft" / "packed" / "train.npy"
    proc = subprocess.run(
        [sys.executable, "-m", "packcfg", "pack", str(TINY), "-q", "--bridge-npy", str(npy)],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    return folder / "runs" / "tiny_cpu_sft" / "packed"


@pytest.fixture(scope="module")
def sft(bridge):
    """Bridge 0.3.1's SFT dataset module (imported after the session's CPU stand-ins)."""
    from megatron.bridge.data.datasets import sft

    return sft


def _eos() -> int:
    from packcfg.packing.sources import load_tokenizer
    from packcfg.resources import resolve_path

    return load_tokenizer(resolve_path("@packcfg/data/sample_sft/tokenizer.json")).eos_id


def test_031_refuses_parquet_packs(bridge, packed: Path) -> None:
    from megatron.bridge.data.datasets.packed_sequence import PackedSequenceSpecs

    with pytest.raises(AssertionError, match="must be a .npy file"):
        PackedSequenceSpecs(packed_sequence_size=512, packed_train_data_path=str(packed / "train.parquet"))


def test_031_reads_a_parquet_path_as_unpacked_jsonl(sft, packed: Path) -> None:
    """A Parquet path given through overrides (which skip __post_init__) reaches 0.3.1's unpacked JSONL
    reader: it indexes the binary file's "lines" and fails on the first sample."""
    tokenizer = SimpleNamespace(eos_id=_eos())
    ds = sft.create_sft_dataset(
        path=packed / "train.parquet", tokenizer=tokenizer, seq_length=512, prompt_template="{input} {output}"
    )
    assert type(ds) is sft.GPTSFTDataset
    with pytest.raises(UnicodeDecodeError):
        ds[0]


def _bridge_batches(sft, npy: Path, metadata: Path, eos: int) -> list[dict[str, torch.Tensor]]:
    tokenizer = SimpleNamespace(eos_id=eos)
    ds = sft.create_sft_dataset(
        path=npy,
        tokenizer=tokenizer,
        seq_length=512,
        pack_metadata_file_path=metadata,
        pad_to_max_length=True,
        answer_only_loss=True,
    )
    assert isinstance(ds, sft.GPTSFTPackedDataset)
    return [ds.collate_fn([ds[i]]) for i in range(len(ds))]


def _packcfg_batches(parquet: Path, faults=None) -> list:
    from packcfg.train.data import PackedParquet, build_micro_batch
    from packcfg.train.settings import DataSettings
    from tests.train.faults import NO_FAULTS, injected

    data = DataSettings(batching="packed", seq_length=512, pack_size=512, pad_to_max_length=True, seed=1234)
    units = PackedParquet(parquet)
    with injected(faults or NO_FAULTS):
        return [build_micro_batch([units[i]], data) for i in range(len(units))]


def _differences(bridge_batches: list, ours: list) -> list[str]:
    """Where the two readings of the same packs differ (empty: identical)."""
    out = []
    for i, (b, p) in enumerate(zip(bridge_batches, ours, strict=True)):
        cu = b["cu_seqlens"][0][: int(b["cu_seqlens_argmin"][0])].tolist()
        real = p.real_tokens
        checks = {
            "cu_seqlens": cu == p.thd.cu_seqlens_list,
            "tokens": torch.equal(b["tokens"][0, :real], p.tokens[0, :real]),
            "labels": torch.equal(b["labels"][0, :real], p.labels[0, :real]),
            "loss_mask": torch.equal(b["loss_mask"][0, :real].float(), p.loss_mask[0, :real]),
            "position_ids": torch.equal(b["position_ids"][0, :real], p.position_ids[0, :real]),
            "width": b["tokens"].shape == p.tokens.shape,
            "no loss on padding": int(b["loss_mask"][0, real:].sum())
            == 0
            == int(p.loss_mask[0, real:].sum()),
        }
        out += [f"pack {i}: {name}" for name, ok in checks.items() if not ok]
    return out


def test_031_reads_packcfg_packs_written_as_npy(sft, packed: Path) -> None:
    npy = packed / "train.npy"
    bridge_batches = _bridge_batches(sft, npy, packed / "metadata.json", _eos())
    ours = _packcfg_batches(packed / "train.parquet")
    assert len(bridge_batches) == len(ours)
    assert len(ours) > 1 and any(len(p.thd.cu_seqlens_list) > 3 for p in ours)  # several samples per pack
    assert _differences(bridge_batches, ours) == []
    # the control: packcfg's reading with a known packing bug must disagree with Bridge's
    from tests.train.faults import Faults

    for fault in (Faults(mask_across_samples=True), Faults(no_position_reset=True)):
        assert _differences(bridge_batches, _packcfg_batches(packed / "train.parquet", fault)), fault
    # and 0.3.1's own pack of a file holds the same three columns per row (its fill_packing_strategy)
    row = np.load(npy, allow_pickle=True)[0]  # our own file, just written: the test may unpickle it
    assert sorted(row) == ["input_ids", "loss_mask", "seq_start_id"]
