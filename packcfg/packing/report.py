"""Render plan stats: an aligned text table, JSON, and a PNG (length histogram and pack fill)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from packcfg.core.atomic import atomic_path
from packcfg.packing.planner import PackPlan

if TYPE_CHECKING:
    from packcfg.core.svg import Panel


def _fmt_int(v: int) -> str:
    return f"{v:,}"


def stats_rows(s: dict[str, Any]) -> list[tuple[str, str]]:
    """The rows `packcfg analyze` prints, in reading order."""
    over = s["oversize"]
    adv = s["advice"]
    packed_gbs = adv.get("packed_global_batch_size")
    rows = [
        ("algorithm", str(s["algorithm"])),
        ("capacity (pack_size)", _fmt_int(s["capacity"])),
        ("align (pad_seq_to_mult)", str(s["align"])),
        ("samples", f"{_fmt_int(s['samples'])} ({_fmt_int(s['samples_packed'])} packed)"),
        ("mean / max sample length", f"{s['mean_sample_length']:.1f} / {_fmt_int(s['max_sample_length'])}"),
        ("packs", _fmt_int(s["packs"])),
        ("lower bound", _fmt_int(s["lower_bound"])),
        ("gap to lower bound", f"{_fmt_int(s['gap_to_lower_bound'])} ({s['gap_to_lower_bound_pct']:.4f}%)"),
        *(
            [
                (
                    "lower bound with max_per_pack",
                    f"{_fmt_int(s['lower_bound_max_per_pack'])} "
                    f"(gap {_fmt_int(s['gap_to_lower_bound_max_per_pack'])})",
                )
            ]
            if "lower_bound_max_per_pack" in s
            else []
        ),
        ("efficiency", f"{100 * s['efficiency']:.2f}%"),
        ("padding tokens", _fmt_int(s["padding_tokens"])),
        ("  pack-tail (bin) waste", _fmt_int(s["bin_waste_tokens"])),
        ("  alignment waste", _fmt_int(s["alignment_waste_tokens"])),
        ("packing factor (samples/pack)", f"{s['packing_factor']:.2f}"),
        ("max samples per pack", str(s["max_samples_per_pack"])),
        ("min / max pack length", f"{_fmt_int(s['min_pack_length'])} / {_fmt_int(s['max_pack_length'])}"),
        (
            f"oversize ({over['policy']})",
            f"{over['count']} samples; truncated tokens {over['truncated_tokens']}, "
            f"split pieces {over['split_pieces']}, dropped {over['dropped']}",
        ),
        ("padded baseline efficiency", f"{100 * adv['padded_baseline_efficiency']:.2f}%"),
        ("worth packing", f"{'yes' if adv['worth_packing'] else 'no'}: {adv['reason']}"),
    ]
    if adv.get("config_packed_global_batch_size") is not None:
        rows.append(
            (
                "global batch size",
                f"{adv['config_packed_global_batch_size']} packs per step (the config already packs): about "
                f"{adv['samples_per_step']:g} samples per step at {s['packing_factor']:.2f} samples per pack",
            )
        )
    elif packed_gbs is not None:
        rows.append(
            (
                "global batch size",
                f"unpacked {adv['unpacked_global_batch_size']} -> packed {packed_gbs} "
                f"(= unpacked / {s['packing_factor']:.2f} samples per pack)",
            )
        )
    return rows


def format_table(rows: list[tuple[str, str]]) -> str:
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


def format_comparison(all_stats: list[dict[str, Any]], times: list[float]) -> str:
    """One line per algorithm, columns aligned."""
    header = ("algorithm", "packs", "lower bound", "gap", "efficiency", "max/pack", "time")
    body = [
        (
            s["algorithm"],
            _fmt_int(s["packs"]),
            _fmt_int(s["lower_bound"]),
            f"{s['gap_to_lower_bound']} ({s['gap_to_lower_bound_pct']:.3f}%)",
            f"{100 * s['efficiency']:.2f}%",
            str(s["max_samples_per_pack"]),
            f"{t:.3f}s",
        )
        for s, t in zip(all_stats, times, strict=True)
    ]
    table = [header, *body]
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    lines = [
        "  ".join(
            c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True))
        )
        for r in table
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def to_json(obj: Any) -> str:
    return json.dumps(obj, indent=2, default=lambda o: o.item() if hasattr(o, "item") else str(o))


def write_plot(
    path: Path, lengths: np.ndarray, p: PackPlan, title: str = "", inputs: Sequence[Path | None] = ()
) -> None:
    """Two panels, the sample length histogram and the pack fill histogram, as SVG (packcfg.core.svg);
    written atomically, never over one of `inputs`, a special file or a symlink."""
    from packcfg.core import svg

    fills = p.pack_lengths() / p.capacity * 100.0
    s = p.stats
    top = float(max(int(lengths.max()) if len(lengths) else 1, 1))
    lengths_panel = svg.histogram(
        lengths,
        np.linspace(0.0, top, min(100, max(10, int(np.sqrt(len(lengths))))) + 1),
        svg.PALETTE["blue"],
        marker=(float(p.capacity), f"capacity {p.capacity}"),
        title=f"sample lengths (n={len(lengths):,}, mean {lengths.mean():.0f})",
        xlabel="sample runtime length (tokens)",
        ylabel="samples",
    )
    fill_panel = pack_fill_panel(
        fills,
        f"pack fill: {s['packs']:,} packs (LB {s['lower_bound']:,}), efficiency {100 * s['efficiency']:.2f}%",
        "pack fill (% of capacity)",
    )
    doc = svg.figure(
        [lengths_panel, fill_panel],
        title or f"packcfg analyze: {p.algorithm}, capacity {p.capacity}, align {p.align}",
    )
    with atomic_path(path, inputs=inputs, what="--plot") as tmp:
        tmp.write_text(doc, encoding="utf-8")


def pack_fill_panel(fills_percent: np.ndarray, title: str, xlabel: str) -> Panel:
    """The pack-fill histogram of `analyze --plot` and the demo: 2% bins on a log axis, so
    that a handful of underfilled packs stays visible next to thousands of full ones."""
    from packcfg.core import svg

    return svg.histogram(
        fills_percent,
        np.linspace(0.0, 100.0, 51),
        svg.PALETTE["green"],
        log_y=True,
        title=title,
        xlabel=xlabel,
        ylabel="packs (log)",
    )
