"""`[tool.packcfg]` / `packcfg.toml` settings: discovery, validation, and CLI precedence."""

from __future__ import annotations

from pathlib import Path

import pytest

from packcfg.core.diagnostics import Severity
from packcfg.lint.settings import Settings, SettingsError, load_settings, parse_settings

KNOWN = ["SC001", "SC004", "PK110", "PK111", "DS701", "DS702"]


def test_pyproject_table_is_found_upward(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(
        '[tool.packcfg]\nselect = ["PK", "DS7"]\nignore = ["DS702"]\nprofile = "legacy"\n'
        '[tool.packcfg.severity]\nPK110 = "warning"\n'
    )
    deep = tmp_path / "a" / "b"
    deep.mkdir(parents=True)
    settings = load_settings(deep / "x.yaml", known_codes=KNOWN)
    assert settings.select == ("PK", "DS7")
    assert settings.ignore == ("DS702",)
    assert settings.profile == "legacy"
    assert settings.severity == {"PK110": Severity.WARNING}
    assert settings.source == tmp_path / "pyproject.toml"


def test_pyproject_without_table_does_not_stop_the_search(tmp_path: Path) -> None:
    (tmp_path / "packcfg.toml").write_text('ignore = ["SC"]\n')
    inner = tmp_path / "inner"
    inner.mkdir()
    (inner / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    assert load_settings(inner, known_codes=KNOWN).ignore == ("SC",)


def test_packcfg_toml_wins_in_the_same_folder(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[tool.packcfg]\nprofile = "legacy"\n')
    (tmp_path / "packcfg.toml").write_text('profile = "current"\n')
    assert load_settings(tmp_path).profile == "current"


def test_no_settings_file_gives_defaults(tmp_path: Path) -> None:
    if any(
        (p / n).exists() for p in (tmp_path, *tmp_path.parents) for n in ("pyproject.toml", "packcfg.toml")
    ):
        pytest.skip("a settings file above the temporary folder")
    assert load_settings(tmp_path) == Settings()


@pytest.mark.parametrize(
    ("table", "words"),
    [
        ({"selec": ["PK"]}, "unknown setting 'selec'"),
        ({"select": ["XX"]}, "unknown rule code or prefix 'XX'"),
        ({"ignore": 3}, "expected a list of rule codes"),
        ({"profile": "old"}, "profile must be one of"),
        ({"severity": {"PK110": "fatal"}}, 'expected "error", "warning" or "info"'),
        ({"severity": {"ZZ999": "error"}}, "unknown rule code 'ZZ999'"),
        ({"severity": "x"}, "severity must be a table"),
    ],
)
def test_bad_settings_are_one_line_errors(table: dict, words: str) -> None:
    with pytest.raises(SettingsError, match=None) as info:
        parse_settings(table, "pyproject.toml", KNOWN)
    assert words in str(info.value)
    assert "\n" not in str(info.value) and str(info.value).startswith("pyproject.toml")


def test_broken_toml_is_a_settings_error(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text("[tool.packcfg\n")
    with pytest.raises(SettingsError, match="cannot read settings"):
        load_settings(tmp_path)


def test_cli_flags_replace_file_values() -> None:
    base = Settings(select=("PK",), ignore=("PK111",), profile="legacy")
    out = base.with_cli(select=["DS"], profile="current", known_codes=KNOWN)
    assert out.select == ("DS",) and out.ignore == ("PK111",) and out.profile == "current"
    with pytest.raises(SettingsError):
        base.with_cli(ignore=["NOPE"], known_codes=KNOWN)


@pytest.mark.parametrize(
    ("select", "ignore", "code", "enabled"),
    [
        (None, (), "PK110", True),
        (None, ("PK",), "PK110", False),
        (("PK110",), ("PK",), "PK110", True),  # the more specific select wins
        (("PK",), ("PK110",), "PK110", False),
        (("PK",), ("PK",), "PK110", False),  # a tie: ignore wins
        (("DS",), (), "PK110", False),
        (("",), (), "PK110", True),  # ALL
    ],
)
def test_longest_prefix_decides(select, ignore, code, enabled) -> None:
    assert Settings(select=select, ignore=ignore).enabled(code) is enabled
