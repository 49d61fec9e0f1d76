"""The positional YAML loader: data, 1-based key positions, and file problems as findings."""

from __future__ import annotations

import math

import pytest

from packcfg.core.yamlsource import MAX_ALIAS_EXPANSION, load_bytes, load_file, load_text


def test_positions_of_keys_and_list_items_are_one_based() -> None:
    doc = load_text("model:\n  seq_length: 512\n  layers:\n    - 1\n    - {a: 2}\n", "x.yaml")
    assert doc.data == {"model": {"seq_length": 512, "layers": [1, {"a": 2}]}}
    model = doc.positions["model"]
    assert (model.line, model.column) == (1, 1)
    seq = model.children["seq_length"]
    assert (seq.file, seq.line, seq.column) == ("x.yaml", 2, 3)
    item = model.children["layers"].children["1"]
    assert (item.line, item.column) == (5, 7)
    assert (item.children["a"].line, item.children["a"].column) == (5, 8)


def test_recipe_loads_like_safe_load(tiny_recipe) -> None:
    import yaml

    doc = load_file(tiny_recipe)
    assert doc.problems == []
    assert doc.data == yaml.safe_load(tiny_recipe.read_text())


def test_keys_keep_their_spelling() -> None:
    # YAML 1.1 would read `on:` as True; a config key is a name.
    assert load_text("on: 1\n'2': x\n").data == {"on": 1, "2": "x"}


def test_merge_keys_and_aliases_expand() -> None:
    doc = load_text("base: &b {x: 1, y: 2}\nm:\n  <<: *b\n  y: 3\nl: &l [1, 2]\nk: *l\n")
    assert doc.problems == []
    assert doc.data["m"] == {"x": 1, "y": 3}
    assert doc.data["k"] == [1, 2]
    assert doc.positions["m"].children["y"].line == 4


@pytest.mark.parametrize(
    ("text", "line", "column", "words"),
    [
        ("a: 1\na: 2\n", 2, 1, "duplicate key 'a'"),
        ("a:\n\tb: 1\n", 2, 1, "tab"),
        ("a: [\n", 1, 5, "invalid YAML"),
        ("- 1\n- 2\n", 1, 1, "top level must be a mapping"),
        ("just a string\n", 1, 1, "top level must be a mapping"),
        ("a: 1\n---\nb: 2\n", 3, 1, "more than one YAML document"),
        ("a: b: c\n", 1, 5, "invalid YAML"),
        ("x: \x07\n", 1, 4, "invalid character"),
        ("? [a]\n: 1\n", 1, 3, "mapping key"),
    ],
)
def test_sc001_problems(text: str, line: int, column: int, words: str) -> None:
    doc = load_text(text, "f.yaml")
    problems = [p for p in doc.problems if p.code == "SC001"]
    assert problems, doc.problems
    assert (problems[0].line, problems[0].column) == (line, column)
    assert words in problems[0].message


def test_duplicate_key_is_not_fatal_and_last_wins() -> None:
    doc = load_text("train:\n  micro_batch_size: 1\n  micro_batch_size: 2\n")
    assert doc.ok and doc.data == {"train": {"micro_batch_size": 2}}
    assert "first set on line 2" in doc.problems[0].message


def test_invalid_utf8_points_at_the_byte() -> None:
    doc = load_bytes("a: 1\nb: é\xff".encode("utf-8", "surrogateescape")[:-2] + b"\xff\n", "f.yaml")
    (problem,) = doc.problems
    assert problem.code == "SC001" and "UTF-8" in problem.message
    assert problem.line == 2


def test_bom_is_accepted() -> None:
    assert load_bytes(b"\xef\xbb\xbfa: 1\n", "f").data == {"a": 1}


@pytest.mark.parametrize("text", ["", "# only a comment\n", "\n\n"])
def test_empty_document_is_empty_data(text: str) -> None:
    doc = load_text(text)
    assert doc.ok and doc.data == {} and doc.problems == []


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("a: !!python/object/apply:os.system [ls]\n", "python tag"),
        ("a: !!python/name:os.system\n", "python tag"),
        ("a: !custom 3\n", "non-standard YAML tag !custom"),
        ("a: !!binary aGVsbG8=\n", "non-standard YAML tag !!binary"),
        ("a: &a [*a]\n", "recursive alias"),
        ("a: " + "[" * 300 + "]" * 300 + "\n", "nesting deeper"),
    ],
)
def test_sc004_problems(text: str, words: str) -> None:
    doc = load_text(text)
    assert not doc.ok
    assert doc.problems[-1].code == "SC004"
    assert words in doc.problems[-1].message


def test_alias_bomb_is_stopped_at_the_top_level_key() -> None:
    lines = ['a: &a ["x","x","x","x","x","x","x","x","x","x"]']
    for prev, name in zip("abcdefgh", "bcdefghi", strict=True):
        lines.append(f"{name}: &{name} [{', '.join(['*' + prev] * 10)}]")
    doc = load_text("\n".join(lines) + "\n")
    assert not doc.ok
    problem = doc.problems[-1]
    assert problem.code == "SC004" and "alias bomb" in problem.message
    assert problem.line > 1 and problem.column == 1
    assert MAX_ALIAS_EXPANSION < 10**8  # what the bomb would expand to


def test_gigantic_integer_becomes_infinity_with_sc002() -> None:
    doc = load_text(f"train:\n  micro_batch_size: {'9' * 10000}\n  x: -{'1' * 5000}\n")
    assert doc.ok
    assert doc.data["train"]["micro_batch_size"] == math.inf
    assert doc.data["train"]["x"] == -math.inf
    assert [p.code for p in doc.problems] == ["SC002", "SC002"]


def test_large_but_convertible_numbers_stay_exact() -> None:
    doc = load_text(f"a: {'9' * 400}\nb: 1.0e+400\n")
    assert doc.data["a"] == int("9" * 400)
    assert doc.data["b"] == math.inf
