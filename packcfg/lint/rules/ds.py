"""DS: dataset and packing specs."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import PurePosixPath

from packcfg.core.diagnostics import Fix, Severity
from packcfg.core.schema import value_repr
from packcfg.lint.context import RuleContext
from packcfg.lint.registry import Example, Finding, RuleDocs, rule
from packcfg.lint.rules._examples import BASE, bridge_target, edit
from packcfg.lint.rules._helpers import is_pos_int, set_edit, spec_name, spec_path

PACKED_PATH_KEYS = ("packed_train_data_path", "packed_val_data_path")
PACKED_SUFFIXES = (".parquet", ".pq", ".npy")


@rule(
    "DS701",
    Severity.ERROR,
    "model and dataset seq_length match",
    fixable=True,
    docs=RuleDocs(
        what="`model.seq_length == dataset.seq_length`. The fix sets model.seq_length to dataset.seq_length: the data "
        "pipeline and the packing specs are sized for the dataset length, while model.seq_length is often a "
        "provider default carried along.",
        why="Bridge asserts they match; a model shorter than its data cannot hold a sample.",
        failing=edit(
            (
                "  seq_length: 4096\n  calculate_per_token_loss",
                "  seq_length: 8192\n  calculate_per_token_loss",
            )
        ),
        passing=BASE,
        fixed=BASE,
        source="Megatron Bridge training/config.py:1629-1648 (main 067f987)",
    ),
)
def ds701(ctx: RuleContext) -> Iterator[Finding]:
    f = ctx.facts
    if (
        f.model_seq_length is not None
        and f.dataset_seq_length is not None
        and f.model_seq_length != f.dataset_seq_length
    ):
        yield Finding(
            f"model.seq_length {f.model_seq_length} != dataset.seq_length {f.dataset_seq_length}",
            at=("model", "seq_length"),
            fix=Fix(
                f"set model.seq_length to dataset.seq_length ({f.dataset_seq_length})",
                (set_edit(ctx, ("model", "seq_length"), f.dataset_seq_length),),
            ),
        )


@rule(
    "DS702",
    Severity.ERROR,
    "max_single_sequence_length within the pack",
    docs=RuleDocs(
        what="`offline_packing_specs.max_single_sequence_length` is a positive integer `<= packed_sequence_size`.",
        why="A sample longer than a pack can never be placed; Bridge's packing config rejects it.",
        failing=edit(
            (
                "    packed_sequence_size: 4096\n",
                "    packed_sequence_size: 4096\n    max_single_sequence_length: 8192\n",
            )
        ),
        passing=edit(
            (
                "    packed_sequence_size: 4096\n",
                "    packed_sequence_size: 4096\n    max_single_sequence_length: 4096\n",
            )
        ),
        source="Megatron Bridge data/packing/config.py:49-53 (main 067f987)",
    ),
)
def ds702(ctx: RuleContext) -> Iterator[Finding]:
    specs = ctx.facts.specs
    if specs is None or specs.get("max_single_sequence_length") is None:
        return
    value = specs["max_single_sequence_length"]
    pss = ctx.facts.packed_sequence_size
    if not is_pos_int(value):
        yield Finding(
            f"max_single_sequence_length must be a positive integer, got {value_repr(value)}",
            at=spec_path("max_single_sequence_length"),
        )
    elif pss is not None and value > pss:
        yield Finding(
            f"max_single_sequence_length {value} exceeds packed_sequence_size {pss}",
            at=spec_path("max_single_sequence_length"),
        )


@rule(
    "DS703",
    Severity.ERROR,
    "pad_seq_to_mult positive and within the cap",
    docs=RuleDocs(
        what="`offline_packing_specs.pad_seq_to_mult` is a positive integer `<=` the per-sample length cap "
        "(`max_single_sequence_length`, else seq_length).",
        why="Padding each sample to a multiple larger than any sample makes every sample exceed the cap.",
        failing=edit(
            ("    packed_sequence_size: 4096\n", "    packed_sequence_size: 4096\n    pad_seq_to_mult: 0\n")
        ),
        passing=edit(
            ("    packed_sequence_size: 4096\n", "    packed_sequence_size: 4096\n    pad_seq_to_mult: 8\n")
        ),
        source="Megatron Bridge data/packing/config.py:47-48 and data/packing/offline.py:174 (main 067f987)",
    ),
)
def ds703(ctx: RuleContext) -> Iterator[Finding]:
    f = ctx.facts
    if f.specs is None or f.specs.get("pad_seq_to_mult") is None:
        return
    value = f.specs["pad_seq_to_mult"]
    cap = f.max_single_sequence_length or f.seq_length
    if not is_pos_int(value):
        yield Finding(
            f"pad_seq_to_mult must be a positive integer, got {value_repr(value)}",
            at=spec_path("pad_seq_to_mult"),
        )
    elif cap is not None and value > cap:
        yield Finding(
            f"pad_seq_to_mult {value} exceeds the per-sample length cap {cap}",
            at=spec_path("pad_seq_to_mult"),
        )


def packed_paths(ctx: RuleContext) -> Iterator[tuple[str, str]]:
    specs = ctx.facts.specs or {}
    for key in PACKED_PATH_KEYS:
        value = specs.get(key)
        if isinstance(value, str) and value:
            yield key, value


def _is_packed_path(path: str) -> bool:
    """A .parquet/.pq/.npy file, a glob ending in one (or in *), or a directory (no suffix / trailing slash)."""
    tail = path.rstrip("/").rsplit("/", 1)[-1]
    if path.endswith("/") or "." not in tail:
        return True  # a directory of Parquet files
    low = tail.lower()
    return low.endswith(PACKED_SUFFIXES) or low.endswith("*")


def _path_example(path: str, legacy: bool = False) -> str:
    """BASE with a packed training path (in the Bridge < 0.6 spelling when `legacy`)."""
    out = edit(
        (
            "    packed_sequence_size: 4096\n",
            f"    packed_sequence_size: 4096\n    packed_train_data_path: {path}\n",
        )
    )
    if legacy:
        out = edit(
            ("  enable_offline_packing: true\n  offline_packing_specs:\n", "  packed_sequence_specs:\n"),
            base=out,
        )
    return out


@rule(
    "DS704",
    Severity.ERROR,
    "packed data paths are Parquet (or .npy)",
    docs=RuleDocs(
        what="Packed data paths end in `.parquet`/`.pq` (file, directory or glob) or `.npy`.",
        why="Bridge picks the reader from the suffix; anything else fails when the dataset is built.",
        failing=edit(
            (
                "    packed_sequence_size: 4096\n",
                "    packed_sequence_size: 4096\n    packed_train_data_path: packed/train.jsonl\n",
            )
        ),
        passing=edit(
            (
                "    packed_sequence_size: 4096\n",
                "    packed_sequence_size: 4096\n    packed_train_data_path: packed/train.parquet\n",
            )
        ),
        examples=(
            Example(
                "target Bridge 0.3.1 (a Bridge YAML handed to it as is): it reads packed data only as .npy",
                bridge_target(_path_example("packed/train.parquet", legacy=True), "0.3.1"),
                fires=True,
            ),
            Example(
                "target Bridge 0.3.1 with a .npy file",
                bridge_target(_path_example("packed/train.npy", legacy=True), "0.3.1"),
                fires=False,
            ),
        ),
        source="Megatron Bridge data/packing/config.py (main 067f987, packed path checks); v0.3.1 "
        "data/datasets/packed_sequence.py:255,268 (.npy only)",
    ),
)
def ds704(ctx: RuleContext) -> Iterator[Finding]:
    # Bridge 0.3.x reads packed files only as .npy (v0.3.1 data/datasets/packed_sequence.py:255 and 268 assert
    # `Path(...).suffix == ".npy"`). Not when packcfg runs the job: its executor reads Parquet, and the bridge
    # engine hands 0.3.x the .npy beside the Parquet (`packcfg pack --bridge-npy`).
    npy_only = ctx.target.reads_parquet is False and ctx.get(("launch", "engine")) not in (
        "bridge",
        "packcfg",
    )
    for key, value in packed_paths(ctx):
        if npy_only and PurePosixPath(value).suffix != ".npy":
            yield Finding(
                f"{spec_name(ctx, key)} {value!r}: {ctx.target.describe()} reads packed data only as a .npy "
                "file (Parquet from Bridge 0.4)",
                at=spec_path(key),
                hint="packcfg pack --bridge-npy writes the .npy beside the Parquet",
            )
        elif not _is_packed_path(value):
            yield Finding(
                f"{spec_name(ctx, key)} {value!r} is not a .parquet/.pq file, directory or glob (or .npy)",
                at=spec_path(key),
            )
        elif getattr(ctx, "check_paths", False) and not _exists(ctx, value):
            yield Finding(
                f"{spec_name(ctx, key)} {value!r} does not exist (--check-paths)", at=spec_path(key)
            )


def _exists(ctx: RuleContext, value: str) -> bool:
    """Whether a packed path (file, directory or glob) exists, relative paths taken from the config's folder."""
    import glob
    from pathlib import Path

    from packcfg.resources import resolve_path

    files = getattr(ctx.sources, "files", None)
    base = Path(files[0]).parent if files else None
    path = resolve_path(value, base)
    if any(ch in value for ch in "*?["):
        return bool(glob.glob(str(path)))
    return path.exists()


@rule(
    "DS705",
    Severity.WARNING,
    "packed_sequence_size differs from seq_length",
    docs=RuleDocs(
        what="`offline_packing_specs.packed_sequence_size != seq_length`.",
        why="Allowed, but it changes memory per step and what a batch means; Bridge's packed-sequence guide says to "
        "keep model, dataset and packed sequence lengths equal.",
        failing=edit(
            ("    packed_sequence_size: 4096\n", "    packed_sequence_size: 8192\n"),
        ),
        passing=BASE,
        source='Megatron Bridge docs/training/packed-sequences.md, "Choosing the Offline Pack Length" (main 067f987): keep model, dataset and packed sequence lengths equal',
    ),
)
def ds705(ctx: RuleContext) -> Iterator[Finding]:
    f = ctx.facts
    if "offline" in f.packing_modes and f.packed_sequence_size is not None and f.seq_length is not None:
        if f.packed_sequence_size != f.seq_length:
            yield Finding(
                f"packed_sequence_size {f.packed_sequence_size} differs from seq_length {f.seq_length}",
                at=spec_path("packed_sequence_size"),
            )


@rule(
    "DS706",
    Severity.ERROR,
    "samples longer than a pack",
    docs=RuleDocs(
        what="The per-sample length cap (seq_length when `max_single_sequence_length` is not set) exceeds "
        "`packed_sequence_size`.",
        why="Samples longer than a pack cannot be placed: Bridge fails with a KeyError while filling packs.",
        failing=edit(("    packed_sequence_size: 4096\n", "    packed_sequence_size: 2048\n")),
        passing=BASE,
        source="Megatron Bridge data/packing/offline.py and data/packing/algorithms.py (main 067f987)",
    ),
)
def ds706(ctx: RuleContext) -> Iterator[Finding]:
    f = ctx.facts
    if (
        "offline" not in f.packing_modes
        or f.specs is None
        or f.specs.get("max_single_sequence_length") is not None
    ):
        return
    if (
        f.seq_length is not None
        and f.packed_sequence_size is not None
        and f.seq_length > f.packed_sequence_size
    ):
        yield Finding(
            f"samples up to seq_length {f.seq_length} cannot fit packs of {f.packed_sequence_size}; "
            "set max_single_sequence_length or a larger packed_sequence_size",
            at=spec_path("packed_sequence_size"),
        )


@rule(
    "DS707",
    Severity.WARNING,
    "offline packing without pad_to_max_length",
    docs=RuleDocs(
        what="Offline packing without `pad_to_max_length` (dataset.pad_to_max_length or dataset_kwargs).",
        why="Fixed width is required with CUDA graphs and fixed-width kernels (Bridge's packed-sequence guide), "
        "and Bridge's model verification cards pack with it.",
        failing=edit(("  dataset_kwargs:\n    pad_to_max_length: true\n", "")),
        passing=BASE,
        source="Megatron Bridge docs/training/packed-sequences.md (main 067f987): pad_to_max_length for CUDA graphs and fixed-width kernels; examples/model_verification_cards/*/card.yaml",
    ),
)
def ds707(ctx: RuleContext) -> Iterator[Finding]:
    f = ctx.facts
    if "offline" in f.packing_modes and not f.pad_to_max_length:
        yield Finding(
            "offline packing without pad_to_max_length (variable-width packs)",
            at=("dataset", "dataset_kwargs", "pad_to_max_length"),
            hint="set dataset.dataset_kwargs.pad_to_max_length: true",
        )
