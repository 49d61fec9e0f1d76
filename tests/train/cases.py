"""Shared inputs of the executor tests: a tiny fp32 model config and deterministic synthetic samples.

Imported by the tests and by `harness.py` (run under torchrun), so every rank and every reference run
builds exactly the same model and data.
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from packcfg.train.batches import Sample

REPO_ROOT = Path(__file__).resolve().parents[2]
TORCHRUN_TIMEOUT_S = 300
VOCAB = 128

TINY_CONFIG: dict[str, Any] = {
    "recipe": {"name": "tiny_test"},
    "model": {
        "num_layers": 2,
        "hidden_size": 32,
        "ffn_hidden_size": 48,
        "num_attention_heads": 4,
        "num_query_groups": 2,
        "kv_channels": 8,
        "seq_length": 64,
        "vocab_size": VOCAB,
        "rotary_base": 10000,
        "transformer_impl": "local",
        "attention_dropout": 0.0,
        "hidden_dropout": 0.0,
        "bf16": False,
    },
    "dataset": {
        "seq_length": 64,
        "seed": 7,
        "enable_offline_packing": True,
        "offline_packing_specs": {"packed_sequence_size": 64},
        "dataset_kwargs": {"pad_to_max_length": False},
    },
    "train": {"micro_batch_size": 1, "global_batch_size": 4, "train_iters": 1},
    "optimizer": {"lr": 1e-2, "min_lr": 1e-3, "clip_grad": 1.0, "weight_decay": 0.01},
    "scheduler": {"lr_warmup_iters": 1, "lr_decay_style": "cosine"},
    "rng": {"seed": 11},
    "logger": {"log_interval": 1},
}


def one_attention_layer_config(heads: int, groups: int, head_dim: int) -> Any:
    """megatron's TransformerConfig for one attention layer on its own (fusions off, CPU initialisation)."""
    from megatron.core.transformer.transformer_config import TransformerConfig

    return TransformerConfig(
        num_layers=1,
        hidden_size=heads * head_dim,
        num_attention_heads=heads,
        num_query_groups=groups,
        kv_channels=head_dim,
        attention_dropout=0.0,
        masked_softmax_fusion=False,
        apply_rope_fusion=False,
        use_cpu_initialization=True,
    )


def tiny_config(**sections: dict[str, Any]) -> dict[str, Any]:
    """TINY_CONFIG with sections updated key by key, e.g. tiny_config(model={"tensor_model_parallel_size": 2})."""
    config = copy.deepcopy(TINY_CONFIG)
    for name, values in sections.items():
        config.setdefault(name, {}).update(values)
    return config


def synthetic_samples(n: int, seed: int = 0, min_len: int = 3, max_len: int = 29) -> list[Sample]:
    """Samples of varied lengths (so CP alignment padding is exercised), with a prompt part (no loss)
    and an answer part (loss), the mask label-aligned like Bridge's packed format."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        length = int(rng.integers(min_len, max_len + 1))
        ids = rng.integers(1, VOCAB, length)
        prompt = int(rng.integers(1, max(2, length // 2)))
        mask = np.zeros(length, np.int8)
        mask[prompt - 1 : length - 1] = 1  # predicting answer tokens; the last token predicts nothing
        out.append(Sample(ids, mask))
    return out


def greedy_packs(samples: list[Sample], capacity: int) -> list[list[Sample]]:
    """First-fit packing in order on runtime lengths (the tests need packs, not an optimal plan)."""
    packs: list[list[Sample]] = []
    for s in samples:
        for pack in packs:
            if sum(x.runtime_length for x in pack) + s.runtime_length <= capacity:
                pack.append(s)
                break
        else:
            packs.append([s])
    return packs


# ---- the parallel equivalence cases (DP, CP, TP): one global batch, reference at world 1

PARALLEL_CASES = ("dp", "cp", "tp")


def case_config(case: str, world: int) -> dict[str, Any]:
    """The case's config at a world size: `dp` spreads the world over data parallel, `cp` over
    context parallel, `tp` over tensor parallel. CP packs are padded to the pack size, so both the
    alignment padding of odd-length samples and the pack's padding segment go through the split."""
    if case == "dp":
        return tiny_config(train={"global_batch_size": 4})
    if case == "cp":
        return tiny_config(
            model={"context_parallel_size": world},
            train={"global_batch_size": 2},
            dataset={"dataset_kwargs": {"pad_to_max_length": True}},
        )
    if case == "tp":
        return tiny_config(model={"tensor_model_parallel_size": world}, train={"global_batch_size": 2})
    raise ValueError(case)


def run_case(case: str, variants: list[str]) -> dict[str, Any]:
    """Loss and full gradients of the case's first global batch, for each variant ("none" or a fault
    name), in the current torch.distributed world (or a world of 1)."""
    import torch.distributed as dist

    if case.startswith("vlm_"):  # the vision-language cases (tests/train/vlm_cases.py)
        from .vlm_cases import run_vlm_case

        return run_vlm_case(case, variants)

    from packcfg.train import batches as thd  # split looked up per call: faults.injected patches it
    from packcfg.train.data import BatchPlan
    from packcfg.train.equivalence import loss_and_grads
    from packcfg.train.model import build_model
    from packcfg.train.parallel import context_group, distributed
    from packcfg.train.settings import TrainSettings

    from .faults import Faults, injected

    world = dist.get_world_size() if dist.is_initialized() else 1
    settings = TrainSettings.from_config(case_config(case, world))
    packs = greedy_packs(synthetic_samples(24, seed=3), settings.data.pack_size)
    results = {}
    with distributed(tp=settings.model.tp, cp=settings.model.cp) as layout:
        model = build_model(settings.model, settings.seed)
        plan = BatchPlan(
            _Packs(packs),
            settings.data,
            settings.micro_batch_size,
            settings.global_batch_size,
            layout.dp,
            layout.dp_rank,
        )
        for variant in variants:
            with injected(Faults.from_names([variant])):
                batches = plan.micro_batches(0)
                if layout.cp > 1:
                    batches = [
                        thd.split_for_context_parallel(b, layout.cp, layout.cp_rank, context_group())
                        for b in batches
                    ]
                results[variant] = loss_and_grads(model, batches)
    return results


class _Packs:
    """Packs as training units (what a packed Parquet file holds, without the file)."""

    def __init__(self, packs: list[list[Sample]]) -> None:
        self.packs = packs

    def __len__(self) -> int:
        return len(self.packs)

    def __getitem__(self, index: int) -> list[Sample]:
        return self.packs[index]


def run_torchrun(
    args: list[str], nproc: int = 2, timeout: int = TORCHRUN_TIMEOUT_S
) -> subprocess.CompletedProcess:
    """`python -m torch.distributed.run` on a free port; a failure shows the children's output. Skips where
    CUDA is visible with fewer GPUs than ranks (tests/train/devices.py)."""
    from packcfg.train.parallel import free_port

    from .devices import skip_unless_one_gpu_per_rank

    skip_unless_one_gpu_per_rank(nproc)

    cmd = [
        sys.executable, "-m", "torch.distributed.run",
        f"--nproc-per-node={nproc}", f"--master-port={free_port()}", "--master-addr=127.0.0.1",
        *args,
    ]  # fmt: skip
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "OMP_NUM_THREADS": "1"}
    try:
        proc = subprocess.run(cmd, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"torchrun timed out after {timeout}s: {' '.join(cmd)}\n{exc.stdout}\n{exc.stderr}")
    if proc.returncode != 0:
        pytest.fail(
            f"torchrun failed ({proc.returncode}): {' '.join(cmd)}\n--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}"
        )
    return proc


# ---- DPO (tests/train/test_dpo.py): pairs, their packs, and the DP case


def synthetic_pairs(n: int, seed: int = 0) -> list[Any]:
    """Preference pairs: one prompt, two answers of different lengths (loss on the answers only)."""
    from packcfg.train.dpo import Pair

    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        prompt = rng.integers(1, VOCAB, int(rng.integers(2, 8)))

        def answer(prompt: np.ndarray = prompt) -> Sample:
            ids = np.concatenate([prompt, rng.integers(1, VOCAB, int(rng.integers(2, 14)))])
            mask = np.zeros(len(ids), np.int8)
            mask[len(prompt) - 1 : len(ids) - 1] = 1
            return Sample(ids, mask)

        out.append(Pair(answer(), answer()))
    return out


def pair_packs(pairs: list[Any], capacity: int) -> list[list[Any]]:
    """First-fit packing of whole pairs (a pair's two runtime lengths together)."""
    packs: list[list[Any]] = []
    size = lambda p: p.chosen.runtime_length + p.rejected.runtime_length  # noqa: E731
    for pair in pairs:
        for pack in packs:
            if sum(size(x) for x in pack) + size(pair) <= capacity:
                pack.append(pair)
                break
        else:
            packs.append([pair])
    return packs


DPO_PAIRS = 12


def run_dpo_case(variants: list[str], tp_case: bool = False) -> dict[str, Any]:
    """DPO loss and full gradients of one global batch (all packs of `DPO_PAIRS` pairs) in the
    current world or a world of 1: the world is DP (packs dealt to ranks contiguously) or, with
    `tp_case`, TP (every rank sees every pack). The reference model is the same architecture from
    another seed, so policy and reference differ."""
    import torch.distributed as dist

    from packcfg.train.dpo import dpo_forward_backward, pack_pairs, reference_logps
    from packcfg.train.equivalence import LossAndGrads, full_gradients
    from packcfg.train.model import build_model
    from packcfg.train.parallel import distributed
    from packcfg.train.settings import DpoSettings, TrainSettings

    from .faults import Faults, injected

    world = dist.get_world_size() if dist.is_initialized() else 1
    tp = world if tp_case else 1
    settings = TrainSettings.from_config(tiny_config(model={"tensor_model_parallel_size": tp}))
    packs = pair_packs(synthetic_pairs(DPO_PAIRS, seed=5), settings.data.pack_size)
    assert len(packs) % 2 == 0, "the DP case needs an even number of packs"
    results = {}
    with distributed(tp=tp) as layout:
        model = build_model(settings.model, settings.seed)
        reference = build_model(settings.model, settings.seed + 1)
        share = len(packs) // layout.dp
        mine = packs[layout.dp_rank * share : (layout.dp_rank + 1) * share]
        for variant in variants:
            with injected(Faults.from_names([variant])):
                batches = [pack_pairs(p, pad_to=settings.data.pack_size) for p in mine]
                refs = reference_logps(reference, batches)
                model.zero_grad(set_to_none=False)
                step = dpo_forward_backward(model, batches, refs, DpoSettings(beta=0.5))
            results[variant] = LossAndGrads(loss=step.loss, grads=full_gradients(model))
    return results
