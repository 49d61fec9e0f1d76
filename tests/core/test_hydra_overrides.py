"""Overrides in Hydra's grammar, the same in every command (issue 9; Bridge's `parse_hydra_overrides`, hydra-core
1.3.2 `_apply_overrides_to_config`), and one meaning per flag across the CLI (`-o` is never an output folder).

Old behaviour each test would have caught: positional `train.micro_batch_size=2` read as a missing file, `+k=v`
creating a key named `+train`, `~k` exit 2, `1e-4` a string, `render -o DIR` the only spelling of its folder."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from packcfg.cli import build_parser, main
from packcfg.core.config import ConfigError, merge_documents
from packcfg.core.overrides import OverrideError, looks_like_override, parse_override
from packcfg.core.yamlsource import load_text
from packcfg.lint import engine

REPO = Path(__file__).resolve().parents[2]
ORACLE_PY = REPO / ".venv-oracle" / "bin" / "python"

BASE = "train:\n  micro_batch_size: 1\n  global_batch_size: 8\nmodel:\n  seq_length: 1024\n"


def merged(*overrides: str, text: str = BASE) -> dict:
    return merge_documents([load_text(text, "b.yaml")], list(overrides)).data


# --- grammar ------------------------------------------------------------------------------------------------

HYDRA_CASES = [
    "a=1e-4", "a=", "a=yes", "a=1_000", "a=.5", "a=inf", "a=[1,x, 2.0]", "a={b:1,c:[x]}", "a='x y'", "a=x y",
    "a=${oc.env:X,1}", "a=foo/bar-baz:1", "~a", "~a=3", "+a.b=null", "++a.b=[]", "a=1.", "a=NaN",
    "a=2024-01-01", "a=0x10", "a=a\\,b", "a=[1,[2,3]]", "a={}", 'a="q\\"x"', "a=-5", "a=+5", "a=1e5", "a=5.0e-6",
    "a=1E4", "a=True", "a=NULL", "a=nul", "a=[a b, c]", "a=[", "a=}", "a.0=1", "train.micro_batch_size=2", "a",
    "+a", "~a.b", "a b=1", "a=${a.b}_x", "a=-1.5e-3", "a=007", "a=  3  ", "a=x=y",
]  # fmt: skip


@pytest.mark.skipif(
    not ORACLE_PY.exists(), reason="needs the oracle venv (.ci/oracle.sh) with hydra-core 1.3.2"
)
def test_values_and_kinds_match_hydras_parser() -> None:
    script = (
        "import json,sys\n"
        "from hydra.core.override_parser.overrides_parser import OverridesParser\n"
        "p = OverridesParser.create(); out = []\n"
        "for s in json.load(sys.stdin):\n"
        "    try:\n"
        "        o = p.parse_override(s); out.append([o.type.name, o.key_or_group, repr(o.value())])\n"
        "    except Exception:\n"
        "        out.append(['ERR'])\n"
        "print(json.dumps(out))\n"
    )
    proc = subprocess.run([str(ORACLE_PY), "-c", script], input=json.dumps(HYDRA_CASES), capture_output=True, text=True)  # fmt: skip
    theirs = json.loads(proc.stdout)
    kinds = {"set": "CHANGE", "add": "ADD", "force_add": "FORCE_ADD", "delete": "DEL"}
    for case, hydra in zip(HYDRA_CASES, theirs, strict=True):
        try:
            o = parse_override(case)
            ours = [kinds[o.kind], ".".join(o.path), repr(o.value)]
        except OverrideError:
            ours = ["ERR"]
        assert ours == hydra, case


@pytest.mark.parametrize("text", ["a=1,2", "a=choice(1,2)", "a=[1", "=1", "a", "+a", "a=x'y"])
def test_malformed_or_sweep_is_an_error_naming_it(text: str) -> None:
    with pytest.raises(OverrideError, match="override"):
        parse_override(text)


def test_override_words() -> None:
    assert all(map(looks_like_override, ["a.b=1", "+a=1", "++a.b=[1]", "~a.b", "~a=1", "a="]))
    assert not any(map(looks_like_override, ["a.yaml", "dir/", "-o", "+a", "a b"]))


# --- semantics ----------------------------------------------------------------------------------------------


def test_add_force_add_delete() -> None:
    data = merged("+train.new=1e-4", "++train.micro_batch_size=2", "~model.seq_length", "+peft={dim: 8}")
    assert data["train"] == {"micro_batch_size": 2, "global_batch_size": 8, "new": 1e-4}
    assert data["model"] == {} and data["peft"] == {"dim": 8}
    assert "+train" not in data  # old: a key literally named `+train`


def test_add_over_a_set_key_is_an_error_as_in_hydra() -> None:
    with pytest.raises(ConfigError, match=r"could not add 'train.micro_batch_size'.*\+\+train"):
        merged("+train.micro_batch_size=2")
    assert merged("+train.micro_batch_size=[2]")["train"]["micro_batch_size"] == [2]  # lists may be added
    assert merged("+a=1", text="a: null\n")["a"] == 1  # a null value may be added over


def test_delete_missing_or_other_value_is_an_error() -> None:
    with pytest.raises(ConfigError, match="not in the config"):
        merged("~train.nope")
    with pytest.raises(ConfigError, match="its value is 1"):
        merged("~train.micro_batch_size=2")
    assert "micro_batch_size" not in merged("~train.micro_batch_size=1")["train"]


def test_a_dict_value_merges_into_a_mapping() -> None:
    # OmegaConf.update(merge=True): the other keys of the section stay
    assert merged("train={micro_batch_size: 4}")["train"] == {"micro_batch_size": 4, "global_batch_size": 8}


def test_override_provenance_names_the_override() -> None:
    located = merge_documents([load_text(BASE, "b.yaml")], ["+train.x=1", "train.micro_batch_size=2"])
    assert located.sources.position(("train", "x")).file == "+train.x=1 (command line)"
    assert (
        located.sources.position(("train", "micro_batch_size")).file
        == "train.micro_batch_size=2 (command line)"
    )
    assert located.sources.position(("train", "global_batch_size")).file == "b.yaml"


# --- the CLI ------------------------------------------------------------------------------------------------

OFFLINE = """\
dataset:
  _target_: megatron.bridge.training.config.FinetuningDatasetConfig
  seq_length: 1024
  pad_to_max_length: true
  enable_offline_packing: true
  offline_packing_specs:
    packed_sequence_size: 1024
train:
  micro_batch_size: 1
  global_batch_size: 8
optimizer:
  lr: 1.0e-4
"""


@pytest.fixture
def exp(tmp_path: Path) -> Path:
    path = tmp_path / "exp.yaml"
    path.write_text(OFFLINE)
    return path


def run(argv: list[str], capsys) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_lint_positional_overrides(exp: Path, capsys) -> None:
    code, out, err = run(["lint", str(exp), "train.micro_batch_size=2"], capsys)
    assert code == 1 and "train.micro_batch_size=2 (command line): PK110" in out, out + err
    code, out, err = run(["lint", str(exp), "+train.micro_batch_size=2"], capsys)
    assert code == 2 and err.count("\n") == 1 and "could not add" in err
    code, out, _ = run(["lint", str(exp), "++train.micro_batch_size=2", "--format", "json"], capsys)
    assert code == 1 and [d["code"] for d in json.loads(out) if d["severity"] == "error"] == ["PK110"]
    code, out, err = run(["lint", str(exp), "~train.micro_batch_size", "optimizer.lr=1e-4"], capsys)
    assert code == 0, out + err  # `~k` no longer exit 2; 1e-4 a float, no SC002
    code, out, err = run(["lint", str(exp), "-o", "optimizer.lr=1e-4"], capsys)
    assert code == 0, out + err


def test_lint_malformed_override_is_exit_2_one_line(exp: Path, capsys) -> None:
    code, _, err = run(["lint", str(exp), "train.micro_batch_size=[1"], capsys)
    assert code == 2 and err.count("\n") == 1 and "train.micro_batch_size=[1" in err


def test_lint_existing_path_wins_over_override_shape(tmp_path: Path, exp: Path, capsys, monkeypatch) -> None:
    odd = tmp_path / "a=b.yaml"
    odd.write_text(OFFLINE)
    monkeypatch.chdir(tmp_path)
    code, out, err = run(["lint", "a=b.yaml"], capsys)
    assert code == 0 and "1 file" in out, out + err
    code, _, err = run(["lint", "missing.yaml"], capsys)
    assert code == 2 and "missing.yaml" in err


def test_lint_overrides_with_only_c_files(exp: Path, capsys) -> None:
    code, out, _ = run(["lint", "-c", str(exp), "train.micro_batch_size=2"], capsys)
    assert code == 1 and "PK110" in out


@pytest.mark.parametrize(
    "argv",
    [
        ["pack", "CFG"], ["analyze", "CFG"], ["verify", "CFG"], ["train", "CFG"],
        ["render", "CFG", "--out", "D"], ["launch", "CFG"],
    ],
)  # fmt: skip
def test_every_config_command_takes_the_same_overrides(argv: list[str]) -> None:
    command = argv[0]
    words = [w for w in argv[1:]]
    args = build_parser(only=command).parse_args(
        [
            command,
            *words,
            "-c",
            "x.yaml",
            "train.micro_batch_size=2",
            "+a.b=1",
            "--set",
            "c=1",
            "~d",
            "--recipe",
            "r",
        ]
    )
    assert args.config_files == ["x.yaml"]
    assert sorted(args.overrides) == sorted(
        ["train.micro_batch_size=2", "+a.b=1", "~d", "c=1", "++recipe.base=r"]
    )


def test_flags_mix_with_positional_overrides() -> None:
    args = build_parser(only="train").parse_args(
        ["train", "c.yaml", "--out", "runs/x", "train.train_iters=3"]
    )
    assert (args.config, args.output_dir, args.overrides) == ("c.yaml", "runs/x", ["train.train_iters=3"])


def test_output_folder_is_out_everywhere(capsys) -> None:
    assert build_parser(only="render").parse_args(["render", "c.yaml", "--out", "B"]).out_dir == "B"
    assert build_parser(only="launch").parse_args(["launch", "c.yaml", "--out", "B"]).bundle_dir == "B"
    assert build_parser(only="launch").parse_args(["launch", "c.yaml", "--bundle-dir", "B"]).bundle_dir == "B"
    assert build_parser(only="train").parse_args(["train", "c.yaml", "--output-dir", "B"]).output_dir == "B"
    assert str(build_parser(only="demo").parse_args(["demo", "--out", "B"]).output_dir) == "B"
    # `-c/--config` everywhere; train's --config-file stays an alias
    assert build_parser(only="train").parse_args(["train", "c.yaml", "--config-file", "x.yaml"]).config_files == ["x.yaml"]  # fmt: skip
    assert build_parser(only="train").parse_args(["train", "c.yaml", "--config", "x.yaml"]).config_files == ["x.yaml"]  # fmt: skip


def test_render_dash_o_dir_is_deprecated_and_dash_o_key_value_an_override(capsys) -> None:
    parser = build_parser(only="render")
    args = parser.parse_args(["render", "c.yaml", "-o", "bundle/"])
    assert args.out_dir == "bundle/" and args.overrides == []
    assert "deprecated" in capsys.readouterr().err
    args = parser.parse_args(["render", "c.yaml", "--out", "b", "-o", "train.train_iters=3"])
    assert args.out_dir == "b" and args.overrides == ["train.train_iters=3"]
    assert capsys.readouterr().err == ""


def test_render_without_out_is_exit_2(exp: Path, capsys) -> None:
    code, _, err = run(["render", str(exp)], capsys)
    assert code == 2 and "--out DIR" in err


def test_verify_reads_c_and_overrides(exp: Path, tmp_path: Path, capsys) -> None:
    extra = tmp_path / "extra.yaml"
    extra.write_text(
        "dataset:\n  offline_packing_specs:\n    packed_metadata_path: /nonexistent/from_c.json\n"
        "    packed_train_data_path: /nonexistent/p.parquet\n"
    )
    code, _, err = run(["verify", str(exp), "-c", str(extra), "dataset.dataset_root=/nonexistent"], capsys)
    assert code == 2 and "/nonexistent/from_c.json" in err, err  # the -c file and the override reached verify


def test_lint_gate_api_applies_hydra_overrides(exp: Path) -> None:
    diags = engine.lint_config([exp], ["++train.micro_batch_size=4"])
    assert [d.code for d in diags if d.severity.value == "error"] == ["PK110"]


APPLY_CASES = [
    "a.l.0=5", "a.l.5=5", "a.s.x=1", "~a.l.0", "+a.l.1=3", "a.l={x: 1}", "a={l: {y: 1}}", "a.new.deep=1",
    "+a.l=[9]", "a.l=[9]", "+a.s=y", "++a.s=y", "~a.s", "~a.s=x", "~a.s=z", "~a.nope", "a={t: 1}", "+a.n=1",
    "+a.z=null", "a.z=1e-3", "~a", "+a={s: q}",
]  # fmt: skip


@pytest.mark.skipif(
    not ORACLE_PY.exists(), reason="needs the oracle venv (.ci/oracle.sh) with hydra-core 1.3.2"
)
def test_applying_overrides_matches_hydra() -> None:
    start = {"a": {"l": [1, 2], "s": "x", "z": None}}
    script = (
        "import json,sys\n"
        "from omegaconf import OmegaConf\n"
        "from hydra._internal.config_loader_impl import ConfigLoaderImpl\n"
        "from hydra.core.override_parser.overrides_parser import OverridesParser\n"
        "p = OverridesParser.create(); out = []\n"
        "start, cases = json.load(sys.stdin)\n"
        "for o in cases:\n"
        "    cfg = OmegaConf.create(start)\n"
        "    try:\n"
        "        ConfigLoaderImpl._apply_overrides_to_config(p.parse_overrides([o]), cfg)\n"
        "        out.append(OmegaConf.to_container(cfg))\n"
        "    except Exception:\n"
        "        out.append('ERR')\n"
        "print(json.dumps(out))\n"
    )
    proc = subprocess.run([str(ORACLE_PY), "-c", script], input=json.dumps([start, APPLY_CASES]), capture_output=True, text=True)  # fmt: skip
    theirs = json.loads(proc.stdout)
    for case, hydra in zip(APPLY_CASES, theirs, strict=True):
        try:
            ours = merge_documents([load_text(json.dumps(start), "s.yaml")], [case]).data
        except ConfigError:
            ours = "ERR"
        assert ours == hydra, case


def test_analyze_override_words_without_input_apply_to_the_default_recipe(capsys) -> None:
    code, out, err = run(["analyze", "dataset.offline_packing_specs.packed_sequence_size=1024", "--format", "json"], capsys)  # fmt: skip
    assert code == 0, err
    assert json.loads(out)["capacity"] == 1024
