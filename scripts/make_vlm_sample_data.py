#!/usr/bin/env python3
"""Generate packcfg's bundled synthetic image-text set (numpy only, deterministic, no downloads).

Writes packcfg/data/sample_vlm/train.npz (read by `packcfg.train.vlm.load_vlm_samples`, with
`allow_pickle=False`): flat arrays
  text, loss_mask, text_offsets   token ids (one `<image>` placeholder, id 6, per image) and the
                                  label-aligned loss mask of each sample, bounded by text_offsets
  pixels, pixel_offsets, image_shapes   uint8 RGB images of varied sizes ([H, W, 3] each, flattened)
  sample_images                   image index bounds of each sample

Each image is a solid colour (one of 8) with one quadrant in a second colour; the answer names, for
each image in order, its colour and which quadrant differs. So the loss can only fall by reading the
images. Image sizes vary (16x16 to 48x32), giving 1 to 5 tiles once tiled as InternVL tiles (16-pixel
tiles, at most 4 plus a thumbnail); a few samples carry long text or many images, so they exceed the
recipe's packing budgets and are split.

Usage: python scripts/make_vlm_sample_data.py [--out DIR] [--seed 1234] [--samples 512]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from packcfg.core.atomic import atomic_path  # noqa: E402

BOS, EOS = 1, 2
IMAGE = 6  # the placeholder each image expands from (packcfg.train.vlm.IMAGE_PLACEHOLDER_ID)
ANSWER = 8
COLOUR_WORDS = 16  # 16..23: the 8 colours
QUADRANT_WORDS = 24  # 24..27: which quadrant differs
FIRST_WORD = 32  # 32..255: question words (no loss)
VOCAB = 256
PALETTE = np.array(
    [
        [230, 25, 75],
        [60, 180, 75],
        [255, 225, 25],
        [0, 130, 200],
        [245, 130, 48],
        [145, 30, 180],
        [70, 240, 240],
        [240, 240, 240],
    ],
    np.uint8,
)
SHAPES = [(16, 16), (16, 16), (16, 32), (32, 16), (32, 32), (16, 48), (48, 32)]  # (H, W)


def make_image(rng: np.random.Generator) -> tuple[np.ndarray, list[int]]:
    """An image and its two answer words (colour, odd quadrant)."""
    h, w = SHAPES[int(rng.integers(len(SHAPES)))]
    colour, other = rng.choice(len(PALETTE), size=2, replace=False)
    quadrant = int(rng.integers(4))
    image = np.broadcast_to(PALETTE[colour], (h, w, 3)).copy()
    r, c = divmod(quadrant, 2)
    image[r * h // 2 : (r + 1) * h // 2, c * w // 2 : (c + 1) * w // 2] = PALETTE[other]
    return image, [COLOUR_WORDS + int(colour), QUADRANT_WORDS + quadrant]


def make_sample(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
    long_text = rng.random() < 0.05  # the long tail: some samples exceed the token budget
    n_images = int(rng.choice([1, 1, 2, 2, 3, 4], p=[0.3, 0.2, 0.2, 0.15, 0.1, 0.05]))
    text, answers, images = [BOS], [], []
    for _ in range(n_images):
        words = int(rng.integers(60, 120)) if long_text else int(rng.integers(2, 12))
        text += rng.integers(FIRST_WORD, VOCAB, words).tolist()
        image, answer = make_image(rng)
        text.append(IMAGE)
        images.append(image)
        answers += answer
    text += [ANSWER, *answers, EOS]
    ids = np.array(text, np.int32)
    mask = np.zeros(len(ids), np.int8)
    start = len(ids) - len(answers) - 1  # predicting the answers and <eos>: positions before them
    mask[start - 1 : len(ids) - 1] = 1
    return ids, mask, images


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--out", type=Path, default=Path(__file__).resolve().parents[1] / "packcfg/data/sample_vlm"
    )
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--samples", type=int, default=512)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    samples = [make_sample(rng) for _ in range(args.samples)]
    images = [img for _, _, imgs in samples for img in imgs]
    arrays = {
        "text": np.concatenate([s[0] for s in samples]),
        "loss_mask": np.concatenate([s[1] for s in samples]),
        "text_offsets": np.cumsum([0, *(len(s[0]) for s in samples)]).astype(np.int64),
        "pixels": np.concatenate([img.ravel() for img in images]),
        "pixel_offsets": np.cumsum([0, *(img.size for img in images)])[:-1].astype(np.int64),
        "image_shapes": np.array([img.shape[:2] for img in images], np.int64),
        "sample_images": np.cumsum([0, *(len(s[2]) for s in samples)]).astype(np.int64),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    target = args.out / "train.npz"
    with atomic_path(target) as tmp, open(tmp, "wb") as f:
        np.savez_compressed(f, **arrays)
    print(f"wrote {target}: {len(samples)} samples, {len(images)} images, {arrays['text'].size} text tokens")


if __name__ == "__main__":
    main()
