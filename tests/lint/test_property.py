"""Property test: random mutations of real recipes never crash lint, and every position is valid."""

from __future__ import annotations

import random
from pathlib import Path

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from packcfg.lint.engine import lint_text

RECIPES = sorted((Path(__file__).resolve().parents[2] / "recipes").glob("*.yaml"))
TEXTS = [p.read_text() for p in RECIPES]

VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.sampled_from([0, 1, -1, 2, 3, 4, 7, 8, 1024, 10**5000]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
    st.lists(st.integers(-3, 9), max_size=4),
    st.dictionaries(st.sampled_from(["a", "b", "_target_", "seq_length"]), st.integers(-2, 5), max_size=3),
)


def _paths(node, prefix=()):
    if isinstance(node, dict):
        for key, value in node.items():
            yield (*prefix, key)
            yield from _paths(value, (*prefix, key))


def _mutate_data(data: dict, rnd: random.Random, draw_value) -> dict:
    paths = list(_paths(data))
    for _ in range(rnd.randint(1, 6)):
        if not paths:
            break
        path = rnd.choice(paths)
        parent = data
        for key in path[:-1]:
            parent = parent.get(key) if isinstance(parent, dict) else None
        if not isinstance(parent, dict) or path[-1] not in parent:
            continue
        action = rnd.choice(["delete", "value", "rename"])
        if action == "delete":
            del parent[path[-1]]
        elif action == "value":
            parent[path[-1]] = draw_value()
        else:
            parent[path[-1] + rnd.choice(["_x", "s", ""])[:2]] = parent.pop(path[-1])
    return data


def _dump(data: dict) -> str:
    def huge(dumper, value):  # PyYAML cannot str() a 5000-digit int; write its digits ourselves
        return dumper.represent_scalar(
            "tag:yaml.org,2002:int", value.__str__() if value < 10**4000 else "9" * 5000
        )

    class Dumper(yaml.SafeDumper):
        pass

    Dumper.add_representer(int, huge)
    return yaml.dump(data, Dumper=Dumper, sort_keys=False)


def _check(text: str) -> None:
    n_lines = max(1, len(text.splitlines()))
    for profile in ("current", "legacy"):
        for d in lint_text(text, "m.yaml", profile=profile):
            assert d.file == "m.yaml"
            assert 1 <= d.line <= n_lines, (d, n_lines)
            assert d.column >= 1
            assert d.message and d.code


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(index=st.integers(0, max(len(TEXTS) - 1, 0)), seed=st.integers(0, 2**32), data=st.data())
def test_mutated_recipe_data_never_crashes(index: int, seed: int, data) -> None:
    rnd = random.Random(seed)
    config = yaml.safe_load(TEXTS[index])
    mutated = _mutate_data(config, rnd, lambda: data.draw(VALUES))
    _check(_dump(mutated))


@settings(max_examples=80, deadline=None)
@given(index=st.integers(0, max(len(TEXTS) - 1, 0)), seed=st.integers(0, 2**32))
def test_mutated_recipe_text_never_crashes(index: int, seed: int) -> None:
    """Line-level mutations: delete, duplicate, swap lines; the result may not even be YAML."""
    rnd = random.Random(seed)
    lines = TEXTS[index].splitlines(keepends=True)
    for _ in range(rnd.randint(1, 5)):
        i = rnd.randrange(len(lines))
        op = rnd.choice(["delete", "duplicate", "swap", "indent", "tab", "junk"])
        if op == "delete" and len(lines) > 1:
            del lines[i]
        elif op == "duplicate":
            lines.insert(i, lines[i])
        elif op == "swap":
            j = rnd.randrange(len(lines))
            lines[i], lines[j] = lines[j], lines[i]
        elif op == "indent":
            lines[i] = "  " + lines[i]
        elif op == "tab":
            lines[i] = "\t" + lines[i].lstrip(" ")
        else:
            lines[i] = rnd.choice([": : :\n", "- x\n", "[\n", "&a *a\n", "key: !!python/none x\n"])
    _check("".join(lines))
