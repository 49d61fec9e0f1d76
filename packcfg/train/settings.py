"""Every setting the executor reads from an experiment config, as typed values with Bridge's defaults.

The train flow parses the config once, at its entry (`loop.train`: `TrainSettings.from_config`); below it
only these settings travel: the model's shape (filled from a Hugging Face folder when the run starts from
one), the data layout and where the data comes from, the optimizer, the loggers (with the config copy W&B
stores), DPO and the vision tower. The lint flow validates configs; this module only reads them (raising
`ValueError` with the key for a value the executor cannot use), so no module below the entry digs
through nested dicts.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from packcfg.core.secret_names import looks_secret
from packcfg.resources import resolve_path

if TYPE_CHECKING:
    from packcfg.packing.api import PackSettings

Batching = Literal["packed", "in_batch", "padded"]


def _section(config: dict[str, Any], name: str) -> dict[str, Any]:
    value = config.get(name) or {}
    if not isinstance(value, dict):
        raise ValueError(f"{name}: expected a mapping, got {type(value).__name__}")
    return value


CKPT_FORMATS = ("torch_dist", "torch")


def _ckpt_format(value: Any) -> str:
    """checkpoint.ckpt_format: "torch_dist" (Bridge's default, megatron-core dist_checkpointing) or
    "torch" (packcfg's per-TP-rank files)."""
    if value is None or value == "":
        return "torch_dist"
    if value not in CKPT_FORMATS:
        raise ValueError(
            f"checkpoint.ckpt_format: {value!r} is not supported by the packcfg executor "
            f"(supported: {', '.join(CKPT_FORMATS)})"
        )
    return str(value)


# model.attention_backend: Bridge's AttnBackend names (megatron-core transformer/enums.py); what the packcfg
# executor does with each is packcfg.train.varlen's.
ATTENTION_BACKENDS = ("auto", "flash", "fused", "unfused", "local")


def _attention_backend(value: Any) -> str:
    """`model.attention_backend` as one of ATTENTION_BACKENDS: None/"" is auto; Bridge's enum dumps
    (`{_target_: ...AttnBackend, _name_: flash}`) and `AttnBackend.flash` spellings read as their name."""
    if value is None or value == "":
        return "auto"
    if isinstance(value, dict):
        value = value.get("_name_", value)
    name = str(value).rsplit(".", 1)[-1].lower()
    if name not in ATTENTION_BACKENDS:
        raise ValueError(
            f"model.attention_backend: {value!r} is not one of {', '.join(ATTENTION_BACKENDS)} (megatron-core AttnBackend)"
        )
    return name


def _truthy(value: Any) -> bool:
    return bool(value) and str(value).lower() not in {"false", "0", "no", "none"}


@dataclass(frozen=True)
class ModelSettings:
    num_layers: int
    hidden_size: int
    ffn_hidden_size: int
    num_attention_heads: int
    num_query_groups: int
    kv_channels: int
    seq_length: int
    vocab_size: int
    rotary_base: float
    rotary_percent: float
    share_embeddings: bool
    init_method_std: float
    layernorm_epsilon: float
    attention_dropout: float
    hidden_dropout: float
    tp: int
    cp: int
    pp: int
    sequence_parallel: bool
    bf16: bool
    transformer_impl: str
    apply_rope_fusion: bool
    position_embedding_type: str
    # Families beyond plain Llama (Bridge's GPTModelProvider names): Qwen2 QKV bias, Qwen3 q/k norm,
    # Llama 3.1/3.2 RoPE scaling ("llama3" type, factor) and linear position interpolation.
    add_qkv_bias: bool = False
    qk_layernorm: bool = False
    rope_scaling: bool = False
    rope_scaling_factor: float = 8.0
    seq_len_interpolation_factor: float | None = None
    # Bridge's model.attention_backend (megatron-core AttnBackend name); packcfg.train.varlen maps it.
    attention_backend: str = "auto"
    # The Hugging Face folder the run starts from (model.hf_path, or a checkpoint.pretrained_checkpoint
    # holding a config.json; packcfg.train.hf): its config.json filled the shape above, its weights load.
    hf_dir: Path | None = None

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> ModelSettings:
        from packcfg.train.hf.config import hf_source, merge_hf_shape  # the shape from an HF folder, if any

        hf_dir = hf_source(config)
        m = merge_hf_shape(config.get("model") or {}, hf_dir)
        heads = int(m.get("num_attention_heads", 0))
        hidden = int(m.get("hidden_size", 0))
        if not heads or not hidden or not m.get("num_layers"):
            raise ValueError("model: num_layers, hidden_size and num_attention_heads are required")
        opt = _section(config, "optimizer")
        return cls(
            num_layers=int(m["num_layers"]),
            hidden_size=hidden,
            ffn_hidden_size=int(m.get("ffn_hidden_size") or 4 * hidden),
            num_attention_heads=heads,
            num_query_groups=int(m.get("num_query_groups") or heads),
            kv_channels=int(m.get("kv_channels") or hidden // heads),
            seq_length=int(m.get("seq_length") or _section(config, "dataset").get("seq_length") or 2048),
            vocab_size=int(m["vocab_size"]),
            rotary_base=float(m.get("rotary_base", 10000)),
            rotary_percent=float(m.get("rotary_percent", 1.0)),
            share_embeddings=_truthy(m.get("share_embeddings_and_output_weights", False)),
            init_method_std=float(m.get("init_method_std", 0.02)),
            layernorm_epsilon=float(m.get("layernorm_epsilon", 1e-5)),
            attention_dropout=float(m.get("attention_dropout", 0.0)),
            hidden_dropout=float(m.get("hidden_dropout", 0.0)),
            tp=int(m.get("tensor_model_parallel_size", 1)),
            cp=int(m.get("context_parallel_size", 1)),
            pp=int(m.get("pipeline_model_parallel_size", 1)),
            sequence_parallel=_truthy(m.get("sequence_parallel", False)),
            bf16=_truthy(m.get("bf16", False)) or _truthy(opt.get("bf16", False)),
            transformer_impl=str(m.get("transformer_impl", "transformer_engine")),
            apply_rope_fusion=_truthy(m.get("apply_rope_fusion", False)),
            position_embedding_type=str(m.get("position_embedding_type", "rope")),
            add_qkv_bias=_truthy(m.get("add_qkv_bias", False)),
            qk_layernorm=_truthy(m.get("qk_layernorm", False)),
            rope_scaling=_truthy(m.get("rope_scaling", False)),
            rope_scaling_factor=float(m.get("rope_scaling_factor") or 8.0),
            seq_len_interpolation_factor=(
                float(m["seq_len_interpolation_factor"]) if m.get("seq_len_interpolation_factor") else None
            ),
            attention_backend=_attention_backend(m.get("attention_backend")),
            hf_dir=hf_dir,
        )


@dataclass(frozen=True)
class DataSettings:
    batching: Batching
    seq_length: int
    pack_size: int
    pad_to_max_length: bool
    seed: int

    @classmethod
    def from_config(cls, config: dict[str, Any], batching: Batching | None) -> DataSettings:
        d = _section(config, "dataset")
        specs = d.get("offline_packing_specs") or d.get("packed_sequence_specs") or {}
        offline = _truthy(d.get("enable_offline_packing")) or bool(d.get("packed_sequence_specs"))
        in_batch = _truthy(d.get("enable_in_batch_packing")) or _truthy(d.get("pack_sequences_in_batch"))
        if batching is None:
            batching = "packed" if offline else "in_batch" if in_batch else "padded"
        seq_length = int(d.get("seq_length") or _section(config, "model").get("seq_length") or 2048)
        kwargs = d.get("dataset_kwargs") or {}
        return cls(
            batching=batching,
            seq_length=seq_length,
            pack_size=int(specs.get("packed_sequence_size") or seq_length),
            pad_to_max_length=_truthy(d.get("pad_to_max_length")) or _truthy(kwargs.get("pad_to_max_length")),
            seed=int(d.get("seed", _section(config, "rng").get("seed", 1234))),
        )


@dataclass(frozen=True)
class VisionSettings:
    """`recipe.mode: vlm_sft`: the vision tower (`model.vision_config`), the image token ids
    (`model.image_*token_id`, Bridge's names) and InternVL's packing budgets (`dataset.*`)."""

    num_layers: int
    hidden_size: int
    ffn_hidden_size: int
    num_attention_heads: int
    image_size: int  # tile side in pixels (InternVL `force_image_size`)
    patch_dim: int  # ViT patch side; a tile gives (image_size / patch_dim)^2 image tokens
    max_tiles: int  # tiles per image at most (InternVL `max_dynamic_patch`), thumbnail not counted
    use_thumbnail: bool  # an extra whole-image tile when an image has more than one (InternVL)
    projector_ffn_hidden_size: int
    image_token_id: int  # the context token each image embedding replaces
    image_start_token_id: int
    image_end_token_id: int
    max_packed_tokens: int  # runtime tokens per pack (the THD row)
    num_images_expected: int  # image tiles per pack
    max_buffer_size: int  # open packs the greedy buffer keeps
    dataset_root: Path | None = None  # dataset.dataset_root: the folder with train.npz (checked on load)

    @property
    def tokens_per_tile(self) -> int:
        return (self.image_size // self.patch_dim) ** 2

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> VisionSettings:
        m, d = _section(config, "model"), _section(config, "dataset")
        v = m.get("vision_config") or {}
        if not isinstance(v, dict):
            raise ValueError(f"model.vision_config: expected a mapping, got {type(v).__name__}")
        missing = [k for k in ("num_layers", "hidden_size", "num_attention_heads") if not v.get(k)]
        if missing:
            raise ValueError(f"model.vision_config: {', '.join(missing)} required for recipe.mode vlm_sft")
        hidden = int(v["hidden_size"])
        image_size, patch = int(v.get("image_size", 16)), int(v.get("patch_dim", 8))
        if image_size % patch:
            raise ValueError(
                f"model.vision_config.image_size {image_size} is not a multiple of patch_dim {patch}"
            )
        seq = int(d.get("seq_length") or m.get("seq_length") or 2048)
        names = ("image_token_id", "image_start_token_id", "image_end_token_id")
        if any(m.get(k) is None for k in names):
            raise ValueError(
                "model: image_token_id, image_start_token_id and image_end_token_id are required"
            )
        ids = {k: int(m[k]) for k in names}
        return cls(
            num_layers=int(v["num_layers"]),
            hidden_size=hidden,
            ffn_hidden_size=int(v.get("ffn_hidden_size") or 4 * hidden),
            num_attention_heads=int(v["num_attention_heads"]),
            image_size=image_size,
            patch_dim=patch,
            max_tiles=int(v.get("max_dynamic_patch", 6)),
            use_thumbnail=_truthy(v.get("use_thumbnail", True)),
            projector_ffn_hidden_size=int(v.get("projector_ffn_hidden_size") or 4 * hidden),
            image_token_id=ids["image_token_id"],
            image_start_token_id=ids["image_start_token_id"],
            image_end_token_id=ids["image_end_token_id"],
            max_packed_tokens=int(d.get("max_packed_tokens") or seq),
            num_images_expected=int(d.get("num_images_expected") or 6),
            max_buffer_size=int(d.get("max_buffer_size") or 64),
            dataset_root=resolve_path(str(root)) if (root := d.get("dataset_root")) else None,
        )


@dataclass(frozen=True)
class OptimSettings:
    lr: float
    min_lr: float
    weight_decay: float
    beta1: float
    beta2: float
    eps: float
    clip_grad: float
    warmup_iters: int
    decay_iters: int
    decay_style: str

    @classmethod
    def from_config(cls, config: dict[str, Any], train_iters: int) -> OptimSettings:
        o, s = _section(config, "optimizer"), _section(config, "scheduler")
        return cls(
            lr=float(o.get("lr", 1e-4)),
            min_lr=float(o.get("min_lr", 0.0)),
            weight_decay=float(o.get("weight_decay", 0.01)),
            beta1=float(o.get("adam_beta1", 0.9)),
            beta2=float(o.get("adam_beta2", 0.999)),
            eps=float(o.get("adam_eps", 1e-8)),
            clip_grad=float(o.get("clip_grad", 1.0)),
            warmup_iters=int(s.get("lr_warmup_iters", 0)),
            decay_iters=int(s.get("lr_decay_iters") or train_iters),
            decay_style=str(s.get("lr_decay_style", "cosine")),
        )


LOSS_TYPES = ("dpo", "ipo")
BETA_KEYS = ("ref_policy_kl_penalty", "reference_policy_kl_penalty", "beta")


@dataclass(frozen=True)
class DpoSettings:
    """`dpo:` section (recipe.mode dpo, packcfg.train.dpo): beta (`ref_policy_kl_penalty`), label
    smoothing, loss type."""

    beta: float = 0.1
    label_smoothing: float = 0.0
    loss_type: str = "dpo"

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> DpoSettings:
        """The `dpo:` section. Beta under NeMo Aligner's `ref_policy_kl_penalty`, NeMo RL's
        `reference_policy_kl_penalty` or `beta`; the loss under Aligner's `preference_loss`."""
        d = config.get("dpo") or {}
        if not isinstance(d, dict):
            raise ValueError(f"dpo: expected a mapping, got {type(d).__name__}")
        beta = next((d[k] for k in BETA_KEYS if d.get(k) is not None), cls.beta)
        try:
            return cls(
                beta=float(beta),
                label_smoothing=float(d.get("label_smoothing", 0.0)),
                loss_type=str(d.get("preference_loss", "dpo")),
            )
        except (TypeError, ValueError) as exc:
            raise ValueError(str(exc) if str(exc).startswith("dpo.") else f"dpo: {exc}") from None

    def __post_init__(self) -> None:
        if self.loss_type not in LOSS_TYPES:
            raise ValueError(f"dpo.preference_loss: {self.loss_type!r} is not one of {list(LOSS_TYPES)}")
        if not self.beta > 0:
            raise ValueError(f"dpo.ref_policy_kl_penalty: {self.beta} must be > 0")
        if not 0 <= self.label_smoothing < 0.5:
            raise ValueError(f"dpo.label_smoothing: {self.label_smoothing} must be in [0, 0.5)")


def redacted(value: Any) -> Any:
    """The config as W&B stores it (on a third party's servers): values under secret-looking keys
    (`hf_token`, `wandb_api_key`, ...: packcfg.core.secret_names.looks_secret) replaced by "<redacted>"."""
    if isinstance(value, dict):
        return {k: "<redacted>" if looks_secret(str(k)) else redacted(v) for k, v in value.items()}
    if isinstance(value, list):
        return [redacted(v) for v in value]
    return value


@dataclass(frozen=True)
class LoggerSettings:
    """Where metrics go beside `metrics.jsonl`: Bridge's `LoggerConfig` fields (megatron-bridge v0.3.1
    src/megatron/bridge/training/config.py), read only; unset means that logger is off."""

    tensorboard_dir: Path | None = None
    tensorboard_log_interval: int = 1
    wandb_project: str | None = None
    wandb_entity: str | None = None
    wandb_exp_name: str | None = None
    wandb_save_dir: Path | None = None
    # The run's config as the W&B run records it (JSON values, secrets redacted); None without W&B.
    wandb_config: dict[str, Any] | None = None

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> LoggerSettings:
        lg = _section(config, "logger")
        save = _section(config, "checkpoint").get("save")

        def text(key: str) -> str | None:
            value = lg.get(key)
            return str(value) if value not in (None, "") else None

        interval = int(lg.get("tensorboard_log_interval") or 1)
        if interval <= 0:
            raise ValueError(f"logger.tensorboard_log_interval must be a positive integer, got {interval}")
        wandb_dir = text("wandb_save_dir")
        project = text("wandb_project")
        return cls(
            tensorboard_dir=resolve_path(tb) if (tb := text("tensorboard_dir")) else None,
            tensorboard_log_interval=interval,
            wandb_project=project,
            wandb_entity=text("wandb_entity"),
            wandb_exp_name=text("wandb_exp_name") or str(_section(config, "recipe").get("name") or "run"),
            # Bridge's default: <checkpoint.save>/wandb (state.py wandb_logger); without a save folder,
            # the run's output folder (set by the loop).
            wandb_save_dir=(
                resolve_path(wandb_dir) if wandb_dir else resolve_path(str(save)) / "wandb" if save else None
            ),
            wandb_config=redacted(json.loads(json.dumps(config, default=str))) if project else None,
        )


@dataclass(frozen=True)
class TrainSettings:
    """Everything the loop needs, resolved from one config (plus CLI choices)."""

    name: str
    model: ModelSettings
    data: DataSettings
    optim: OptimSettings
    micro_batch_size: int
    global_batch_size: int
    train_iters: int
    seed: int
    log_interval: int
    save_dir: Path | None
    save_interval: int
    load_dir: Path | None
    pretrained_dir: Path | None
    output_dir: Path
    grad_reduce_in_fp32: bool = False  # ddp.grad_reduce_in_fp32: bf16 grads accumulated/reduced in fp32
    logger: LoggerSettings = LoggerSettings()
    ckpt_format: str = "torch_dist"  # checkpoint.ckpt_format, Bridge's default
    mode: str | None = None  # recipe.mode as written (None: unset)
    vision: VisionSettings | None = None  # recipe.mode vlm_sft only
    dpo: DpoSettings | None = None  # recipe.mode dpo only
    # Where the text data comes from and how it is packed (packing's own settings, `packcfg.packing`);
    # read only when asked (`data_source`): a caller that hands in its own units needs no dataset section.
    pack: PackSettings | None = None

    @classmethod
    def from_config(
        cls,
        config: dict[str, Any],
        *,
        batching: Batching | None = None,
        output_dir: str | Path | None = None,
        data_source: bool = False,
    ) -> TrainSettings:
        """With `data_source`, also where the training data comes from (`pack`, or the VLM dataset root);
        raises PackingError (one line) for a dataset section packing cannot read."""
        t, ck = _section(config, "train"), _section(config, "checkpoint")
        name = str(_section(config, "recipe").get("name") or "run")
        mode = _section(config, "recipe").get("mode")
        pack = None
        if data_source and mode != "vlm_sft":
            from packcfg.packing.api import settings_from_config  # numpy: only when the data is read

            pack = settings_from_config(config)
        train_iters = int(t.get("train_iters", 0))
        if train_iters <= 0:
            raise ValueError("train.train_iters must be a positive integer")

        def path(value: Any) -> Path | None:
            return resolve_path(str(value)) if value else None

        return cls(
            name=name,
            model=ModelSettings.from_config(config),
            data=DataSettings.from_config(config, batching),
            optim=OptimSettings.from_config(config, train_iters),
            micro_batch_size=int(t.get("micro_batch_size", 1)),
            global_batch_size=int(t.get("global_batch_size", 1)),
            train_iters=train_iters,
            seed=int(_section(config, "rng").get("seed", 1234)),
            log_interval=max(1, int(_section(config, "logger").get("log_interval", 1))),
            save_dir=path(ck.get("save")),
            save_interval=int(ck.get("save_interval") or 0),
            load_dir=path(ck.get("load")),
            pretrained_dir=path(ck.get("pretrained_checkpoint")),
            ckpt_format=_ckpt_format(ck.get("ckpt_format")),
            output_dir=Path(output_dir) if output_dir else Path("runs") / name,
            grad_reduce_in_fp32=_truthy(_section(config, "ddp").get("grad_reduce_in_fp32", False)),
            logger=LoggerSettings.from_config(config),
            mode=mode,
            vision=VisionSettings.from_config(config) if mode == "vlm_sft" else None,
            dpo=DpoSettings.from_config(config) if mode == "dpo" else None,
            pack=pack,
        )
