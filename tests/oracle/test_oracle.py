"""Differential test: packcfg lint and Megatron Bridge's validate() agree on which configs Bridge rejects.

It runs against the Bridge the venv has (bridge_side.LINE): 0.3.1 in one oracle venv, 0.6.x in the other, each
with its own expectations (expectations.for_line), and packcfg lints with `--bridge-version` = that Bridge. On
0.6 the recipes are 0.6's, packcfg merges the case over the recipe's own `to_yaml()` (bridge_side.Bridge.snapshot)
and the case is rewritten by bridge_side.to_06 instead of to_031. Below, "0.3.1" is the line in use.

For every case in tests/cases and every shipped recipe in recipes/ that Bridge 0.3.1 models (a recipe
function exists for its model, see bridge_side.recipe_for), the config is built both ways:
(a) Bridge: the recipe function, the case (renamed to 0.3.1's fields by bridge_side.to_031) merged as an
    override file by Bridge's own process_config_with_overrides, then runtime_config_update/validate with
    WORLD_SIZE from the case's launch section;
(b) packcfg: `packcfg lint` of the same merge (`-c <the recipe's to_yaml snapshot> -c <the renamed case>`,
    or `--recipe NAME` once lint takes it).
Then:
- Bridge rejects -> packcfg reports an error, and the code expectations.BRIDGE_CODES maps Bridge's message to.
- every other packcfg error is listed in expectations.EXTRAS / CASE_EXTRAS (a check Bridge 0.3.1 lacks), with
  the reason; an unlisted one is a packcfg error Bridge does not share, and fails here.
And every base-recipe snapshot in packcfg/data/bridge_recipes: packcfg lint of it alone reports an error exactly
when Bridge's validate() rejected the recipe itself (index.json records that).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

import pytest
from bridge_side import LINE, VERSION, recipe_for, to_bridge
from expectations import for_line

_E = for_line(LINE)
BRIDGE_CODES = _E.bridge_codes
CASE_EXTRAS = _E.case_extras
EXTRAS = _E.extras
MISSING_RULES = _E.missing_rules
NOT_MODELLED = _E.not_modelled
PACKCFG_BUGS = _E.packcfg_bugs
SAME_REJECTION = _E.same_rejection
VERSION_DIFFERENCES = _E.version_differences
TARGET = ("--bridge-version", VERSION)  # lint knows which Bridge judges the config

REPO = Path(__file__).resolve().parents[2]
SNAPSHOTS = REPO / "packcfg" / "data" / "bridge_recipes"
CASES = sorted((REPO / "tests" / "cases").glob("*.yaml"))
SHIPPED = sorted((REPO / "recipes").glob("*.yaml"))
INDEX = json.loads((SNAPSHOTS / "index.json").read_text()) if (SNAPSHOTS / "index.json").exists() else {}


@lru_cache(maxsize=1)
def _lint_takes_recipe() -> bool:
    out = subprocess.run([sys.executable, "-m", "packcfg", "lint", "--help"], capture_output=True, text=True)
    return "--recipe" in out.stdout


def packcfg_findings(*args: str) -> tuple[dict[str, str], str]:
    """{code: worst severity} of `packcfg lint ARGS --format json`, and the error lines (exit 2 -> 'EXIT2')."""
    proc = subprocess.run(
        [sys.executable, "-m", "packcfg", "lint", *args, "--format", "json"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )
    if proc.returncode == 2:
        return {"EXIT2": "error"}, proc.stderr.strip()
    found = json.loads(proc.stdout or "[]")
    rank = {"error": 3, "warning": 2, "info": 1}
    codes: dict[str, str] = {}
    for d in found:
        if rank.get(d.get("severity"), 0) > rank.get(codes.get(d["code"], ""), 0):
            codes[d["code"]] = d["severity"]
    text = "; ".join(f"{d['code']} {d['message']}" for d in found if d.get("severity") == "error")
    return codes, text


def packcfg_errors(*args: str) -> tuple[set[str], str]:
    codes, text = packcfg_findings(*args)
    return {c for c, sev in codes.items() if sev == "error"}, text


def bridge_codes(message: str) -> set[str | None]:
    return {code for pattern, code in BRIDGE_CODES if re.search(pattern, message)}


def _load_case(path: Path):
    """The case as Bridge's OmegaConf.load reads it (None and the error where it cannot)."""
    from omegaconf import OmegaConf

    try:
        return OmegaConf.to_container(OmegaConf.load(path), resolve=False), ""
    except Exception as e:  # OmegaConf/YAML rejects the file: Bridge fails to load it
        return None, f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"


def _check(path: Path, bridge, tmp_path: Path):
    """Compare Bridge and packcfg on one case (asserts); returns Bridge's verdict."""
    name = path.name
    case, load_error = _load_case(path)
    if case is None:
        # Bridge's OmegaConf.load rejects the file itself; packcfg must too.
        errors, text = packcfg_errors(str(path))
        assert errors, f"{name}: Bridge cannot load it ({load_error}); packcfg reports no error"
        return
    if not isinstance(case, dict):
        pytest.skip(f"{name}: not a mapping")
    recipe, why = recipe_for(case, LINE)
    if name in NOT_MODELLED:
        pytest.skip(f"{name}: {NOT_MODELLED[name]}")
    if recipe is None:
        pytest.skip(f"{name}: {why}")
    if not bridge.has(recipe) or (LINE == "0.3" and not (SNAPSHOTS / f"{recipe}.yaml").exists()):
        pytest.skip(f"{name}: recipe {recipe} is not in Bridge {VERSION} or has no snapshot")

    from omegaconf import OmegaConf

    renamed = tmp_path / name
    pretrained = tmp_path / "pretrained_checkpoint"
    pretrained.mkdir()
    OmegaConf.save(OmegaConf.create(to_bridge(case, LINE, pretrained)), renamed)
    verdict = bridge.verdict(recipe, renamed, case)

    # packcfg sees the same merge; the launch section (world size) stays with it.
    launch = tmp_path / f"launch_{name}"
    OmegaConf.save(OmegaConf.create({"launch": case["launch"]} if "launch" in case else {}), launch)
    if LINE == "0.6":
        args = ("-c", str(bridge.snapshot(recipe)), "-c", str(renamed), "-c", str(launch), *TARGET)
    elif _lint_takes_recipe():
        args = ("--recipe", recipe, str(renamed), "-c", str(launch), *TARGET)
    else:
        args = ("-c", str(SNAPSHOTS / f"{recipe}.yaml"), "-c", str(renamed), "-c", str(launch), *TARGET)
    codes, text = packcfg_findings(*args)
    errors = {c for c, sev in codes.items() if sev == "error"}

    detail = (
        f"{name} over {recipe} (world {verdict.world}): Bridge "
        f"{'rejects: ' + verdict.message if verdict.rejected else 'accepts'}; packcfg errors: {text or 'none'}"
    )
    expected: set[str] = set()
    if verdict.rejected:
        mapped = bridge_codes(verdict.message)
        assert mapped, f"unmapped Bridge rejection (add it to expectations.BRIDGE_CODES): {detail}"
        expected = {c for c in mapped if c is not None}
        if name in VERSION_DIFFERENCES:
            # packcfg follows current Bridge here; it must still say something about it.
            assert expected <= set(codes), f"{detail} ({VERSION_DIFFERENCES[name]})"
            return verdict
        assert errors, f"packcfg bug: Bridge rejects, packcfg reports no error: {detail}"
        missing = {c for c in expected - errors if (name, c) not in SAME_REJECTION}
        assert not missing, f"packcfg bug: Bridge rejects and packcfg misses {sorted(missing)}: {detail}"
        if None in mapped:
            assert any(re.search(p, verdict.message) for p in MISSING_RULES), detail
    unexplained = {
        code
        for code in errors - expected
        if code not in EXTRAS
        and (name, code) not in CASE_EXTRAS
        # Bridge stops at its first failure: a later check it makes may also apply.
        and not (verdict.rejected and code in {c for _, c in BRIDGE_CODES})
    }
    assert not unexplained, (
        f"packcfg errors Bridge {VERSION} does not raise and no reason is listed {sorted(unexplained)}: {detail}"
    )
    return verdict


# Checks Bridge 0.6's validate() makes and 0.3.1's does not (CUDA-graph padding, the dataset's packing switch and
# specs, in-batch alignment, cp_comm_type, local CUDA graphs): on 0.6 these cases must be rejected by Bridge
# itself, with the message packcfg's code stands for, so the agreement above is about a real rejection.
ONLY_IN_06 = {
    "CG501_pad_cu_no_fixed_width.yaml": "CG501",
    "CG502_te_graphs_variable_width.yaml": "CG502",
    "CG503_attn_graphs_no_pad_cu.yaml": "CG503",
    "CG507_local_scoped_graphs.yaml": "CG507",
    "PK102_flag_without_specs.yaml": "PK102",
    "PK103_size_zero.yaml": "PK103",
    "CP205_a2a_p2p_no_sizes.yaml": "CP205",
}


@pytest.mark.skipif(LINE != "0.6", reason="checks that exist only in Bridge 0.6")
@pytest.mark.parametrize(("name", "code"), sorted(ONLY_IN_06.items()))
def test_06_only_checks_are_bridges_own_rejections(name, code, bridge, tmp_path):
    verdict = _check(REPO / "tests" / "cases" / name, bridge, tmp_path)
    assert verdict.rejected and code in bridge_codes(verdict.message), (name, verdict)


@pytest.mark.parametrize("path", CASES, ids=[p.name for p in CASES])
def test_case_agrees_with_bridge(path, bridge, tmp_path):
    _check(path, bridge, tmp_path)


@pytest.mark.parametrize("path", SHIPPED, ids=[p.name for p in SHIPPED])
def test_shipped_recipe_agrees_with_bridge(path, bridge, tmp_path):
    _check(path, bridge, tmp_path)


SNAPSHOT_NAMES = sorted(INDEX.get("recipes", {}))


def _recipes_06() -> list[str]:
    """The 0.6 recipes the cases and shipped recipes are merged over, and both tasks of each model."""
    names: set[str] = set()
    for path in CASES + SHIPPED:
        case, _ = _load_case(path)
        if isinstance(case, dict):
            recipe = recipe_for(case, "0.6")[0]
            if recipe:
                stem = recipe.rsplit("_", 2)[0]
                names.update({f"{stem}_sft_config", f"{stem}_peft_config"})
    return sorted(names - set(_E.not_modelled_recipes))


@pytest.mark.skipif(LINE != "0.6", reason="Bridge 0.6's recipes, snapshotted on the fly")
@pytest.mark.parametrize("name", _recipes_06() if LINE == "0.6" else [])
def test_bridge_06_recipe_lints_as_bridge_validates(name, bridge):
    """Bridge 0.6's own recipe (its to_yaml(), as a user's override file is merged over it) lints without errors
    exactly when Bridge 0.6's runtime_config_update/validate() accepts it at its smallest world."""
    if not bridge.has(name):
        pytest.skip(f"{name} is not a Bridge {VERSION} recipe")
    world, problem = bridge.validate_recipe(name)
    errors, text = packcfg_errors(str(bridge.snapshot(name)), *TARGET)
    if problem is None:
        assert not errors, f"{name}: Bridge {VERSION} validates it at world {world}; packcfg: {text}"
    else:
        expected = bridge_codes(problem)
        assert expected, f"unmapped Bridge {VERSION} rejection of {name}: {problem}"
        assert errors == expected, f"{name}: Bridge rejects ({problem}); packcfg: {text or 'no error'}"


@pytest.mark.skipif(LINE != "0.3", reason="packcfg's shipped snapshots are Bridge 0.3.1's")
@pytest.mark.parametrize("name", SNAPSHOT_NAMES)
def test_snapshot_lints_as_bridge_validates(name, request):
    """Bridge's own recipe lints without errors exactly when Bridge validates it (at its smallest world).

    No EXTRAS here: Bridge ships these recipes and runs them, so any packcfg error on one that validates is a
    false error. The only rejections are PEFT recipes without a pretrained checkpoint (MF430), and packcfg must
    report that and nothing else.
    """
    if name in PACKCFG_BUGS:
        request.applymarker(pytest.mark.xfail(reason=PACKCFG_BUGS[name], strict=True))
    entry = INDEX["recipes"][name]
    errors, text = packcfg_errors(str(SNAPSHOTS / entry["file"]), *TARGET)
    if entry["validates"]:
        assert not errors, f"{name}: Bridge validates it at world {entry['min_world_size']}; packcfg: {text}"
    else:
        expected = bridge_codes(entry["validate_error"])
        assert expected, f"unmapped Bridge rejection of {name}: {entry['validate_error']}"
        assert errors == expected, (
            f"{name}: Bridge rejects ({entry['validate_error']}); packcfg: {text or 'no error'}"
        )


def test_every_shipped_recipe_and_most_cases_are_modelled(bridge):
    """Guard against the suite silently skipping: the recipe mapping covers what it claims."""
    modelled = []
    for path in CASES + SHIPPED:
        case, _ = _load_case(path)
        if isinstance(case, dict) and path.name not in NOT_MODELLED and recipe_for(case, LINE)[0]:
            modelled.append(path.name)
    assert len(modelled) >= 0.75 * len(CASES + SHIPPED), modelled
    if os.environ.get("CI") == "true" and LINE == "0.3":
        assert SNAPSHOT_NAMES, "packcfg/data/bridge_recipes/index.json lists no recipes"
    if LINE == "0.6":
        assert len(_recipes_06()) >= 8, _recipes_06()


def test_oracle_fails_when_packcfg_misses_or_adds_an_error(bridge, tmp_path, monkeypatch):
    """Controls: the comparison itself discriminates, in both directions."""
    real = packcfg_findings
    case = REPO / "tests" / "cases" / "PK110_offline_mbs4.yaml"

    # packcfg without PK110: Bridge still rejects MBS 4 with offline packing -> the oracle must fail.
    monkeypatch.setitem(globals(), "packcfg_findings", lambda *a: ({}, ""))
    with pytest.raises(AssertionError, match="packcfg bug: Bridge rejects"):
        _check(case, bridge, tmp_path)

    # packcfg with an error no Bridge check and no listed reason explains -> the oracle must fail.
    shipped = REPO / "recipes" / "llama3_8b_packed_sft.yaml"

    def with_extra(*args):
        codes, text = real(*args)
        return {**codes, "ZZ999": "error"}, text + "; ZZ999 invented"

    monkeypatch.setitem(globals(), "packcfg_findings", with_extra)
    (tmp_path / "b").mkdir()
    with pytest.raises(AssertionError, match="no reason is listed"):
        _check(shipped, bridge, tmp_path / "b")
