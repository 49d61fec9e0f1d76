"""demo.png: the loss curves of the packed and padded runs, the pack-fill histogram, the throughput."""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np


def pack_fills(packed_file: Path, pack_size: int) -> np.ndarray:
    """Fill of every pack in a packed Parquet, as a fraction of `pack_size`: runtime tokens (each sample
    trains on all its stored tokens but the last) over the pack size, as the planner counts them."""
    from packcfg.packing import read_packed

    fills = [
        (len(row["input_ids"]) - len(row["seq_start_id"])) / pack_size for row in read_packed(packed_file)
    ]
    return np.asarray(fills, dtype=np.float64)


def render_png(
    packed_rows: Sequence[dict[str, Any]],
    padded_rows: Sequence[dict[str, Any]],
    fills: np.ndarray,
    title: str,
    train: Mapping[str, Any],
) -> bytes:
    """Loss curves, pack-fill histogram and real tokens/s, as PNG bytes (the caller writes them atomically).

    `train` is summary.json's `train` section, the one source of the printed and plotted numbers. The
    throughput panel leads with the strongest honest baseline, length-grouped padding (its speedup in the
    title, its bar next to packed); the padded run (every row padded to seq_length, or to each
    micro-batch's longest sample) comes second, labelled as the worst case."""
    import matplotlib

    matplotlib.use("Agg")  # no display, no GUI toolkit import
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    fig, (ax1, ax2, ax3) = plt.subplots(1, 3, figsize=(15, 4.4), width_ratios=[1.2, 1.2, 0.8])
    try:
        for rows, label, style in (
            (packed_rows, "packed (THD)", {"color": "#4C72B0", "lw": 2.0}),
            # dashed on top: the curves coincide (same data), and the padded one must stay visible
            (padded_rows, "padded", {"color": "#C44E52", "lw": 1.2, "ls": "--"}),
        ):
            ax1.plot([r["step"] for r in rows], [r["loss"] for r in rows], label=label, **style)
        ax1.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax1.set_xlabel("optimizer step")
        ax1.set_ylabel("loss (per token)")
        ax1.set_title("loss: the same samples in both runs")
        ax1.legend()
        ax2.hist(100.0 * fills, bins=np.linspace(0, 100, 51), color="#55A868")
        ax2.set_yscale("log")  # the few underfilled packs must stay visible next to the many full ones
        ax2.set_xlabel("pack fill (% of pack size)")
        ax2.set_ylabel("packs (log)")
        ax2.set_title(f"pack fill: {len(fills):,} packs, mean {100.0 * fills.mean():.1f}%")
        names, rates, colors = throughput_bars(train)
        bars = ax3.bar(names, rates, color=colors)
        ax3.bar_label(bars, labels=[f"{r:,.0f}" for r in rates])
        ax3.margins(y=0.15)  # room for the bar labels
        ax3.set_ylabel("real tokens / s")
        ax3.tick_params(axis="x", labelsize=8)
        ax3.set_title(throughput_title(train), fontsize=10)
        fig.suptitle(title)
        fig.tight_layout()
        buffer = io.BytesIO()
        fig.savefig(buffer, dpi=110, format="png")
    finally:
        plt.close(fig)
    return buffer.getvalue()


def throughput_bars(train: Mapping[str, Any]) -> tuple[list[str], list[float], list[str]]:
    """The throughput bars, strongest baseline first: packed, length-grouped padding, then the padded run
    labelled as the worst case (names, real tokens/s, colours)."""
    worst = str(train["padded_layout"]).replace("rows padded to ", "padded to\n")
    return (
        ["packed", "length-grouped\npadding", f"worst case:\n{worst}"],
        [
            train["packed"]["tokens_per_s"],
            train["length_grouped"]["tokens_per_s"],
            train["padded"]["tokens_per_s"],
        ],
        ["#4C72B0", "#DD8452", "#C44E52"],
    )


def throughput_title(train: Mapping[str, Any]) -> str:
    """The throughput panel's title: the speedup against length-grouped padding first, the worst case
    second (the same numbers as the printed summary)."""
    return (
        f"throughput: packed {train['speedup_length_grouped']:.2f}x\nvs length-grouped padding\n"
        f"({train['speedup']:.2f}x vs worst case)"
    )
