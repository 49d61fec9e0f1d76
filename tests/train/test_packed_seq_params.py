"""The TE path's `PackedSeqParams` and the device-agnostic equivalence harness (issue 12).

`bridge_packed_seq_params` must return what Megatron Bridge's
`training/utils/packed_seq_utils.get_packed_seq_params` returns (the `cu_seqlens` branch used for
packed SFT; same code in v0.3.1 and main 067f987). The table below was derived by reading that function
(Bridge is not imported): trim `cu_seqlens` (and `cu_seqlens_unpadded`) at the precomputed argmin, else
at `torch.argmin` (the first `-1`, or index 0 when nothing is negative, giving an empty tensor);
with unpadded bounds, q/kv = unpadded and q/kv_padded = padded; without, q/kv = padded and no padded
fields; `max_seqlen` squeezed to an int (main's `_as_python_int`; v0.3.1 keeps the 0-d tensor), `None`
when absent.

The CUDA variants run the packed-vs-unpacked equivalence with the model on the GPU and the batches
built on CPU (as the data pipeline builds them); they skip on machines without CUDA.
"""

from __future__ import annotations

import pytest
import torch

from packcfg.train.batches import pack_thd, split_for_context_parallel
from packcfg.train.forward import bridge_packed_metadata, bridge_packed_seq_params, to_device

from .cases import synthetic_samples

I32 = torch.int32


def _t(rows: list) -> torch.Tensor:
    return torch.tensor(rows, dtype=I32)


# (batch, expected q/kv, expected q/kv padded, expected max_seqlen)
BRIDGE_TABLE = [
    # Bridge's collate output without CP: -1 filled, precomputed argmin, no unpadded bounds.
    (
        {
            "cu_seqlens": _t([[0, 3, 7, -1]]),
            "cu_seqlens_argmin": torch.tensor([[3]]),
            "max_seqlen": _t([[4]]),
        },
        [0, 3, 7],
        None,
        4,
    ),
    # No precomputed argmin: torch.argmin finds the first -1.
    ({"cu_seqlens": _t([[0, 5, 9, 12, -1, -1]]), "max_seqlen": _t([[5]])}, [0, 5, 9, 12], None, 5),
    # Already 1-D (squeeze is a no-op).
    ({"cu_seqlens": _t([0, 2, -1]), "max_seqlen": _t([2])}, [0, 2], None, 2),
    # Nothing negative and no argmin: argmin is index 0, the bounds come back empty (Bridge's
    # collate always appends a -1, so its batches never hit this).
    ({"cu_seqlens": _t([[0, 5, 9]]), "max_seqlen": _t([[5]])}, [], None, 5),
    # No max_seqlen: None.
    ({"cu_seqlens": _t([[0, 6, -1]]), "cu_seqlens_argmin": torch.tensor([[2]])}, [0, 6], None, None),
    # CP (pad_seq_to_mult 4): real lengths 3, 5 padded to 4, 8, pack padding to 16 counted as 0 real.
    (
        {
            "cu_seqlens": _t([[0, 4, 12, 16, -1]]),
            "cu_seqlens_argmin": torch.tensor([[4]]),
            "cu_seqlens_unpadded": _t([[0, 3, 8, 8, -1]]),
            "cu_seqlens_unpadded_argmin": torch.tensor([[4]]),
            "max_seqlen": _t([[8]]),
        },
        [0, 3, 8, 8],
        [0, 4, 12, 16],
        8,
    ),
    # Unpadded bounds without their argmin: torch.argmin takes the first -1 (index 4), not the repeat.
    (
        {
            "cu_seqlens": _t([[0, 4, 8, 12, -1, -1]]),
            "cu_seqlens_argmin": torch.tensor([[4]]),
            "cu_seqlens_unpadded": _t([[0, 3, 8, 8, -1, -1]]),
            "max_seqlen": _t([[4]]),
        },
        [0, 3, 8, 8],
        [0, 4, 8, 12],
        4,
    ),
]


@pytest.mark.parametrize(("batch", "q", "q_padded", "max_seqlen"), BRIDGE_TABLE)
def test_packed_seq_params_match_bridge(batch, q, q_padded, max_seqlen):
    params = bridge_packed_seq_params(batch)
    assert params.qkv_format == "thd"
    assert params.cu_seqlens_q.tolist() == q and params.cu_seqlens_kv.tolist() == q
    assert params.cu_seqlens_q.dtype == I32
    if q_padded is None:
        assert params.cu_seqlens_q_padded is None and params.cu_seqlens_kv_padded is None
    else:
        assert params.cu_seqlens_q_padded.tolist() == q_padded
        assert params.cu_seqlens_kv_padded.tolist() == q_padded
    assert params.max_seqlen_q == max_seqlen and params.max_seqlen_kv == max_seqlen
    assert max_seqlen is None or type(params.max_seqlen_q) is int


def test_metadata_of_a_pack_is_what_bridge_collate_produces():
    samples = synthetic_samples(5, seed=6)
    lengths = [s.runtime_length for s in samples[:3]]
    cu = [0, *torch.tensor(lengths).cumsum(0).tolist()]

    plain = bridge_packed_metadata(pack_thd(samples[:3]).thd)
    assert plain["cu_seqlens"].tolist() == [[*cu, -1]] and "cu_seqlens_unpadded" not in plain
    assert plain["max_seqlen"].tolist() == [[max(lengths)]]

    # pad_to_max_length: the pack padding is one more segment (Bridge appends max_length).
    fixed = bridge_packed_metadata(pack_thd(samples[:3], pad_to=64).thd)
    assert fixed["cu_seqlens"].tolist() == [[*cu, 64, -1]] and "cu_seqlens_unpadded" not in fixed

    # CP 2: segments padded to multiples of 4; unpadded = running sum of real lengths, padding 0.
    split = split_for_context_parallel(pack_thd(samples[:3], pad_to=64), 2, 0, None)
    meta = bridge_packed_metadata(split.thd)
    padded = [0]
    for n in [*lengths, 64 - cu[-1]]:
        padded.append(padded[-1] + -(-n // 4) * 4)
    assert meta["cu_seqlens"].tolist() == [[*padded, -1]]
    assert meta["cu_seqlens_unpadded"].tolist() == [[*cu, cu[-1], -1]]
    params = bridge_packed_seq_params(meta)
    assert params.cu_seqlens_q.tolist() == [*cu, cu[-1]] and params.cu_seqlens_q_padded.tolist() == padded


def test_batches_follow_the_models_device():
    """Every tensor of a micro-batch, THD metadata included, goes where the model is."""
    batch = split_for_context_parallel(pack_thd(synthetic_samples(4, seed=1), pad_to=128), 2, 1, None)
    moved = to_device(batch, torch.device("meta"))
    assert {t.device.type for t in (moved.tokens, moved.labels, moved.loss_mask, moved.position_ids)} == {
        "meta"
    }
    thd = moved.thd
    for name in ("cu_seqlens_q", "cu_seqlens_kv", "position_ids", "index_in_sample", "kv_gather_index"):
        assert getattr(thd, name).device.type == "meta", name


def test_initial_weights_come_from_one_cpu_seed_on_any_device(monkeypatch):
    """TP 2 starts from TP 1's weights only if every rank slices one CPU-initialised full weight;
    GPU initialisation draws each shard from its own CUDA RNG stream."""
    from packcfg.train.model import transformer_config
    from packcfg.train.settings import TrainSettings

    from .cases import tiny_config

    settings = TrainSettings.from_config(tiny_config())
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert transformer_config(settings.model, use_te=False).use_cpu_initialization


# ---- CUDA variants (world of 1 on one GPU; the 2-process tests need one GPU per rank)

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA: runs the model on the GPU")


@needs_cuda
def test_packed_equals_one_by_one_on_cuda(tiny_world):
    from .test_equivalence import _packed_vs_one_by_one

    model, _ = tiny_world
    assert next(model.parameters()).device.type == "cuda"
    assert _packed_vs_one_by_one(model, _faults()) == []
    assert _packed_vs_one_by_one(model, _faults(mask_across_samples=True)), "control not detected on CUDA"


@needs_cuda
def test_layouts_agree_on_cuda(tiny_world):
    from .test_equivalence import test_in_batch_offline_and_padded_agree

    model, _ = tiny_world
    assert next(model.parameters()).device.type == "cuda"
    test_in_batch_offline_and_padded_agree(tiny_world)


@needs_cuda
def test_transformer_engine_thd_equals_one_by_one():
    from packcfg.train import mcore_compat

    if not mcore_compat.has_transformer_engine():
        pytest.skip("needs Transformer Engine: the TE layer spec's fused THD attention")
    from packcfg.train.batches import pad_batch
    from packcfg.train.equivalence import compare, loss_and_grads
    from packcfg.train.model import build_model
    from packcfg.train.parallel import distributed
    from packcfg.train.settings import TrainSettings

    from .cases import greedy_packs, tiny_config

    settings = TrainSettings.from_config(tiny_config(model={"transformer_impl": "transformer_engine"}))
    samples = synthetic_samples(10, seed=1)
    with distributed():
        model = build_model(settings.model, settings.seed)
        reference = loss_and_grads(model, [pad_batch([s]) for s in samples])
        packed = loss_and_grads(model, [pack_thd(p) for p in greedy_packs(samples, 64)])
    assert compare(reference, packed, loss_atol=1e-3, grad_rtol=1e-2) == []


def _faults(**kwargs):
    from .faults import Faults

    return Faults(**kwargs)
