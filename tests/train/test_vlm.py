"""VLM in-batch packing computes what one sample at a time computes (issue 15, vision-language half).

- Equivalence: InternVL-style packs (greedy buffer, token and tile budgets, long samples split) vs each
  piece alone, loss within 1e-5 and every gradient (language model, ViT, projector) within 1e-5
  relative; a control (`image_tokens_across_samples`) must fail the same comparison. DP 2 and TP 2 vs 1.
- Properties (hypothesis): no pack over either budget; every runtime token (with its target and loss
  mask), every tile, of every sample appears exactly once, pieces in order; no image is cut.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from dataclasses import replace

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from packcfg.train.equivalence import compare, load_results, loss_and_grads
from packcfg.train.settings import TrainSettings, VisionSettings
from packcfg.train.vlm import (
    VlmSample,
    greedy_buffer_packs,
    image_spans,
    pack_vlm,
    split_sample,
)

from .cases import run_case, run_torchrun
from .faults import Faults, injected
from .vlm_cases import IMAGE_END, IMAGE_START, IMAGE_TOKEN, VLM_PARALLEL_CASES, vlm_config, vlm_samples

TOL = 1e-5


@pytest.fixture(scope="module")
def vlm_world() -> Iterator[tuple[torch.nn.Module, VisionSettings]]:
    """(model, vision settings) of the tiny VLM config inside a world of 1."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from packcfg.train.parallel import distributed
        from packcfg.train.vlm import build_vlm_model

        s = TrainSettings.from_config(vlm_config())
        assert s.vision is not None
        with distributed() as _layout:
            yield build_vlm_model(s.model, s.vision, s.seed), s.vision


def _vision() -> VisionSettings:
    s = TrainSettings.from_config(vlm_config())
    assert s.vision is not None
    return s.vision


# ---- 1. packed vs one piece at a time


def _packed_vs_one_by_one(model, vision, faults: Faults):
    samples = vlm_samples(24, vision, seed=1)
    packs = greedy_buffer_packs(samples, vision)
    pieces = [p for s in samples for p in split_sample(s, vision)]
    assert len(pieces) > len(samples), "some samples must be split to test splitting"
    assert sum(len(p) for p in packs) == len(pieces) and any(len(p) > 2 for p in packs)
    assert any(len(pk) > 1 and sum(s.num_tiles for s in pk) > 0 for pk in packs)
    one_by_one = loss_and_grads(model, [pack_vlm([p], vision) for p in pieces])
    with injected(faults):
        packed = loss_and_grads(model, [pack_vlm(pk, vision) for pk in packs])
    return one_by_one, packed


def _max_diffs(a, b) -> tuple[float, float]:
    rel = max(float((b.grads[k] - g).norm() / g.norm().clamp_min(1e-30)) for k, g in a.grads.items())
    return abs(a.loss - b.loss), rel


def test_packed_equals_one_piece_at_a_time(vlm_world):
    model, vision = vlm_world
    ref, packed = _packed_vs_one_by_one(model, vision, Faults())
    assert compare(ref, packed, loss_atol=TOL, grad_rtol=TOL) == []
    dl, dg = _max_diffs(ref, packed)
    print(f"\nVLM packed vs one by one: |loss diff| {dl:.2e}, max relative grad diff {dg:.2e}")
    # the vision tower and projector are trained (their gradients are compared, and not zero)
    for name in ("vision_model.conv1.weight", "vision_projection.encoder.linear_fc1.weight"):
        assert ref.grads[name].abs().sum() > 0, name


@pytest.mark.parametrize("fault", ["image_tokens_across_samples", "mask_across_samples"])
def test_controls_break(vlm_world, fault):
    model, vision = vlm_world
    ref, broken = _packed_vs_one_by_one(model, vision, Faults.from_names([fault]))
    problems = compare(ref, broken, loss_atol=TOL, grad_rtol=TOL)
    dl, dg = _max_diffs(ref, broken)
    print(f"\ncontrol {fault}: |loss diff| {dl:.2e}, max relative grad diff {dg:.2e}")
    assert problems


def test_images_reach_the_loss(vlm_world):
    """Changing the pixels changes the loss: the image embeddings are really spliced in."""
    model, vision = vlm_world
    batches = [pack_vlm(pk, vision) for pk in greedy_buffer_packs(vlm_samples(8, vision, seed=2), vision)]
    a = loss_and_grads(model, batches).loss
    flipped = [replace(mb, pixel_values=-mb.pixel_values) for mb in batches]  # type: ignore[operator]
    assert abs(a - loss_and_grads(model, flipped).loss) > 1e-4


def test_no_loss_on_image_tokens():
    vision = _vision()
    for pk in greedy_buffer_packs(vlm_samples(12, vision, seed=3), vision):
        mb = pack_vlm(pk, vision)
        image = torch.isin(mb.labels, torch.tensor([IMAGE_START, IMAGE_TOKEN, IMAGE_END]))
        assert not mb.loss_mask[image].any()
        assert mb.pixel_values is not None and mb.image_token_index is not None
        assert mb.image_token_index.numel() == mb.pixel_values.shape[0] * vision.tokens_per_tile


@pytest.mark.torchrun
@pytest.mark.slow
@pytest.mark.parametrize("case", VLM_PARALLEL_CASES)
def test_vlm_parallel_matches_world_of_one(case, tmp_path):
    """DP 2 and TP 2 (language model, ViT and projector all TP-sharded) vs the same batch at world 1."""
    out = tmp_path / f"{case}.pt"
    run_torchrun(["tests/train/harness.py", case, str(out), "image_tokens_across_samples"])
    got = load_results(out)
    ref = run_case(case, ["none"])["none"]
    dl, dg = _max_diffs(ref, got["none"])
    print(f"\n{case} world 2 vs 1: |loss diff| {dl:.2e}, max relative grad diff {dg:.2e}")
    assert compare(ref, got["none"], loss_atol=TOL, grad_rtol=TOL) == []
    assert compare(ref, got["image_tokens_across_samples"], loss_atol=TOL, grad_rtol=TOL)


# ---- 2. budgets and splitting (properties)

SMALL = replace(_vision(), image_size=2, patch_dim=1)  # 4 tokens per tile


@st.composite
def samples_and_budgets(draw):
    """Samples as (text run lengths, image tile counts) alternating, and budgets every image fits."""
    max_tiles = draw(st.integers(1, 6))
    n = draw(st.integers(1, 12))
    specs = []
    for _ in range(n):
        images = draw(st.lists(st.integers(1, max_tiles), max_size=4))
        texts = draw(st.lists(st.integers(0, 40), min_size=len(images) + 1, max_size=len(images) + 1))
        texts[-1] += 2  # a sample has at least one runtime token after its last image
        specs.append((texts, images))
    biggest = max([t for _, imgs in specs for t in imgs] or [0])
    tokens = draw(st.integers(biggest * SMALL.tokens_per_tile + 2, 80))
    tile_budget = draw(st.integers(max(biggest, 1), 12))
    buffer = draw(st.integers(1, 8))
    return specs, replace(
        SMALL, max_packed_tokens=tokens, num_images_expected=tile_budget, max_buffer_size=buffer
    )


def _make(specs) -> list[VlmSample]:
    """Samples whose text tokens are unique ids and whose tiles carry unique values, so any token or
    tile that is lost, duplicated or reordered shows."""
    out, next_id, next_tile = [], 100, 0
    for texts, images in specs:
        ids, tiles = [], []
        for k, n in enumerate(texts):
            ids += list(range(next_id, next_id + n))
            next_id += n
            if k < len(images):
                ids += [IMAGE_START, *[IMAGE_TOKEN] * (images[k] * SMALL.tokens_per_tile), IMAGE_END]
                tiles += [np.full((3, 2, 2), next_tile + j, np.float32) for j in range(images[k])]
                next_tile += images[k]
        mask = (np.arange(len(ids)) % 3 == 0).astype(np.int8)
        mask[-1] = 0
        out.append(
            VlmSample(
                input_ids=np.array(ids, np.int64),
                loss_mask=mask,
                tiles=np.stack(tiles) if tiles else np.zeros((0, 3, 2, 2), np.float32),
                image_tiles=tuple(images),
            )
        )
    return out


@settings(max_examples=150, deadline=None)
@given(samples_and_budgets())
def test_split_pieces_cover_each_sample_once_in_order(case):
    specs, vision = case
    for sample in _make(specs):
        pieces = split_sample(sample, vision)
        for p in pieces:
            assert p.runtime_length <= vision.max_packed_tokens and p.num_tiles <= vision.num_images_expected
            assert p.loss_mask[-1] == 0
            spans = image_spans(p, vision)  # raises if a piece holds a cut image
            assert all(e - s == t * vision.tokens_per_tile + 2 for s, e, t in spans)
            assert all(e <= p.runtime_length for _, e, _ in spans)
        # runtime tokens, their targets and loss masks concatenate back to the sample's, in order
        assert np.array_equal(np.concatenate([p.input_ids[:-1] for p in pieces]), sample.input_ids[:-1])
        assert np.array_equal(np.concatenate([p.input_ids[1:] for p in pieces]), sample.input_ids[1:])
        assert np.array_equal(np.concatenate([p.loss_mask[:-1] for p in pieces]), sample.loss_mask[:-1])
        assert np.array_equal(np.concatenate([p.tiles for p in pieces]), sample.tiles)
        assert sum((p.image_tiles for p in pieces), ()) == sample.image_tiles
        if (
            sample.runtime_length <= vision.max_packed_tokens
            and sample.num_tiles <= vision.num_images_expected
        ):
            assert pieces == [sample]


@settings(max_examples=150, deadline=None)
@given(samples_and_budgets())
def test_greedy_buffer_packs_respect_budgets_and_keep_every_piece(case):
    specs, vision = case
    samples = _make(specs)
    packs = greedy_buffer_packs(samples, vision)
    for pk in packs:
        assert sum(p.runtime_length for p in pk) <= vision.max_packed_tokens
        assert sum(p.num_tiles for p in pk) <= vision.num_images_expected
    packed = [p for pk in packs for p in pk]
    # every runtime token exactly once: unique text ids, and unique tile values
    text = np.concatenate([p.input_ids[:-1] for p in packed])
    text = text[text >= 100]
    want = np.concatenate([s.input_ids[:-1] for s in samples])
    assert np.array_equal(np.sort(text), np.sort(want[want >= 100]))
    tiles = np.sort(np.concatenate([p.tiles[:, 0, 0, 0] for p in packed if len(p.tiles)] or [np.zeros(0)]))
    assert np.array_equal(tiles, np.arange(sum(s.num_tiles for s in samples)))
    # within a pack, the pieces of one sample keep their order (text ids increase)
    for pk in packs:
        firsts = [int(p.input_ids[p.input_ids >= 100][0]) for p in pk if (p.input_ids >= 100).any()]
        assert firsts == sorted(firsts)


def test_an_image_over_the_budget_is_a_clear_error():
    vision = replace(SMALL, max_packed_tokens=10, num_images_expected=6)
    (sample,) = _make([([1, 3], [3])])  # an image of 3 tiles is 14 tokens > 10
    with pytest.raises(ValueError, match="does not fit a pack of 10 tokens"):
        split_sample(sample, vision)


# ---- 3. the recipe through the CLI, reduced, DP 2 (a clean folder; checkpoint and resume)


@pytest.mark.torchrun
@pytest.mark.slow
def test_packcfg_train_tiny_vlm_recipe_reduced(tmp_path):
    import json
    import os
    import subprocess
    import sys

    from .cases import REPO_ROOT
    from .devices import skip_unless_one_gpu_per_rank

    skip_unless_one_gpu_per_rank(2)
    recipe = REPO_ROOT / "recipes" / "tiny_cpu_vlm.yaml"
    common = ["--nproc-per-node", "2", "-o", "train.micro_batch_size=8", "-o", "checkpoint.save_interval=2"]
    common += ["-o", "+checkpoint.save=runs/tiny_cpu_vlm/checkpoints"]

    def cli(*args: str) -> subprocess.CompletedProcess:
        proc = subprocess.run(
            [sys.executable, "-m", "packcfg", "train", str(recipe), *common, *args],
            cwd=tmp_path, capture_output=True, text=True, timeout=300,
            env={**os.environ, "PYTHONWARNINGS": "ignore", "PYTHONPATH": str(REPO_ROOT)},
        )  # fmt: skip
        assert proc.returncode == 0, f"--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}"
        return proc

    first = cli("-o", "train.train_iters=2")
    assert "DP 2" in first.stdout and "step     2/2" in first.stdout
    assert (tmp_path / "runs/tiny_cpu_vlm/checkpoints/iter_0000002").is_dir()
    cli("-o", "train.train_iters=4", "--resume")
    lines = (tmp_path / "runs/tiny_cpu_vlm/metrics.jsonl").read_text().splitlines()
    metrics = [json.loads(line) for line in lines]
    assert [m["step"] for m in metrics] == [1, 2, 3, 4]
    assert all(m["loss"] > 0 and m["real_tokens"] > 0 for m in metrics)


@pytest.mark.parametrize(
    ("height", "width", "tiles"),
    [(16, 16, 1), (16, 32, 3), (32, 32, 5), (16, 48, 4), (48, 32, 3), (8, 64, 5)],
)
def test_tiles_per_image_as_internvl_counts_them(height, width, tiles):
    """InternVL's dynamic_preprocess: the closest-aspect grid of at most 4 tiles, plus a thumbnail
    when there are several (e.g. 8x64 -> a 4x1 grid, 5 tiles)."""
    from packcfg.train.vlm import tile_image

    vision = replace(_vision(), image_size=16, max_tiles=4, use_thumbnail=True)
    out = tile_image(np.zeros((height, width, 3), np.uint8), vision)
    assert out.shape == (tiles, 3, 16, 16)
