"""`packcfg.check()` on live Megatron Bridge configs (0.3.1 and 0.6.x, whichever this oracle venv holds).

For every recipe of the base-recipe corpus (packcfg/data/bridge_recipes/index.json) that this Bridge has, the
ConfigContainer its recipe function builds is checked three ways and must give the same diagnostics, field
for field (code, severity, message, key path, line, column, hint, fix; only the file name differs):
(a) `packcfg.check(cfg)`;
(b) `packcfg lint` of `cfg.to_yaml(FILE)` (Bridge's own dump; sets as sorted lists, as the corpus writes them);
(c) `packcfg.check(omegaconf)` of Bridge's own OmegaConf conversion (`create_omegaconf_dict_config`, as its
    scripts merge overrides) against `packcfg lint` of `OmegaConf.save` of it.
The same again after a change made in Python, as a user makes one (`cfg.train.micro_batch_size = 2`), which
is a packing error (PK110) on every recipe that packs offline: the comparison is not of empty lists only.
Run: PYTHONPATH=$PWD /work/venvs/oracle-0.3.1/bin/python -m pytest tests/oracle/test_python_check.py
"""

from __future__ import annotations

import importlib.metadata
import json
from pathlib import Path

import pytest

import packcfg

REPO = Path(__file__).resolve().parents[2]
INDEX = json.loads((REPO / "packcfg" / "data" / "bridge_recipes" / "index.json").read_text())["recipes"]
BRIDGE_VERSION = importlib.metadata.version("megatron-bridge")
_PK110_SEEN: list[str] = []


def _function(bridge, name: str):
    fn = getattr(bridge.recipes, name, None)
    if fn is None:
        try:
            fn = bridge.gen.resolve(INDEX[name]["function"])
        except (ImportError, AttributeError):
            pytest.skip(f"{name}: not a recipe function of Megatron Bridge {BRIDGE_VERSION}")
    return fn


def _fields(d) -> tuple:
    return (d.code, d.severity, d.message, d.path, d.line, d.column, d.hint, d.fix)


def _lint_dump(bridge, cfg, path: Path) -> list:
    with bridge.gen._sets_as_lists():
        cfg.to_yaml(str(path))
    return packcfg.lint_file(path)


def _same(bridge, cfg, tmp_path: Path, tag: str) -> list:
    from omegaconf import OmegaConf

    got = packcfg.check(cfg)
    assert {d.file for d in got} <= {"<ConfigContainer>"}
    expected = _lint_dump(bridge, cfg, tmp_path / f"{tag}.yaml")
    assert [_fields(d) for d in got] == [_fields(d) for d in expected]

    from megatron.bridge.training.utils.omegaconf_utils import create_omegaconf_dict_config

    omega, _excluded = create_omegaconf_dict_config(cfg)
    (tmp_path / f"{tag}_omegaconf.yaml").write_text(OmegaConf.to_yaml(omega))
    got_omega = packcfg.check(omega)
    assert [_fields(d) for d in got_omega] == [
        _fields(d) for d in packcfg.lint_file(tmp_path / f"{tag}_omegaconf.yaml")
    ]
    return got


def _build(bridge, name: str):
    """The recipe's ConfigContainer; a skip when Bridge itself cannot build it here (before packcfg runs at all:
    e.g. Bridge 0.6's nemotron_3_nano recipes read an HF config.json the offline cache does not hold)."""
    fn = _function(bridge, name)
    try:
        return bridge.gen.build(fn)
    except Exception as exc:
        first = (str(exc).strip().splitlines() or [""])[0][:200]
        pytest.skip(
            f"{name}: Megatron Bridge {BRIDGE_VERSION} cannot build it here: {type(exc).__name__}: {first}"
        )


@pytest.mark.parametrize("name", sorted(INDEX))
def test_check_of_a_container_is_lint_of_its_yaml(name: str, bridge, tmp_path: Path) -> None:
    cfg = _build(bridge, name)
    _same(bridge, cfg, tmp_path, "recipe")
    cfg.train.micro_batch_size = 2  # changed in Python, as a user does before finetune(cfg, ...)
    changed = _same(bridge, cfg, tmp_path, "changed")
    if any(d.code == "PK110" for d in changed):
        _PK110_SEEN.append(name)


def test_a_packing_error_made_in_python_raises(bridge) -> None:
    cfg = _build(bridge, "llama32_1b_sft_config")
    assert not [d for d in packcfg.check(cfg) if d.severity == "error"]
    cfg.train.micro_batch_size = 2
    with pytest.raises(packcfg.CheckError) as info:
        packcfg.check(cfg, raise_on="error")
    assert [(d.code, d.path) for d in info.value.diagnostics] == [("PK110", "train.micro_batch_size")]
    assert "PK110 error at train.micro_batch_size" in str(info.value)
    assert packcfg.check(cfg, allow=["PK110"], raise_on="error")  # allowed: returned, not raised
    # the fix lint proposes, applied as overrides, clears it
    fix = next(d for d in packcfg.check(cfg) if d.code == "PK110").fix
    overrides = [f"{'.'.join(e.path)}={e.value}" for e in fix.edits if e.action == "set"]
    assert "PK110" not in {d.code for d in packcfg.check(cfg, overrides=overrides)}


def test_the_corpus_comparison_saw_packing_errors() -> None:
    """Runs after the parametrized test (file order): the changed containers did give PK110s to compare."""
    assert len(_PK110_SEEN) >= 5, _PK110_SEEN
