"""Shared inputs of the VLM executor tests: a tiny fp32 vision-language config and deterministic
image-text samples (real images, tiled and expanded as training does).

Imported by tests/train/test_vlm.py and, through `cases.run_case`, by `harness.py` under torchrun, so
every rank and every reference run builds exactly the same model and data.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .cases import VOCAB, tiny_config

IMAGE_START, IMAGE_TOKEN, IMAGE_END = 3, 4, 5
VLM_PARALLEL_CASES = ("vlm_dp", "vlm_tp")


def vlm_config(**sections: dict[str, Any]) -> dict[str, Any]:
    """The tiny test model with a 1-layer ViT (8-pixel tiles of 4 patches) and small budgets (48
    tokens, 6 tiles per pack), so packs hold several samples and some samples are split."""
    config = tiny_config(
        recipe={"name": "tiny_vlm_test", "mode": "vlm_sft"},
        model={
            "image_start_token_id": IMAGE_START,
            "image_token_id": IMAGE_TOKEN,
            "image_end_token_id": IMAGE_END,
            "vision_config": {
                "num_layers": 1,
                "hidden_size": 16,
                "ffn_hidden_size": 24,
                "num_attention_heads": 2,
                "image_size": 8,
                "patch_dim": 4,
                "max_dynamic_patch": 4,
                "use_thumbnail": True,
                "projector_ffn_hidden_size": 24,
            },
        },
        dataset={
            "enable_offline_packing": False,
            "enable_in_batch_packing": True,
            "max_packed_tokens": 48,
            "num_images_expected": 6,
            "max_buffer_size": 4,
        },
        train={"micro_batch_size": 4, "global_batch_size": 8},
    )
    for name, values in sections.items():
        config.setdefault(name, {}).update(values)
    return config


def vlm_samples(n: int, vision: Any, seed: int = 0) -> list[Any]:
    """Samples of 0-3 images (8x8 to 16x16 pixels: 1 to 5 tiles) between prompt words, then an
    answer with loss; a few long prompts exceed the token budget."""
    from packcfg.train.vlm import IMAGE_PLACEHOLDER_ID, expand_sample

    rng = np.random.default_rng(seed)
    shapes = [(8, 8), (8, 16), (16, 8), (16, 16)]
    out = []
    for i in range(n):
        words = 30 if i % 7 == 3 else 3
        text, images = [1], []
        for _ in range(int(rng.integers(0, 4))):
            text += rng.integers(10, VOCAB, int(rng.integers(1, words))).tolist()
            text.append(IMAGE_PLACEHOLDER_ID)
            h, w = shapes[int(rng.integers(len(shapes)))]
            images.append(rng.integers(0, 256, (h, w, 3), dtype=np.uint8))
        answer = rng.integers(10, VOCAB, int(rng.integers(2, 8))).tolist()
        ids = np.array([*text, *answer], np.int64)
        mask = np.zeros(len(ids), np.int8)
        mask[len(text) - 1 : len(ids) - 1] = 1
        out.append(expand_sample(ids, mask, images, vision))
    return out


def vlm_case_config(case: str, world: int) -> dict[str, Any]:
    if case == "vlm_dp":
        return vlm_config()
    if case == "vlm_tp":
        return vlm_config(model={"tensor_model_parallel_size": world})
    raise ValueError(case)


def run_vlm_case(case: str, variants: list[str]) -> dict[str, Any]:
    """Loss and full gradients of the case's first global batch (in-batch packed, InternVL budgets),
    for each variant ("none" or a fault name), in the current torch.distributed world (or a world of 1)."""
    import torch.distributed as dist

    from packcfg.train.data import SampleUnits
    from packcfg.train.equivalence import loss_and_grads
    from packcfg.train.parallel import distributed
    from packcfg.train.settings import TrainSettings
    from packcfg.train.vlm import VlmBatchPlan, build_vlm_model

    from .faults import Faults, injected

    world = dist.get_world_size() if dist.is_initialized() else 1
    settings = TrainSettings.from_config(vlm_case_config(case, world))
    assert settings.vision is not None
    samples = vlm_samples(8, settings.vision, seed=5)
    results = {}
    with distributed(tp=settings.model.tp) as layout:
        model = build_vlm_model(settings.model, settings.vision, settings.seed)
        plan = VlmBatchPlan(
            SampleUnits(samples),
            settings.data,
            settings.micro_batch_size,
            settings.global_batch_size,
            layout.dp,
            layout.dp_rank,
            vision=settings.vision,
        )
        for variant in variants:
            with injected(Faults.from_names([variant])):
                results[variant] = loss_and_grads(model, plan.micro_batches(0))
    return results
