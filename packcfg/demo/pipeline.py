"""The demo pipeline: lint -> analyze -> pack -> train packed -> train padded -> summary, in one directory.

The padded baseline trains on exactly what the packed run trains on. Both runs get the same units, the
packs of the packed file, through `TrainOptions.units`; the trainer's batch plan orders units by a seeded
permutation of their count, so both runs see the same packs in the same order. Under `padded` batching
a unit's samples become one micro-batch of right-padded rows (one row per sample), so each optimizer step
has the same micro-batches, the same samples and the same real and supervised tokens in both runs; only
the layout differs (one THD row per pack vs one padded row per sample). The loss is per token over the
global batch, so the two loss curves must agree up to float noise, and the summary reports how closely.

A third run, in the padded stage, is the throughput reference of the headline: the same samples regrouped
by length (`batches.length_grouped`, as many groups as packs) into padded rows, each group padded to its
longest sample, as a length-grouped sampler would batch them. Its steps hold other samples, so only its
real tokens/s is compared; the packed-vs-padded speedup above is reported second.
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from packcfg import __version__
from packcfg.demo import summary as summ
from packcfg.demo.outdir import SUMMARY_KIND, SUMMARY_NAME, OutputDirError, staged_output

if TYPE_CHECKING:
    from packcfg.train.settings import Batching

DEFAULT_TRAIN_ITERS = (
    8  # a clear loss drop within 60 s on 2 cores: the worst-case padded run is what bounds the time
)
QUICK_TRAIN_ITERS = 4
STAGES = 7

# Where each part goes inside the output directory (all paths in summary.json are relative to it).
PACKED_DATA = "data/train.parquet"
PACKED_METADATA = "data/metadata.json"
RUNS: tuple[Batching, ...] = ("packed", "padded")
# Padded rows of similar-length samples: the throughput reference of the headline (other samples per step).
GROUPED = "length_grouped"
PLOT_NAME = "demo.svg"

Say = Callable[[str], None]


class DemoError(Exception):
    """The demo cannot run or continue; the message is one line for the user (exit 2)."""


class LintBlocked(DemoError):
    """The config has lint errors: the demo stops before packing, as a launch would (exit 1)."""


@dataclass
class DemoOptions:
    output_dir: Path = field(default_factory=lambda: Path("runs/demo"))
    config: Path | None = None  # default: the bundled tiny CPU recipe
    config_files: list[Path] = field(default_factory=list)  # `-c FILE`: merged over the config, in order
    overrides: list[str] = field(default_factory=list)  # the user's KEY=VALUE words; the demo's own go last
    train_iters: int | None = None  # default: QUICK_TRAIN_ITERS with quick, else DEFAULT_TRAIN_ITERS
    quick: bool = False
    # One thread by default: with OpenMP's busy-waiting, two threads on two cores that anything else also
    # uses made a tiny model's step 25x slower in our measurements, while one thread loses little here.
    threads: int = 1

    def iterations(self) -> int:
        if self.train_iters is not None:
            return self.train_iters
        return QUICK_TRAIN_ITERS if self.quick else DEFAULT_TRAIN_ITERS


@dataclass
class DemoResult:
    output_dir: Path
    summary: dict[str, Any]
    text: str  # the printed summary


def _print(text: str) -> None:
    print(text, flush=True)


def run_demo(options: DemoOptions, say: Say = _print) -> DemoResult:
    """Run every stage into a staging directory that replaces `options.output_dir` when complete."""
    iters = options.iterations()
    if iters <= 0:
        raise DemoError(f"--train-iters must be > 0, got {iters}")
    if options.threads <= 0:
        raise DemoError(f"--threads must be > 0, got {options.threads}")
    if options.config is None:
        from packcfg.resources import tiny_recipe

        config_path = tiny_recipe()
    else:
        config_path = Path(options.config)
    try:
        with staged_output(options.output_dir) as stage:
            summary = _run_stages(options, config_path, iters, stage, say)
    except OutputDirError as exc:
        raise DemoError(str(exc)) from None
    text = summ.format_text(summary)
    say("")
    say(text)
    return DemoResult(Path(options.output_dir), summary, text)


def _run_stages(options: DemoOptions, config_path: Path, iters: int, stage: Path, say: Say) -> dict[str, Any]:
    from packcfg.core.config import ConfigError, load_config

    t_start = time.perf_counter()
    timings: dict[str, float] = {}
    files = [config_path, *options.config_files]
    try:
        base = load_config(files, options.overrides)
    except ConfigError as exc:
        raise DemoError(str(exc)) from None
    overrides = [*options.overrides, *demo_overrides(base, stage, iters)]

    with _stage(1, "lint", f"{config_path.name} with the demo's overrides", say, timings):
        lint = lint_stage(config_path, overrides, stage, say, config_files=options.config_files)

    config = load_config(files, overrides)
    with _stage(2, "analyze", "plan the packs from the sample lengths", say, timings):
        analysis = analyze_stage(config, say)
    _write_text(
        stage / "analyze.json", json.dumps(analysis["plan_stats"], indent=2, default=_jsonable) + "\n"
    )

    with _stage(3, "pack", f"write {PACKED_DATA} (Bridge's packed Parquet)", say, timings):
        packing = pack_stage(config, analysis, say)

    with _stage(4, "setup", "import torch and megatron-core (the one slow import)", say, timings):
        from packcfg.train.data import PackedParquet

        units = PackedParquet(packing["train_path"])  # one reader, shared: both runs get the same packs

    def saved(path: Path) -> None:  # the folder it will have once the staging folder is swapped in
        say(f"saved {Path(options.output_dir) / path.relative_to(stage)}")

    runs: dict[str, dict[str, Any]] = {}
    for i, batching in enumerate(RUNS, start=5):
        what = (
            "one THD row per pack"
            if batching == "packed"
            else "the same packs, each sample its own padded row; then length-grouped padded rows"
        )
        with (
            _stage(i, f"train {batching}", f"{iters} steps, {what}", say, timings, key=f"train_{batching}"),
            _torch_threads(options.threads),
        ):
            runs[batching] = train_stage(config, batching, units, stage, on_saved=saved)
            if batching == "padded":  # the strongest padded baseline: the headline's reference
                runs[GROUPED] = train_stage(*grouped_baseline(config, units), stage, name=GROUPED)

    with _stage(7, "summary", "summary.json, summary.md, demo.svg", say, timings):
        result = build_summary(options, config_path, config, iters, lint, packing, runs, timings)
        write_outputs(result, stage)
    result["timings_s"]["summary"] = round(timings["summary"], 3)
    result["timings_s"]["total"] = round(time.perf_counter() - t_start, 3)
    # summary.json last: its presence marks a complete demo directory (see outdir.py)
    _write_text(stage / SUMMARY_NAME, json.dumps(result, indent=2, default=_jsonable) + "\n")
    return result


# ------------------------------------------------------------------------------------------------ config


def _quoted(value: Any) -> str:
    """A YAML scalar for a dotted override: JSON is valid YAML, and quoting keeps paths with `:` or `#`
    intact."""
    return json.dumps(str(value)) if isinstance(value, str | Path) else json.dumps(value)


def demo_overrides(base: dict[str, Any], stage: Path, iters: int) -> list[str]:
    """Dotted overrides that keep every file the demo writes under `stage` and shorten the schedule."""
    scheduler = base.get("scheduler") or {}
    warmup = scheduler.get("lr_warmup_iters", 0)
    warmup = warmup if isinstance(warmup, int) and not isinstance(warmup, bool) else 0
    dataset = base.get("dataset") or {}
    # the specs section as the config spells it (Bridge < 0.6: packed_sequence_specs), never a second one
    specs = next(
        (k for k in ("offline_packing_specs", "packed_sequence_specs") if k in dataset),
        "offline_packing_specs",
    )
    values: dict[str, Any] = {
        f"dataset.{specs}.packed_train_data_path": stage / PACKED_DATA,
        f"dataset.{specs}.packed_metadata_path": stage / PACKED_METADATA,
        "train.train_iters": iters,
        # the cosine schedule ends with the run, and warm-up stays a small part of it
        "scheduler.lr_decay_iters": iters,
        "scheduler.lr_warmup_iters": min(warmup, iters // 5),
        "checkpoint.save": stage / "packed" / "checkpoints",
        "checkpoint.save_interval": iters,  # one checkpoint, at the end
    }
    return [f"{key}={_quoted(value)}" for key, value in values.items()]


# ------------------------------------------------------------------------------------------------ stages


def lint_stage(
    config_path: Path, overrides: list[str], stage: Path, say: Say, config_files: list[Path] | None = None
) -> dict[str, Any]:
    """Every rule on the recipe (and -c files) plus the overrides; lint errors stop the demo (LintBlocked)."""
    from packcfg import lint_file
    from packcfg.core.config import ConfigError
    from packcfg.lint.rules import all_rules

    try:
        diagnostics = lint_file(config_path, config_files=config_files or (), overrides=overrides)
    except ConfigError as exc:
        raise DemoError(str(exc)) from None
    rules_checked = len(all_rules())
    counts = {
        sev: sum(1 for d in diagnostics if d.severity.value == sev) for sev in ("error", "warning", "info")
    }
    for d in diagnostics:
        say(f"  {d.file}:{d.line}:{d.column}: {d.code} {d.severity.value}: {d.message}")
    _write_text(stage / "lint.json", json.dumps([d.to_dict() for d in diagnostics], indent=2) + "\n")
    say(
        f"  {rules_checked} rules checked: {counts['error']} errors, {counts['warning']} warnings, "
        f"{counts['info']} info"
    )
    if counts["error"]:
        raise LintBlocked(
            f"{config_path}: {counts['error']} lint error(s); fix them (packcfg lint {config_path}) and rerun"
        )
    return {
        "rules_checked": rules_checked,
        "diagnostics": len(diagnostics),
        "errors": counts["error"],
        "warnings": counts["warning"],
        "infos": counts["info"],
        "file": "lint.json",
    }


def analyze_stage(config: dict[str, Any], say: Say) -> dict[str, Any]:
    """Plan the packs exactly as the packer will (the same plan `ensure_packed` writes)."""
    from packcfg import packing
    from packcfg.train.settings import DataSettings

    try:
        p = packing.plan_for_config(config)
    except (packing.PackingError, packing.PlanError) as exc:
        raise DemoError(str(exc)) from None
    s = p.stats
    seq_length = DataSettings.from_config(config, "padded").seq_length
    # The unpacked baseline pads every sample to seq_length (Bridge's pad_to_max_length); packing leaves
    # only each pack's tail (and alignment) as padding.
    padded = int(s["items"]) * seq_length - int(s["tokens"])
    packed_padding = int(s["padding_tokens"])
    say(
        f"  {s['samples']:,} samples, mean {s['mean_sample_length']:.1f} / max {s['max_sample_length']} tokens"
        f" -> {s['packs']:,} packs of {s['capacity']} (lower bound {s['lower_bound']:,}), "
        f"{s['packing_factor']:.2f} samples/pack, efficiency {100 * s['efficiency']:.2f}%"
    )
    say(
        f"  padding: {padded:,} tokens if every sample is padded to seq_length {seq_length}, "
        f"{packed_padding:,} packed (pack tails {s['bin_waste_tokens']:,}, alignment "
        f"{s['alignment_waste_tokens']:,})"
    )
    return {
        "plan_stats": s,
        "samples": int(s["samples"]),
        "packs": int(s["packs"]),
        "lower_bound": int(s["lower_bound"]),
        "packing_factor": float(s["packing_factor"]),
        "efficiency": float(s["efficiency"]),
        "tokens": int(s["tokens"]),
        "pack_size": int(s["capacity"]),
        "pad_seq_to_mult": int(s["align"]),
        "seq_length": seq_length,
        "padding_tokens_padded": padded,
        "padding_tokens_packed": packed_padding,
        "padding_removed_tokens": padded - packed_padding,
        "padding_removed_fraction": (padded - packed_padding) / padded if padded else 0.0,
        "bin_waste_tokens": int(s["bin_waste_tokens"]),
        "alignment_waste_tokens": int(s["alignment_waste_tokens"]),
    }


def pack_stage(config: dict[str, Any], analysis: dict[str, Any], say: Say) -> dict[str, Any]:
    """Write the packed Parquet where the (overridden) config says: inside the staging directory."""
    import pyarrow.parquet as pq

    from packcfg import packing

    try:
        packed = packing.ensure_packed(config, progress=True)
    except packing.PackingError as exc:
        raise DemoError(str(exc)) from None
    rows = pq.ParquetFile(packed.train_path).metadata.num_rows
    say(f"  wrote {PACKED_DATA}: {rows:,} packs; metadata {PACKED_METADATA}")
    if rows != analysis["packs"]:  # same planner, settings and seed: a mismatch is a packing bug
        say(f"  warning: the packed file has {rows} packs but the plan had {analysis['packs']}")
    out = {k: v for k, v in analysis.items() if k != "plan_stats"}
    out.update(
        packs=rows,
        planned_packs=analysis["packs"],
        packed_file=PACKED_DATA,
        metadata_file=PACKED_METADATA,
        train_path=packed.train_path,
    )
    return out


def grouped_baseline(config: dict[str, Any], units: Any) -> tuple[dict[str, Any], Batching, Any]:
    """The length-grouped padded baseline: the packed file's samples regrouped by length into as many
    units as there are packs (so a step holds about the same real tokens), each padded to its longest."""
    from packcfg.train.batches import length_grouped
    from packcfg.train.settings import DataSettings

    samples = units.all_samples()
    group = max(1, round(len(samples) / max(1, len(units))))
    run_config = copy.deepcopy(config)
    dataset = run_config.setdefault("dataset", {})
    dataset["pad_to_max_length"] = False
    (dataset.get("dataset_kwargs") or {}).pop("pad_to_max_length", None)
    grouped = length_grouped(samples, group, seed=DataSettings.from_config(config, "padded").seed)
    return run_config, "padded", _GroupUnits(grouped)


class _GroupUnits:
    """Training units (`len`, `[i]` -> samples) that are given groups of samples."""

    def __init__(self, groups: list[Any]) -> None:
        self.groups = groups

    def __len__(self) -> int:
        return len(self.groups)

    def __getitem__(self, index: int) -> list[Any]:
        return self.groups[index]


def train_stage(
    config: dict[str, Any],
    batching: Batching,
    units: Any,
    stage: Path,
    name: str | None = None,
    on_saved: Callable[[Path], None] | None = None,
) -> dict[str, Any]:
    """One training run into `stage/<name or batching>/` (metrics.jsonl; checkpoints for the packed run,
    each announced through `on_saved`)."""
    from packcfg.train.loop import TrainOptions, train

    name = name or batching
    run_config = copy.deepcopy(config)
    if batching != "packed":  # the baseline is a measurement: only the packed run keeps a checkpoint
        run_config.setdefault("checkpoint", {})["save"] = None
    t0 = time.perf_counter()
    try:
        result = train(
            run_config,
            TrainOptions(
                batching=batching, output_dir=stage / name, units=units, progress=True, on_saved=on_saved
            ),
        )
    except (ValueError, FileNotFoundError) as exc:
        raise DemoError(f"train {name}: {exc}") from None
    wall = time.perf_counter() - t0
    return {
        "wall_s": wall,
        "metrics_path": stage / name / "metrics.jsonl",
        "checkpoints": [str(Path(p).relative_to(stage)) for p in result.checkpoints],
    }


# ------------------------------------------------------------------------------------------------ summary


def build_summary(
    options: DemoOptions,
    config_path: Path,
    config: dict[str, Any],
    iters: int,
    lint: dict[str, Any],
    packing: dict[str, Any],
    runs: dict[str, dict[str, Any]],
    timings: dict[str, float],
) -> dict[str, Any]:
    """summary.json's content; training numbers come from the metrics files just written."""
    from packcfg.train.settings import DataSettings

    rows = {b: summ.read_metrics(runs[b]["metrics_path"]) for b in (*RUNS, GROUPED)}
    per_run = {
        b: summ.run_summary(rows[b], f"{b}/metrics.jsonl", runs[b]["wall_s"])
        | {"checkpoints": runs[b]["checkpoints"]}
        for b in (*RUNS, GROUPED)
    }
    data = DataSettings.from_config(config, "padded")
    padded_layout = (
        f"rows padded to seq_length {data.seq_length}"
        if data.pad_to_max_length
        else "rows padded to the longest sample of each micro-batch"
    )
    train_cfg = config.get("train") or {}
    speedup = (
        per_run["packed"]["tokens_per_s"] / per_run["padded"]["tokens_per_s"]
        if per_run["padded"]["tokens_per_s"]
        else 0.0
    )
    pk = {k: (str(v) if isinstance(v, Path) else v) for k, v in packing.items() if k != "train_path"}
    return {
        "kind": SUMMARY_KIND,
        "packcfg_version": __version__,
        "config": str(config_path),
        "config_name": config_path.name,
        "output_dir": str(options.output_dir),
        "quick": options.quick,
        "threads": options.threads,
        "lint": lint,
        "packing": pk,
        "train": {
            "steps": iters,
            "global_batch_size": train_cfg.get("global_batch_size"),
            "micro_batch_size": train_cfg.get("micro_batch_size"),
            "padded_layout": padded_layout,
            "packed": per_run["packed"],
            "padded": per_run["padded"],
            "speedup": speedup,
            # The headline: against padded rows of similar-length samples (the best a padded run does).
            "length_grouped": per_run[GROUPED],
            "speedup_length_grouped": (
                per_run["packed"]["tokens_per_s"] / per_run[GROUPED]["tokens_per_s"]
                if per_run[GROUPED]["tokens_per_s"]
                else 0.0
            ),
            **summ.compare_runs(rows["packed"], rows["padded"]),
        },
        "plot": PLOT_NAME,
        # the summary stage's own time and the total are filled in once the stage ends
        "timings_s": {k: round(v, 3) for k, v in timings.items()},
    }


def write_outputs(result: dict[str, Any], stage: Path) -> None:
    """demo.svg and summary.md (summary.json is written last by the caller)."""
    from packcfg.demo.plot import pack_fills, render_svg

    pk, tr = result["packing"], result["train"]
    fills = pack_fills(stage / pk["packed_file"], pk["pack_size"])
    rows = {b: summ.read_metrics(stage / tr[b]["metrics"]) for b in RUNS}
    picture = render_svg(
        rows["packed"],
        rows["padded"],
        fills,
        f"packcfg demo: {result['config_name']}, {tr['steps']} steps x {tr['global_batch_size']} packs",
        tr,
    )
    _write_text(stage / PLOT_NAME, picture)
    _write_text(stage / "summary.md", summ.format_markdown(result))


# ------------------------------------------------------------------------------------------------ helpers


def _write_bytes(path: Path, data: bytes) -> None:
    from packcfg.core.atomic import atomic_write_bytes

    atomic_write_bytes(path, data)


def _write_text(path: Path, text: str) -> None:
    _write_bytes(path, text.encode("utf-8"))


def _jsonable(obj: Any) -> Any:
    """numpy scalars and paths in stats dicts."""
    if hasattr(obj, "item"):
        return obj.item()
    return str(obj)


@contextmanager
def _stage(
    index: int, name: str, what: str, say: Say, timings: dict[str, float], key: str | None = None
) -> Iterator[None]:
    """A stage header, then the stage's time into `timings[key or name]`."""
    say(f"\n== [{index}/{STAGES}] {name}: {what}")
    t0 = time.perf_counter()
    yield
    seconds = timings[key or name] = time.perf_counter() - t0
    say(f"   {name} done in {seconds:.1f} s")


@contextmanager
def _torch_threads(threads: int) -> Iterator[None]:
    """Set torch's intra-op threads for the training stages and restore them after (the demo may run
    inside a longer-lived process, e.g. a test session)."""
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(previous)
