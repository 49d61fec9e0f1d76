"""The packing flow end to end: settings (from flags or an experiment config) -> spool -> plan -> files.

`pack_dataset(settings)` is what `packcfg pack` runs; `ensure_packed(config)` is what the trainer and
the demo call; `tokenized_samples(config)` gives the trainer the very samples the packer packs.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from packcfg import __version__
from packcfg.core.atomic import OutputRefused, check_output, clean_stale_temps, temp_dir
from packcfg.packing.errors import PackingError, PackOutputRefused
from packcfg.packing.planner import PackPlan, PlanError, plan
from packcfg.packing.progress import Progress
from packcfg.packing.sources import (
    TOKENIZED_FORMATS,
    Spool,
    detect_format,
    file_checksum,
    load_tokenizer,
    spool,
    tokenizer_checksum,
    tokenizer_inputs,
)
from packcfg.packing.sources import cache as token_cache
from packcfg.packing.sources.spooling import release_memory, unpack_values

__all__ = ["detect_format", "spool"]  # re-exported for the commands
from packcfg.packing.writer import (
    FORMAT_VERSION,
    bridge_metadata,
    iter_packed,
    merge_split_metadata,
    parquet_entry,
    read_metadata,
    write_json_atomic,
    write_packed,
)


@dataclass
class PackSettings:
    """Everything that decides the packed output (all of it goes into the fingerprint)."""

    source: Path
    output: Path
    metadata: Path
    capacity: int
    tokenizer: Path | None = None
    align: int = 1
    algorithm: str = "bfd"
    seed: int = 0
    oversize: str | None = None
    max_per_pack: int | None = None
    pad_id: int | None = None  # None: the tokenizer's EOS (Bridge pads with EOS), else 0
    split: str = "train"
    pairs: bool = False  # DPO: samples 2k and 2k+1 (chosen, rejected) stay adjacent in one pack
    shuffle: bool = True
    pad_to_max_length: bool | None = None  # noted in metadata only: rows are never padded in the file
    chat: bool | None = None  # the config's chat switches (None: no config); checked against the rows
    vocab_size: int | None = None  # the config's model.vocab_size: a pad id must be below it
    extra: dict[str, Any] = field(default_factory=dict)

    def fingerprint_fields(self) -> dict[str, Any]:
        return {
            "format_version": FORMAT_VERSION,
            "capacity": self.capacity,
            "align": self.align,
            "algorithm": self.algorithm,
            "seed": self.seed,
            "oversize": self.oversize,
            "max_per_pack": self.max_per_pack,
            "pad_id": self.pad_id,
            "pairs": self.pairs,
            "shuffle": self.shuffle,
        }


@dataclass(frozen=True)
class PackedData:
    """What `ensure_packed` returns: the packed train file, its metadata file and the parsed entry."""

    train_path: Path
    metadata_path: Path
    metadata: dict[str, Any]
    created: bool


# --------------------------------------------------------------------------------------------- config


def _get(config: Mapping[str, Any], dotted: str, default: Any = None) -> Any:
    from packcfg.core.config import get_path  # the YAML layer: not imported to pack a data file

    return get_path(config, dotted.split("."), default)


def _int_setting(config: Mapping[str, Any], dotted: str, default: int | None) -> int | None:
    value = _get(config, dotted, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise PackingError(f"config {dotted}: expected an integer, got {value!r}")
    return value


def _flag(config: Mapping[str, Any], dotted: str) -> bool:
    return str(_get(config, dotted, False)).lower() in {"true", "1", "yes"}


MAX_PACK_SIZE = 2**31 - 1
"""The largest pack size `pack` writes: a packed row's offsets (seq_start_id) are int32 in Bridge's format."""
_ROW_BOUND = f"({MAX_PACK_SIZE}: seq_start_id is int32)"


def _positive_or_none(value: Any) -> int | None:
    return value if type(value) is int and value > 0 else None


def settings_from_config(
    config: Mapping[str, Any], base_dir: Path | None = None, **overrides: Any
) -> PackSettings:
    """Pack settings from an experiment config (Bridge vocabulary), then explicit overrides (not None).

    capacity <- dataset.offline_packing_specs.packed_sequence_size (else dataset.seq_length; the section
    may be spelled packed_sequence_specs, as before Bridge 0.6);
    align <- offline_packing_specs.pad_seq_to_mult; seed <- dataset.seed (else rng.seed);
    source <- dataset.dataset_root/training.jsonl; tokenizer <- tokenizer.tokenizer_model;
    outputs <- offline_packing_specs.packed_train_data_path / packed_metadata_path.
    Relative paths are relative to `base_dir` when given, else to the working directory.
    """
    from packcfg.resources import resolve_path

    for name in ("capacity", "align", "max_per_pack"):
        value = overrides.get(name)
        if value is not None and value <= 0:
            raise PackingError(f"{name.replace('_', '-')} must be > 0, got {value}")
    if (overrides.get("capacity") or 0) > MAX_PACK_SIZE:
        raise PackingError(
            f"capacity {overrides['capacity']} is larger than a packed row can be {_ROW_BOUND}"
        )
    if overrides.get("seed") is not None and overrides["seed"] < 0:
        raise PackingError(f"--seed must be >= 0, got {overrides['seed']}")
    # the packing section under the name the file gives it: Bridge >= 0.6 `offline_packing_specs`, or the
    # older `packed_sequence_specs` (the newer wins where both are set, as packcfg.core.normalize reads them),
    # so that messages name the user's own keys
    from packcfg.core.normalize import LEGACY_SPECS, SPECS

    dataset = _get(config, "dataset", {})
    section = SPECS[1]
    if isinstance(dataset, Mapping) and LEGACY_SPECS[1] in dataset and section not in dataset:
        section = LEGACY_SPECS[1]
    specs_at = f"dataset.{section}"
    specs = _get(config, specs_at, {}) or {}
    if not isinstance(specs, Mapping):
        raise PackingError(f"config {specs_at}: expected a mapping, got {specs!r}")
    capacity = _int_setting(config, f"{specs_at}.packed_sequence_size", None)
    if capacity is None:
        capacity = _int_setting(config, "dataset.seq_length", None)
    align = _int_setting(config, f"{specs_at}.pad_seq_to_mult", 1) or 1
    seed = _int_setting(config, "dataset.seed", None)
    if seed is None:
        seed = _int_setting(config, "rng.seed", 0) or 0

    def path_of(dotted: str) -> Path | None:
        value = _get(config, dotted)
        if value is None:
            return None
        if not isinstance(value, str | Path):
            raise PackingError(f"config {dotted}: expected a path, got {value!r}")
        return resolve_path(value, base_dir)

    split = overrides.get("split") or "train"
    source = overrides.get("source")
    if source is None:
        root = path_of("dataset.dataset_root")
        if root is None:
            raise PackingError("config dataset.dataset_root: not set (the folder holding training.jsonl)")
        name = {"train": "training.jsonl", "validation": "validation.jsonl", "test": "test.jsonl"}[split]
        source = root / name if root.is_dir() or not root.suffix else root
    tokenizer = overrides.get("tokenizer") or path_of("tokenizer.tokenizer_model")
    out_key = {"train": "packed_train_data_path", "validation": "packed_val_data_path"}.get(split)
    output = overrides.get("output") or (path_of(f"{specs_at}.{out_key}") if out_key else None)
    metadata = overrides.get("metadata") or path_of(f"{specs_at}.packed_metadata_path")
    if output is None:
        raise PackingError(f"config {specs_at}.{out_key}: not set (where the packed file goes)")
    if metadata is None:
        metadata = Path(output).with_name("metadata.json")
    settings = PackSettings(
        source=Path(source),
        output=Path(output),
        metadata=Path(metadata),
        capacity=overrides.get("capacity") or capacity or 0,  # 0: reported below
        tokenizer=Path(tokenizer) if tokenizer is not None else None,
        align=overrides.get("align") or align,
        algorithm=overrides.get("algorithm") or "bfd",
        seed=overrides["seed"] if overrides.get("seed") is not None else seed,
        oversize=overrides.get("oversize"),
        max_per_pack=overrides.get("max_per_pack"),
        pad_id=overrides.get("pad_id"),
        split=split,
        # DPO data is pairs (chosen, rejected) whether or not `--pairs` was given: never split them.
        pairs=bool(overrides.get("pairs")) or _get(config, "recipe.mode") == "dpo",
        pad_to_max_length=bool(_get(config, "dataset.dataset_kwargs.pad_to_max_length", False)),
        chat=_flag(config, "dataset.dataset_kwargs.chat")
        and _flag(config, "dataset.dataset_kwargs.use_hf_tokenizer_chat_template"),
        vocab_size=_positive_or_none(_get(config, "model.vocab_size")),
    )
    if not settings.capacity:
        raise PackingError(f"config {specs_at}.packed_sequence_size: not set (the pack size)")
    if settings.capacity > MAX_PACK_SIZE:
        raise PackingError(
            f"config: pack size {settings.capacity} is larger than a packed row can be {_ROW_BOUND}"
        )
    if settings.capacity < 0 or settings.align <= 0:
        raise PackingError(
            f"config: pack size {settings.capacity} and pad_seq_to_mult {settings.align} must be > 0"
        )
    return settings


# --------------------------------------------------------------------------------------------- packing


def fingerprint(settings: PackSettings, source_sum: str | None, tokenizer_sum: str | None) -> str:
    blob = json.dumps(
        {"settings": settings.fingerprint_fields(), "source": source_sum, "tokenizer": tokenizer_sum},
        sort_keys=True,
    )
    return "sha256:" + hashlib.sha256(blob.encode()).hexdigest()


def _tokenizer_for(settings: PackSettings, fmt: str) -> Path | None:
    """The tokenizer, for sources that need one (only then does it go into the fingerprint). A config's chat
    switches (Bridge's `dataset.dataset_kwargs.chat` and `use_hf_tokenizer_chat_template`, read by
    megatron-bridge v0.3.1 data/datasets/sft.py `create_sft_dataset`) must agree with the rows."""
    if settings.chat is not None and (fmt == "chat") != settings.chat:
        if fmt == "chat":
            raise PackingError(
                f"{settings.source}: rows are chat 'messages': set dataset.dataset_kwargs.chat: true and "
                "dataset.dataset_kwargs.use_hf_tokenizer_chat_template: true (as Bridge needs for them)"
            )
        raise PackingError(
            f"{settings.source}: dataset.dataset_kwargs.chat and use_hf_tokenizer_chat_template are set but the "
            f"rows are not chat 'messages' ({fmt} format)"
        )
    return settings.tokenizer if fmt in TOKENIZED_FORMATS else None


def up_to_date(settings: PackSettings) -> dict[str, Any] | None:
    """The existing metadata entry when output and metadata match these settings and inputs, else None."""
    if not settings.output.is_file() or not settings.metadata.is_file():
        return None
    try:
        entries = read_metadata(settings.metadata)
    except PackingError:
        return None
    entry = next((e for e in entries if e.get("split", "train") == settings.split), None)
    if entry is None:
        return None
    fmt = detect_format(settings.source)
    fp = fingerprint(
        settings, file_checksum(settings.source), tokenizer_checksum(_tokenizer_for(settings, fmt))
    )
    if entry.get("fingerprint") != fp:
        return None
    try:
        import pyarrow.parquet as pq

        if pq.ParquetFile(settings.output).metadata.num_rows != entry.get("packs"):
            return None
    except Exception:  # unreadable output: repack
        return None
    return entry


def make_plan(sp: Spool, settings: PackSettings, unpacked_gbs: int | None = None) -> PackPlan:
    try:
        return plan(
            sp.runtime_lengths(),
            settings.capacity,
            algorithm=settings.algorithm,
            align=settings.align,
            max_per_pack=settings.max_per_pack,
            seed=settings.seed,
            oversize=settings.oversize,
            pairs=True if settings.pairs else None,
            unpacked_global_batch_size=unpacked_gbs,
        )
    except PlanError as exc:
        msg = str(exc)
        # name the source line of the offending sample, not just its index
        if msg.startswith("sample ") and msg.split()[1].isdigit():
            i = int(msg.split()[1])
            if 0 <= i < sp.num_samples:
                msg = f"{settings.source}:{int(sp.lines[i])}: {msg}"
        else:
            msg = f"{settings.source}: {msg}"
        raise PackingError(msg) from None


def _packcfg_wrote(settings: PackSettings) -> Any:
    """`may_replace` for the packed file: it carries packcfg's entry in its Parquet metadata (or, for files
    from before that entry existed, packcfg's metadata JSON names it with a fingerprint)."""

    def owned(path: Path) -> bool:
        if parquet_entry(path) is not None:
            return True
        try:
            entries = read_metadata(settings.metadata)
        except PackingError:
            return False
        return any(
            e.get("file") == path.name
            and "packcfg_version" in e
            and str(e.get("fingerprint", "")).startswith("sha256:")
            for e in entries
        )

    return owned


def _is_metadata(path: Path) -> bool:
    """`may_replace` for the metadata JSON: packing metadata (a JSON list of objects, ours or Bridge's) or
    an empty file is merged into; anything else is the user's and needs --force."""
    try:
        if path.stat().st_size == 0:
            return True
        read_metadata(path)
    except (OSError, PackingError):
        return False
    return True


def check_pack_outputs(
    settings: PackSettings, *, force: bool = False, inputs: Iterable[Path | None] = (), final: bool = True
) -> None:
    """The output rule for `pack`: the packed file and the metadata are neither an input (source, tokenizer,
    config files), nor each other, nor a special file; with `final`, also not a symlink, and an existing
    packed file packcfg did not write (or a metadata file that is not packing metadata) needs `force`.
    Raises PackOutputRefused (a PackingError)."""
    ins = [settings.source, *tokenizer_inputs(settings.tokenizer), *inputs]
    try:
        check_output(settings.output, inputs=ins, follow_symlinks=True, what="packed file")
        check_output(
            settings.metadata, inputs=[*ins, settings.output], follow_symlinks=True, what="metadata file"
        )
        if final:
            check_output(
                settings.output,
                force=force,
                may_replace=_packcfg_wrote(settings),
                what="packed file",
            )
            check_output(settings.metadata, force=force, may_replace=_is_metadata, what="metadata file")
    except OutputRefused as exc:
        raise PackOutputRefused(str(exc)) from None


_MAX_TOKEN_ID = 2**31 - 1  # input_ids are int32 in the packed file


def _check_pad_id(pad_id: int, tokenizer: Any, vocab_size: int | None) -> None:
    """A pad id is a token id: in [0, vocab) of the tokenizer that made the tokens (else of the config's
    model.vocab_size, else of int32). PackingError naming the value and the bound."""
    if tokenizer is not None:
        vocab, what = (
            int(tokenizer.tokenizer.get_vocab_size(with_added_tokens=True)),
            f"the tokenizer {tokenizer.path}",
        )
    elif vocab_size is not None:
        vocab, what = vocab_size, "model.vocab_size"
    else:
        vocab, what = _MAX_TOKEN_ID + 1, "int32 token ids"
    if type(pad_id) is not int or not 0 <= pad_id < vocab:
        raise PackingError(
            f"pad id (--pad-id) {pad_id!r} is not a token id: it must be in [0, {vocab}) ({what}); "
            "leave it out to pad with the tokenizer's EOS"
        )


def pack_dataset(
    settings: PackSettings,
    *,
    force: bool = False,
    progress: bool = True,
    inputs: Iterable[Path | None] = (),
    _fail_after_rows: int | None = None,
) -> PackedData:
    """Pack `settings.source` into `settings.output` + metadata unless an up-to-date result exists.

    `force`: repack even when up to date, and replace a packed file packcfg did not write. `inputs`:
    more files the command read (config files) that the outputs must not be. Temporary files of killed
    earlier runs beside the outputs are removed first. Raises PackingError (PackOutputRefused when the
    output may not be written).
    """
    inputs = tuple(inputs)
    if settings.pad_id is not None:
        _check_pad_id(settings.pad_id, None, settings.vocab_size)  # before any file is read
    check_pack_outputs(settings, inputs=inputs, final=False)
    if not force:
        existing = up_to_date(settings)
        if existing is not None:
            return PackedData(settings.output, settings.metadata, existing, created=False)
    check_pack_outputs(settings, force=force, inputs=inputs)
    fmt = detect_format(settings.source)
    tokenizer = _tokenizer_for(settings, fmt)
    loaded = load_tokenizer(tokenizer) if tokenizer is not None else None
    pad_id = settings.pad_id
    if pad_id is None:
        pad_id = loaded.pad_id if loaded is not None else 0
    _check_pad_id(pad_id, loaded, settings.vocab_size)
    tokenizer_sum = tokenizer_checksum(tokenizer)
    with ThreadPoolExecutor(max_workers=1) as pool:
        # the source's sha256 is taken in a worker thread while the source is read (hashlib releases
        # the GIL); an unreadable source still reports the checksum's error, as before
        pending_sum = pool.submit(file_checksum, settings.source)
        try:
            return _pack(
                settings,
                fmt,
                tokenizer,
                pad_id,
                tokenizer_sum,
                pending_sum,
                inputs,
                progress,
                _fail_after_rows,
            )
        except PackingError:
            pending_sum.result()
            raise


def _pack(
    settings: PackSettings,
    fmt: str,
    tokenizer: Path | None,
    pad_id: int,
    tokenizer_sum: str | None,
    pending_sum: Future[str | None],
    inputs: tuple[Path | None, ...],
    progress: bool,
    fail_after_rows: int | None,
) -> PackedData:
    """`pack_dataset` once the inputs are checked: spool, plan, write the file, then the metadata."""
    t0 = time.perf_counter()
    settings.output.parent.mkdir(parents=True, exist_ok=True)
    clean_stale_temps(settings.output.parent, settings.output.name)
    clean_stale_temps(settings.metadata.parent, settings.metadata.name)
    # the spool lives next to the output: same filesystem, and no surprise in a small /tmp; it is a
    # locked `.<output>.<random>.tmp` folder, so a killed run's spool is removed by the next run
    with temp_dir(settings.output) as workdir:
        sp, cache = None, None
        if fmt in TOKENIZED_FORMATS and token_cache.enabled():
            # tokenized before from the same bytes with the same tokenizer: read that (sources.cache); the
            # source's sha256 is awaited only when there is a cache to look in
            cache = token_cache.cache_root()
            if cache.is_dir():
                sp = token_cache.load(cache, token_cache.cache_key(pending_sum.result(), tokenizer_sum, fmt))
        if sp is None:
            with Progress("read ", None, progress) as bar:
                sp = spool(settings.source, tokenizer, workdir, bar)
            if cache is not None:
                cache_key = token_cache.cache_key(pending_sum.result(), tokenizer_sum, fmt)
                info = {
                    "source": str(settings.source),
                    "source_checksum": pending_sum.result(),
                    "source_format": fmt,
                    "tokenizer": str(tokenizer),
                    "tokenizer_checksum": tokenizer_sum,
                }
                token_cache.store(cache, cache_key, sp, info)
        source_sum = pending_sum.result()
        release_memory()  # what reading freed (its blocks, pyarrow's pool), before planning and writing
        t_read = time.perf_counter()
        p = make_plan(sp, settings)
        release_memory()  # the planner's temporaries
        t_plan = time.perf_counter()
        stats = p.stats
        if p.num_packs == 0:
            dropped = (stats.get("oversize") or {}).get("dropped", sp.num_samples)
            raise PackingError(
                f"{settings.source}: oversize policy 'drop' dropped all {dropped:,} sample(s) (each longer "
                f"than the pack size {settings.capacity}); nothing to pack"
            )
        entry: dict[str, Any] = {"split": settings.split, **bridge_metadata(p)}
        entry.update(
            {
                "packcfg_version": __version__,
                "format_version": FORMAT_VERSION,
                "file": settings.output.name,
                "algorithm": settings.algorithm,
                "seed": settings.seed,
                "pad_seq_to_mult": settings.align,
                "pad_id": pad_id,
                "oversize": stats["oversize"],
                "max_per_pack": settings.max_per_pack,
                "pairs": settings.pairs,
                "rows_shuffled": settings.shuffle,
                "pad_to_max_length": settings.pad_to_max_length,
                "pad_to_max_length_note": (
                    "rows are stored unpadded; the executor pads each row to pack_size"
                    if settings.pad_to_max_length
                    else None
                ),
                "samples": stats["samples"],
                "samples_packed": stats["samples_packed"],
                "items_packed": int(len(p.order)),  # sample slots in the rows (split pieces count apart)
                "packs": p.num_packs,
                "lower_bound": stats["lower_bound"],
                "efficiency": stats["efficiency"],
                "bin_waste_tokens": stats["bin_waste_tokens"],
                "alignment_waste_tokens": stats["alignment_waste_tokens"],
                "source": str(settings.source),
                "source_format": fmt,
                "source_checksum": source_sum,
                "tokenizer": str(tokenizer) if tokenizer is not None else None,
                "tokenizer_checksum": tokenizer_sum,
                "fingerprint": fingerprint(settings, source_sum, tokenizer_sum),
            }
        )
        with Progress("write", p.num_packs, progress) as bar:
            write_packed(
                settings.output,
                sp,
                p,
                pad_id,
                settings.seed,
                settings.shuffle,
                bar,
                fail_after_rows=fail_after_rows,
                file_metadata=entry,
                inputs=(settings.source, tokenizer, *inputs),
            )
        t_write = time.perf_counter()
        sp.close()
    entry["timings_s"] = {
        "read": round(t_read - t0, 3),
        "plan": round(t_plan - t_read, 3),
        "write": round(t_write - t_plan, 3),
    }
    write_json_atomic(settings.metadata, merge_split_metadata(settings.metadata, entry))
    return PackedData(settings.output, settings.metadata, entry, created=True)


def ensure_packed(
    config: Mapping[str, Any], *, force: bool = False, progress: bool = True, base_dir: Path | None = None
) -> PackedData:
    """Pack the config's training data unless an up-to-date packed file exists; return its paths.

    Reads dataset.dataset_root/training.jsonl (tokenized with tokenizer.tokenizer_model when it is text),
    packs to offline_packing_specs.packed_sequence_size with pad_seq_to_mult and dataset.seed, and writes
    packed_train_data_path and packed_metadata_path. Raises PackingError (one line) on bad input.
    """
    return pack_dataset(settings_from_config(config, base_dir), force=force, progress=progress)


def config_is_packed(config: Mapping[str, Any]) -> bool:
    """Offline packing is on: the config's global batch size already counts packs, not samples."""
    return _get(config, "dataset.enable_offline_packing") is True or bool(
        _get(config, "dataset.packed_sequence_specs")
    )


def unpacked_global_batch_size(config: Mapping[str, Any]) -> int | None:
    """`train.global_batch_size` when it is a real positive int of an unpacked config: the batch size packing
    advice starts from. None for a config that already packs (its GBS counts packs; dividing again would be
    wrong)."""
    value = _get(config, "train.global_batch_size")
    if config_is_packed(config):
        return None
    return value if type(value) is int and value > 0 else None


def plan_for_config(
    config: Mapping[str, Any], *, split: str = "train", base_dir: Path | None = None
) -> PackPlan:
    """The pack plan `ensure_packed` writes for this config, with batch-size advice from the config."""
    settings = settings_from_config(config, base_dir, split=split)
    sp = spool(settings.source, _tokenizer_for(settings, detect_format(settings.source)))
    return make_plan(sp, settings, unpacked_global_batch_size(config))


def tokenized_samples(
    config: Mapping[str, Any], *, split: str = "train", base_dir: Path | None = None
) -> list[tuple[np.ndarray, np.ndarray]]:
    """The samples the packer packs, unpacked: one (input_ids int32, loss_mask int8) per packed item.

    The loss mask is label-aligned as in the packed file (position i: does predicting token i+1 count;
    0 at the last position). Samples come in source order, after the same oversize policy (truncated or
    split pieces as the packer makes them) and without alignment padding, so a padded baseline trains
    on exactly the tokens and targets packed training sees.
    """
    return samples_of(settings_from_config(config, base_dir, split=split))


def samples_of(settings: PackSettings) -> list[tuple[np.ndarray, np.ndarray]]:
    """`tokenized_samples` from parsed pack settings (the train flow parses its config once)."""
    fmt = detect_format(settings.source)
    sp = spool(settings.source, _tokenizer_for(settings, fmt))
    p = make_plan(sp, settings)
    items = np.sort(p.order) if p.has_pieces or len(p.order) != len(p.item_sample) else None
    ids = items if items is not None else np.arange(len(p.item_sample))
    out: list[tuple[np.ndarray, np.ndarray]] = []
    for it in ids.tolist():
        s = int(sp.offsets[p.item_sample[it]] + p.item_start[it])
        n = int(p.item_length[it]) + 1
        tokens, mask = unpack_values(np.asarray(sp.packed[s : s + n]))
        mask[-1] = 0
        out.append((tokens, mask))
    return out


load_samples = tokenized_samples


def read_packed(path: str | Path) -> Iterator[dict[str, np.ndarray]]:
    """Rows of a packed Parquet: dicts with `input_ids` (int32), `loss_mask` (int8), `seq_start_id`."""
    return iter_packed(Path(path))


def unpack_row(row: Mapping[str, np.ndarray]) -> list[tuple[np.ndarray, np.ndarray]]:
    """Split a packed row back into its samples: [(input_ids, label-aligned loss_mask), ...]."""
    ids, mask, starts = (
        row["input_ids"],
        row["loss_mask"],
        list(row["seq_start_id"]) + [len(row["input_ids"])],
    )
    return [(ids[starts[i] : starts[i + 1]], mask[starts[i] : starts[i + 1]]) for i in range(len(starts) - 1)]


def settings_dict(settings: PackSettings) -> dict[str, Any]:
    d = asdict(settings)
    return {k: (str(v) if isinstance(v, Path) else v) for k, v in d.items()}
