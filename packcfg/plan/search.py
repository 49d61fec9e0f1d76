"""The search: every TP x CP x PP x pack size x recomputation layout of the request, estimated, ranked by
real tokens/s among those that fit in memory, and kept only when `packcfg lint` passes it with the user's
other settings (the lint engine runs in-process on the config plus the proposal's overrides).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from packcfg.plan.estimate import RECOMPUTE, Estimate, Hardware, Layout, PackProfile, Precision, estimate
from packcfg.plan.shape import ModelShape, PlanError, flag, shape_from_config


@dataclass(frozen=True)
class Request:
    """What the user asked for (command-line flags); None means "from the config"."""

    gpus: int | None = None
    gpus_per_node: int | None = None
    hardware: Hardware = field(default_factory=Hardware)
    pack_sizes: tuple[int, ...] | None = None
    tp: tuple[int, ...] | None = None
    cp: tuple[int, ...] | None = None
    pp: tuple[int, ...] | None = None
    recompute: tuple[str, ...] = RECOMPUTE
    samples_per_step: float | None = None
    top: int = 10
    data: Path | None = None


@dataclass
class Proposal:
    rank: int
    estimate: Estimate
    profile: PackProfile
    overrides: dict[str, Any]  # dotted key -> value, what differs from the config

    def override_args(self) -> list[str]:
        """The proposal as Hydra overrides (`++key=value`), in a stable order."""
        return [f"++{k}={_yaml_scalar(v)}" for k, v in self.overrides.items()]


@dataclass
class PlanResult:
    shape: ModelShape
    gpus: int
    precision: Precision
    hardware: Hardware
    proposals: list[Proposal]
    considered: int
    rejected: Counter[str]  # why layouts were left out, counted
    samples: int
    infeasible: str | None = None


def _yaml_scalar(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _get(config: Mapping[str, Any], dotted: str, default: Any = None) -> Any:
    from packcfg.core.config import get_path

    return get_path(config, dotted.split("."), default)


def _pos_int(config: Mapping[str, Any], dotted: str, default: int) -> int:
    value = _get(config, dotted)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise PlanError(f"{dotted}: expected a positive integer, got {value!r}")
    return value


def precision_of(config: Mapping[str, Any]) -> Precision:
    bf16 = any(flag(_get(config, k)) for k in ("model.bf16", "optimizer.bf16")) or str(
        _get(config, "mixed_precision") or ""
    ).startswith("bf16")
    return Precision(
        bf16=bf16,
        grad_reduce_in_fp32=flag(_get(config, "ddp.grad_reduce_in_fp32", bf16)),
        distributed_optimizer=flag(_get(config, "ddp.use_distributed_optimizer"))
        or flag(_get(config, "optimizer.use_distributed_optimizer")),
    )


# ------------------------------------------------------------------------------------------ lengths

READ_CAPACITY = 1 << 20  # tokens: the pack size the lengths are read with (longer samples are refused)


def sample_lengths(config: Mapping[str, Any], data: Path | None = None) -> np.ndarray:
    """Runtime lengths of the training samples, read the way `packcfg analyze`/`pack` read them (the packing
    flow's public `tokenized_samples`); `data` replaces `dataset.dataset_root`."""
    from packcfg.packing import PackingError, tokenized_samples
    from packcfg.packing import PlanError as PackPlanError

    dataset = dict(config.get("dataset") or {})
    if data is not None:
        dataset["dataset_root"] = str(data)
    # read every sample whole: a pack far longer than any sample, so that none is cut or refused here
    specs = dataset.get("offline_packing_specs")
    specs = dict(specs) if isinstance(specs, Mapping) else {}
    specs.update(packed_sequence_size=READ_CAPACITY, pad_seq_to_mult=1)
    specs.setdefault("packed_train_data_path", "packed.parquet")  # named, never written: nothing is packed
    dataset["offline_packing_specs"] = specs
    cfg = {**config, "dataset": dataset}
    try:
        samples = tokenized_samples(cfg)
    except ImportError as exc:
        raise PlanError(
            f"reading the data's lengths needs {exc.name or 'an optional module'}: pip install 'packcfg[pack]'"
        ) from None
    except (PackingError, PackPlanError, OSError) as exc:
        where = f"{exc.filename}: " if isinstance(exc, OSError) and exc.filename else ""
        msg = f"{where}{exc.strerror or exc}" if isinstance(exc, OSError) else str(exc)
        raise PlanError(f"reading the data's lengths: {msg} (give the data with --data FILE)") from None
    if not samples:
        raise PlanError("the training data has no samples")
    return np.fromiter((len(ids) - 1 for ids, _ in samples), dtype=np.int64, count=len(samples))


class Profiles:
    """PackProfiles from the packing planner's public `plan()`, cached per (pack size, alignment)."""

    def __init__(self, lengths: np.ndarray, pairs: bool, seed: int, fixed_width: bool) -> None:
        self.lengths = lengths
        self.pairs = pairs
        self.seed = seed
        self.fixed_width = fixed_width
        self.get = cache(self._profile)

    def longest(self, align: int) -> int:
        longest = int(self.lengths.max())
        if self.pairs and len(self.lengths) > 1:  # a DPO pair shares one pack
            pairs = self.lengths[: len(self.lengths) // 2 * 2].reshape(-1, 2)
            aligned = -(-pairs // align) * align
            return int(aligned.sum(axis=1).max())
        return -(-longest // align) * align

    def _profile(self, pack_size: int, align: int) -> PackProfile | None:
        from packcfg.packing import PlanError as PackPlanError
        from packcfg.packing import plan

        if self.longest(align) > pack_size:
            return None
        try:
            p = plan(self.lengths, pack_size, align=align, seed=self.seed, pairs=True if self.pairs else None)
        except PackPlanError:
            return None
        aligned = -(-self.lengths // align) * align
        stats = p.stats
        return PackProfile(
            pack_size=pack_size,
            pad_seq_to_mult=align,
            packs=int(stats["packs"]),
            samples=len(self.lengths),
            real_tokens=int(self.lengths.sum()),
            aligned_tokens=int(aligned.sum()),
            sum_sq_lengths=float(np.square(aligned.astype(np.float64)).sum()),
            efficiency=float(stats["efficiency"]),
            fixed_width=self.fixed_width,
        )


# ------------------------------------------------------------------------------------------ search


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _powers_of_two(upto: int) -> list[int]:
    return [2**k for k in range(0, 20) if 2**k <= upto]


def _alignment(cp: int, tp: int, profile_name: str = "current") -> int:
    from packcfg.lint.facts import alignment_multiple  # the M the CP rules check (one definition)

    return alignment_multiple(cp, tp, tp > 1, profile_name) or 1


def _pack_sizes(request: Request, p0: int, longest: int) -> list[int]:
    if request.pack_sizes:
        return sorted(set(request.pack_sizes))
    start = 1 << max(0, (longest - 1).bit_length())
    sizes = {p0} | {s for s in (start * 2**k for k in range(8)) if s <= max(2 * p0, 2 * start)}
    return sorted(s for s in sizes if s >= longest)


def _recompute_overrides(config: Mapping[str, Any], recompute: str) -> dict[str, Any]:
    wanted = (
        {"granularity": "full", "method": "uniform", "num_layers": 1}
        if recompute == "full"
        else {"granularity": None, "method": None, "num_layers": None}
    )
    out = {}
    for key, value in wanted.items():
        dotted = f"model.recompute_{key}"
        if _get(config, dotted) != value:
            out[dotted] = value
    return out


def current_recompute(config: Mapping[str, Any]) -> str:
    return "full" if _get(config, "model.recompute_granularity") == "full" else "none"


def layout_overrides(config: Mapping[str, Any], layout: Layout, gpus_per_node: int) -> dict[str, Any]:
    """The dotted keys (and values) a layout sets, only those that differ from the config."""
    nodes = max(1, layout.gpus // gpus_per_node)
    wanted: dict[str, Any] = {
        "model.tensor_model_parallel_size": layout.tp,
        "model.context_parallel_size": layout.cp,
        "model.pipeline_model_parallel_size": layout.pp,
        "model.sequence_parallel": layout.sp,
        "model.seq_length": layout.pack_size,
        "dataset.seq_length": layout.pack_size,
        "dataset.offline_packing_specs.packed_sequence_size": layout.pack_size,
        "dataset.offline_packing_specs.pad_seq_to_mult": layout.pad_seq_to_mult,
        "train.micro_batch_size": layout.micro_batch_size,
        "train.global_batch_size": layout.global_batch_size,
        "launch.nodes": nodes,
        "launch.gpus_per_node": layout.gpus // nodes,
    }
    if layout.cp > 1:  # what CP fine-tuning needs (lint LS301, LS302)
        wanted["model.calculate_per_token_loss"] = True
        wanted["ddp.average_in_collective"] = False
    out = {k: v for k, v in wanted.items() if _get(config, k) != v}
    out.update(_recompute_overrides(config, layout.recompute))
    return out


def _lint_errors(files: Sequence[Path], overrides: Sequence[str]) -> list[str]:
    from packcfg.core.diagnostics import Severity
    from packcfg.lint.engine import lint_config

    return [d.code for d in lint_config(list(files), list(overrides)) if d.severity == Severity.ERROR]


def plan_config(
    files: Sequence[Path],
    overrides: Sequence[str] = (),
    request: Request | None = None,
    *,
    lengths: np.ndarray | None = None,
) -> PlanResult:
    """Plan for the experiment merged from `files` and `overrides` (as every packcfg command merges them)."""
    from packcfg.core.config import ConfigError, load_config

    request = request or Request()
    try:
        config = load_config(list(files), list(overrides))
    except ConfigError as exc:
        raise PlanError(str(exc)) from None
    if _get(config, "dataset.enable_offline_packing") is not True:
        raise PlanError(
            "dataset.enable_offline_packing: not true; packcfg plan plans offline packed fine-tuning"
        )
    if isinstance(config.get("peft"), Mapping) and config["peft"]:
        raise PlanError(
            "peft: packcfg plan models full-parameter fine-tuning (adapter training keeps gradients and "
            "optimizer state for the adapters only); plan without the peft section for the full model"
        )
    shape = shape_from_config(config)
    precision = precision_of(config)
    gpn = request.gpus_per_node or _pos_int(config, "launch.gpus_per_node", 8)
    gpus = request.gpus or _pos_int(config, "launch.nodes", 1) * _pos_int(config, "launch.gpus_per_node", gpn)
    if gpus > gpn and gpus % gpn:
        raise PlanError(f"--gpus {gpus} is not a whole number of nodes of {gpn} GPUs (--gpus-per-node)")
    hw = replace(request.hardware, gpus_per_node=gpn)
    if lengths is None:
        lengths = sample_lengths(config, request.data)
    p0 = _pos_int(config, "dataset.offline_packing_specs.packed_sequence_size", 0)
    m0 = _pos_int(config, "dataset.offline_packing_specs.pad_seq_to_mult", 1)
    g0 = _pos_int(config, "train.global_batch_size", 1)
    pairs = _get(config, "recipe.mode") == "dpo"
    fixed = flag(_get(config, "dataset.dataset_kwargs.pad_to_max_length"))
    seed = _get(config, "dataset.seed", 0) if isinstance(_get(config, "dataset.seed"), int) else 0
    profiles = Profiles(lengths, pairs, seed, fixed)
    base = profiles.get(p0, m0)
    if base is None and request.samples_per_step is None:
        raise PlanError(
            f"dataset.offline_packing_specs.packed_sequence_size {p0}: the longest sample "
            f"({profiles.longest(m0)} tokens) does not fit, so train.global_batch_size {g0} (packs) says no "
            "samples per step; give --samples-per-step N to plan larger packs"
        )
    target = request.samples_per_step or g0 * base.samples_per_pack  # type: ignore[union-attr]
    overlap = flag(_get(config, "ddp.overlap_grad_reduce"))

    rejected: Counter[str] = Counter()
    scored: list[tuple[Estimate, PackProfile]] = []
    smallest: Estimate | None = None
    tps = request.tp or tuple(d for d in _divisors(min(gpn, gpus)) if gpus % d == 0)
    cps = request.cp or tuple(_powers_of_two(gpus))
    pps = request.pp or tuple(_divisors(shape.num_layers))
    considered = 0
    for tp in tps:
        problems = shape.tp_problems(tp)
        if tp > gpn:
            problems.append(f"TP {tp} is larger than a node ({gpn} GPUs)")
        if problems:
            rejected[problems[0]] += 1
            continue
        for cp in cps:
            for pp in pps:
                if shape.num_layers % pp:
                    rejected[f"model.num_layers {shape.num_layers} not divisible by PP {pp}"] += 1
                    continue
                if gpus % (tp * cp * pp):
                    rejected[f"{gpus} GPUs not divisible by TP*CP*PP = {tp * cp * pp}"] += 1
                    continue
                dp = gpus // (tp * cp * pp)
                align = math.lcm(m0, _alignment(cp, tp))
                sizes = _pack_sizes(request, p0, profiles.longest(align))
                if not sizes:
                    rejected["no pack size holds the longest sample"] += 1
                for size in sizes:
                    if size % align or size % (2 * cp if cp > 1 else 1):
                        rejected[f"pack size {size} not a multiple of {align} (CP {cp}, TP {tp})"] += 1
                        continue
                    profile = profiles.get(size, align)
                    if profile is None:
                        rejected[f"pack size {size}: the longest sample does not fit"] += 1
                        continue
                    packs = max(dp, round(target / profile.samples_per_pack / dp) * dp)
                    for rc in request.recompute:
                        considered += 1
                        layout = Layout(tp, cp, pp, dp, size, align, packs, rc)
                        est = estimate(shape, layout, profile, precision, hw, overlap, reference=pairs)
                        if smallest is None or est.memory["total"] < smallest.memory["total"]:
                            smallest = est
                        if not est.fits:
                            rejected["does not fit in memory"] += 1
                            continue
                        scored.append((est, profile))
    result = PlanResult(shape, gpus, precision, hw, [], considered, rejected, len(lengths))
    if not scored:
        result.infeasible = _why_none(rejected, smallest, hw, gpus)
        return result
    # fastest first; equal speed: less memory, then fewer model-parallel ranks
    scored.sort(
        key=lambda e: (-e[0].tokens_per_second, e[0].memory["total"], e[0].layout.tp * e[0].layout.pp)
    )
    for est, profile in scored:
        over = layout_overrides(config, est.layout, gpn)
        errors = _lint_errors(files, [*overrides, *Proposal(0, est, profile, over).override_args()])
        if errors:
            rejected["lint: " + ", ".join(sorted(set(errors)))] += 1
            continue
        result.proposals.append(Proposal(len(result.proposals) + 1, est, profile, over))
        if len(result.proposals) >= request.top:
            break
    if not result.proposals:
        result.infeasible = _why_none(rejected, smallest, hw, gpus)
    return result


def _why_none(rejected: Counter[str], smallest: Estimate | None, hw: Hardware, gpus: int) -> str:
    """One line: the constraint that rules every layout out."""
    from packcfg.plan.estimate import GIB

    if smallest is not None and rejected.get("does not fit in memory"):
        lay = smallest.layout
        return (
            f"nothing fits in {hw.gpu_memory_bytes / GIB:g} GiB per GPU (less {hw.headroom:.0%} headroom) on "
            f"{gpus} GPUs: the smallest estimate is {smallest.memory['total'] / GIB:.1f} GiB "
            f"(TP {lay.tp}, CP {lay.cp}, PP {lay.pp}, pack {lay.pack_size}, recompute {lay.recompute}); "
            "add GPUs or use larger ones"
        )
    if not rejected:
        return "no layout to consider"
    reason, _ = rejected.most_common(1)[0]
    return f"no layout on {gpus} GPUs passes: {reason}"
