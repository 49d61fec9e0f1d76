"""An HF `config.json` as the config's `model` section, and back (standard library only).

Where the executor's weights come from a Hugging Face folder (`model.hf_path`, or
`checkpoint.pretrained_checkpoint` naming a folder with a `config.json`), the model's shape comes from
that folder: `model_section` fills the `model` keys Bridge's bridges derive from the HF config
(`LlamaBridge.hf_config_to_model_config_kwargs`, `Qwen2Bridge`/`Qwen3Bridge.provider_bridge` in
Megatron Bridge at commit 067f987, `src/megatron/bridge/models/{llama,qwen}/`). A key the YAML also sets
must agree with the folder; parallelism, precision and dropout keys stay the YAML's.

Both config.json spellings are read: transformers 4 (`rope_theta`, `rope_scaling`) and transformers 5
(`rope_parameters`); export writes the transformers 4 spelling, which both releases load.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

from packcfg.resources import resolve_path

FAMILIES = {"llama": "llama", "qwen2": "qwen2", "qwen3": "qwen3"}  # HF model_type -> packcfg family
ARCHITECTURES = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM"}
# megatron-core's llama3 RoPE scaling fixes these (RotaryEmbedding._apply_scaling); Bridge does too.
LLAMA3_FIXED = {"low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}


class HFConfigError(ValueError):
    """A Hugging Face folder or config.json the executor cannot use (one line, names the file)."""


def is_hf_folder(path: Path) -> bool:
    return (path / "config.json").is_file()


def hf_source(config: dict[str, Any]) -> Path | None:
    """The HF folder the config starts from: `model.hf_path`, else `checkpoint.pretrained_checkpoint`
    when that folder holds a config.json; None when the config names no HF folder."""
    model = config.get("model") or {}
    ckpt = config.get("checkpoint") or {}
    hf_path = model.get("hf_path") if isinstance(model, dict) else None
    if hf_path:
        path = resolve_path(str(hf_path))
        if not is_hf_folder(path):
            raise HFConfigError(
                f"model.hf_path: {path} is not a local Hugging Face folder (no config.json); "
                "packcfg reads local folders only and downloads nothing"
            )
        return path
    pretrained = ckpt.get("pretrained_checkpoint") if isinstance(ckpt, dict) else None
    if pretrained:
        path = resolve_path(str(pretrained))
        if is_hf_folder(path):
            return path
    return None


@dataclass(frozen=True)
class HFModel:
    """An HF folder's family and its shape in the config's `model` vocabulary."""

    folder: Path
    family: str
    model: dict[str, Any]
    raw: dict[str, Any]


def read_hf_config(folder: Path) -> HFModel:
    path = folder / "config.json"
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise HFConfigError(f"{path}: cannot read ({exc})") from None
    except json.JSONDecodeError as exc:
        raise HFConfigError(f"{path}:{exc.lineno}: not JSON ({exc.msg})") from None
    except (ValueError, RecursionError) as exc:  # an integer of over 4300 digits; nesting too deep
        raise HFConfigError(f"{path}: not usable JSON ({str(exc)[:120]})") from None
    if not isinstance(raw, dict):
        raise HFConfigError(f"{path}: expected a JSON object")
    model_type = raw.get("model_type")
    family = FAMILIES.get(str(model_type))
    if family is None:
        raise HFConfigError(
            f"{path}: model_type {model_type!r} is not supported (supported: {', '.join(FAMILIES)})"
        )
    return HFModel(folder=folder, family=family, model=_model_keys(raw, family, path), raw=raw)


def _need(raw: dict[str, Any], key: str, path: Path) -> Any:
    if key not in raw or raw[key] is None:
        raise HFConfigError(f"{path}: {key} is missing")
    return raw[key]


def _size(raw: dict[str, Any], key: str, path: Path, default: int | None = None) -> int:
    """A positive integer field (a JSON integer, or a float with an integer value)."""
    value = raw.get(key)
    if value is None:
        if default is None:
            raise HFConfigError(f"{path}: {key} is missing")
        return default
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise HFConfigError(f"{path}: {key} must be a positive integer, got {repr(value)[:60]}")
    return value


def _real(raw: dict[str, Any], key: str, path: Path, default: float) -> float:
    value = raw.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise HFConfigError(f"{path}: {key} must be a number, got {repr(value)[:60]}")
    return float(value)


def _rope(raw: dict[str, Any], path: Path) -> tuple[float, dict[str, Any] | None]:
    """(theta, scaling dict or None) from either spelling."""
    params = raw.get("rope_parameters")
    if isinstance(params, dict):
        theta = _real(params, "rope_theta", path, _real(raw, "rope_theta", path, 10000.0))
        kind = params.get("rope_type") or params.get("type") or "default"
        return theta, (None if kind == "default" else {**params, "rope_type": kind})
    scaling = raw.get("rope_scaling")
    theta = _real(raw, "rope_theta", path, 10000.0)
    if not scaling:
        return theta, None
    if not isinstance(scaling, dict):
        raise HFConfigError(f"{path}: rope_scaling must be an object, got {scaling!r}")
    kind = scaling.get("rope_type") or scaling.get("type") or "default"
    return theta, (None if kind == "default" else {**scaling, "rope_type": kind})


def _model_keys(raw: dict[str, Any], family: str, path: Path) -> dict[str, Any]:
    hidden = _size(raw, "hidden_size", path)
    heads = _size(raw, "num_attention_heads", path)
    act = raw.get("hidden_act", "silu")
    if act != "silu":
        raise HFConfigError(f"{path}: hidden_act {act!r} is not supported (SwiGLU needs silu)")
    if raw.get("mlp_bias"):
        raise HFConfigError(f"{path}: mlp_bias true is not supported")
    if family != "qwen2" and raw.get("attention_bias"):
        raise HFConfigError(f"{path}: attention_bias true is not supported for {family}")
    if raw.get("use_sliding_window") or any(t != "full_attention" for t in raw.get("layer_types") or []):
        raise HFConfigError(f"{path}: sliding-window attention is not supported")
    theta, scaling = _rope(raw, path)
    model: dict[str, Any] = {
        "num_layers": _size(raw, "num_hidden_layers", path),
        "hidden_size": hidden,
        "ffn_hidden_size": _size(raw, "intermediate_size", path),
        "num_attention_heads": heads,
        "num_query_groups": _size(raw, "num_key_value_heads", path, default=heads),
        "kv_channels": _size(raw, "head_dim", path, default=max(hidden // heads, 1)),
        "vocab_size": _size(raw, "vocab_size", path),
        "layernorm_epsilon": _real(raw, "rms_norm_eps", path, 1e-6),
        "rotary_base": theta,
        "rotary_percent": 1.0,
        "position_embedding_type": "rope",
        "normalization": "RMSNorm",
        "gated_linear_unit": True,
        "add_bias_linear": False,
        "add_qkv_bias": family == "qwen2",
        "qk_layernorm": family == "qwen3",
        "share_embeddings_and_output_weights": bool(raw.get("tie_word_embeddings", False)),
        "rope_scaling": False,
    }
    if model["num_attention_heads"] % model["num_query_groups"]:
        raise HFConfigError(f"{path}: num_attention_heads is not a multiple of num_key_value_heads")
    if scaling is not None:
        kind = scaling["rope_type"]
        if kind == "llama3":
            for key, fixed in LLAMA3_FIXED.items():
                got = scaling.get(key, fixed)
                if not math.isclose(float(got), fixed):
                    raise HFConfigError(
                        f"{path}: llama3 rope scaling with {key} {got} is not supported "
                        f"(megatron-core fixes it at {fixed:g})"
                    )
            model["rope_scaling"] = True
            model["rope_scaling_factor"] = float(scaling.get("factor", 8.0))
        elif kind == "linear":
            model["seq_len_interpolation_factor"] = float(scaling["factor"])
        else:
            raise HFConfigError(f"{path}: rope scaling type {kind!r} is not supported (llama3, linear)")
    return model


# Keys whose YAML value may differ from the folder's (the run's choices, not the checkpoint's shape).
_SHAPE_KEYS = (
    "num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads", "num_query_groups",
    "kv_channels", "vocab_size", "rotary_base", "add_qkv_bias", "qk_layernorm",
    "share_embeddings_and_output_weights", "rope_scaling", "rope_scaling_factor",
    "seq_len_interpolation_factor",
)  # fmt: skip


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return _as_bool(a) == _as_bool(b)
    try:
        return math.isclose(float(a), float(b), rel_tol=1e-9)
    except (TypeError, ValueError):
        return a == b


def _as_bool(value: Any) -> bool:
    return bool(value) and str(value).lower() not in {"false", "0", "no", "none"}


def model_section(config: dict[str, Any]) -> dict[str, Any]:
    """The config's `model` section, with the shape filled from its HF folder when it starts from one.

    Raises HFConfigError when a shape key the YAML sets disagrees with the folder's config.json."""
    return merge_hf_shape(config.get("model") or {}, hf_source(config))


def merge_hf_shape(model: Any, folder: Path | None) -> dict[str, Any]:
    """A `model` section with the shape filled from the HF folder `folder` (`hf_source`; None: as is).

    Raises HFConfigError when a shape key the section sets disagrees with the folder's config.json."""
    if not isinstance(model, dict):
        raise ValueError(f"model: expected a mapping, got {type(model).__name__}")
    if folder is None:
        return model
    hf = read_hf_config(folder)
    for key in _SHAPE_KEYS:
        if model.get(key) is not None and key in hf.model and not _same(model[key], hf.model[key]):
            raise HFConfigError(
                f"model.{key}: {model[key]!r} disagrees with {folder / 'config.json'} ({hf.model[key]!r})"
            )
    tp = _parallel(model, "tensor_model_parallel_size")
    if hf.model["vocab_size"] % tp:
        raise HFConfigError(
            f"model.tensor_model_parallel_size: {tp} does not divide the vocabulary of "
            f"{folder / 'config.json'} ({hf.model['vocab_size']}); packcfg does not pad it as Bridge does"
        )
    check_fits_memory(hf, tp * _parallel(model, "pipeline_model_parallel_size"))
    return {**model, **hf.model}


def _parallel(model: dict[str, Any], key: str) -> int:
    value = model.get(key) or 1
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 1


# The largest value of each shape field among released models (with margin): the field furthest past its
# ceiling is the one an estimate that does not fit names.
_CEILINGS = {
    "vocab_size": 262_144, "hidden_size": 32_768, "intermediate_size": 131_072, "num_hidden_layers": 256,
    "num_attention_heads": 256, "num_key_value_heads": 256, "head_dim": 512,
}  # fmt: skip
_CONFIG_KEY = {
    "vocab_size": "vocab_size", "hidden_size": "hidden_size", "intermediate_size": "ffn_hidden_size",
    "num_hidden_layers": "num_layers", "num_attention_heads": "num_attention_heads",
    "num_key_value_heads": "num_query_groups", "head_dim": "kv_channels",
}  # fmt: skip


def parameter_count(model: dict[str, Any]) -> int:
    """Parameters of the GPT model a `model` section (from `_model_keys`) describes: embeddings, output
    layer unless tied, and per layer QKV, output projection, SwiGLU MLP and norms."""
    h, ffn, d = model["hidden_size"], model["ffn_hidden_size"], model["kv_channels"]
    heads, groups = model["num_attention_heads"], model["num_query_groups"]
    qkv_rows = (heads + 2 * groups) * d
    layer = h * qkv_rows + heads * d * h + 3 * h * ffn + 2 * h
    layer += qkv_rows if model.get("add_qkv_bias") else 0
    layer += 2 * d if model.get("qk_layernorm") else 0
    tied = model.get("share_embeddings_and_output_weights")
    return model["vocab_size"] * h * (1 if tied else 2) + model["num_layers"] * layer + h


def memory_bytes() -> int | None:
    """The memory this process can have: the machine's physical memory, or its cgroup limit if lower."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None
    for limit in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            text = Path(limit).read_text(encoding="ascii").strip()
        except (OSError, UnicodeDecodeError):
            continue
        if text.isdigit() and 0 < int(text) < total:
            total = int(text)
    return total if total > 0 else None


def _bytes(n: int) -> str:
    if n.bit_length() > 80:
        return f"about 2^{n.bit_length() - 1} bytes"
    units = ("bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB", "ZiB", "YiB")
    value, i = float(n), 0
    while value >= 1024 and i < len(units) - 1:
        value, i = value / 1024, i + 1
    return f"{n} bytes" if i == 0 else f"{value:.1f} {units[i]}"


def check_fits_memory(hf: HFModel, shards: int, available: int | None = None) -> None:
    """Refuse, before anything is allocated, a config.json whose model cannot fit in this machine's memory.

    The estimate is a lower bound: every parameter in fp32 (the executor builds its weights in fp32 on
    the CPU, then moves them), spread over `shards` = TP x PP processes; optimizer state, gradients and the
    safetensors read come on top. The field named is the one (of those the file sets) furthest past the
    largest released models. `available`: memory_bytes() unless given."""
    available = memory_bytes() if available is None else available
    if available is None:
        return
    needed = 4 * parameter_count(hf.model) // shards
    if needed <= available:
        return
    given = [k for k in _CEILINGS if k in hf.raw]  # not a value derived from another (head_dim)
    field = max(given, key=lambda k: Fraction(hf.model[_CONFIG_KEY[k]], _CEILINGS[k]))
    value = hf.model[_CONFIG_KEY[field]]
    shown = str(value) if value.bit_length() < 200 else f"about 2^{value.bit_length() - 1}"
    raise HFConfigError(
        f"{hf.folder / 'config.json'}: {field} {shown} describes a model that needs at least "
        f"{_bytes(needed)} of memory per process (fp32 weights over TP x PP {shards}), more than the "
        f"{_bytes(available)} this machine has; refused before allocating anything"
    )


def hf_config_dict(settings: Any, family: str, dtype: str = "float32") -> dict[str, Any]:
    """A transformers config.json for `settings` (a ModelSettings), the inverse of `_model_keys`
    (after Bridge's `megatron_to_hf_config`; RoPE in the transformers 4 spelling)."""
    if family not in ARCHITECTURES:
        raise HFConfigError(
            f"family {family!r} has no Hugging Face export (supported: {', '.join(FAMILIES)})"
        )
    out: dict[str, Any] = {
        "architectures": [ARCHITECTURES[family]],
        "model_type": family,
        "hidden_size": settings.hidden_size,
        "intermediate_size": settings.ffn_hidden_size,
        "num_hidden_layers": settings.num_layers,
        "num_attention_heads": settings.num_attention_heads,
        "num_key_value_heads": settings.num_query_groups,
        "head_dim": settings.kv_channels,
        "vocab_size": settings.vocab_size,
        "rms_norm_eps": settings.layernorm_epsilon,
        "rope_theta": settings.rotary_base,
        "hidden_act": "silu",
        "tie_word_embeddings": settings.share_embeddings,
        "max_position_embeddings": max(settings.seq_length, 8192 + 1 if settings.rope_scaling else 0),
        "attention_dropout": 0.0,
        "torch_dtype": dtype,
    }
    if family in ("llama", "qwen3"):
        out["attention_bias"] = False
    if family == "llama":
        out["mlp_bias"] = False
    if family in ("qwen2", "qwen3"):
        out["use_sliding_window"] = False
    if settings.rope_scaling:
        out["rope_scaling"] = {"rope_type": "llama3", "factor": settings.rope_scaling_factor, **LLAMA3_FIXED}
    elif settings.seq_len_interpolation_factor:
        out["rope_scaling"] = {"rope_type": "linear", "factor": settings.seq_len_interpolation_factor}
    return out


def family_of(settings: Any) -> str:
    """The export family of a `ModelSettings`: its HF folder's when the run started from one, else from the
    model's shape (q/k norm -> qwen3, QKV bias -> qwen2, else llama)."""
    if settings.hf_dir is not None:
        return read_hf_config(settings.hf_dir).family
    if settings.qk_layernorm:
        return "qwen3"
    if settings.add_qkv_bias:
        return "qwen2"
    return "llama"
