"""Charts as SVG text: the few kinds packcfg draws (line, histogram, bar), side by side, with no plotting library.

`analyze --plot` and the demo's picture need three chart kinds and nothing else; matplotlib and its stack
(~76 MB installed: fonts, pillow, a C++ solver) cost more than everything they drew. SVG keeps the text as
text (searchable, diffable, crisp at any zoom) and opens in every browser.

    svg = figure([histogram(...), bars(...)], title="...")    # a str; write it atomically

Each panel is laid out in its own box; axes get round ticks (1, 2, 5 x 10^k) or powers of ten on a log axis.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from xml.sax.saxutils import escape

PALETTE = {"blue": "#4C72B0", "orange": "#DD8452", "green": "#55A868", "red": "#C44E52", "grey": "#8C8C8C"}

_W, _H = 420, 330  # one panel's box, in px
_M_LEFT, _M_RIGHT, _M_TOP, _M_BOTTOM = 62, 14, 54, 58  # the plot area's margins inside the box
_FONT = "font-family='DejaVu Sans, Helvetica, Arial, sans-serif'"


@dataclass
class Panel:
    """One chart: its title, axis labels and the SVG of its marks, drawn in data coordinates by `draw`."""

    title: str
    xlabel: str
    ylabel: str
    x_range: tuple[float, float]
    y_range: tuple[float, float]
    log_y: bool = False
    marks: list = field(default_factory=list)  # (kind, data) drawn once the box is known
    x_categories: Sequence[str] = ()
    width: int = _W


def line(series: Sequence[tuple[str, Sequence[float], Sequence[float], str, bool]], **labels: str) -> Panel:
    """Lines: (label, xs, ys, colour, dashed) per series, with a legend."""
    xs = [x for _, s, _, _, _ in series for x in s]
    ys = [y for _, _, s, _, _ in series for y in s]
    panel = Panel(x_range=_span(xs), y_range=_padded(_span(ys)), **labels)
    panel.marks = [("line", s) for s in series] + [("legend", [(s[0], s[3], s[4]) for s in series])]
    return panel


def histogram(
    values: Sequence[float],
    edges: Sequence[float],
    colour: str,
    log_y: bool = False,
    marker: tuple[float, str] | None = None,
    **labels: str,
) -> Panel:
    """Counts of `values` in the bins `edges` (right edge inclusive for the last bin, as NumPy counts them);
    `marker` (x, label) draws a dashed vertical line with a legend entry. A log axis keeps a bin of one
    visible next to bins of thousands."""
    counts = _bin_counts(values, edges)
    top = max(counts, default=0)
    y_range = (0.5, 10 ** math.ceil(math.log10(max(top, 2)))) if log_y else _padded((0.0, float(max(top, 1))))
    lo, hi = edges[0], edges[-1]
    if marker is not None:
        hi = max(hi, marker[0])
    panel = Panel(x_range=(lo, hi), y_range=y_range, log_y=log_y, **labels)
    panel.marks = [("bins", (edges, counts, colour))]
    if marker is not None:
        panel.marks += [("vline", marker), ("legend", [(marker[1], PALETTE["red"], True)])]
    return panel


def bars(names: Sequence[str], values: Sequence[float], colours: Sequence[str], **labels: str) -> Panel:
    """One bar per name (a name may hold newlines), its value printed above it."""
    panel = Panel(
        x_range=(0.0, float(len(names))),
        y_range=(0.0, max(values, default=1.0) * 1.18 or 1.0),
        x_categories=names,
        width=300,
        **labels,
    )
    panel.marks = [("bars", (values, colours))]
    return panel


def figure(panels: Sequence[Panel], title: str) -> str:
    """The panels side by side under a title, as an SVG document."""
    width = sum(p.width for p in panels)
    height = _H + 34
    out = [
        f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' "
        f"viewBox='0 0 {width} {height}' {_FONT} font-size='12'>",
        f"<rect width='{width}' height='{height}' fill='white'/>",
        _text(width / 2, 22, title, size=15, anchor="middle", weight="bold"),
    ]
    x0 = 0
    for p in panels:
        out.append(f"<g transform='translate({x0},34)'>")
        out.extend(_draw(p))
        out.append("</g>")
        x0 += p.width
    out.append("</svg>")
    return "\n".join(out) + "\n"


# ------------------------------------------------------------------------------------------------ drawing


def _draw(p: Panel) -> list[str]:
    left, top = _M_LEFT, _M_TOP
    right, bottom = p.width - _M_RIGHT, _H - _M_BOTTOM
    (x_lo, x_hi), (y_lo, y_hi) = p.x_range, p.y_range

    def sx(x: float) -> float:
        return left + (x - x_lo) / ((x_hi - x_lo) or 1.0) * (right - left)

    def sy(y: float) -> float:
        if p.log_y:
            y, lo, hi = math.log10(max(y, y_lo)), math.log10(y_lo), math.log10(y_hi)
        else:
            lo, hi = y_lo, y_hi
        return bottom - (y - lo) / ((hi - lo) or 1.0) * (bottom - top)

    out = [_text(p.width / 2, 18, p.title, size=12.5, anchor="middle")]
    # axes and ticks
    y_ticks = _log_ticks(y_lo, y_hi) if p.log_y else _ticks(y_lo, y_hi)
    for t in y_ticks:
        y = sy(t)
        out.append(f"<line x1='{left}' y1='{y:.1f}' x2='{right}' y2='{y:.1f}' stroke='#e6e6e6'/>")
        out.append(_text(left - 6, y + 4, _fmt_tick(t, p.log_y), anchor="end", size=11))
    if p.x_categories:
        step = (right - left) / len(p.x_categories)
        for i, name in enumerate(p.x_categories):
            out.append(_text(left + step * (i + 0.5), bottom + 16, name, anchor="middle", size=10.5))
    else:
        for t in _ticks(x_lo, x_hi):
            x = sx(t)
            out.append(f"<line x1='{x:.1f}' y1='{bottom}' x2='{x:.1f}' y2='{bottom + 4}' stroke='#333'/>")
            out.append(_text(x, bottom + 17, _fmt_tick(t, False), anchor="middle", size=11))
    out.append(
        f"<rect x='{left}' y='{top}' width='{right - left}' height='{bottom - top}' fill='none' stroke='#333'/>"
    )
    out.append(_text((left + right) / 2, _H - 14, p.xlabel, anchor="middle"))
    out.append(
        f"<text transform='translate(16,{(top + bottom) / 2:.1f}) rotate(-90)' text-anchor='middle'>"
        f"{escape(p.ylabel)}</text>"
    )
    for kind, data in p.marks:
        if kind == "line":
            label, xs, ys, colour, dashed = data
            pts = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in zip(xs, ys, strict=True))
            dash = " stroke-dasharray='6 4'" if dashed else ""
            width = 1.4 if dashed else 2.2
            out.append(
                f"<polyline points='{pts}' fill='none' stroke='{colour}' stroke-width='{width}'{dash}/>"
            )
        elif kind == "bins":
            edges, counts, colour = data
            for a, b, c in zip(edges[:-1], edges[1:], counts, strict=True):
                if c:
                    y = sy(c)
                    out.append(
                        f"<rect x='{sx(a):.1f}' y='{y:.1f}' width='{max(sx(b) - sx(a), 0.5):.1f}' "
                        f"height='{bottom - y:.1f}' fill='{colour}'><title>{c:,} in [{a:g}, {b:g}]</title></rect>"
                    )
        elif kind == "vline":
            x = sx(data[0])
            out.append(
                f"<line x1='{x:.1f}' y1='{top}' x2='{x:.1f}' y2='{bottom}' stroke='{PALETTE['red']}' "
                "stroke-width='1.5' stroke-dasharray='6 4'/>"
            )
        elif kind == "bars":
            values, colours = data
            step = (right - left) / len(values)
            for i, (v, colour) in enumerate(zip(values, colours, strict=True)):
                x, y = left + step * (i + 0.15), sy(v)
                out.append(
                    f"<rect x='{x:.1f}' y='{y:.1f}' width='{step * 0.7:.1f}' height='{bottom - y:.1f}' "
                    f"fill='{colour}'/>"
                )
                out.append(_text(x + step * 0.35, y - 5, f"{v:,.0f}", anchor="middle", size=11))
        elif kind == "legend":
            for i, (label, colour, dashed) in enumerate(data):
                y = top + 14 + 16 * i
                dash = " stroke-dasharray='6 4'" if dashed else ""
                out.append(
                    f"<line x1='{right - 150}' y1='{y - 4}' x2='{right - 126}' y2='{y - 4}' stroke='{colour}' "
                    f"stroke-width='2'{dash}/>"
                )
                out.append(_text(right - 120, y, label, size=11))
    return out


def _text(x: float, y: float, s: str, size: float = 12, anchor: str = "start", weight: str = "normal") -> str:
    """A text element; each newline in `s` starts a line below the first."""
    lines = s.split("\n")
    head = f"<text x='{x:.1f}' y='{y:.1f}' font-size='{size}' text-anchor='{anchor}'"
    if weight != "normal":
        head += f" font-weight='{weight}'"
    if len(lines) == 1:
        return f"{head}>{escape(s)}</text>"
    spans = "".join(
        f"<tspan x='{x:.1f}' dy='{0 if i == 0 else size * 1.2:.1f}'>{escape(line)}</tspan>"
        for i, line in enumerate(lines)
    )
    return f"{head}>{spans}</text>"


# ------------------------------------------------------------------------------------------------- scales


def _span(values: Sequence[float]) -> tuple[float, float]:
    if not values:
        return (0.0, 1.0)
    lo, hi = float(min(values)), float(max(values))
    return (lo, hi) if hi > lo else (lo - 0.5, hi + 0.5)


def _padded(span: tuple[float, float]) -> tuple[float, float]:
    lo, hi = span
    pad = (hi - lo) * 0.06
    return (lo - pad if lo != 0 else 0.0, hi + pad)


def _ticks(lo: float, hi: float, target: int = 5) -> list[float]:
    """Round ticks (1, 2 or 5 x 10^k apart) inside [lo, hi]."""
    if hi <= lo:
        return [lo]
    raw = (hi - lo) / target
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)
    first = math.ceil(lo / step) * step
    n = int(math.floor((hi - first) / step + 1e-9)) + 1
    return [round(first + i * step, 12) for i in range(n)]


def _log_ticks(lo: float, hi: float) -> list[float]:
    return [10.0**k for k in range(math.ceil(math.log10(lo)), math.floor(math.log10(hi)) + 1)]


def _fmt_tick(t: float, log: bool) -> str:
    if log or (t == int(t) and abs(t) >= 1):
        return f"{int(t):,}"
    return f"{t:g}"


def _bin_counts(values: Sequence[float], edges: Sequence[float]) -> list[int]:
    import numpy as np

    counts, _ = np.histogram(np.asarray(values, dtype=np.float64), bins=np.asarray(edges, dtype=np.float64))
    return [int(c) for c in counts]
