"""demo.svg: the loss curves of the packed and padded runs, the pack-fill histogram, the throughput."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from packcfg.core import svg


def pack_fills(packed_file: Path, pack_size: int) -> np.ndarray:
    """Fill of every pack in a packed Parquet, as a fraction of `pack_size`: runtime tokens (each sample
    trains on all its stored tokens but the last) over the pack size, as the planner counts them."""
    from packcfg.packing import read_packed

    fills = [
        (len(row["input_ids"]) - len(row["seq_start_id"])) / pack_size for row in read_packed(packed_file)
    ]
    return np.asarray(fills, dtype=np.float64)


def render_svg(
    packed_rows: Sequence[dict[str, Any]],
    padded_rows: Sequence[dict[str, Any]],
    fills: np.ndarray,
    title: str,
    train: Mapping[str, Any],
) -> str:
    """Loss curves, pack-fill histogram and real tokens/s, as an SVG document (packcfg.core.svg; the caller
    writes it atomically).

    `train` is summary.json's `train` section, the one source of the printed and plotted numbers. The
    throughput panel leads with the strongest honest baseline, length-grouped padding (its speedup in the
    title, its bar next to packed); the padded run (every row padded to seq_length, or to each
    micro-batch's longest sample) comes second, labelled as the worst case."""
    from packcfg.packing.report import pack_fill_panel

    def curve(rows: Sequence[dict[str, Any]]) -> tuple[list[float], list[float]]:
        return [r["step"] for r in rows], [r["loss"] for r in rows]

    loss = svg.line(
        [
            ("packed (THD)", *curve(packed_rows), svg.PALETTE["blue"], False),
            # dashed on top: the curves coincide (same data), and the padded one must stay visible
            ("padded", *curve(padded_rows), svg.PALETTE["red"], True),
        ],
        title="loss: the same samples in both runs",
        xlabel="optimizer step",
        ylabel="loss (per token)",
    )
    fill = pack_fill_panel(
        100.0 * fills,
        f"pack fill: {len(fills):,} packs, mean {100.0 * fills.mean():.1f}%",
        "pack fill (% of pack size)",
    )
    names, rates, colours = throughput_bars(train)
    speed = svg.bars(
        names, rates, colours, title=throughput_title(train), xlabel="", ylabel="real tokens / s"
    )
    return svg.figure([loss, fill, speed], title)


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
        [svg.PALETTE["blue"], svg.PALETTE["orange"], svg.PALETTE["red"]],
    )


def throughput_title(train: Mapping[str, Any]) -> str:
    """The throughput panel's title: the speedup against length-grouped padding first, the worst case
    second (the same numbers as the printed summary)."""
    return (
        f"throughput: packed {train['speedup_length_grouped']:.2f}x\nvs length-grouped padding\n"
        f"({train['speedup']:.2f}x vs worst case)"
    )
