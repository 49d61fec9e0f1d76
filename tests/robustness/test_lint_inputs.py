"""Hostile inputs to `packcfg lint` (issue 22): special files, symlink loops, permissions, override and `${}`
bounds, `--output` over a file the command read, and `--fix` through YAML anchors, aliases and merge keys.

Every case runs the real command in a subprocess with a timeout (a special file must never make it wait) and
asserts the contract: exit 2 with one stderr line naming the thing (or a finding), no traceback, and the
user's files unchanged.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from . import packcfg_cli
from .packcfg_cli import ROOT, refused

CASE = ROOT / "tests" / "cases" / "PK110_offline_mbs4.yaml"
TIMEOUT = 60

PK110_BASE = """\
model:
  seq_length: 4096
  calculate_per_token_loss: true
dataset:
  seq_length: 4096
  enable_offline_packing: true
  offline_packing_specs:
    packed_sequence_size: 4096
train:
  micro_batch_size: 4
  global_batch_size: 128
"""


def run(args: list[str], cwd: Path, *, unprivileged: bool = False, **kw) -> subprocess.CompletedProcess:
    return packcfg_cli.run(args, cwd, timeout=TIMEOUT, unprivileged=unprivileged, **kw)


def no_traceback(proc: subprocess.CompletedProcess) -> str:
    out = proc.stdout + proc.stderr
    assert "Traceback" not in out, out
    assert proc.returncode in (0, 1, 2), out
    return out


@pytest.fixture
def exp(tmp_path: Path) -> Path:
    path = tmp_path / "exp.yaml"
    shutil.copy(CASE, path)
    return path


# ---------------------------------------------------------------------------------------- special files


@pytest.mark.parametrize(
    "args",
    [
        ["/dev/zero"],
        ["-c", "/dev/zero"],
        ["exp.yaml", "-c", "/dev/zero"],
        ["exp.yaml", "--pack-metadata", "/dev/zero"],
    ],
    ids=["config", "dash-c", "extra-c", "pack-metadata"],
)
def test_dev_zero_is_refused_not_read(exp: Path, args: list[str]) -> None:
    refused(run(["lint", *args], exp.parent), "/dev/zero", "character device")


@pytest.mark.parametrize(
    "args",
    [
        ["pipe.yaml"],
        ["-c", "pipe.yaml"],
        ["exp.yaml", "--pack-metadata", "pipe.yaml"],
        ["exp.yaml", "-c", "pipe.yaml", "--fix"],
    ],
    ids=["config", "dash-c", "pack-metadata", "fix"],
)
def test_fifo_is_refused_never_waited_on(exp: Path, args: list[str]) -> None:
    os.mkfifo(exp.parent / "pipe.yaml")
    before = exp.read_bytes()
    refused(run(["lint", *args], exp.parent), "pipe.yaml", "FIFO")
    assert exp.read_bytes() == before


def test_fifo_found_in_a_folder_walk_is_reported(exp: Path) -> None:
    os.mkfifo(exp.parent / "pipe.yaml")
    for extra in ([], ["--experiments-only"]):
        proc = run(["lint", ".", *extra], exp.parent)
        no_traceback(proc)
        assert proc.returncode == 2 and "pipe.yaml" in proc.stderr and "FIFO" in proc.stderr


@pytest.mark.parametrize("name", ["pyproject.toml", "packcfg.toml"])
def test_settings_file_that_is_a_fifo_is_refused(exp: Path, name: str) -> None:
    os.mkfifo(exp.parent / name)
    refused(run(["lint", "exp.yaml"], exp.parent), name, "FIFO")


# ---------------------------------------------------------------------------------------- symlink loops


@pytest.mark.parametrize("name", ["pyproject.toml", "packcfg.toml"])
def test_symlink_loop_in_settings_discovery(exp: Path, name: str) -> None:
    os.symlink(name, exp.parent / name)
    refused(run(["lint", "exp.yaml"], exp.parent), name, "symlink loop")


def test_symlink_loop_through_two_links(exp: Path) -> None:
    os.symlink("b", exp.parent / "pyproject.toml")
    os.symlink("pyproject.toml", exp.parent / "b")
    refused(run(["lint", "exp.yaml"], exp.parent), "pyproject.toml", "symlink loop")


@pytest.mark.parametrize("args", [["loop.yaml"], ["-c", "loop.yaml"]], ids=["path", "dash-c"])
def test_config_that_is_a_symlink_loop(exp: Path, args: list[str]) -> None:
    os.symlink("loop.yaml", exp.parent / "loop.yaml")
    refused(run(["lint", *args], exp.parent), "loop.yaml", "symlink loop")


# ---------------------------------------------------------------------------------------- permissions


def test_unreadable_config_file(exp: Path) -> None:
    exp.chmod(0)
    try:
        refused(run(["lint", "exp.yaml"], exp.parent, unprivileged=True), "exp.yaml", "ermission denied")
    finally:
        exp.chmod(0o644)


@pytest.mark.parametrize(
    "args", [["sub/exp.yaml"], ["-c", "sub/exp.yaml"], ["sub"]], ids=["file", "c", "dir"]
)
def test_config_under_unreadable_folder(tmp_path: Path, args: list[str]) -> None:
    sub = tmp_path / "sub"
    sub.mkdir()
    shutil.copy(CASE, sub / "exp.yaml")
    sub.chmod(0)
    try:
        refused(run(["lint", *args], tmp_path, unprivileged=True), "sub", "ermission denied")
    finally:
        sub.chmod(0o755)


def test_unreadable_settings_file(exp: Path) -> None:
    settings = exp.parent / "pyproject.toml"
    settings.write_text("[tool.packcfg]\n")
    settings.chmod(0)
    try:
        refused(
            run(["lint", "exp.yaml"], exp.parent, unprivileged=True), "pyproject.toml", "ermission denied"
        )
    finally:
        settings.chmod(0o644)


def test_fix_in_a_read_only_folder(tmp_path: Path) -> None:
    ro = tmp_path / "ro"
    ro.mkdir()
    shutil.copy(CASE, ro / "exp.yaml")
    before = (ro / "exp.yaml").read_bytes()
    ro.chmod(0o555)
    try:
        proc = run(["lint", "ro/exp.yaml", "--fix"], tmp_path, unprivileged=True)
    finally:
        ro.chmod(0o755)
    no_traceback(proc)
    assert proc.returncode == 2
    assert "ro/exp.yaml: not fixed:" in proc.stderr and "ermission denied" in proc.stderr
    assert (ro / "exp.yaml").read_bytes() == before
    assert sorted(p.name for p in ro.iterdir()) == ["exp.yaml"]  # no temporary left


# ---------------------------------------------------------------------------------------- bounds


def test_override_key_with_thousands_of_dots(exp: Path) -> None:
    key = "train." + ".".join(["a"] * 5000)
    line = refused(run(["lint", "exp.yaml", f"{key}=1"], exp.parent), "5001 levels", "at most 100")
    assert len(line) < 400  # the 10 kB override is cut in the message


def test_override_value_nested_thousands_deep(exp: Path) -> None:
    value = "[" * 5000 + "]" * 5000
    refused(run(["lint", "exp.yaml", f"train.x={value}"], exp.parent), "deeper than 100")


def test_long_interpolation_chain_is_a_finding(tmp_path: Path) -> None:
    lines = ["x:", *(f"  v{i}: ${{x.v{i + 1}}}" for i in range(3000)), "  v3000: 1"]
    (tmp_path / "chain.yaml").write_text("\n".join(lines) + "\n")
    proc = run(["lint", "chain.yaml"], tmp_path)
    no_traceback(proc)
    assert proc.returncode == 1
    assert "SC002" in proc.stdout and "interpolation chain longer than 64 steps" in proc.stdout


def _limit_memory() -> None:  # pragma: no cover - runs in the child
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))


def test_doubling_interpolation_chain_is_bounded(tmp_path: Path) -> None:
    # 16 characters doubled 40 times is 16 TiB: the bound stops it at 1 MiB, within a 3 GiB address space
    lines = ["x:", "  v0: aaaaaaaaaaaaaaaa", *(f"  v{i + 1}: ${{x.v{i}}}${{x.v{i}}}" for i in range(40))]
    (tmp_path / "dbl.yaml").write_text("\n".join(lines) + "\n")
    proc = run(["lint", "dbl.yaml"], tmp_path, preexec_fn=_limit_memory)
    no_traceback(proc)
    assert proc.returncode == 1
    assert "expands past 1,048,576 characters" in proc.stdout


def test_doubling_chain_of_lists_is_bounded(tmp_path: Path) -> None:
    # shared lists: cheap to build, but every later walk would visit 2^60 values
    lines = ["x:", "  v0: [1]", *(f"  v{i + 1}: ['${{x.v{i}}}', '${{x.v{i}}}']" for i in range(60))]
    (tmp_path / "dbl.yaml").write_text("\n".join(lines) + "\n")
    proc = run(["lint", "dbl.yaml", "--format", "json"], tmp_path, preexec_fn=_limit_memory)
    no_traceback(proc)
    assert proc.returncode == 1 and "expands past" in proc.stdout


def test_doubling_chain_in_a_config_that_runs(tmp_path: Path) -> None:
    """The flows that run a config (mode "run") refuse it with one line."""
    lines = ["x:", "  v0: aaaaaaaaaaaaaaaa", *(f"  v{i + 1}: ${{x.v{i}}}${{x.v{i}}}" for i in range(40))]
    (tmp_path / "dbl.yaml").write_text("\n".join(lines) + "\n")
    refused(run(["analyze", "dbl.yaml"], tmp_path, preexec_fn=_limit_memory), "dbl.yaml", "expands past")


def test_deeply_nested_settings_toml(exp: Path) -> None:
    (exp.parent / "pyproject.toml").write_text("x = " + "[" * 100_000 + "]" * 100_000 + "\n")
    refused(run(["lint", "exp.yaml"], exp.parent), "pyproject.toml", "nested too deeply")


def test_pack_metadata_too_big_or_too_deep(exp: Path) -> None:
    (exp.parent / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    refused(run(["lint", "exp.yaml", "--pack-metadata", "deep.json"], exp.parent), "deep.json", "not JSON")
    with open(exp.parent / "big.json", "wb") as fh:
        fh.truncate(200 << 20)  # sparse: costs no disk
    refused(run(["lint", "exp.yaml", "--pack-metadata", "big.json"], exp.parent), "big.json", "bytes")


# ---------------------------------------------------------------------------------------- --output


@pytest.mark.parametrize("settings_name", ["pyproject.toml", "packcfg.toml"])
def test_output_never_replaces_the_settings_file(exp: Path, settings_name: str) -> None:
    settings = exp.parent / settings_name
    settings.write_text(
        '[tool.packcfg]\nignore = ["MF"]\n' if settings_name == "pyproject.toml" else "ignore = []\n"
    )
    before = settings.read_bytes()
    refused(
        run(["lint", "exp.yaml", "--output", settings_name], exp.parent),
        settings_name,
        "input of this command",
    )
    assert settings.read_bytes() == before


def test_output_never_replaces_a_hard_link_of_an_input(exp: Path) -> None:
    settings = exp.parent / "pyproject.toml"
    settings.write_text("[tool.packcfg]\n")
    os.link(settings, exp.parent / "report.txt")
    before = settings.read_bytes()
    refused(
        run(["lint", "exp.yaml", "--output", "report.txt"], exp.parent), "report.txt", "input of this command"
    )
    assert settings.read_bytes() == before


@pytest.mark.parametrize(
    "args",
    [
        ["exp.yaml", "--output", "exp.yaml"],
        ["-c", "exp.yaml", "--output", "exp.yaml"],
        ["exp.yaml", "--pack-metadata", "meta.json", "--output", "meta.json"],
    ],
    ids=["path", "dash-c", "pack-metadata"],
)
def test_output_never_replaces_an_input(exp: Path, args: list[str]) -> None:
    (exp.parent / "meta.json").write_text('[{"pack_size": 4096}]\n')
    before = {p.name: p.read_bytes() for p in exp.parent.iterdir()}
    refused(run(["lint", *args], exp.parent), "input of this command")
    assert {p.name: p.read_bytes() for p in exp.parent.iterdir()} == before


# ---------------------------------------------------------------------------------------- --fix and anchors


def _fix(tmp_path: Path, text: str, *args: str) -> tuple[subprocess.CompletedProcess, Path]:
    path = tmp_path / "exp.yaml"
    path.write_text(text)
    return run(["lint", "exp.yaml", "--fix", *args], tmp_path), path


def _relint(path: Path) -> subprocess.CompletedProcess:
    return run(["lint", path.name, "--format", "json"], path.parent)


def test_fix_of_a_scalar_alias_that_only_one_path_wants_is_refused(tmp_path: Path) -> None:
    text = PK110_BASE.replace("micro_batch_size: 4", "micro_batch_size: &m 4") + "  eval_iters: *m\n"
    proc, path = _fix(tmp_path, text)
    no_traceback(proc)
    assert path.read_text() == text  # unchanged: the anchor stays, nothing written into the other field
    assert proc.returncode == 1  # the finding remains
    assert (
        "PK110: not fixed: train.micro_batch_size is shared through a YAML anchor with train.eval_iters"
        in (proc.stderr)
    )
    yaml.safe_load(path.read_text())


def test_fix_of_an_anchor_every_alias_wants_edits_the_anchor(tmp_path: Path) -> None:
    text = (
        PK110_BASE.replace("  seq_length: 4096\n  calculate", "  seq_length: &s 4096\n  calculate")
        .replace("dataset:\n  seq_length: 4096", "dataset:\n  seq_length: *s")
        .replace("packed_sequence_size: 4096", "packed_sequence_size: *s")
    )
    proc, path = _fix(tmp_path, text)
    no_traceback(proc)
    new = path.read_text()
    assert "seq_length: &s 16384" in new and "seq_length: *s" in new and "packed_sequence_size: *s" in new
    data = yaml.safe_load(new)
    assert data["dataset"]["offline_packing_specs"]["packed_sequence_size"] == 16384
    assert data["train"] == {"micro_batch_size": 1, "global_batch_size": 32}
    assert "PK110" not in _relint(path).stdout


def test_fix_through_an_aliased_mapping_is_refused(tmp_path: Path) -> None:
    text = (
        "defaults: &t\n  micro_batch_size: 4\n  global_batch_size: 128\n"
        + PK110_BASE.split("train:")[0]
        + "train: *t\n"
    )
    proc, path = _fix(tmp_path, text)
    no_traceback(proc)
    assert path.read_text() == text
    assert "train.micro_batch_size is inside train, which is shared through a YAML anchor with defaults" in (
        proc.stderr
    )


def test_fix_of_a_merged_key_gives_the_merging_mapping_its_own_key(tmp_path: Path) -> None:
    text = (
        "common: &c\n  micro_batch_size: 4\n  global_batch_size: 128\n"
        + PK110_BASE.split("train:")[0]
        + "train:\n  <<: *c\n  train_iters: 1000\n"
    )
    proc, path = _fix(tmp_path, text)
    no_traceback(proc)
    data = yaml.safe_load(path.read_text())
    assert data["common"] == {"micro_batch_size": 4, "global_batch_size": 128}  # the anchor is not edited
    assert data["train"]["micro_batch_size"] == 1 and data["train"]["global_batch_size"] == 32
    assert "PK110" not in _relint(path).stdout


def test_rename_of_a_subtree_holding_an_anchor_used_elsewhere_is_refused(tmp_path: Path) -> None:
    text = (ROOT / "tests" / "cases" / "DP801_legacy_specs.yaml").read_text()
    text = text.replace("    packed_sequence_size: 4096\n", "    packed_sequence_size: &ps 4096\n", 1)
    text = text.replace("  train_iters: 1000\n", "  train_iters: 1000\n  exit_interval: *ps\n", 1)
    proc, path = _fix(tmp_path, text, "--bridge-version", "0.6.2")  # DP801 renames for a 0.6+ target only
    no_traceback(proc)
    assert path.read_text() == text
    assert "DP801: not fixed: dataset.packed_sequence_specs holds a YAML anchor that train.exit_interval" in (
        proc.stderr
    )


def test_refused_fix_leaves_the_other_fixes_applied(tmp_path: Path) -> None:
    text = "recipe:\n  family: llama\n  mode: sft\n" + (
        PK110_BASE.replace("micro_batch_size: 4", "micro_batch_size: &m 4")
        .replace(
            "calculate_per_token_loss: true", "calculate_per_token_loss: false\n  context_parallel_size: 2"
        )
        .replace("packed_sequence_size: 4096", "packed_sequence_size: 4096\n    pad_seq_to_mult: 4")
        + "  eval_iters: *m\n"
    )
    proc, path = _fix(tmp_path, text)
    no_traceback(proc)
    data = yaml.safe_load(path.read_text())
    assert data["model"]["calculate_per_token_loss"] is True  # LS301's fix was written
    assert data["train"]["micro_batch_size"] == 4 and data["train"]["eval_iters"] == 4  # PK110's was not
    assert "micro_batch_size: &m 4" in path.read_text()
    assert "PK110: not fixed" in proc.stderr
    relint = _relint(path).stdout
    assert "LS301" not in relint and "PK110" in relint


def test_fix_whose_result_would_not_read_back_is_not_written(
    exp: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The safety net: whatever the editor produced, a text that does not re-read as intended is not written."""
    from packcfg.cli import main
    from packcfg.lint import fix

    real = fix.apply_edits

    def broken(text, edits):  # an editor bug: the new text loses a key
        new, problems = real(text, edits)
        return new.replace("  train_iters: 1000\n", ""), problems

    monkeypatch.setattr(fix, "apply_edits", broken)
    before = exp.read_bytes()
    rc = main(["lint", str(exp), "--fix"])
    err = capsys.readouterr().err
    assert rc == 1 and "Traceback" not in err
    assert "not fixed: the edited file would not read back as intended (train.train_iters is missing)" in err
    assert exp.read_bytes() == before
