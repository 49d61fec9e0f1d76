"""Every shipped recipe lints clean: `packcfg lint recipes/` exits 0 with no errors (nor warnings)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from packcfg.cli import main

RECIPES = Path(__file__).resolve().parents[2] / "recipes"


def test_recipes_folder_lints_clean(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["lint", "--format", "json", str(RECIPES)])
    diagnostics = json.loads(capsys.readouterr().out)
    assert code == 0
    assert [d for d in diagnostics if d["severity"] == "error"] == []


@pytest.mark.parametrize("profile", ["current", "legacy"])
def test_recipes_are_strict_clean_in_both_profiles(profile: str, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["lint", "--strict", "--format", "json", "--profile", profile, str(RECIPES)])
    assert json.loads(capsys.readouterr().out) == []
    assert code == 0


def test_at_least_eight_recipes_with_recipe_and_launch() -> None:
    import yaml

    files = sorted(RECIPES.glob("*.yaml"))
    assert len(files) >= 8
    for path in files:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        assert "recipe" in data and "launch" in data, path.name
