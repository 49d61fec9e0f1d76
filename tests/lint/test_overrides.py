"""Merging `-c` files and `-o` overrides with provenance: every key points at what last set it."""

from __future__ import annotations

from pathlib import Path

import pytest

from packcfg.core.config import ConfigError, deep_merge, load_config, load_located, parse_override


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_override_file_sets_position_of_what_it_changed(tmp_path: Path) -> None:
    base = _write(
        tmp_path, "base.yaml", "train:\n  micro_batch_size: 4\n  global_batch_size: 8\nmodel:\n  x: 1\n"
    )
    over = _write(tmp_path, "over.yaml", "# tweak\ntrain:\n  micro_batch_size: 1\n")
    located = load_located([base, over])
    assert located.data["train"] == {"micro_batch_size": 1, "global_batch_size": 8}
    mbs = located.sources.position(("train", "micro_batch_size"))
    assert (mbs.file, mbs.line, mbs.column) == (str(over), 3, 3)
    gbs = located.sources.position(("train", "global_batch_size"))
    assert (gbs.file, gbs.line) == (str(base), 3)
    # the section was last named by the override file
    assert located.sources.position(("train",)).file == str(over)
    assert located.sources.position(("model", "x")).file == str(base)


def test_replacing_a_section_drops_stale_positions(tmp_path: Path) -> None:
    base = _write(tmp_path, "base.yaml", "dataset:\n  specs:\n    a: 1\n    b: 2\n")
    over = _write(tmp_path, "over.yaml", "dataset:\n  specs: null\n")
    located = load_located([base, over])
    assert located.data["dataset"]["specs"] is None
    # `a` is gone: its position falls back to the nearest present parent, set by the override file
    pos = located.sources.position(("dataset", "specs", "a"))
    assert (pos.file, pos.line) == (str(over), 2)


def test_dotted_override_has_a_pseudo_position(tmp_path: Path) -> None:
    base = _write(tmp_path, "base.yaml", "train:\n  micro_batch_size: 4\n")
    located = load_located([base], ["train.micro_batch_size=1", "model.new.deep=[1, 2]"])
    assert located.data["train"]["micro_batch_size"] == 1
    assert located.data["model"] == {"new": {"deep": [1, 2]}}
    pos = located.sources.position(("train", "micro_batch_size"))
    assert (pos.file, pos.line, pos.column) == ("train.micro_batch_size=1 (command line)", 1, 1)
    assert (
        located.sources.position(("model", "new", "deep", "1")).file == "model.new.deep=[1, 2] (command line)"
    )
    # the loaded document's own tree is not changed by the override
    assert located.documents[0].positions["train"].children["micro_batch_size"].line == 2


def test_missing_key_points_at_nearest_section_or_first_line(tmp_path: Path) -> None:
    base = _write(tmp_path, "base.yaml", "# header\n\ntrain:\n  micro_batch_size: 4\n")
    located = load_located([base])
    assert located.sources.position(("train", "nope", "deeper")).line == 3
    top = located.sources.position(("nothing", "here"))
    assert (top.file, top.line, top.column) == (str(base), 1, 1)
    assert located.sources.exact(("train", "nope")) is None


def test_load_config_keeps_plain_behaviour(tmp_path: Path) -> None:
    base = _write(tmp_path, "base.yaml", "a:\n  b: 1\n  c: [1, 2]\n")
    over = _write(tmp_path, "over.yaml", "a:\n  c: [3]\n")
    assert load_config([base, over], ["a.d=x"]) == {"a": {"b": 1, "c": [3], "d": "x"}}


def test_load_config_raises_with_file_line_and_code(tmp_path: Path) -> None:
    bad = _write(tmp_path, "bad.yaml", "a: [\n")
    with pytest.raises(ConfigError, match=r"bad\.yaml:1:5: SC001"):
        load_config([bad])
    with pytest.raises(ConfigError, match="no such file"):
        load_config([tmp_path / "missing.yaml"])


@pytest.mark.parametrize("text", ["noequals", "=1", "a..b=1", "a.=1"])
def test_bad_override_is_config_error(text: str) -> None:
    with pytest.raises(ConfigError):
        parse_override(text)


def test_override_values_follow_hydra() -> None:
    assert parse_override("a.b=1") == (("a", "b"), 1)
    assert parse_override("a=true") == (("a",), True)
    assert parse_override("a=[1, x]") == (("a",), [1, "x"])
    assert parse_override("a=") == (("a",), "")  # Hydra: `key=` is the empty string
    assert parse_override("a=null") == (("a",), None)
    assert parse_override("a=1e-4") == (("a",), 1e-4)
    with pytest.raises(ConfigError):
        parse_override("a=" + "9" * 5000)  # too long to convert: an error, not a traceback


def test_deep_merge_without_positions_is_the_plain_merge() -> None:
    base = {"a": {"b": 1, "l": [1]}, "x": 1}
    update = {"a": {"l": [2]}, "x": {"y": 2}}
    out = deep_merge(base, update)
    assert out == {"a": {"b": 1, "l": [2]}, "x": {"y": 2}}
    assert base == {"a": {"b": 1, "l": [1]}, "x": 1}  # inputs untouched
    out["a"]["l"].append(3)
    assert update["a"]["l"] == [2]
