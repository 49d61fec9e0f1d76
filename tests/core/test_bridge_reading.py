"""Reading a config as Megatron Bridge reads it (rules.md rev 3, issue 9): OmegaConf scalars, interpolation
after the merge, builder-backed and enum dumps, empty files, base recipes.

Each test names the behaviour the old loader got wrong (PyYAML's YAML 1.1 floats, no interpolation, SC001 on
an empty file, `model.transformer` keys read as unknown, no base recipe)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from packcfg.cli import main
from packcfg.core.config import ConfigError, load_config, merge_documents
from packcfg.core.interpolate import Unknown, is_unknown
from packcfg.core.yamlsource import load_text
from packcfg.lint import engine
from packcfg.lint.facts import derive

REPO = Path(__file__).resolve().parents[2]
DATA = Path(__file__).resolve().parent / "data"
ORACLE_PY = REPO / ".venv-oracle" / "bin" / "python"

CP2_SFT = """\
recipe:
  family: llama
model:
  _target_: megatron.bridge.models.gpt_provider.GPTModelProvider
  seq_length: 4096
  context_parallel_size: 2
  calculate_per_token_loss: true
  cross_entropy_loss_fusion: false
dataset:
  _target_: megatron.bridge.training.config.FinetuningDatasetConfig
  seq_length: 4096
  pad_to_max_length: true
  enable_offline_packing: true
  offline_packing_specs:
    packed_sequence_size: 4096
    pad_seq_to_mult: 4
train:
  micro_batch_size: 1
  global_batch_size: 8
"""


def codes(diags) -> set[str]:
    return {d.code for d in diags}


def _lint(text: str, *, overrides=(), name: str = "x.yaml"):
    return engine.lint_text(text, name, overrides=overrides)


# --- 1. scalars: OmegaConf 2.3's loader ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, value",
    [("1e-5", 1e-5), ("5.0e-6", 5e-6), ("1E4", 1e4), ("-2e-3", -2e-3), ("1_000.5", 1000.5), (".5", 0.5)],
)
def test_exponent_floats_are_floats(text: str, value: float) -> None:
    # old: PyYAML's YAML 1.1 resolver needs a dot, so `1e-5` was the string "1e-5" (SC002 on optimizer.lr)
    doc = load_text(f"optimizer:\n  lr: {text}\n")
    assert doc.data == {"optimizer": {"lr": value}} and isinstance(doc.data["optimizer"]["lr"], float)


def test_lr_written_without_a_dot_draws_no_sc002() -> None:
    assert "SC002" not in codes(_lint("optimizer:\n  lr: 1e-5\n  min_lr: 5e-7\n"))


def test_timestamps_stay_strings_and_yaml11_booleans_are_booleans() -> None:
    doc = load_text("a: 2024-01-01\nb: yes\nc: Off\nd: 0x10\n")
    assert doc.data == {"a": "2024-01-01", "b": True, "c": False, "d": 16}


SCALARS = ["1e-5", "5.0e-6", "1E4", "1e5x", "2024-01-01", "yes", "On", "NO", "0x1F", "0o17", "017", "1_000",
           ".inf", "-.Inf", "1:30", "1:30.5", "null", "~", "True", "y", "+1", "1.", ".5e-3", "1e+5", "-0"]  # fmt: skip


@pytest.mark.skipif(
    not ORACLE_PY.exists(), reason="needs the oracle venv (.ci/oracle.sh) with omegaconf 2.3.0"
)
def test_scalars_match_omegaconf_load_exactly(tmp_path: Path) -> None:
    text = "".join(f"k{i}: {s}\n" for i, s in enumerate(SCALARS))
    (tmp_path / "s.yaml").write_text(text)
    code = (
        "import json,sys; from omegaconf import OmegaConf; "
        "c = OmegaConf.to_container(OmegaConf.load(sys.argv[1])); "
        "print(json.dumps({k: [type(v).__name__, repr(v)] for k, v in c.items()}))"
    )
    out = subprocess.run(
        [str(ORACLE_PY), "-c", code, str(tmp_path / "s.yaml")], capture_output=True, text=True
    )
    theirs = json.loads(out.stdout)
    ours = {k: [type(v).__name__, repr(v)] for k, v in load_text(text).data.items()}
    assert ours == theirs


# --- 2. interpolation ---------------------------------------------------------------------------------------


def test_interpolation_resolves_after_the_merge_with_the_type_of_its_target() -> None:
    # old: `${model.seq_length}` stayed a string: SC002 / PK103 on a valid file
    text = CP2_SFT.replace(
        "  seq_length: 4096\n  pad_to_max", "  seq_length: ${model.seq_length}\n  pad_to_max"
    )
    text = text.replace("packed_sequence_size: 4096", "packed_sequence_size: ${dataset.seq_length}")
    assert "seq_length: ${model.seq_length}" in text
    assert _lint(text) == []
    located = merge_documents([load_text(text)], ["model.seq_length=8192"])
    assert located.data["dataset"]["seq_length"] == 8192  # the override, merged before resolution
    assert located.data["dataset"]["offline_packing_specs"]["packed_sequence_size"] == 8192


def test_diagnostic_on_an_interpolated_value_points_at_the_interpolation_line() -> None:
    text = CP2_SFT.replace("pad_seq_to_mult: 4", "pad_seq_to_mult: ${train.micro_batch_size}")
    (d,) = [d for d in _lint(text) if d.code == "CP203"]
    line = text.splitlines().index("    pad_seq_to_mult: ${train.micro_batch_size}") + 1
    assert (d.file, d.line) == ("x.yaml", line)
    assert " 1" in d.message  # the resolved value


def test_relative_and_embedded_interpolation() -> None:
    text = "a:\n  b: 3\n  c: ${.b}\n  d:\n    e: ${..b}\n    f: run_${a.b}_${.e}\n    g: '\\${a.b}'\n"
    data = merge_documents([load_text(text)]).data
    assert data["a"] == {"b": 3, "c": 3, "d": {"e": 3, "f": "run_3_3", "g": "${a.b}"}}
    assert merge_documents([load_text("a: x${b}\nb: true\nc: ${d.0}\nd: [7]\n")]).data["a"] == "xTrue"


def test_env_resolver_makes_the_value_unknown_not_wrong() -> None:
    text = CP2_SFT.replace("micro_batch_size: 1", "micro_batch_size: ${oc.env:MBS}")
    located = merge_documents([load_text(text)])
    value = located.data["train"]["micro_batch_size"]
    assert is_unknown(value) and str(value) == "${oc.env:MBS}"
    assert derive(located.data).mbs is None  # unknown: PK110 cannot fire on it
    assert _lint(text) == []  # no SC002, no PK110
    # a value that depends on an unknown one is unknown too
    assert is_unknown(merge_documents([load_text("a: ${oc.env:X}\nb: ${a}\nc: n_${a}\n")]).data["c"])


def test_env_resolver_reads_the_environment_when_packcfg_runs_the_config(tmp_path, monkeypatch) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(
        "train:\n  micro_batch_size: ${oc.env:PACKCFG_TEST_MBS}\n  gbs: ${oc.env:PACKCFG_NOPE,8}\n"
    )
    monkeypatch.setenv("PACKCFG_TEST_MBS", "2")
    assert load_config([path])["train"] == {"micro_batch_size": "2", "gbs": "8"}
    monkeypatch.delenv("PACKCFG_TEST_MBS")
    with pytest.raises(ConfigError, match="PACKCFG_TEST_MBS"):
        load_config([path])


def test_missing_target_and_cycle_are_sc002_at_the_interpolation() -> None:
    diags = _lint("model:\n  seq_length: ${dataset.seq_lenght}\n")
    (d,) = [d for d in diags if d.code == "SC002"]
    assert (
        (d.line, d.column) == (2, 3)
        and "dataset.seq_lenght" in d.message
        and "not in the config" in d.message
    )
    (d,) = [d for d in _lint("a:\n  x: ${b.y}\nb:\n  y: ${a.x}\n") if d.code == "SC002"]
    assert "recursive interpolation" in d.message


def test_missing_target_bridge_fills_in_is_unknown_without_a_base() -> None:
    # an override file alone: Bridge's config holds every field, so `${model.seq_length}` resolves there
    located = merge_documents([load_text("dataset:\n  seq_length: ${model.seq_length}\n")])
    assert located.problems == [] and is_unknown(located.data["dataset"]["seq_length"])


# --- 4. empty files -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["", "# only a comment\n", "\n\n"])
def test_empty_or_comment_only_file_is_an_empty_mapping(text: str, tmp_path: Path, capsys) -> None:
    # old: SC001 "the file is empty"; OmegaConf.load reads it as {}
    assert _lint(text) == []
    empty = tmp_path / "empty.yaml"
    empty.write_text(text)
    main_cfg = tmp_path / "exp.yaml"
    main_cfg.write_text(CP2_SFT)
    assert main(["lint", str(empty)]) == 0
    assert main(["lint", str(main_cfg), "-c", str(empty)]) == 0
    capsys.readouterr()


# --- 5. builder-backed and enum dumps -----------------------------------------------------------------------

BUILDER = """\
model:
  _target_: megatron.bridge.models.gpt.model_config.BridgeGPTModelConfig
  _builder_: megatron.bridge.models.gpt.gpt_builder.GPTModelBuilder
  seq_length: 4096
  transformer:
    _target_: megatron.core.transformer.transformer_config.TransformerConfig
    context_parallel_size: 2
    calculate_per_token_loss: false
    cuda_graph_scope:
    - _target_: megatron.core.transformer.enums.CudaGraphScope
      _args_: [1]
      _name_: attn
dataset:
  _target_: megatron.bridge.training.config.FinetuningDatasetConfig
  seq_length: 4096
  enable_offline_packing: true
  offline_packing_specs:
    packed_sequence_size: 4096
    pad_seq_to_mult: 1
train:
  micro_batch_size: 1
"""


def test_builder_backed_model_fields_count_as_model_fields() -> None:
    # old: CP read as 1 (LS301/CP203 missed) and every model.transformer key drew SC003
    diags = _lint(BUILDER)
    found = codes(diags)
    assert {"LS301", "CP203"} <= found and "SC003" not in found
    (ls,) = [d for d in diags if d.code == "LS301"]
    assert ls.line == 8  # model.transformer.calculate_per_token_loss, where it is written
    (cp,) = [d for d in diags if d.code == "CP203"]
    assert cp.line == 19
    located = merge_documents([load_text(BUILDER)])
    assert derive(located.data).cp == 2
    assert located.data["model"]["cuda_graph_scope"] == ["attn"]  # enum dump read as its NAME
    assert located.sources.position(("model", "context_parallel_size")).line == 7


def test_builder_override_path_reaches_the_model_field() -> None:
    text = BUILDER.replace("context_parallel_size: 2", "context_parallel_size: 1").replace("pad_seq_to_mult: 1", "pad_seq_to_mult: 4")  # fmt: skip
    assert "LS301" not in codes(_lint(text))
    assert "LS301" in codes(_lint(text, overrides=["model.transformer.context_parallel_size=2"]))


def test_enum_dump_reads_as_its_name() -> None:
    text = "model:\n  cuda_graph_impl: transformer_engine\n  cuda_graph_scope:\n    _target_: x.CudaGraphScope\n    _args_: [1]\n    _name_: attn\n"  # fmt: skip
    located = merge_documents([load_text(text)])
    assert located.data["model"]["cuda_graph_scope"] == "attn"
    assert "SC002" not in codes(_lint(text))


# --- 7. base recipes ----------------------------------------------------------------------------------------


@pytest.fixture
def recipes(monkeypatch) -> Path:
    monkeypatch.setenv("PACKCFG_RECIPE_PATH", str(DATA / "recipes"))
    return DATA / "recipes"


def test_override_file_is_linted_over_its_base_recipe(recipes: Path, tmp_path: Path) -> None:
    # old: `recipe.base` unknown and nothing merged: MBS 2 over a recipe with offline packing passed
    override = tmp_path / "ov.yaml"
    override.write_text("recipe:\n  base: tiny_offline_base\ntrain:\n  micro_batch_size: 2\n")
    diags = engine.lint_config([override])
    pk = [d for d in diags if d.code == "PK110"]
    assert pk and (pk[0].file, pk[0].line) == (str(override), 4)
    assert not any(d.code == "SC003" for d in diags)  # Bridge's own keys (bridge_only_field...) never SC003
    assert not any(
        d.code.startswith("DP") for d in diags
    )  # nor its release's spelling (packed_sequence_specs)
    # a value that comes from the base names the recipe, not a line of the user's file
    base_diags = engine.lint_config(
        [override], overrides=["train.micro_batch_size=1", "model.context_parallel_size=2"]
    )
    (ls,) = [d for d in base_diags if d.code == "LS301"]
    assert ls.file == "<bridge recipe tiny_offline_base>"


def test_recipe_flag_on_the_cli(recipes: Path, tmp_path: Path, capsys) -> None:
    override = tmp_path / "ov.yaml"
    override.write_text("train:\n  micro_batch_size: 2\n")
    assert main(["lint", str(override)]) == 0
    assert main(["lint", str(override), "--recipe", "tiny_offline_base"]) == 1
    assert "PK110" in capsys.readouterr().out
    assert main(["lint", str(override), "--recipe", "tiny_offline_bas"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown base recipe" in err and "tiny_offline_base" in err
    assert main(["lint", "--list-recipes"]) == 0
    assert "tiny_offline_base\n" in capsys.readouterr().out


def test_builder_backed_base_recipe(recipes: Path) -> None:
    text = (
        "recipe:\n  base: builder_model_base\nmodel:\n  transformer:\n    calculate_per_token_loss: false\n"
    )
    located = merge_documents([load_text(text)])
    assert located.data["model"]["context_parallel_size"] == 2
    assert located.data["model"]["calculate_per_token_loss"] is False
    assert (
        located.sources.position(("model", "context_parallel_size")).file
        == "<bridge recipe builder_model_base>"
    )


def test_recipe_base_is_a_known_key() -> None:
    assert "SC003" not in codes(_lint("recipe:\n  name: x\n"))
    with pytest.raises(ConfigError, match="unknown base recipe"):
        merge_documents([load_text("recipe:\n  base: no_such_recipe_at_all\n")])


def test_shipped_snapshots_load_as_base_recipes() -> None:
    from packcfg.core.base_recipes import recipe_names

    names = recipe_names()
    if "llama32_1b_sft_config" not in names:
        pytest.skip("base-recipe snapshots not shipped yet")
    located = merge_documents([load_text("train:\n  micro_batch_size: 2\n")], recipe="llama32_1b_sft_config")
    assert located.base == "llama32_1b_sft_config" and located.data["train"]["micro_batch_size"] == 2
    assert located.data["recipe"]["base"] == "llama32_1b_sft_config"


def test_lint_of_one_file_does_not_import_omegaconf() -> None:
    code = "import sys; from packcfg.cli import main; main(['lint', sys.argv[1]]); print('omegaconf' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code, str(REPO / "recipes" / "tiny_cpu_sft.yaml")], capture_output=True, text=True)  # fmt: skip
    assert out.stdout.strip().endswith("False")


def test_unknown_is_not_equal_to_anything() -> None:
    assert Unknown("${x}") != Unknown("${x}") and Unknown("${x}") is not None


CASES = sorted((REPO / "tests" / "cases").glob("*.yaml"))


@pytest.mark.parametrize("case", CASES[::4], ids=lambda p: p.stem)
def test_an_unknown_value_never_draws_a_finding_a_known_one_would_not(case: Path) -> None:
    """Every scalar of a case replaced, one at a time, by `${oc.env:X}`: no SC002 at it, no internal error,
    and no error or warning the case did not already have (rules that need the value do not fire)."""
    import re

    from packcfg.lint.settings import Settings

    text = case.read_text()
    internal: list[str] = []
    before = {
        d.code for d in engine.lint_located(merge_documents([load_text(text, "t.yaml")]), settings=Settings())
    }
    lines = text.splitlines()
    for i, line in enumerate(lines):
        m = re.match(r"^(\s*)([A-Za-z_]+): (\S[^#]*?)\s*(#.*)?$", line)
        if not m:
            continue
        mutated = [*lines[:i], f"{m.group(1)}{m.group(2)}: ${{oc.env:X}}", *lines[i + 1 :]]
        located = merge_documents([load_text("\n".join(mutated) + "\n", "t.yaml")])
        for d in engine.lint_located(located, settings=Settings(), on_internal_error=internal.append):
            assert not (d.code == "SC002" and d.line == i + 1), (line, d.message)
            new = d.code not in before and d.severity.value != "info"
            assert not new or (d.code == "PK111" and "PK101" in before), (line, d.code, d.message)
    assert internal == []


def test_overrides_apply_over_the_base_recipe_as_in_bridge(recipes: Path) -> None:
    # Bridge's order: recipe, then the YAML files, then the command-line overrides (Hydra semantics on the whole)
    doc = load_text("recipe:\n  base: tiny_offline_base\n", "ov.yaml")
    with pytest.raises(ConfigError, match="could not add 'train.micro_batch_size'"):
        merge_documents([doc], ["+train.micro_batch_size=2"])  # already set by the recipe
    located = merge_documents(
        [doc], ["~model.bridge_only_field_packcfg_does_not_know", "train.micro_batch_size=4"]
    )
    assert located.data["train"]["micro_batch_size"] == 4
    again = merge_documents([doc])  # the cached snapshot was not changed by the overrides above
    assert again.data["train"]["micro_batch_size"] == 1
    located = merge_documents(
        [load_text("train:\n  micro_batch_size: 2\n")], ["++recipe.base=tiny_offline_base"]
    )
    assert located.base == "tiny_offline_base" and located.data["model"]["seq_length"] == 2048


INTERP_CASES = [
    "a: ${b}\nb: ${a}\n", "a: ${nope.x}\n", "a:\n  b: 1\n  c: ${.b}\n", "a:\n  b:\n    c: ${..d}\n  d: 3\n",
    "a: x_${b}\nb: 2\n", "a: x_${b}\nb: true\n", "a: ${b}\nb: [1, 2]\n", "a: '\\${b}'\nb: 1\n", "a: ${b.0}\nb: [5]\n",
    "a: ${b[0]}\nb: [5]\n", "a: x${b}\nb: null\n", "a: ${b}\nb: null\n", "a: ${b}\nb: ${c}\nc: 7\n",
    "a: ${b}\nb:\n  c: ${d}\nd: 1e-5\n", "a:\n  x: ${a}\n", "a: ${b}${c}\nb: 1\nc: 2\n", "a: ' ${b} '\nb: 1\n",
]  # fmt: skip


@pytest.mark.skipif(
    not ORACLE_PY.exists(), reason="needs the oracle venv (.ci/oracle.sh) with omegaconf 2.3.0"
)
def test_interpolation_matches_omegaconf_to_container_resolve(tmp_path: Path) -> None:
    script = (
        "import json,sys\nfrom omegaconf import OmegaConf\nout = []\n"
        "for i, _ in enumerate(json.load(sys.stdin)):\n"
        "    try:\n"
        "        out.append(OmegaConf.to_container(OmegaConf.load(sys.argv[1] + f'/{i}.yaml'), resolve=True))\n"
        "    except Exception:\n"
        "        out.append('ERR')\n"
        "print(json.dumps(out))\n"
    )
    for i, text in enumerate(INTERP_CASES):
        (tmp_path / f"{i}.yaml").write_text(text)
    proc = subprocess.run([str(ORACLE_PY), "-c", script, str(tmp_path)], input=json.dumps(INTERP_CASES), capture_output=True, text=True)  # fmt: skip
    for text, theirs in zip(INTERP_CASES, json.loads(proc.stdout), strict=True):
        located = merge_documents([load_text(text, "i.yaml")])
        ours = "ERR" if any(p.code == "SC002" for _, p in located.problems) else located.data
        assert ours == theirs, text


def test_override_of_a_key_the_base_lacks_is_an_error_as_in_bridge(recipes: Path) -> None:
    # Bridge's parse_hydra_overrides sets struct mode: `KEY=VALUE` needs the key, `+KEY=VALUE` adds it
    doc = load_text("recipe:\n  base: tiny_offline_base\n", "ov.yaml")
    with pytest.raises(ConfigError, match=r"could not override 'train.micro_batch_sise'.*\+train"):
        merge_documents([doc], ["train.micro_batch_sise=2"])
    assert merge_documents([doc], ["+train.micro_batch_sise=2"]).data["train"]["micro_batch_sise"] == 2
    assert merge_documents([doc], ["launch.nodes=2"]).data["launch"] == {"nodes": 2}  # packcfg's own section


def test_every_shipped_base_recipe_merges_and_draws_no_sc003_or_dp() -> None:
    from packcfg.core.base_recipes import recipe_names

    names = recipe_names()
    if not names:
        pytest.skip("no base-recipe snapshots shipped")
    internal: list[str] = []
    for name in names:
        located = merge_documents([load_text("", "ov.yaml")], recipe=name)
        diags = engine.lint_located(located, on_internal_error=internal.append)
        assert not [d for d in diags if d.code == "SC003" or d.code.startswith("DP")], name
    assert internal == []
