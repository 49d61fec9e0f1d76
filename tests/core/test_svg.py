"""packcfg.core.svg: well-formed SVG whatever the text, marks where the data says, round ticks."""

from __future__ import annotations

from xml.etree import ElementTree

import numpy as np
import pytest

from packcfg.core import svg

NS = "{http://www.w3.org/2000/svg}"


def _parse(doc: str) -> ElementTree.Element:
    root = ElementTree.fromstring(doc)
    assert root.tag == f"{NS}svg"
    return root


def test_text_is_escaped_and_newlines_become_lines() -> None:
    title = "a <b> & 'c' \"d\"\nsecond line"
    root = _parse(
        svg.figure(
            [svg.bars(["x<y", "p&q"], [1.0, 2.0], ["red", "blue"], title=title, xlabel="", ylabel="")], title
        )
    )
    texts = ["".join(t.itertext()) for t in root.iter(f"{NS}text")]
    assert "a <b> & 'c' \"d\"second line" in texts
    assert {"x<y", "p&q"} <= set(texts)


def test_histogram_counts_every_value_and_draws_empty_bins_not_at_all() -> None:
    values = np.array([0, 1, 1, 9, 10])  # 10 sits on the last edge: counted, as NumPy counts it
    panel = svg.histogram(values, np.linspace(0, 10, 11), "green", title="t", xlabel="x", ylabel="y")
    root = _parse(svg.figure([panel], "h"))
    tips = [t.text for t in root.iter(f"{NS}title")]
    assert tips == ["1 in [0, 1]", "2 in [1, 2]", "2 in [9, 10]"]


def test_log_axis_keeps_a_single_count_visible() -> None:
    values = np.concatenate([np.full(5000, 99.5), [10.0]])
    panel = svg.histogram(
        values, np.linspace(0, 100, 51), "green", log_y=True, title="t", xlabel="x", ylabel="y"
    )
    root = _parse(svg.figure([panel], "h"))
    heights = {
        r.find(f"{NS}title").text: float(r.get("height"))
        for r in root.iter(f"{NS}rect")
        if r.find(f"{NS}title") is not None
    }
    assert heights["1 in [10, 12]"] > 10  # a bin of one is a visible bar on the log axis
    assert heights["5,000 in [98, 100]"] > 4 * heights["1 in [10, 12]"]


def test_bar_heights_are_proportional() -> None:
    root = _parse(
        svg.figure(
            [
                svg.bars(
                    ["a", "b", "c"], [300.0, 150.0, 30.0], ["r", "g", "b"], title="", xlabel="", ylabel=""
                )
            ],
            "",
        )
    )
    h = [float(r.get("height")) for r in root.iter(f"{NS}rect") if r.get("fill") in ("r", "g", "b")]
    assert h[1] / h[0] == pytest.approx(0.5, abs=0.005) and h[2] / h[0] == pytest.approx(0.1, abs=0.005)


def test_line_series_and_legend() -> None:
    panel = svg.line(
        [
            ("up", [1, 2, 3], [1.0, 2.0, 3.0], "blue", False),
            ("down", [1, 2, 3], [3.0, 2.0, 1.0], "red", True),
        ],
        title="t",
        xlabel="x",
        ylabel="y",
    )
    root = _parse(svg.figure([panel], ""))
    lines = root.findall(f".//{NS}polyline")
    assert len(lines) == 2 and lines[1].get("stroke-dasharray")
    first = [tuple(map(float, p.split(","))) for p in lines[0].get("points").split()]
    assert first[0][1] > first[1][1] > first[2][1]  # rising data: smaller y on screen
    assert {"up", "down"} <= {"".join(t.itertext()) for t in root.iter(f"{NS}text")}


@pytest.mark.parametrize(
    ("lo", "hi", "expected"),
    [
        (0, 100, [0, 20, 40, 60, 80, 100]),
        (0, 7, [0, 2, 4, 6]),
        (2.5, 4.9, [2.5, 3, 3.5, 4, 4.5]),
        (0.5, 1000, [0, 200, 400, 600, 800, 1000][1:]),
    ],
)
def test_ticks_are_round(lo, hi, expected) -> None:
    assert svg._ticks(lo, hi) == expected


def test_empty_and_flat_data_still_draw() -> None:
    _parse(
        svg.figure(
            [svg.histogram(np.zeros(0), np.linspace(0, 1, 5), "g", title="", xlabel="", ylabel="")], "e"
        )
    )
    _parse(
        svg.figure(
            [svg.line([("flat", [1, 1], [2.0, 2.0], "b", False)], title="", xlabel="", ylabel="")], "f"
        )
    )
