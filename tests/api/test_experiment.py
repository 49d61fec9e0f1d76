"""`packcfg.Experiment`: validation is the lint engine (every error finding one ValidationError error, with its
rule code, the key path as written and lint's message), `allow` through the validation context, and
`model_dump(by_alias=True)` gives the input back."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

import packcfg
from packcfg.core.config import load_document

REPO = Path(__file__).resolve().parents[2]
CORPUS = sorted([*(REPO / "tests" / "cases").glob("*.yaml"), *(REPO / "recipes").glob("*.yaml")])


def _data(path: Path):
    doc = load_document(path)
    if not doc.ok or doc.problems or "packcfg:" in doc.text:
        pytest.skip("a finding of the text (suppression comment, duplicate key, tag): a mapping has no text")
    return doc.data


def _errors(path: Path) -> list[tuple[str, str, str | None]]:
    return sorted((d.code, d.message, d.path) for d in packcfg.lint_file(path) if d.severity == "error")


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.name)
def test_every_error_finding_is_one_validation_error_and_the_dump_round_trips(path: Path) -> None:
    data = _data(path)
    expected = _errors(path)
    if not expected:
        exp = packcfg.Experiment.model_validate(data)
        assert exp.model_dump(by_alias=True) == data
        assert sorted((d.code, d.message) for d in exp.diagnostics) == sorted(
            (d.code, d.message) for d in packcfg.lint_file(path)
        )
        return
    with pytest.raises(ValidationError) as info:
        packcfg.Experiment.model_validate(data)
    got = sorted((e["type"], e["msg"], e["ctx"]["path"]) for e in info.value.errors())
    # lint's path is the normalised key; the error's loc is the key as written (the same here but for legacy keys)
    assert [(c, m) for c, m, _ in got] == [(c, m) for c, m, _ in expected]
    for error in info.value.errors():
        assert error["ctx"]["code"] == error["type"]
        assert error["ctx"]["severity"] == "error"
        assert ".".join(error["loc"]) == (error["ctx"]["path"] or "")
    # every error allowed: the model builds, and dumps what it was given
    codes = sorted({c for c, _, _ in expected})
    exp = packcfg.Experiment.model_validate(data, context={"allow": codes})
    assert exp.model_dump(by_alias=True) == data


def test_key_path_is_the_one_the_user_wrote() -> None:
    legacy = {
        "model": {"seq_length": 4096, "context_parallel_size": 2, "calculate_per_token_loss": True},
        "train": {"micro_batch_size": 1, "global_batch_size": 32},
        "dataset": {
            "_target_": "megatron.bridge.training.config.FinetuningDatasetConfig",
            "seq_length": 4096,
            # the 0.3.1 spelling of offline_packing_specs; pad_seq_to_mult 3 is not a multiple of 2*CP
            "packed_sequence_specs": {"packed_sequence_size": 4096, "pad_seq_to_mult": 3},
        },
    }
    with pytest.raises(ValidationError) as info:
        packcfg.Experiment.model_validate(legacy)
    cp203 = [e for e in info.value.errors() if e["type"] == "CP203"]
    assert len(cp203) == 1
    assert cp203[0]["loc"] == ("dataset", "packed_sequence_specs", "pad_seq_to_mult")
    assert cp203[0]["input"] == 3
    lint = [d for d in packcfg.check(legacy) if d.code == "CP203"]
    assert cp203[0]["msg"] == lint[0].message


def test_allow_in_the_context_unblocks_only_that_code() -> None:
    data = {
        "recipe": {"family": "nope"},
        "model": {"seq_length": 4096},
        "train": {"micro_batch_size": 4, "global_batch_size": 128},
        "dataset": {"enable_offline_packing": True, "offline_packing_specs": {"packed_sequence_size": 4096}},
    }
    with pytest.raises(ValidationError) as info:
        packcfg.Experiment.model_validate(data)
    assert sorted(e["type"] for e in info.value.errors()) == ["PK110", "SC002"]
    with pytest.raises(ValidationError) as info:
        packcfg.Experiment.model_validate(data, context={"allow": ["PK110"]})
    assert [e["type"] for e in info.value.errors()] == ["SC002"]
    exp = packcfg.Experiment.model_validate(data, context={"allow": "pk110,SC002"})
    assert {"PK110", "SC002"} <= {d.code for d in exp.diagnostics}
    with pytest.raises(ValidationError, match="unknown rule code PK999"):
        packcfg.Experiment.model_validate(data, context={"allow": ["PK999"]})
    with pytest.raises(ValidationError, match="unknown validation context key 'allows'"):
        packcfg.Experiment.model_validate(data, context={"allows": ["PK110"]})


def test_typed_access_has_bridge_defaults_and_unset_fields_stay_out_of_the_dump() -> None:
    data = {
        "train": {"micro_batch_size": 1, "global_batch_size": 8},
        "model": {"_target_": "x.GPTModelProvider"},
    }
    exp = packcfg.Experiment.model_validate(data)
    assert exp.train.micro_batch_size == 1
    assert exp.model.context_parallel_size == 1  # Bridge's default, not written
    assert exp.model_dump(by_alias=True) == data
    assert exp.model_dump()["model"] == {"target": "x.GPTModelProvider"}
    assert exp.model_dump(exclude_unset=False)["model"]["context_parallel_size"] == 1
    assert (
        packcfg.Experiment.model_validate_json(exp.model_dump_json(by_alias=True)).model_dump(by_alias=True)
        == data
    )


def test_interpolations_and_recipe_context() -> None:
    data = {"model": {"seq_length": 4096}, "dataset": {"seq_length": "${model.seq_length}"}}
    exp = packcfg.Experiment.model_validate(data)
    assert exp.model_dump(by_alias=True) == data  # kept as written; lint resolved it to check it
    override = {
        "train": {"micro_batch_size": 2},
        "dataset": {"packed_sequence_specs": {"packed_sequence_size": 8192}},
    }
    with pytest.raises(ValidationError) as info:
        packcfg.Experiment.model_validate(override, context={"recipe": "llama32_1b_sft_config"})
    pk110 = [e["msg"] for e in info.value.errors() if e["type"] == "PK110"]
    assert "global_batch_size 4 (was 8)" in pk110[0]  # the recipe's global batch size was merged under it


def test_not_config_data_is_a_validation_error_not_a_traceback() -> None:
    with pytest.raises(ValidationError) as info:
        packcfg.Experiment.model_validate({"train": {"micro_batch_size": object()}})
    assert info.value.errors()[0]["type"] == "SC001"
    assert "train.micro_batch_size" in info.value.errors()[0]["msg"]
    with pytest.raises(ValidationError, match="expected a mapping"):
        packcfg.Experiment.model_validate([1, 2])


def test_lint_never_imports_pydantic_for_the_model() -> None:
    import subprocess
    import sys

    code = "import sys, packcfg; packcfg.lint_file(sys.argv[1]); print('pydantic' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code, str(REPO / "recipes" / "tiny_cpu_sft.yaml")],
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == "False"
