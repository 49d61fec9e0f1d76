"""`recipe.mode: vlm_sft`: image-text samples, InternVL-style in-batch packing, and a small
vision-language model built from megatron-core modules.

- Images are tiled as InternVL's `dynamic_preprocess` tiles them (internvl_chat/internvl/train/
  dataset.py): the grid of at most `max_dynamic_patch` tiles closest to the image's aspect ratio,
  plus a whole-image thumbnail tile when there is more than one. Each image's placeholder expands to
  `IMG_START, IMG_CONTEXT x (tiles x tokens_per_tile), IMG_END` (InternVL's preprocess), so a
  sample's token count and tile count are known before packing.
- Packing follows InternVL's `PackedDataset` (internvl_chat/internvl/train/dataset_packed.py): two
  budgets per pack, tokens (`max_packed_tokens`) and image tiles (`num_images_expected`, counted as
  InternVL counts `pixel_values` rows: tiles, thumbnails included); a sample over a budget is split,
  never through an image (`split_buffer` moves a cut inside an image back to the image's start); each
  piece is its own sequence (its own `cu_seqlens` segment). The packs themselves come from the
  planner's greedy buffer (`packcfg.packing.planner.GreedyBufferPacker`). Two deliberate differences
  from InternVL: every token is kept (InternVL drops the text between a cut and the next image, and
  pieces without images), and a piece over the tile budget is cut before the image that overflows it
  (InternVL drops such a piece).
- The model: megatron-core's `GPTModel` (language), a tiny ViT made of megatron-core's
  `TransformerBlock` with a bidirectional core attention, and megatron-core's `MultimodalProjector`.
  Image embeddings replace the embeddings at the image context positions of the THD row, in order,
  as InternVL's `InternVLChatModel.forward` does (`input_embeds[selected] = vit_embeds`) and as
  megatron-core's `LLaVAModel` feeds its combined embeddings to the language model (`decoder_input`).
  megatron-core 0.16.1's own `CLIPViTModel` cannot be built on CPU (`__init__` calls `.cuda()` on its
  position ids) and its local ViT spec uses the stock `DotProductAttention` (CUDA buffers, no THD).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from packcfg.packing.planner import GreedyBufferPacker
from packcfg.train import mcore_compat
from packcfg.train.attention import expand_groups
from packcfg.train.batches import MicroBatch, Sample, pack_thd
from packcfg.train.data import BatchPlan, SampleUnits
from packcfg.train.mcore_compat import ModuleSpec, quiet_megatron_import
from packcfg.train.model import build_model, transformer_config
from packcfg.train.settings import ModelSettings, VisionSettings

with quiet_megatron_import():
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.vision.multimodal_projector import MultimodalProjector
    from megatron.core.tensor_parallel.layers import ColumnParallelLinear, RowParallelLinear
    from megatron.core.transformer.mlp import MLPSubmodules
    from megatron.core.transformer.module import MegatronModule
    from megatron.core.transformer.transformer_block import TransformerBlock
    from megatron.core.transformer.transformer_config import TransformerConfig

IMAGE_PLACEHOLDER_ID = 6  # the stored `<image>` token of the bundled data, before expansion


# ---------------------------------------------------------------------------------------------- data


@dataclass(frozen=True)
class VlmSample(Sample):
    """A tokenized sample with its images: placeholders already expanded, `tiles` `[n, 3, S, S]`
    float32 in image order, `image_tiles` the tile count of each image."""

    tiles: np.ndarray
    image_tiles: tuple[int, ...]

    @property
    def num_tiles(self) -> int:
        return int(sum(self.image_tiles))


def tile_grid(width: int, height: int, max_tiles: int, image_size: int) -> tuple[int, int]:
    """(columns, rows) of InternVL's `find_closest_aspect_ratio`: among grids of 1..max_tiles tiles,
    the one whose aspect ratio is closest to the image's; on a tie the larger grid if the image has
    more than half its pixels."""
    ratios = sorted(
        {
            (i, j)
            for n in range(1, max_tiles + 1)
            for i in range(1, n + 1)
            for j in range(1, n + 1)
            if i * j <= max_tiles
        },
        key=lambda r: r[0] * r[1],
    )
    aspect = width / height
    best, best_diff = (1, 1), float("inf")
    for cols, rows in ratios:
        diff = abs(aspect - cols / rows)
        if diff < best_diff:
            best, best_diff = (cols, rows), diff
        elif diff == best_diff and width * height > 0.5 * image_size * image_size * cols * rows:
            best = (cols, rows)
    return best


def _resize(image: np.ndarray, height: int, width: int) -> np.ndarray:
    """Nearest-neighbour resize of an `[H, W, 3]` array (numpy only; the data is synthetic)."""
    rows = (np.arange(height) * image.shape[0] // height).clip(0, image.shape[0] - 1)
    cols = (np.arange(width) * image.shape[1] // width).clip(0, image.shape[1] - 1)
    return image[rows][:, cols]


def tile_image(image: np.ndarray, vision: VisionSettings) -> np.ndarray:
    """InternVL's `dynamic_preprocess` on an `[H, W, 3]` uint8 image: resize to the chosen grid, cut
    into `image_size` tiles row by row, add the thumbnail when there are several; returns `[n, 3, S, S]`
    float32 in [-1, 1]."""
    size = vision.image_size
    cols, rows = tile_grid(image.shape[1], image.shape[0], vision.max_tiles, size)
    grid = _resize(image, rows * size, cols * size)
    tiles = [
        grid[r * size : (r + 1) * size, c * size : (c + 1) * size] for r in range(rows) for c in range(cols)
    ]
    if vision.use_thumbnail and len(tiles) > 1:
        tiles.append(_resize(image, size, size))
    out = np.stack(tiles).astype(np.float32).transpose(0, 3, 1, 2)
    return out / 127.5 - 1.0


def expand_sample(
    text_ids: np.ndarray, loss_mask: np.ndarray, images: Sequence[np.ndarray], vision: VisionSettings
) -> VlmSample:
    """A stored sample (one `IMAGE_PLACEHOLDER_ID` per image) with each placeholder expanded to its
    image's start, context and end tokens (no loss on any of them)."""
    if int((text_ids == IMAGE_PLACEHOLDER_ID).sum()) != len(images):
        raise ValueError(
            f"{int((text_ids == IMAGE_PLACEHOLDER_ID).sum())} image placeholders for {len(images)} images"
        )
    tiles = [tile_image(img, vision) for img in images]
    ids: list[np.ndarray] = []
    mask: list[np.ndarray] = []
    k = 0
    for token, m in zip(text_ids.tolist(), loss_mask.tolist(), strict=True):
        if token != IMAGE_PLACEHOLDER_ID:
            ids.append(np.array([token], np.int64))
            mask.append(np.array([m], np.int8))
            continue
        n = len(tiles[k]) * vision.tokens_per_tile
        ids.append(
            np.array(
                [vision.image_start_token_id, *[vision.image_token_id] * n, vision.image_end_token_id],
                np.int64,
            )
        )
        mask.append(np.zeros(n + 2, np.int8))
        k += 1
    return VlmSample(
        input_ids=np.concatenate(ids),
        loss_mask=np.concatenate(mask),
        tiles=np.concatenate(tiles)
        if tiles
        else np.zeros((0, 3, vision.image_size, vision.image_size), np.float32),
        image_tiles=tuple(len(t) for t in tiles),
    )


def load_vlm_samples(root: str | Path, vision: VisionSettings, split: str = "train") -> list[VlmSample]:
    """The bundled image-text set (`scripts/make_vlm_sample_data.py`): `<split>.npz` of flat arrays,
    read with `allow_pickle=False` (nothing in the file runs code)."""
    path = Path(root) / f"{split}.npz"
    if not path.is_file():
        raise FileNotFoundError(f"dataset.dataset_root: no {split}.npz in {root}")
    with np.load(path, allow_pickle=False) as z:
        a = {k: z[k] for k in z.files}
    out = []
    for i in range(len(a["text_offsets"]) - 1):
        t0, t1 = a["text_offsets"][i], a["text_offsets"][i + 1]
        images = []
        for j in range(a["sample_images"][i], a["sample_images"][i + 1]):
            h, w = (int(x) for x in a["image_shapes"][j])
            p0 = int(a["pixel_offsets"][j])
            images.append(a["pixels"][p0 : p0 + h * w * 3].reshape(h, w, 3))
        out.append(expand_sample(a["text"][t0:t1], a["loss_mask"][t0:t1], images, vision))
    return out


# ------------------------------------------------------------------------------- splitting, packing


def image_spans(sample: VlmSample, vision: VisionSettings) -> list[tuple[int, int, int]]:
    """(start, end, tiles) of each image in runtime positions: `[start, end)` covers IMG_START through
    IMG_END. The stored last token is a target only (a piece cut before an image ends in its start)."""
    ids = sample.input_ids[:-1]
    starts = np.flatnonzero(ids == vision.image_start_token_id).tolist()
    ends = np.flatnonzero(ids == vision.image_end_token_id).tolist()
    if len(starts) != len(ends) or len(starts) != len(sample.image_tiles):
        raise ValueError(
            f"sample has {len(starts)} image starts, {len(ends)} ends and {len(sample.image_tiles)} images"
        )
    return [(s, e + 1, t) for s, e, t in zip(starts, ends, sample.image_tiles, strict=True)]


def split_sample(sample: VlmSample, vision: VisionSettings) -> list[VlmSample]:
    """Pieces of at most `max_packed_tokens` runtime tokens and `num_images_expected` tiles, in order.

    A cut that would fall inside an image moves back to the image's start (InternVL `split_buffer`),
    as does a cut before an image that would overflow the tile budget. Piece k covers runtime positions
    `[a_k, b_k)`: it stores tokens `a_k..b_k` (the last one as the final target only), so every runtime
    token and its target appear in exactly one piece."""
    budget, tile_budget = vision.max_packed_tokens, vision.num_images_expected
    n = sample.runtime_length
    spans = image_spans(sample, vision)
    if n <= budget and sample.num_tiles <= tile_budget:
        return [sample]
    pieces: list[VlmSample] = []
    first_image, a = 0, 0
    while a < n:
        b, tiles, k = min(a + budget, n), 0, first_image
        while k < len(spans) and spans[k][0] < b:
            start, end, t = spans[k]
            if end > b or tiles + t > tile_budget:
                b = start
                break
            tiles += t
            k += 1
        if b <= a:
            start, end, t = spans[k]
            raise ValueError(
                f"an image of {end - start} tokens and {t} tiles does not fit a pack of "
                f"{budget} tokens and {tile_budget} tiles (dataset.max_packed_tokens, dataset.num_images_expected)"
            )
        t0 = sum(s[2] for s in spans[:first_image])
        mask = sample.loss_mask[a : b + 1].copy()
        mask[-1] = 0
        pieces.append(
            VlmSample(
                input_ids=sample.input_ids[a : b + 1],
                loss_mask=mask,
                tiles=sample.tiles[t0 : t0 + tiles],
                image_tiles=tuple(s[2] for s in spans[first_image:k]),
            )
        )
        a, first_image = b, k
    return pieces


def greedy_buffer_packs(samples: Sequence[VlmSample], vision: VisionSettings) -> list[list[VlmSample]]:
    """Split the samples to the budgets, then pack the pieces with the planner's greedy buffer (token
    budget `max_packed_tokens`, second budget `num_images_expected` tiles, `max_buffer_size` open
    packs). Pieces keep their order within a pack."""
    pieces = [p for s in samples for p in split_sample(s, vision) if p.runtime_length]
    packer = GreedyBufferPacker(
        vision.max_packed_tokens, vision.max_buffer_size, secondary_capacity=vision.num_images_expected
    )
    groups: list[list[int]] = []
    for i, p in enumerate(pieces):
        groups += packer.add(i, p.runtime_length, p.num_tiles)
    groups += packer.flush()
    return [[pieces[i] for i in sorted(g)] for g in groups]


def pack_vlm(samples: Sequence[VlmSample], vision: VisionSettings) -> MicroBatch:
    """One THD row of VLM samples: the text layout of `pack_thd`, the samples' tiles in order, the
    positions their embeddings fill, and no loss where the target is an image token."""
    samples = [s for s in samples if s.runtime_length]
    mb = pack_thd(samples)
    image_ids = torch.tensor([vision.image_token_id, vision.image_start_token_id, vision.image_end_token_id])
    mask = mb.loss_mask * ~torch.isin(mb.labels, image_ids)
    index = torch.nonzero(mb.tokens[0] == vision.image_token_id).flatten()
    tiles = [s.tiles for s in samples if len(s.tiles)]
    size = vision.image_size
    pixels = torch.from_numpy(np.concatenate(tiles)) if tiles else torch.zeros(0, 3, size, size)
    if index.numel() != pixels.shape[0] * vision.tokens_per_tile:
        raise ValueError(
            f"pack has {index.numel()} image tokens for {pixels.shape[0]} tiles of {vision.tokens_per_tile} tokens"
        )
    return replace(mb, loss_mask=mask, pixel_values=pixels, image_token_index=index)


class VlmBatchPlan(BatchPlan):
    """In-batch packing for VLM samples: each micro-batch's MBS samples (assigned to ranks as
    `BatchPlan` assigns units) are split and greedy-buffer packed under the token and tile budgets;
    each pack is one forward pass (one THD row)."""

    def __init__(self, *args: Any, vision: VisionSettings, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.data.batching != "in_batch":
            raise ValueError(
                f"recipe.mode vlm_sft trains on in-batch packs (dataset.enable_in_batch_packing: true), "
                f"not {self.data.batching} batches"
            )
        self.vision = vision

    def micro_batches_after(self, consumed: int) -> list[MicroBatch]:
        out = []
        for units in self.micro_batch_units_after(consumed):
            samples = [s for unit in units for s in unit]
            out += [pack_vlm(p, self.vision) for p in greedy_buffer_packs(samples, self.vision)]  # type: ignore[arg-type]
        return out


def load_vlm_units(vision: VisionSettings) -> SampleUnits:
    """The run's image-text samples (`dataset.dataset_root`), one per unit."""
    if vision.dataset_root is None:
        raise ValueError("dataset.dataset_root: required for recipe.mode vlm_sft (a folder with train.npz)")
    samples = load_vlm_samples(vision.dataset_root, vision)
    check_images_fit(samples, vision)
    return SampleUnits(samples)


def check_images_fit(samples: Sequence[VlmSample], vision: VisionSettings) -> None:
    """Refuse, before training starts, an image that no pack can hold (a split never cuts an image)."""
    for i, sample in enumerate(samples):
        for start, end, tiles in image_spans(sample, vision):
            if end - start > vision.max_packed_tokens or tiles > vision.num_images_expected:
                raise ValueError(
                    f"sample {i}: an image of {end - start} tokens and {tiles} tiles does not fit a pack of "
                    f"{vision.max_packed_tokens} tokens and {vision.num_images_expected} tiles "
                    "(dataset.max_packed_tokens, dataset.num_images_expected)"
                )


# --------------------------------------------------------------------------------------------- model


class BidirectionalCoreAttention(MegatronModule):
    """Core attention for the ViT: every patch of a tile sees every patch of the same tile (`[s, b,
    h, d]` with b = tiles), nothing else. Same constructor and forward signature as megatron's
    `DotProductAttention` (whose local version is CUDA-only), as the ViT's `AttnMaskType.no_mask`."""

    def __init__(
        self,
        config: TransformerConfig,
        layer_number: int,
        attn_mask_type: Any,
        attention_type: str,
        attention_dropout: float | None = None,
        softmax_scale: float | None = None,
        **_unused: Any,
    ) -> None:
        super().__init__(config=config)
        self.head_dim = config.kv_channels
        self.softmax_scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(self.head_dim)
        self.dropout = config.attention_dropout if attention_dropout is None else attention_dropout

    def forward(
        self,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        attention_mask: Tensor | None,
        *args: Any,
        **kwargs: Any,
    ) -> Tensor:
        s, b, heads, _ = query.shape
        q = query.permute(1, 2, 0, 3)
        k = expand_groups(key, heads, 2).permute(1, 2, 0, 3)
        v = expand_groups(value, heads, 2).permute(1, 2, 0, 3)
        out = F.scaled_dot_product_attention(
            q, k, v, dropout_p=self.dropout if self.training else 0.0, scale=self.softmax_scale
        )
        return out.permute(2, 0, 1, 3).reshape(s, b, heads * self.head_dim)


class TinyViT(MegatronModule):
    """A ViT as megatron-core's `CLIPViTModel` lays it out (conv patch embedding, learned position
    embedding, `TransformerBlock` over `[patches, tiles, hidden]`), without a class token, with
    RMSNorm/SwiGLU layers of the local spec and a final norm. Tensor parallel like any megatron block."""

    def __init__(self, config: TransformerConfig, vision: VisionSettings) -> None:
        super().__init__(config=config)
        self.patch_dim = vision.patch_dim
        self.num_patches = vision.tokens_per_tile
        self.conv1 = torch.nn.Conv2d(
            3, config.hidden_size, vision.patch_dim, stride=vision.patch_dim, bias=False
        )
        self.position_embeddings = torch.nn.Embedding(self.num_patches, config.hidden_size)
        attention = ModuleSpec(module=BidirectionalCoreAttention)
        spec = mcore_compat.local_block_spec(attention, config.num_layers)
        self.decoder = TransformerBlock(config=config, spec=spec, pre_process=True, post_process=True)

    def forward(self, pixel_values: Tensor) -> Tensor:
        """`[tiles, 3, S, S]` -> `[tiles, patches, hidden]`."""
        x = self.conv1(pixel_values.to(self.conv1.weight.dtype)).flatten(2).transpose(1, 2)
        x = x + self.position_embeddings.weight[None]
        x = self.decoder(x.transpose(0, 1).contiguous(), attention_mask=None)
        return x.transpose(0, 1)


class VisionLanguageModel(torch.nn.Module):
    """GPTModel + TinyViT + MultimodalProjector: the tiles' embeddings replace the language embeddings
    at `image_token_index`, then the language model runs on them (`decoder_input`)."""

    def __init__(self, language_model: GPTModel, vision_model: TinyViT, projection: MultimodalProjector):
        super().__init__()
        self.language_model = language_model
        self.vision_model = vision_model
        self.vision_projection = projection
        self.config = language_model.config  # what the step and the gradient reductions read

    def sharded_state_dict(
        self, prefix: str = "", sharded_offsets: tuple = (), metadata: dict | None = None
    ) -> dict[str, Any]:
        """Each part's own sharded state under its attribute name (megatron-core's
        `sharded_state_dict_default`, as `LLaVAModel` composes its parts), so torch_dist checkpoints
        save and reshard the VLM like the language model alone; keys equal `named_parameters()`."""
        from megatron.core.transformer.utils import sharded_state_dict_default

        out: dict[str, Any] = {}
        for name, module in self.named_children():
            out.update(sharded_state_dict_default(module, f"{prefix}{name}.", sharded_offsets, metadata))
        return out

    def forward(
        self,
        input_ids: Tensor,
        position_ids: Tensor,
        attention_mask: Tensor | None,
        labels: Tensor,
        packed_seq_params: Any = None,
        pixel_values: Tensor | None = None,
        image_token_index: Tensor | None = None,
    ) -> Tensor:
        embeddings = self.language_model.embedding(
            input_ids=input_ids, position_ids=position_ids
        )  # [s, b, h]
        if pixel_values is not None and pixel_values.shape[0]:
            if input_ids.shape[0] != 1:
                raise ValueError("VLM batches are THD rows (batch 1)")
            assert image_token_index is not None
            images = self.vision_projection(self.vision_model(pixel_values))
            images = images.reshape(-1, embeddings.shape[-1]).to(embeddings.dtype)
            batch = torch.zeros_like(image_token_index)
            embeddings = embeddings.index_put((image_token_index, batch), images)
        return self.language_model(
            input_ids=input_ids,
            position_ids=position_ids,
            attention_mask=attention_mask,
            decoder_input=embeddings,
            labels=labels,
            packed_seq_params=packed_seq_params,
        )


def _vision_configs(
    model: ModelSettings, vision: VisionSettings
) -> tuple[TransformerConfig, TransformerConfig]:
    """The ViT's config (the language model's, resized) and the projector's (a GELU MLP from the
    ViT width to the language width, as megatron's LLaVA projector). Both take the local path (no
    fusions) whatever the language model uses: their layers come from the local spec."""
    vit = replace(
        model,
        num_layers=vision.num_layers,
        hidden_size=vision.hidden_size,
        ffn_hidden_size=vision.ffn_hidden_size,
        num_attention_heads=vision.num_attention_heads,
        num_query_groups=vision.num_attention_heads,
        kv_channels=vision.hidden_size // vision.num_attention_heads,
        add_qkv_bias=False,
        qk_layernorm=False,
    )
    vit_config = transformer_config(vit, use_te=False)
    proj = replace(model, ffn_hidden_size=vision.projector_ffn_hidden_size)
    proj_config = transformer_config(proj, use_te=False)
    proj_config.gated_linear_unit = False
    proj_config.activation_func = F.gelu
    if hasattr(proj_config, "use_te_activation_func"):  # the projector's spec has no activation module
        proj_config.use_te_activation_func = False
    return vit_config, proj_config


def build_vlm_model(model: ModelSettings, vision: VisionSettings, seed: int) -> VisionLanguageModel:
    """Language model, then ViT, then projector, from one seed: the same full weights at any TP size."""
    if model.cp > 1:
        raise ValueError(
            "recipe.mode vlm_sft: context parallel is not supported (model.context_parallel_size)"
        )
    if model.sequence_parallel and model.tp > 1:
        raise ValueError("recipe.mode vlm_sft: sequence parallel is not supported (model.sequence_parallel)")
    if vision.num_attention_heads % model.tp or vision.hidden_size % vision.num_attention_heads:
        raise ValueError(
            f"model.vision_config: {vision.num_attention_heads} heads must divide hidden_size "
            f"{vision.hidden_size} and be a multiple of TP {model.tp}"
        )
    language = build_model(model, seed)
    vit_config, proj_config = _vision_configs(model, vision)
    vit = TinyViT(vit_config, vision)
    projection = MultimodalProjector(
        proj_config,
        MLPSubmodules(linear_fc1=ColumnParallelLinear, linear_fc2=RowParallelLinear),
        projector_type="mlp",
        input_size=vision.hidden_size,
    )
    out = VisionLanguageModel(language, vit, projection)
    if torch.cuda.is_available():
        out = out.cuda()
    return out
