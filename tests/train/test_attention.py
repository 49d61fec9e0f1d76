"""packcfg's THD RoPE and attention pieces against megatron-core's own reference implementations."""

from __future__ import annotations

import torch

from packcfg.train.attention import Rope, RopeSpec, thd_positions
from packcfg.train.batches import pack_thd, split_for_context_parallel

from .cases import synthetic_samples
from .faults import Faults, injected


def test_thd_positions_restart_per_sample():
    cu = torch.tensor([0, 3, 3, 7, 8], dtype=torch.int32)  # includes an empty sample
    assert thd_positions(cu, 8).tolist() == [0, 1, 2, 0, 1, 2, 3, 0]


def test_vectorised_thd_rope_equals_megatron_per_sample_loop(tiny_world):
    from megatron.core.models.common.embeddings.rope_utils import _apply_rotary_pos_emb_thd

    from packcfg.train.mcore_compat import parallel_state

    rope = Rope(RopeSpec(dim=16, base=10000.0))
    cu = torch.tensor([0, 5, 17, 18, 40], dtype=torch.int32)
    x = torch.randn(40, 3, 16)
    cos, sin = rope.cos_sin(thd_positions(cu, 40))
    table = torch.outer(torch.arange(64, dtype=torch.float32), rope.inv_freq)
    table = torch.cat((table, table), -1)[:, None, None, :]
    expected = _apply_rotary_pos_emb_thd(x, cu, table, cp_group=parallel_state.get_context_parallel_group())
    torch.testing.assert_close(rope.apply(x, cos, sin), expected, rtol=0, atol=1e-6)


def test_context_parallel_split_is_load_balanced():
    """CP 2: every sample padded to a multiple of 4; rank r holds chunks r and 3-r with global positions,
    and the two ranks together hold every token exactly once."""
    samples = synthetic_samples(5, seed=2)
    batch = pack_thd(samples)
    shares = [split_for_context_parallel(batch, 2, r, cp_group=None) for r in range(2)]
    cu_padded = shares[0].thd.cu_seqlens_kv_list
    assert all(c % 4 == 0 for c in cu_padded)
    n0 = (cu_padded[1] - cu_padded[0]) // 4  # chunk size of the first sample
    p0 = shares[0].position_ids[0, : 2 * n0].tolist()
    p1 = shares[1].position_ids[0, : 2 * n0].tolist()
    assert p0 == [*range(0, n0), *range(3 * n0, 4 * n0)]
    assert p1 == [*range(n0, 2 * n0), *range(2 * n0, 3 * n0)]
    assert sum(s.real_tokens for s in shares) == batch.real_tokens
    assert sum(int(s.loss_mask.sum()) for s in shares) == int(batch.loss_mask.sum())
    with injected(Faults(cp_wrong_chunks=True)):
        wrong = split_for_context_parallel(batch, 2, 0, cp_group=None)
    assert not torch.equal(wrong.tokens, shares[0].tokens)
    # the control's rank 0 holds chunks 0 and 1 of the first sample: its first 2 * n0 tokens, in order
    assert wrong.tokens[0, : 2 * n0].tolist() == batch.tokens[0, : 2 * n0].tolist()
    assert torch.equal(wrong.position_ids, shares[0].position_ids)  # positions still assume chunks 0 and 3
