"""`engine: bridge` end to end (issue 21): the rendered bundle's own command line, through the target Bridge
version's own scripts/training/run_recipe.py, to Bridge's first packed batch, which must be packcfg's packs.

Each case renders a bundle with `packcfg render` (as a user would; only `launch.bridge.script` is pointed at
the run_recipe.py of the Bridge line this venv holds, and shipped 8B recipes get their cluster data paths
redirected to a local copy of packcfg's sample data), then runs the bundle's own `torchrun.sh` with `bash`.
torchrun.sh does its data prep as on a node (packcfg pack, verify, Bridge 0.3.1's .npy copies, the validation
packs) and execs `torchrun <options> run_recipe.py --recipe NAME KEY=VALUE...`. A stand-in `torchrun` on PATH
drops torchrun's own options, sets WORLD_SIZE to --nproc-per-node and runs one worker in the oracle venv:
tests/oracle/bridge_worker.py, which runs run_recipe.py as `__main__` with exactly those words and stops it at
Bridge's setup (the part that needs CUDA), taking Bridge's own first train and validation batches instead.

Asserted, per case: Bridge's override merge skipped or failed no key; the dataset config is the local
(non-downloading) class; Bridge's tokenizer is the bundle's HF folder, built offline; the packed datasets are
Bridge's own packed readers over the files packcfg wrote (0.3.1: .npy; 0.6.x: Parquet), train and
validation; every row of Bridge's first batch of each equals packcfg's pack at the index Bridge's sampler
chose, token for token (tokens, labels, loss mask, position ids, cu_seqlens); Bridge wrote nothing into the
data folder and no packs of its own; on 0.6.x, the runner ran from its own folder (chdir) and the paths still
resolved into the bundle, and its pack-size / pad rewrite agrees with the packs.

Bridge's scripts are not in its wheel or sdist (checked: megatron-bridge 0.3.1 and 0.6.2 on PyPI): they are read
from the Megatron Bridge git mirror (v0.3.1 tag; r0.6.0 release branch). Where the mirror is absent (CI), the
cases skip and say so.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
RECIPES = ROOT / "recipes"
MIRROR = Path(os.environ.get("PACKCFG_BRIDGE_MIRROR", "/work/.mirror/NVIDIA-NeMo+Megatron-Bridge/repo"))
BRIDGE = version("megatron-bridge")
LINE = "0.3.1" if BRIDGE == "0.3.1" else "0.6" if BRIDGE.startswith("0.6.") else BRIDGE
REF = {"0.3.1": "v0.3.1", "0.6": "r0.6.0"}.get(LINE)
WORKER = Path(__file__).resolve().parent / "bridge_worker.py"

# torchrun's stand-in: its options are dropped (the worker is this one process), the world size kept.
FAKE_TORCHRUN = """#!/bin/bash
nproc=1
while [ $# -gt 0 ]; do
  case "$1" in
    --nproc-per-node=*|--nproc_per_node=*) nproc="${1#*=}"; shift ;;
    --*) shift ;;
    *) break ;;
  esac
done
export WORLD_SIZE="$nproc" RANK=0 LOCAL_RANK=0 LOCAL_WORLD_SIZE="$nproc"
exec python3 "$PACKCFG_E2E_WORKER" "$@"
"""


@dataclass(frozen=True)
class Case:
    name: str
    recipe: Path
    overrides: tuple[str, ...] = ()
    local_data: bool = False  # a shipped recipe whose data lives on a cluster: use a local copy


def _local(pack: str) -> tuple[str, ...]:
    """A shipped recipe's cluster paths -> local ones: the sample data (an absolute folder outside the
    bundle, as a user's declared data is), its tokenizer, packs and checkpoints inside the bundle."""
    return (
        "tokenizer.tokenizer_model=@packcfg/data/sample_sft/tokenizer.json",
        f"dataset.offline_packing_specs.packed_train_data_path=packed/{pack}/training.parquet",
        f"dataset.offline_packing_specs.packed_val_data_path=packed/{pack}/validation.parquet",
        f"dataset.offline_packing_specs.packed_metadata_path=packed/{pack}/metadata.json",
        "checkpoint.save=output/checkpoints",
        # the sample data holds ~4k short samples: a batch of the recipe's size would not fit its packs
        "train.global_batch_size=8",
    )


CASES = [
    # every shipped recipe with launch.engine: bridge, as shipped
    Case("llama32_1b_sft_bridge", RECIPES / "llama32_1b_sft_bridge.yaml"),
    # Llama 3: the shipped 8B packed SFT recipe (TP 2 + SP, 4096-token packs) launched through Bridge
    Case(
        "llama3_8b",
        RECIPES / "llama3_8b_packed_sft.yaml",
        ("--engine", "bridge", "launch.bridge.recipe=llama3_8b_sft_config", *_local("4096")),
        local_data=True,
    ),
    # Qwen3: the shipped 8B long-context recipe (TP 2, CP 4, SP; 16384-token packs, pad 16)
    Case(
        "qwen3_8b",
        RECIPES / "qwen3_8b_packed_sft_cp4.yaml",
        ("--engine", "bridge", "launch.bridge.recipe=qwen3_8b_sft_config", *_local("16384")),
        local_data=True,
    ),
    # Nemotron (hybrid Mamba): the tiny data over Bridge's Nemotron Nano 9B v2 recipe, TP 2 + SP, pad 2
    Case(
        "nemotron_nano_9b_v2",
        RECIPES / "llama32_1b_sft_bridge.yaml",
        (
            "launch.bridge.recipe=nemotron_nano_9b_v2_sft_config",
            "model.tensor_model_parallel_size=2",
            "+model.sequence_parallel=true",
            "dataset.offline_packing_specs.pad_seq_to_mult=2",
        ),
    ),
]


@pytest.fixture(scope="module")
def scripts(tmp_path_factory) -> Path:
    """Bridge's scripts/ folder of the target line, from the mirror (the wheel has none)."""
    if REF is None:
        pytest.skip(f"megatron-bridge {BRIDGE}: no Bridge line known for it (0.3.1 or 0.6.x)")
    root = tmp_path_factory.mktemp(f"bridge-{REF}")
    try:
        archive = subprocess.run(
            ["git", "-C", str(MIRROR), "archive", REF, "scripts"], capture_output=True, check=True
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip(f"Megatron Bridge mirror with {REF} not available at {MIRROR} (CI has none: PyPI only)")
    subprocess.run(["tar", "-x", "-C", str(root)], input=archive, check=True)
    assert (root / "scripts" / "training" / "run_recipe.py").is_file()
    return root


@pytest.fixture(scope="module")
def fake_bin(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("bin")
    (folder / "torchrun").write_text(FAKE_TORCHRUN)
    (folder / "torchrun").chmod(0o755)
    return folder


@pytest.fixture(scope="module")
def user_data(tmp_path_factory) -> Path:
    """The user's declared data folder, outside any bundle: packcfg's sample SFT data, repeated (training
    x2, validation x16) so that the shipped recipes' long packs (up to 16384 tokens) fill a global batch of
    8 in both splits."""
    from packcfg.resources import resolve_path

    folder = tmp_path_factory.mktemp("user_data")
    for name, times in (("training.jsonl", 2), ("validation.jsonl", 16)):
        text = resolve_path(f"@packcfg/data/sample_sft/{name}").read_text(encoding="utf-8")
        (folder / name).write_text(text * times, encoding="utf-8")
    return folder


@pytest.fixture(scope="module")
def run_case(tmp_path_factory, scripts: Path, fake_bin: Path, user_data: Path):
    """Render and run a case once per module (the control reuses the shipped recipe's run)."""
    done: dict[str, tuple[Path, dict, dict, dict]] = {}

    def run(case: Case):
        if case.name not in done:
            before = _listing(user_data)
            bundle, got = _run(case, tmp_path_factory.mktemp(case.name), scripts, fake_bin, user_data)
            done[case.name] = (bundle, got, before, _listing(user_data))
        return done[case.name]

    return run


def _listing(folder: Path) -> dict[str, int]:
    return {p.relative_to(folder).as_posix(): p.stat().st_size for p in folder.rglob("*") if p.is_file()}


def _run(case: Case, tmp: Path, scripts: Path, fake_bin: Path, user_data: Path) -> tuple[Path, dict]:
    bundle = tmp / "bundle"
    words = list(case.overrides)
    if case.local_data:
        # the user's declared data and pretrained checkpoint (0.6.x's validate() checks that it exists)
        pretrained = tmp / "pretrained"
        pretrained.mkdir()
        words += [f"dataset.dataset_root={user_data}", f"checkpoint.pretrained_checkpoint={pretrained}"]
    words += [
        f"launch.bridge.script={scripts / 'scripts' / 'training' / 'run_recipe.py'}",
        f"launch.bridge.version={BRIDGE}",
    ]
    render = subprocess.run(
        [sys.executable, "-m", "packcfg", "render", str(case.recipe), "--out", str(bundle), *words],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert render.returncode == 0, render.stderr
    out = tmp / "first_batch.pt"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "WORLD_SIZE", "RANK", "LOCAL_RANK")}
    env.update(
        PATH=os.pathsep.join([str(fake_bin), str(Path(sys.executable).parent), env.get("PATH", "")]),
        PACKCFG_E2E_WORKER=str(WORKER),
        PACKCFG_E2E_OUT=str(out),
    )
    job = subprocess.run(
        ["bash", "torchrun.sh"], cwd=bundle, env=env, capture_output=True, text=True, timeout=900
    )
    assert job.returncode == 0, job.stdout[-3000:] + job.stderr[-6000:]
    import torch

    return bundle, torch.load(out, weights_only=False)


def _differences(
    batch: dict, indices: list[int], parquet: Path, size: int, faults=None, align: int = 1
) -> list[str]:
    """Where Bridge's batch rows differ from packcfg's packs at `indices` (empty: identical)."""
    import torch

    from packcfg.train.data import PackedParquet, build_micro_batch
    from packcfg.train.settings import DataSettings
    from tests.train.faults import NO_FAULTS, injected

    data = DataSettings(batching="packed", seq_length=size, pack_size=size, pad_to_max_length=True, seed=0)
    units = PackedParquet(parquet)
    out: list[str] = []
    assert len(indices) == batch["tokens"].shape[0]
    for row, index in enumerate(indices):
        with injected(faults or NO_FAULTS):
            p = build_micro_batch([units[index]], data)
        real = p.real_tokens
        logical_ok = True
        if "cu_seqlens" in batch:  # 0.3.1: -1 after cu_seqlens_argmin
            cu = batch["cu_seqlens"][row][: int(batch["cu_seqlens_argmin"][row])].tolist()
        else:  # 0.6.x: the last boundary repeated; with pad_seq_to_mult > 1 also the logical offsets
            padded = "cu_seqlens_q_padded" in batch
            cu = _trimmed(batch["cu_seqlens_q_padded" if padded else "cu_seqlens_q"][row].tolist())
            if padded:
                # Bridge's logical offsets (each sample up to its last non-EOS token, for TE's THD + CP): the
                # same samples, each shorter than its padded length by less than one alignment multiple
                logical = _trimmed(batch["cu_seqlens_q"][row].tolist())
                lengths = [b - a for a, b in zip(logical, logical[1:], strict=False)]
                widths = [b - a for a, b in zip(cu, cu[1:], strict=False)]
                logical_ok = len(lengths) <= len(widths) and all(
                    0 <= w - n < align for n, w in zip(lengths, widths, strict=False)
                )
        checks = {
            "cu_seqlens": cu == p.thd.cu_seqlens_list,
            "logical cu_seqlens": logical_ok,
            "tokens": torch.equal(batch["tokens"][row, :real], p.tokens[0, :real]),
            "labels": torch.equal(batch["labels"][row, :real], p.labels[0, :real]),
            "loss_mask": torch.equal(batch["loss_mask"][row, :real].float(), p.loss_mask[0, :real]),
            "position_ids": torch.equal(batch["position_ids"][row, :real], p.position_ids[0, :real]),
            "width": batch["tokens"].shape[1] == p.tokens.shape[1],
            "no loss on padding": int(batch["loss_mask"][row, real:].sum()) == 0,
        }
        out += [f"row {row} (pack {index}): {name}" for name, ok in checks.items() if not ok]
    return out


def _trimmed(cu: list[int]) -> list[int]:
    while len(cu) > 1 and cu[-1] == cu[-2]:
        cu = cu[:-1]
    return cu


def _eos() -> int:
    from packcfg.packing.sources import load_tokenizer
    from packcfg.resources import resolve_path

    return load_tokenizer(resolve_path("@packcfg/data/sample_sft/tokenizer.json")).eos_id


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bundle_runs_bridge_to_its_first_packed_batch(
    case: Case, run_case, scripts: Path, user_data: Path
) -> None:
    bundle, got, data_before, data_after = run_case(case)
    info = got["info"]
    bundle = bundle.resolve()
    # The override merge: every KEY=VALUE the bundle hands Bridge was applied (Bridge logs a warning for a
    # key it skips, cannot set or cannot instantiate).
    assert got["override_warnings"] == []
    # Tokenizer: the bundle's HF folder, loaded offline by Bridge's build_tokenizer, same EOS as the packs.
    assert info["tokenizer_model"] == str(bundle / "tokenizer")
    assert info["eos_id"] == _eos()
    # Local data, never a download: the local class, the user's (or the bundle's sample) folder.
    local_class = "FinetuningDatasetConfig" if LINE == "0.3.1" else "GPTSFTDatasetConfig"
    assert info["dataset_config"] == local_class
    root = user_data if case.local_data else bundle / "lib" / "packcfg" / "data" / "sample_sft"
    assert info["dataset_root"] == str(root)
    assert data_after == data_before  # Bridge wrote nothing into the data folder
    # Bridge's own packed readers over packcfg's files, train and validation.
    config = yaml.safe_load((bundle / "config.yaml").read_text())
    specs = config["dataset"]["offline_packing_specs"]
    size = specs["packed_sequence_size"]
    train = bundle / specs["packed_train_data_path"]
    val = (
        train.with_name("validation.parquet")
        if not specs.get("packed_val_data_path")
        else bundle / specs["packed_val_data_path"]
    )
    packed = "GPTSFTPackedDataset" if LINE == "0.3.1" else "GPTSFTPackedParquetDataset"
    assert (info["train_dataset"], info["valid_dataset"]) == (packed, packed)
    suffix = ".npy" if LINE == "0.3.1" else ".parquet"
    assert info["packed_train"] == str(train.with_suffix(suffix))
    assert info["packed_val"] == str(val.with_suffix(suffix))
    # No packs of Bridge's own (it would write them beside the data or under dataset_root/packed).
    assert sorted(p.name for p in train.parent.iterdir()) == sorted(
        {train.name, val.name, "metadata.json", "validation_metadata.json"}
        | ({train.with_suffix(".npy").name, val.with_suffix(".npy").name} if LINE == "0.3.1" else set())
    )
    # Token for token: Bridge's collate of the first batch == packcfg's packs at the indices Bridge chose.
    align = int(specs.get("pad_seq_to_mult") or 1)
    assert _differences(got["train"], got["train_indices"], train, size, align=align) == []
    assert _differences(got["valid"], got["valid_indices"], val, size, align=align) == []
    assert info["train_len"] > 0 and info["valid_len"] > 0
    # Paths: absolute, inside the bundle, where the worker ran from elsewhere (0.6.x changes into Bridge).
    assert info["checkpoint_save"].startswith(str(bundle) + "/")
    assert info["checkpoint_load"] == info["checkpoint_save"]
    declared = (config.get("logger") or {}).get("tensorboard_dir")  # a user's absolute path stays as it is
    assert info["tensorboard_dir"] == (declared or str(bundle / "output" / "tb_logs"))
    if LINE == "0.6":
        assert info["cwd"] == str(scripts)  # run_recipe.py's os.chdir(REPO_ROOT)
        # the runner's rewrite agrees with the packs: size = seq_length, pad unchanged by its lcm
        assert info["packed_sequence_size"] == info["seq_length"] == size
        assert info["pad_seq_to_mult"] == int(specs.get("pad_seq_to_mult") or 1)
    assert info["model_seq_length"] == info["seq_length"]


def test_comparison_catches_a_packing_bug(run_case) -> None:
    """The control: packcfg's own reading with a known packing bug must disagree with Bridge's batch."""
    from tests.train.faults import Faults

    bundle, got, _, _ = run_case(CASES[0])
    train = bundle / "runs" / "llama32_1b_sft_bridge" / "packed" / "train.parquet"
    assert _differences(got["train"], got["train_indices"], train, 512) == []
    for fault in (Faults(mask_across_samples=True), Faults(no_position_reset=True)):
        assert _differences(got["train"], got["train_indices"], train, 512, fault), fault
