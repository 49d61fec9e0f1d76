"""One meaning per flag across commands (issue 24 item 5): `--out DIR` is a folder wherever a command writes
one, `--output FILE` a report file, `-c FILE` a YAML merged over the config in every command that reads one;
each deprecated spelling still works, warned once per invocation in one stderr line naming the new one."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from packcfg.cli import COMMANDS, build_parser, main
from packcfg.core.cli_args import start_invocation, warn_deprecated

CONFIG_COMMANDS = ("lint", "analyze", "pack", "verify", "train", "export-hf", "render", "launch", "demo")
OUT_COMMANDS = ("render", "launch", "train", "pack", "demo", "export-hf")


def _parse(argv: list[str]) -> argparse.Namespace:
    return build_parser(only=argv[0]).parse_args(argv)


def _actions(command: str) -> dict[str, argparse.Action]:
    parser = build_parser(only=command)
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return {flag: a for a in sub.choices[command]._actions for flag in a.option_strings}


# (old spelling, same thing in the new spelling, the attribute both set, its value, the new spelling named)
ALIASES = [
    (["render", "c.yaml", "--output", "B"], ["render", "c.yaml", "--out", "B"], "out_dir", "B", "--out DIR"),
    (["render", "c.yaml", "-o", "B"], ["render", "c.yaml", "--out", "B"], "out_dir", "B", "`--out DIR`"),
    (["launch", "c.yaml", "--bundle-dir", "B"], ["launch", "c.yaml", "--out", "B"], "bundle_dir", "B", "--out DIR"),
    (["train", "c.yaml", "--output-dir", "B"], ["train", "c.yaml", "--out", "B"], "output_dir", "B", "--out DIR"),
    (["demo", "--output-dir", "B"], ["demo", "--out", "B"], "output_dir", Path("B"), "--out DIR"),
    (["lint", "c.yaml", "--output-format", "json"], ["lint", "c.yaml", "--format", "json"], "format", "json", "--format"),
    (["lint", "c.yaml", "--override", "a.b=1"], ["lint", "c.yaml", "--set", "a.b=1"], "overrides", ["a.b=1"], "--set KEY=VALUE"),
    (["train", "c.yaml", "--override", "a.b=1"], ["train", "c.yaml", "-o", "a.b=1"], "overrides", ["a.b=1"], "--set KEY=VALUE"),
    (["train", "c.yaml", "--config-file", "x.yaml"], ["train", "c.yaml", "-c", "x.yaml"], "config_files", ["x.yaml"], "-c FILE"),
    (["export-hf", "c.yaml", "--out", "H", "--config-file", "x.yaml"], ["export-hf", "c.yaml", "--out", "H", "-c", "x.yaml"], "config_files", ["x.yaml"], "-c FILE"),
    (["pack", "c.yaml", "--out", "p.parquet"], ["pack", "c.yaml", "--parquet", "p.parquet"], "parquet", Path("p.parquet"), "`--parquet FILE.parquet`"),
]  # fmt: skip


@pytest.mark.parametrize(("old", "new", "dest", "value", "named"), ALIASES, ids=lambda v: " ".join(v) if isinstance(v, list) else None)  # fmt: skip
def test_deprecated_spelling_works_and_is_warned_once(old, new, dest, value, named, capsys) -> None:
    start_invocation()
    assert getattr(_parse(new), dest) == value
    assert capsys.readouterr().err == ""  # the new spelling: no warning
    start_invocation()
    twice = old + old[-2:] if dest not in ("overrides", "config_files") else old
    assert getattr(_parse(twice), dest) == value
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("packcfg: warning: ") and "is deprecated" in err, err
    assert f"use {named}" in err and "CHANGELOG.md" in err


def test_each_invocation_warns_again_and_ranks_stay_quiet(capsys, monkeypatch) -> None:
    for _ in range(2):  # main() starts a new invocation each time
        start_invocation()
        warn_deprecated("--old", "--new")
        warn_deprecated("--old", "--new")
        assert capsys.readouterr().err.count("--old is deprecated") == 1
    start_invocation()
    monkeypatch.setenv("RANK", "1")  # a rank `train` started itself: its parent already said it
    warn_deprecated("--old", "--new")
    assert capsys.readouterr().err == ""


def test_main_warns_once_per_command(tmp_path: Path, capsys) -> None:
    case = Path(__file__).parents[1] / "cases" / "PK110_offline_mbs2.yaml"
    for _ in range(2):
        assert main(["lint", str(case), "--output-format", "json", "--output-format", "json"]) == 1
        out, err = capsys.readouterr()
        assert json.loads(out)[0]["code"] == "PK110"
        assert err == "packcfg: warning: --output-format is deprecated, use --format (see CHANGELOG.md)\n"


@pytest.mark.parametrize("command", OUT_COMMANDS)
def test_out_is_a_folder_everywhere(command: str) -> None:
    action = _actions(command)["--out"]
    assert action.metavar == "DIR" and "folder" in (action.help or "")


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_output_is_only_ever_a_file(command: str) -> None:
    action = _actions(command).get("--output")
    if action is None:
        return
    if action.help == argparse.SUPPRESS:  # render's deprecated spelling of --out
        assert command == "render"
    else:
        assert action.metavar == "FILE", command


@pytest.mark.parametrize("command", CONFIG_COMMANDS)
def test_dash_c_adds_a_file_in_every_command(command: str) -> None:
    first = [] if command == "demo" else ["c.yaml"]
    extra = ["--out", "H"] if command == "export-hf" else []
    args = _parse([command, *first, *extra, "-c", "x.yaml", "-c", "y.yaml"])
    assert args.config_files == ["x.yaml", "y.yaml"]


def test_demo_config_is_positional_and_dash_c_merges(capsys) -> None:
    from packcfg.demo.commands.demo import config_arguments

    start_invocation()
    assert config_arguments(_parse(["demo", "r.yaml", "-c", "x.yaml", "train.train_iters=2"])) == (
        Path("r.yaml"), [Path("x.yaml")], ["train.train_iters=2"])  # fmt: skip
    assert config_arguments(_parse(["demo", "train.train_iters=2"])) == (None, [], ["train.train_iters=2"])
    assert capsys.readouterr().err == ""
    # the old spelling: `demo -c RECIPE` named the recipe itself
    assert config_arguments(_parse(["demo", "-c", "r.yaml"])) == (Path("r.yaml"), [], [])
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "`demo -c RECIPE` for the demo's recipe is deprecated, use `packcfg demo RECIPE`" in err  # fmt: skip


def test_pack_out_is_a_folder(tmp_path: Path, capsys) -> None:
    pytest.importorskip("pyarrow")
    pytest.importorskip("tokenizers")
    from packcfg.resources import tiny_recipe

    start_invocation()
    out = tmp_path / "packs"
    assert main(["pack", str(tiny_recipe()), "--out", str(out), "-q"]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["metadata.json", "train.parquet"]  # the config's names
    assert capsys.readouterr().err == ""
    # the old `--out FILE.parquet` writes that file, warned
    assert main(["pack", str(tiny_recipe()), "--out", str(tmp_path / "old.parquet"), "--metadata",
                 str(tmp_path / "old.json"), "-q"]) == 0  # fmt: skip
    assert (tmp_path / "old.parquet").is_file() and (tmp_path / "old.json").is_file()
    assert "`pack --out FILE.parquet` is deprecated" in capsys.readouterr().err
