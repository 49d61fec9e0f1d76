"""`packcfg.check()`: a mapping, an OmegaConf DictConfig and a path give the diagnostics `packcfg lint` gives for
the same config as a YAML file; `raise_on` raises CheckError listing the findings that block."""

from __future__ import annotations

import enum
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import packcfg
from packcfg.config_check import CheckError
from packcfg.core.config import ConfigError, load_document

REPO = Path(__file__).resolve().parents[2]
CORPUS = sorted([*(REPO / "tests" / "cases").glob("*.yaml"), *(REPO / "recipes").glob("*.yaml")])

PK110 = {
    "recipe": {"family": "llama"},
    "model": {"seq_length": 4096},
    "train": {"micro_batch_size": 4, "global_batch_size": 128},
    "dataset": {
        "_target_": "megatron.bridge.training.config.FinetuningDatasetConfig",
        "seq_length": 4096,
        "enable_offline_packing": True,
        "offline_packing_specs": {"packed_sequence_size": 4096},
    },
}


def _key(d) -> tuple:
    """What must be equal between check() of an object and lint of its YAML file (the file name differs)."""
    return (d.code, d.severity, d.message, d.path, d.hint, d.fix)


def _comparable(path: Path) -> bool:
    # a suppression comment, a duplicate key or a bad tag lives in the text, which a mapping does not have
    doc = load_document(path)
    return "packcfg:" not in doc.text and doc.ok and not doc.problems


@pytest.mark.parametrize("path", [p for p in CORPUS if _comparable(p)], ids=lambda p: p.name)
def test_mapping_gives_what_lint_gives_for_the_file(path: Path) -> None:
    data = load_document(path).data
    expected = sorted(map(_key, packcfg.lint_file(path)), key=str)
    got = packcfg.check(data)
    assert sorted(map(_key, got), key=str) == expected
    assert {d.file for d in got} <= {"<dict>"}


@pytest.mark.parametrize("path", [p for p in CORPUS if _comparable(p)], ids=lambda p: p.name)
def test_omegaconf_gives_what_lint_gives_for_the_file(path: Path) -> None:
    from omegaconf import OmegaConf

    cfg = OmegaConf.load(path)
    got = packcfg.check(cfg)
    assert sorted(map(_key, got), key=str) == sorted(map(_key, packcfg.lint_file(path)), key=str)
    assert {d.file for d in got} <= {"<DictConfig>"}


def test_path_is_linted_as_the_cli_lints_it(tmp_path: Path) -> None:
    case = REPO / "tests" / "cases" / "PK110_offline_mbs4.yaml"
    cli = subprocess.run(
        [sys.executable, "-m", "packcfg", "lint", str(case), "--format", "json"],
        capture_output=True,
        text=True,
    )
    got = [d.to_dict() for d in packcfg.check(case)]
    assert got == [{k: v for k, v in d.items() if k != "version"} for d in json.loads(cli.stdout)]
    assert [d.to_dict() for d in packcfg.check(str(case))] == got


def test_overrides_and_recipe_as_on_the_command_line(tmp_path: Path) -> None:
    fixed = packcfg.check(PK110, overrides=["train.micro_batch_size=1", "train.global_batch_size=32"])
    assert "PK110" not in {d.code for d in fixed}
    assert "PK110" in {d.code for d in packcfg.check(PK110)}
    override = {
        "train": {"micro_batch_size": 2},
        "dataset": {"packed_sequence_specs": {"packed_sequence_size": 8192}},
    }
    (tmp_path / "override.yaml").write_text(yaml.safe_dump(override))
    cli = subprocess.run(
        [sys.executable, "-m", "packcfg", "lint", str(tmp_path / "override.yaml"), "--recipe",
         "llama32_1b_sft_config", "--format", "json"],
        capture_output=True, text=True,
    )  # fmt: skip
    expected = sorted((d["code"], d["message"], d["path"]) for d in json.loads(cli.stdout))
    got = packcfg.check(override, recipe="llama32_1b_sft_config")
    assert sorted((d.code, d.message, d.path) for d in got) == expected
    assert "PK110" in {d.code for d in got}


def test_raise_on_error_lists_every_blocking_finding() -> None:
    with pytest.raises(CheckError) as info:
        packcfg.check(PK110, raise_on="error")
    codes = [d.code for d in info.value.diagnostics]
    assert codes == ["PK110"]
    assert (
        "PK110 error at train.micro_batch_size: offline packing needs train.micro_batch_size 1, got 4"
        in str(info.value)
    )
    assert isinstance(info.value, packcfg.CheckError)


def test_allow_unblocks_that_code_only_and_warnings_raise_on_warning() -> None:
    found = packcfg.check(PK110, allow=["pk110"], raise_on="error")
    assert "PK110" in {d.code for d in found}  # allowed: still reported, not raised
    warnings = [d for d in found if d.severity == "warning"]
    assert warnings  # DS707: variable-width packs
    with pytest.raises(CheckError) as info:
        packcfg.check(PK110, allow=["PK110"], raise_on="warning")
    assert {d.code for d in info.value.diagnostics} == {d.code for d in warnings}


def test_clean_config_does_not_raise(tiny_recipe: Path) -> None:
    data = load_document(tiny_recipe).data
    found = packcfg.check(data, raise_on="error")
    assert not [d for d in found if d.severity == "error"]
    assert sorted(map(_key, found), key=str) == sorted(map(_key, packcfg.lint_file(tiny_recipe)), key=str)


@pytest.mark.parametrize(
    ("obj", "message"),
    [
        (
            {"train": {"micro_batch_size": object()}},
            "<dict>: train.micro_batch_size: a value of type object is not",
        ),
        ({"train": {1: 2}}, "<dict>: train: key 1 is not text"),
        (42, "cannot check a builtins.int"),
    ],
)
def test_what_is_not_config_data_is_one_line(obj, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        packcfg.check(obj)
    assert str(info.value).startswith(message)
    assert "\n" not in str(info.value)


def test_cycle_and_bad_arguments_are_one_line(tmp_path: Path) -> None:
    loop: dict = {"train": {}}
    loop["train"]["self"] = loop
    with pytest.raises(ConfigError, match="nested deeper than 100 levels"):
        packcfg.check(loop)
    with pytest.raises(ConfigError, match="no such file"):
        packcfg.check(tmp_path / "missing.yaml")
    with pytest.raises(ConfigError, match="train.micro_batch_size"):
        packcfg.check(PK110, overrides=["train.micro_batch_size"])
    with pytest.raises(ValueError, match="unknown rule code PK999"):
        packcfg.check(PK110, allow=["PK999"])
    with pytest.raises(ValueError, match="raise_on must be"):
        packcfg.check(PK110, raise_on="fatal")


class Impl(enum.Enum):
    local = "l"
    none = "n"


def test_python_values_are_read_as_lint_reads_bridge_dumps(tmp_path: Path) -> None:
    # an Enum member is its name (as lint reads Bridge's `_name_` enum dumps); tuples and sets are lists
    data = {
        "model": {"cuda_graph_impl": Impl.none, "cuda_graph_scope": ("attn",), "seq_length": 4096},
        "train": {"micro_batch_size": 1},
    }
    as_text = {
        "model": {"cuda_graph_impl": "none", "cuda_graph_scope": ["attn"], "seq_length": 4096},
        "train": {"micro_batch_size": 1},
    }
    (tmp_path / "exp.yaml").write_text(yaml.safe_dump(as_text))
    assert sorted(map(_key, packcfg.check(data)), key=str) == sorted(
        map(_key, packcfg.lint_file(tmp_path / "exp.yaml")), key=str
    )


def test_import_packcfg_stays_light() -> None:
    code = "import sys, packcfg; print(sorted(m for m in ('pydantic', 'omegaconf', 'torch', 'nemo_run', 'yaml') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
    code = "import sys, packcfg; packcfg.check({}); print('pydantic' in sys.modules, 'torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]


def test_public_names_are_exported_lazily() -> None:
    assert {"check", "Experiment", "CheckError", "lint_file"} <= set(packcfg.__all__)
    assert {"check", "Experiment", "CheckError"} <= set(dir(packcfg))
    code = (
        "import sys, packcfg; import packcfg.experiment; assert callable(packcfg.check); "
        "assert packcfg.check is packcfg.config_check.check; print('pydantic' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "True"
    with pytest.raises(AttributeError):
        packcfg.no_such_name  # noqa: B018
