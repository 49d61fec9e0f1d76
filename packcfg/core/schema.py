"""The experiment config as typed data, in Megatron Bridge's vocabulary, and its shape check.

One table (`SECTIONS`) declares every typed field with Bridge's default. Two things are built from it:
- `validate(config)`: the lint path's shape check, in plain Python because importing Pydantic and
  building its validators costs ~250 ms per process, most of the lint budget for one file;
- `Experiment` and `json_schema()`: Pydantic v2 models built from the same table on first use
  (for `packcfg schema`, editors, and the flows that want a typed object).

Shapes only: cross-field constraints live in the lint rules so that every problem is reported at
once with its position. `validate` never raises: every type/range problem is SC002, every unknown
key of a modelled section SC003. Values with their own rule (PK103, DS702, DS703) stay untyped here.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from packcfg.core.diagnostics import Severity
from packcfg.core.interpolate import is_unknown

_FIELDS_FILE = Path(__file__).with_name("bridge_fields.json")


@dataclass(frozen=True)
class SchemaIssue:
    """One shape problem: SC002 (wrong type / out of range / missing) or SC003 (unknown key)."""

    path: tuple[str, ...]
    code: str
    message: str
    severity: Severity
    hint: str | None = None


# --- type specs ---------------------------------------------------------------------------------


class Type:
    """A field type: `check` returns what was expected when `value` does not fit, else None."""

    __slots__ = ()

    def check(self, value: Any) -> str | None:
        raise NotImplementedError

    def annotation(self) -> Any:
        raise NotImplementedError


class Int(Type):
    __slots__ = ("ge",)

    def __init__(self, ge: int | None = None) -> None:
        self.ge = ge

    def check(self, value: Any) -> str | None:
        # bool is an int subclass in Python; in a config it is a mistake (`tensor_model_parallel_size: true`)
        if isinstance(value, bool) or not isinstance(value, int):
            return "an integer" if self.ge is None else f"an integer >= {self.ge}"
        if self.ge is not None and value < self.ge:
            return f"an integer >= {self.ge}"
        return None

    def annotation(self) -> Any:
        from typing import Annotated

        from pydantic import Field

        return Annotated[int, Field(ge=self.ge)] if self.ge is not None else int


class Float(Type):
    __slots__ = ("ge", "le", "gt", "lt")

    def __init__(
        self,
        ge: float | None = None,
        le: float | None = None,
        gt: float | None = None,
        lt: float | None = None,
    ) -> None:
        self.ge, self.le, self.gt, self.lt = ge, le, gt, lt

    def _range(self) -> str:
        parts = []
        for op, bound in ((">=", self.ge), (">", self.gt), ("<=", self.le), ("<", self.lt)):
            if bound is not None:
                parts.append(f"{op} {bound}")
        return " and ".join(parts)

    def check(self, value: Any) -> str | None:
        want = "a finite number" + (f" {self._range()}" if self._range() else "")
        if isinstance(value, bool) or not isinstance(value, int | float):
            return want
        try:
            if not math.isfinite(value):
                return want
        except OverflowError:  # an int too large for a float
            return want
        if (
            (self.ge is not None and value < self.ge)
            or (self.gt is not None and value <= self.gt)
            or (self.le is not None and value > self.le)
            or (self.lt is not None and value >= self.lt)
        ):
            return want
        return None

    def annotation(self) -> Any:
        from typing import Annotated

        from pydantic import Field

        return Annotated[float, Field(ge=self.ge, le=self.le, gt=self.gt, lt=self.lt, allow_inf_nan=False)]


class _Bool(Type):
    def check(self, value: Any) -> str | None:
        return None if isinstance(value, bool) else "true or false"

    def annotation(self) -> Any:
        return bool


class _Str(Type):
    def check(self, value: Any) -> str | None:
        return None if isinstance(value, str) else "a string"

    def annotation(self) -> Any:
        return str


class _AnyType(Type):
    def check(self, value: Any) -> str | None:
        return None

    def annotation(self) -> Any:
        return Any


class OneOf(Type):
    __slots__ = ("values",)

    def __init__(self, values: tuple[Any, ...]) -> None:
        self.values = values

    def check(self, value: Any) -> str | None:
        if isinstance(value, str | int | float) and not isinstance(value, bool) and value in self.values:
            return None
        return "one of " + ", ".join(repr(v) for v in self.values)

    def annotation(self) -> Any:
        from typing import Literal

        return Literal[self.values]  # type: ignore[valid-type]


class ListOf(Type):
    __slots__ = ("item",)

    def __init__(self, item: Type) -> None:
        self.item = item

    def check(self, value: Any) -> str | None:
        if not isinstance(value, list):
            return "a list"
        for v in value:
            if self.item.check(v) is not None:
                return f"a list of {self.item.check(v)}"
        return None

    def annotation(self) -> Any:
        return list[self.item.annotation()]  # type: ignore[misc]


class Either(Type):
    __slots__ = ("options",)

    def __init__(self, options: tuple[Type, ...]) -> None:
        self.options = options

    def check(self, value: Any) -> str | None:
        wants = []
        for opt in self.options:
            want = opt.check(value)
            if want is None:
                return None
            wants.append(want)
        return " or ".join(wants)

    def annotation(self) -> Any:
        from typing import Union

        return Union[tuple(o.annotation() for o in self.options)]  # noqa: UP007


class MappingOf(Type):
    __slots__ = ("value",)

    def __init__(self, value: Type) -> None:
        self.value = value

    def check(self, value: Any) -> str | None:
        if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
            return "a mapping with string keys"
        for v in value.values():
            if self.value.check(v) is not None:
                return f"a mapping of {self.value.check(v)}"
        return None

    def annotation(self) -> Any:
        return dict[str, self.value.annotation()]  # type: ignore[misc]


class Nested(Type):
    """A nested section (validated field by field by `validate`)."""

    __slots__ = ("section",)

    def __init__(self, section: str) -> None:
        self.section = section

    def check(self, value: Any) -> str | None:
        return None if isinstance(value, dict) else "a mapping"

    def annotation(self) -> Any:
        return _BUILT_MODELS[self.section]  # built before any section that nests it


BOOL, STR, ANY = _Bool(), _Str(), _AnyType()
POS, NONNEG, INT = Int(ge=1), Int(ge=0), Int()
NUM, NONNEG_NUM, PROB = Float(), Float(ge=0), Float(ge=0, le=1)
STR_OR_LIST = Either((STR, ListOf(STR)))


class F:
    """A typed field: its type and Bridge's default. `None` as a value is accepted when the default is None."""

    # plain classes, not dataclasses: building ~10 dataclasses costs milliseconds on every `packcfg lint`
    __slots__ = ("type", "default")

    def __init__(self, type: Type, default: Any = None) -> None:  # noqa: A002  (the field's own word)
        self.type = type
        self.default = default

    @property
    def nullable(self) -> bool:
        return self.default is None


# --- the sections -------------------------------------------------------------------------------
# Only fields the rules read, or that are cheap mistakes, are typed; every other field name Bridge
# accepts is listed in bridge_fields.json (names only, generated by scripts/bridge_data/fields.py from
# the pinned Megatron Bridge + Megatron Core wheels) so an unknown key can be told from a known one.

SECTIONS: dict[str, dict[str, F]] = {
    # packcfg's own sections: strict, every key is known (unknown -> SC003 error)
    "recipe": {
        "name": F(STR),
        "family": F(STR),  # a canonical id from families.yaml (checked in `validate`)
        "mode": F(OneOf(("pretrain", "sft", "peft", "dpo", "vlm_sft"))),
        "description": F(STR),
        "base": F(STR),  # a Bridge recipe the file is merged onto (packcfg.core.base_recipes)
    },
    "launch": {
        "backend": F(OneOf(("local", "slurm", "nemo-run")), "local"),
        "nodes": F(POS, 1),
        "gpus_per_node": F(POS, 1),
        "partition": F(STR),
        "account": F(STR),
        "time": F(Either((STR, POS))),  # "HH:MM:SS" or minutes, as sbatch takes it
        "container_image": F(STR),
        "env": F(MappingOf(Either((STR, INT, NUM, BOOL)))),
        "mounts": F(ListOf(STR)),
        # what the launch flow accepts today (packcfg.launch.spec): keep the two in step
        "engine": F(OneOf(("packcfg", "bridge")), "packcfg"),
        "bridge": F(MappingOf(STR)),  # recipe / entry / version / step_func / mode / script
        "device": F(OneOf(("gpu", "cpu")), "gpu"),
        "env_from": F(ListOf(STR)),
        "job_name": F(STR),
        "qos": F(STR),
        "exclusive": F(BOOL),
    },
    # packcfg's DPO settings (recipe.mode dpo; packcfg.train.dpo), named as NeMo Aligner's model.dpo
    # (ref_policy_kl_penalty, preference_loss) and NeMo RL's dpo (reference_policy_kl_penalty)
    "dpo": {
        "ref_policy_kl_penalty": F(Float(gt=0), 0.1),
        "reference_policy_kl_penalty": F(Float(gt=0)),
        "beta": F(Float(gt=0)),
        "label_smoothing": F(Float(ge=0, lt=0.5), 0.0),
        "preference_loss": F(OneOf(("dpo", "ipo")), "dpo"),
    },
    # Megatron Bridge sections (unknown key -> SC003 warning)
    "model": {
        "tensor_model_parallel_size": F(POS, 1),
        "pipeline_model_parallel_size": F(POS, 1),
        "context_parallel_size": F(POS, 1),
        "expert_model_parallel_size": F(POS, 1),
        "expert_tensor_parallel_size": F(POS),
        "virtual_pipeline_model_parallel_size": F(POS),
        "sequence_parallel": F(BOOL, False),
        "seq_length": F(POS),  # provider-specific default (GPTModelProvider: 1024)
        "num_layers": F(POS),
        "hidden_size": F(POS),
        "ffn_hidden_size": F(POS),
        "num_attention_heads": F(POS),
        "num_query_groups": F(POS),
        "kv_channels": F(POS),
        "vocab_size": F(POS),
        "num_moe_experts": F(NONNEG),
        "mtp_num_layers": F(NONNEG),
        "calculate_per_token_loss": F(BOOL, False),
        "cross_entropy_loss_fusion": F(BOOL, True),  # GPTModelProvider's default
        "apply_rope_fusion": F(BOOL),  # provider-specific (Megatron Core: false; RoPE family providers: true)
        "position_embedding_type": F(OneOf(("learned_absolute", "rope", "mrope", "yarn", "none"))),
        "transformer_impl": F(
            OneOf(("transformer_engine", "local", "inference_optimized")), "transformer_engine"
        ),
        "cuda_graph_impl": F(OneOf(("none", "local", "transformer_engine", "full_iteration")), "none"),
        "cuda_graph_scope": F(STR_OR_LIST),
        "cuda_graph_modules": F(STR_OR_LIST),
        "enable_cuda_graph": F(BOOL, False),
        "cp_comm_type": F(STR_OR_LIST),
        "hierarchical_context_parallel_sizes": F(ListOf(POS)),
        "num_layers_in_first_pipeline_stage": F(POS),
        "num_layers_in_last_pipeline_stage": F(POS),
        "bf16": F(BOOL, False),
        "fp16": F(BOOL, False),
        "hidden_dropout": F(PROB, 0.1),
        "attention_dropout": F(PROB, 0.1),
        "rotary_base": F(Float(gt=0)),
        "hf_model_id": F(STR),
        "hf_path": F(STR),
    },
    "dataset": {
        "seq_length": F(POS),  # required when the dataset is defined (see _check_required)
        "sequence_length": F(POS),
        "seed": F(INT, 1234),
        "dataset_root": F(STR),
        "num_workers": F(NONNEG, 8),
        "enable_offline_packing": F(BOOL, False),
        "offline_packing_specs": F(Nested("offline_packing_specs")),
        "packed_sequence_specs": F(Nested("offline_packing_specs")),  # legacy spelling (DP801)
        "enable_in_batch_packing": F(BOOL, False),
        "pack_sequences_in_batch": F(BOOL, False),  # legacy spelling (DP802)
        "defer_in_batch_packing_to_step": F(BOOL, False),
        "packing_buffer_size": F(POS),
        "pad_to_max_length": F(BOOL, False),
        "pad_to_multiple_of": F(POS),
        "micro_batch_size": F(POS),  # Energon's own loader micro-batch (PK112)
        "dataset_kwargs": F(Nested("dataset_kwargs")),
        "do_validation": F(BOOL, True),
        "do_test": F(BOOL, True),
        # vlm_sft in-batch packing budgets, InternVL's PackedDataset arguments (internvl_chat
        # train/dataset_packed.py): tokens per pack, image tiles per pack, open packs in the buffer.
        "max_packed_tokens": F(POS),
        "num_images_expected": F(POS),
        "max_buffer_size": F(POS),
    },
    "offline_packing_specs": {
        # packed_sequence_size, max_single_sequence_length and pad_seq_to_mult have their own rules
        # (PK103, DS702, DS703), which report their types and ranges: untyped here (rules.md "Overlaps").
        "packed_sequence_size": F(ANY, -1),
        "max_single_sequence_length": F(ANY),
        "pad_seq_to_mult": F(ANY, 1),
        "pad_cu_seqlens": F(BOOL, False),
        "tokenizer_model_name": F(STR),
        "packed_train_data_path": F(STR),
        "packed_val_data_path": F(STR),
        "packed_metadata_path": F(STR),
    },
    "dataset_kwargs": {
        "pad_to_max_length": F(BOOL, False),
        "virtual_tokens": F(NONNEG, 0),
    },
    "train": {
        "micro_batch_size": F(POS),
        "global_batch_size": F(POS),
        "train_iters": F(POS),
        "train_samples": F(POS),
        "eval_micro_batch_size": F(POS),
        "eval_global_batch_size": F(POS),
        "eval_iters": F(NONNEG),
        "eval_interval": F(NONNEG),  # 0 = off (Bridge training/train.py: `if ... and eval_interval`)
        "exit_interval": F(NONNEG),  # 0 = off (train.py: `if cfg.train.exit_interval and ...`)
        "manual_gc": F(BOOL, False),
        "manual_gc_interval": F(NONNEG, 0),
    },
    "validation": {
        "eval_iters": F(NONNEG, 100),
        "eval_interval": F(NONNEG),  # 0 (or null) = no periodic evaluation (Bridge training/train.py:667-673)
        "skip_train": F(BOOL, False),
        "eval_micro_batch_size": F(POS),
        "eval_global_batch_size": F(POS),
    },
    "ddp": {
        "average_in_collective": F(BOOL, False),
        "use_distributed_optimizer": F(BOOL, False),
        "overlap_grad_reduce": F(BOOL, False),
        "overlap_param_gather": F(BOOL, False),
        "grad_reduce_in_fp32": F(BOOL, False),
        "check_for_nan_in_grad": F(BOOL, False),
        "use_megatron_fsdp": F(BOOL, False),
        "megatron_fsdp_version": F(POS),
        "data_parallel_sharding_strategy": F(STR),
    },
    "optimizer": {
        "optimizer": F(OneOf(("adam", "sgd", "muon", "dist_muon")), "adam"),
        "lr": F(NONNEG_NUM),
        "min_lr": F(NONNEG_NUM),
        "weight_decay": F(NONNEG_NUM, 0.01),
        "adam_beta1": F(Float(ge=0, lt=1), 0.9),
        "adam_beta2": F(Float(ge=0, lt=1), 0.999),
        "adam_eps": F(Float(gt=0), 1e-8),
        "clip_grad": F(NONNEG_NUM, 1.0),
        "bf16": F(BOOL, False),
        "fp16": F(BOOL, False),
        "use_distributed_optimizer": F(BOOL, False),
    },
    "scheduler": {
        "lr_decay_style": F(OneOf(("constant", "linear", "cosine", "inverse-square-root", "WSD")), "linear"),
        "lr_decay_iters": F(POS),
        "lr_warmup_iters": F(NONNEG, 0),
        "lr_warmup_fraction": F(PROB),
        "lr_warmup_init": F(NONNEG_NUM, 0.0),
        "start_weight_decay": F(NONNEG_NUM),
        "end_weight_decay": F(NONNEG_NUM),
    },
    "checkpoint": {
        "save": F(STR),
        "save_interval": F(NONNEG),  # 0 = no periodic save (Bridge training/train.py:1431-1434)
        "load": F(STR),
        "pretrained_checkpoint": F(STR),
        "finetune": F(BOOL, False),
        "ckpt_format": F(OneOf(("torch_dist", "zarr", "fsdp_dtensor")), "torch_dist"),
        "async_save": F(BOOL, False),
        "most_recent_k": F(INT, -1),
    },
    "logger": {
        "log_interval": F(POS, 100),
        "tensorboard_dir": F(STR),
        "wandb_project": F(STR),
        "wandb_exp_name": F(STR),
        "log_throughput": F(BOOL, False),
    },
    "tokenizer": {
        "tokenizer_type": F(STR),
        "tokenizer_model": F(STR),
        "vocab_size": F(POS),
    },
    "rng": {
        "seed": F(NONNEG, 1234),
        "te_rng_tracker": F(BOOL, False),
    },
    "dist": {
        "distributed_backend": F(OneOf(("nccl", "gloo")), "nccl"),
        "distributed_timeout_minutes": F(POS, 10),
        "eval_context_parallel_size": F(POS),
        "use_megatron_fsdp": F(BOOL, False),
        "use_torch_fsdp2": F(BOOL, False),
    },
    "rerun_state_machine": {
        "rerun_mode": F(OneOf(("disabled", "validate_results", "report_determinism_stats")), "disabled"),
        "check_for_nan_in_loss": F(BOOL, True),
        "check_for_spiky_loss": F(BOOL, False),
    },
}

OWN_SECTIONS = ("recipe", "launch", "dpo")
BRIDGE_SECTIONS = (
    "model",
    "train",
    "validation",
    "dataset",
    "ddp",
    "optimizer",
    "scheduler",
    "checkpoint",
    "logger",
    "tokenizer",
    "rng",
    "dist",
    "rerun_state_machine",
)
# Nested sections whose keys are checked for unknowns too (dataset_kwargs is open in Bridge: not checked).
CHECKED_NESTED = ("offline_packing_specs",)


def default(section: str, key: str) -> Any:
    """Bridge's default for a typed field (None when the field is not typed here)."""
    spec = SECTIONS.get(section, {}).get(key)
    return spec.default if spec else None


# --- validation ---------------------------------------------------------------------------------


@lru_cache(maxsize=1)
def _field_table() -> dict[str, Any]:
    return json.loads(_FIELDS_FILE.read_text(encoding="utf-8"))


def _table_sections(part: dict[str, Any]) -> dict[str, frozenset[str]]:
    """A part of bridge_fields.json as section -> names (the nested offline specs under their section name)."""
    out = {k: frozenset(v) for k, v in part.get("sections", {}).items()}
    nested = part.get("nested", {})
    out["offline_packing_specs"] = frozenset(nested.get("dataset.offline_packing_specs", ())) | frozenset(
        nested.get("dataset.packed_sequence_specs", ())
    )
    return out


@lru_cache(maxsize=2)
def known_fields(profile: str = "current") -> dict[str, frozenset[str]]:
    """Field names Bridge accepts per section (bridge_fields.json, generated from the pinned Megatron
    Bridge + Megatron Core snapshot) plus the typed fields above. The `legacy` profile also knows the
    fields the legacy snapshot (Bridge 0.3.1) had and the current one dropped."""
    data = _field_table()
    out = dict(_table_sections(data))
    if profile == "legacy":
        for name, fields in _table_sections(data.get("legacy", {})).items():
            out[name] = out.get(name, frozenset()) | fields
    for name, fields in SECTIONS.items():
        out[name] = out.get(name, frozenset()) | frozenset(fields)
    out["top"] = out.get("top", frozenset()) | frozenset(OWN_SECTIONS) | frozenset(BRIDGE_SECTIONS)
    return out


@lru_cache(maxsize=1)
def removed_fields() -> tuple[dict[str, frozenset[str]], str, str]:
    """(section -> names Bridge dropped since the legacy snapshot, legacy version, current version)."""
    data = _field_table()
    legacy = data.get("legacy", {})
    removed = {k: v for k, v in _table_sections(legacy).items() if v}
    return (
        removed,
        str(legacy.get("generated_from", {}).get("megatron-bridge", "?")),
        str(data.get("generated_from", {}).get("megatron-bridge", "?")),
    )


def edit_distance(a: str, b: str, limit: int = 3) -> int:
    """Levenshtein distance, cut off at `limit` (enough for "did you mean")."""
    if abs(len(a) - len(b)) >= limit:
        return limit
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i]
        for j, cb in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb)))
        if min(cur) >= limit:
            return limit
        prev = cur
    return min(prev[-1], limit)


def did_you_mean(key: str, candidates: frozenset[str] | set[str]) -> str | None:
    """The closest candidate within edit distance 2 (ties: alphabetical), or None."""
    best: tuple[int, str] | None = None
    for cand in candidates:
        d = edit_distance(key, cand)
        if d <= 2 and (best is None or (d, cand) < best):
            best = (d, cand)
    return best[1] if best else None


def value_repr(value: Any, limit: int = 60) -> str:
    """A short repr of a config value for messages; safe for huge ints and odd objects."""
    try:
        text = repr(value)
    except ValueError:  # ints past sys.get_int_max_str_digits refuse to print
        return (
            f"<integer of {value.bit_length()} bits>"
            if isinstance(value, int)
            else f"<{type(value).__name__}>"
        )
    except Exception:
        return f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _type_name(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def _check_fields(
    path: tuple[str, ...], mapping: dict[Any, Any], fields: dict[str, F]
) -> Iterator[SchemaIssue]:
    for key, spec in fields.items():
        if key not in mapping:
            continue
        value = mapping[key]
        where = (*path, key)
        if (value is None and spec.nullable) or is_unknown(value):
            continue  # Unknown: an interpolation whose value lint cannot know (`${oc.env:VAR}`)
        want = spec.type.check(value)
        if want is not None:
            yield SchemaIssue(
                where,
                "SC002",
                f"{'.'.join(where)} is {value_repr(value)} ({_type_name(value)}); expected {want}",
                Severity.ERROR,
            )
        elif isinstance(spec.type, Nested):
            yield from _check_fields(where, value, SECTIONS[spec.type.section])


def _unknown_keys(
    path: tuple[str, ...], mapping: dict[Any, Any], known: frozenset[str], severity: Severity
) -> Iterator[SchemaIssue]:
    for key in mapping:
        if not isinstance(key, str):
            yield SchemaIssue(
                path,
                "SC002",
                f"{'.'.join(path) or 'top level'}: key {value_repr(key)} is not a string",
                Severity.ERROR,
            )
            continue
        if key in known or key == "_target_":
            continue
        where = ".".join((*path, key))
        guess = did_you_mean(key, known)
        kind = "packcfg's own section" if severity is Severity.ERROR else "a section packcfg models"
        section = ".".join(path) or "the top level"
        msg = f"unknown key {where} in {section} ({kind})" + (f"; did you mean {guess!r}?" if guess else "")
        hint = f"did you mean {guess!r}?" if guess else None
        removed, old, new = removed_fields()
        if key in removed.get(path[-1] if path else "top", ()):
            msg = (
                f"unknown key {where}: Megatron Bridge {old} had it, {new} does not "
                "(known under the legacy profile)" + (f"; did you mean {guess!r}?" if guess else "")
            )
            hint = hint or "use --profile legacy for configs written for that Bridge"
        yield SchemaIssue((*path, key), "SC003", msg, severity, hint)


def validate(config: dict[str, Any], profile: str = "current") -> list[SchemaIssue]:
    """Every shape problem of a (normalised) config: SC002 type/range/missing, SC003 unknown keys.
    `profile` picks the known-field set (`legacy` also knows fields Bridge removed since 0.3.1)."""
    if not isinstance(config, dict):
        return [
            SchemaIssue(
                (), "SC002", f"the config is {_type_name(config)}; expected a mapping", Severity.ERROR
            )
        ]
    known = known_fields(profile)
    issues = list(_unknown_keys((), config, known["top"], Severity.WARNING))
    for name in (*OWN_SECTIONS, *BRIDGE_SECTIONS):
        value = config.get(name)
        if value is None:
            continue
        if not isinstance(value, dict):
            if is_unknown(value):
                continue
            msg = f"{name} is {value_repr(value)} ({_type_name(value)}); expected a mapping"
            issues.append(SchemaIssue((name,), "SC002", msg, Severity.ERROR))
            continue
        issues.extend(_check_fields((name,), value, SECTIONS[name]))
        severity = Severity.ERROR if name in OWN_SECTIONS else Severity.WARNING
        issues.extend(_unknown_keys((name,), value, known[name], severity))
    dataset = config.get("dataset")
    if isinstance(dataset, dict):
        for key in ("offline_packing_specs", "packed_sequence_specs"):
            specs = dataset.get(key)
            if isinstance(specs, dict):
                issues.extend(
                    _unknown_keys(("dataset", key), specs, known["offline_packing_specs"], Severity.WARNING)
                )
    issues.extend(_check_required(config))
    issues.extend(_check_family(config))
    return issues


ENERGON_REQUIRED = ("micro_batch_size", "task_encoder")


def _check_required(config: dict[str, Any]) -> Iterator[SchemaIssue]:
    """Fields Bridge requires with no default. Only for a full dataset definition (one with a
    `_target_`): an override file that touches a few dataset keys is not a dataset definition."""
    dataset = config.get("dataset")
    if not isinstance(dataset, dict) or dataset.get("_target_") is None:
        return
    target = dataset.get("_target_")
    if dataset.get("seq_length") is None and dataset.get("sequence_length") is None:
        yield SchemaIssue(
            ("dataset",),
            "SC002",
            f"dataset.seq_length is missing; {value_repr(target)} requires it (no default)",
            Severity.ERROR,
            "set dataset.seq_length (usually equal to model.seq_length)",
        )
    if isinstance(target, str) and "energon" in target.rsplit(".", 1)[-1].lower():
        for key in ENERGON_REQUIRED:  # EnergonDatasetConfig declares these without defaults
            if dataset.get(key) is None:
                msg = f"dataset.{key} is missing; {value_repr(target)} requires it (no default)"
                yield SchemaIssue(("dataset",), "SC002", msg, Severity.ERROR)


def _check_family(config: dict[str, Any]) -> Iterator[SchemaIssue]:
    recipe = config.get("recipe")
    family = recipe.get("family") if isinstance(recipe, dict) else None
    if not isinstance(family, str):
        return
    from packcfg.core.families import family_table

    ids = frozenset(family_table().ids)
    if family not in ids:
        guess = did_you_mean(family, ids)
        yield SchemaIssue(
            ("recipe", "family"),
            "SC002",
            f"recipe.family is {family!r}, not a family id" + (f"; did you mean {guess!r}?" if guess else ""),
            Severity.ERROR,
            f"did you mean {guess!r}?" if guess else "the ids are in packcfg/core/families.yaml",
        )


# --- Pydantic models (built on first use: not on the lint path) ---------------------------------


_BUILT_MODELS: dict[str, Any] = {}


@lru_cache(maxsize=1)
def _pydantic_models() -> dict[str, Any]:
    from pydantic import BaseModel, ConfigDict, Field, create_model

    class _Section(BaseModel):
        model_config = ConfigDict(strict=True, extra="allow", populate_by_name=True)
        target: str | None = Field(default=None, alias="_target_")

    class _OwnSection(_Section):
        model_config = ConfigDict(strict=True, extra="forbid", populate_by_name=True)

    models = _BUILT_MODELS
    # nested sections first: their parents refer to them
    for name in ("offline_packing_specs", "dataset_kwargs", *OWN_SECTIONS, *BRIDGE_SECTIONS):
        fields: dict[str, Any] = {}
        for key, spec in SECTIONS[name].items():
            ann = spec.type.annotation()
            fields[key] = (ann | None if spec.nullable else ann, spec.default)
        base = _OwnSection if name in OWN_SECTIONS else _Section
        title = "".join(part.capitalize() for part in name.split("_"))
        models[name] = create_model(title, __base__=base, **fields)
    top = {name: (models[name] | None, None) for name in (*OWN_SECTIONS, *BRIDGE_SECTIONS)}
    top["peft"] = (dict[str, Any] | None, None)
    models["Experiment"] = create_model(  # type: ignore[call-overload]
        "Experiment",
        __config__=ConfigDict(extra="allow", populate_by_name=True),
        __doc__="One experiment: packcfg's recipe and launch plus Megatron Bridge's ConfigContainer sections.",
        **top,
    )
    return models


def json_schema() -> dict[str, Any]:
    """JSON Schema of the whole config (for editors; `packcfg schema` prints it)."""
    schema = _pydantic_models()["Experiment"].model_json_schema(by_alias=True)
    schema["title"] = "packcfg experiment"
    return schema


def __getattr__(name: str) -> Any:
    # `from packcfg.core.schema import Experiment` builds the Pydantic models on first use only.
    if name == "Experiment":
        return _pydantic_models()["Experiment"]
    raise AttributeError(name)
