"""Hostile inputs through the real CLI, command by command (what `scripts/adversary.py` swept, as tests).

Each case builds a fresh folder, runs one `packcfg ...` in it (tests/robustness/packcfg_cli.py: a real
`python -m packcfg` process, or, for the large matrices of hostile files, overrides and records,
`packcfg.cli.main` in this process, ~1 s less per case) and asserts the contract every command keeps,
whatever the input:
- no Python traceback reaches the user;
- the exit status is 0, 1 or 2 (130/143 only on signals, which no case sends);
- every file the case protects (the command's inputs, files beside its outputs) keeps its content, kind
  (file, link, FIFO) and link target;
- a case that must be refused exits non-zero (never a silent 0), one that must succeed exits 0.

Cases the other robustness suites already cover are not repeated here: `--output` over the config or a
`-c` file, FIFO configs and symlink loops (test_lint_inputs.py), `pack --out`/`--metadata` over its source
(test_pack_inputs.py), code planted in checkpoints (test_checkpoint_payloads.py).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from .packcfg_cli import ROOT, run, run_in_process

TINY = ROOT / "recipes" / "tiny_cpu_sft.yaml"
CASES = ROOT / "tests" / "cases"
CONTRACT = (0, 1, 2)


def fingerprint(path: Path) -> tuple:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return ("missing",)
    if stat.S_ISLNK(st.st_mode):
        return ("link", os.readlink(path))
    if stat.S_ISREG(st.st_mode):
        return ("file", hashlib.sha256(path.read_bytes()).hexdigest(), stat.S_IMODE(st.st_mode))
    if stat.S_ISDIR(st.st_mode):
        return ("dir",)
    return ("special", stat.S_IFMT(st.st_mode))


def attempt(
    folder: Path,
    argv: list[str],
    *,
    expect: str = "any",
    protect: tuple[str, ...] = (),
    timeout: float = 120,
    env: dict[str, str] | None = None,
    in_process: bool = False,
) -> subprocess.CompletedProcess:
    """Run `packcfg ARGV` in `folder` and assert the contract (module docstring); `expect`: "refuse" (exit
    non-zero), "ok" (exit 0) or "any". `in_process`: through `packcfg.cli.main` here (the matrices), not a
    new interpreter."""
    before = {p: fingerprint(folder / p) for p in protect}
    try:
        proc = (
            run_in_process(argv, folder, env=env)
            if in_process
            else run(argv, folder, timeout=timeout, env=env)
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"packcfg {' '.join(argv)}: no answer in {timeout} s")
    out = proc.stdout + proc.stderr
    assert "Traceback (most recent call last)" not in out, out[-3000:]
    assert proc.returncode in CONTRACT, f"exit {proc.returncode}: {out[-2000:]}"
    changed = [p for p in protect if fingerprint(folder / p) != before[p]]
    assert changed == [], f"changed: {changed} (exit {proc.returncode}): {out[-2000:]}"
    if expect == "refuse":
        assert proc.returncode != 0, f"expected a refusal, got exit 0: {out[-2000:]}"
    elif expect == "ok":
        assert proc.returncode == 0, f"expected success, got exit {proc.returncode}: {out[-2000:]}"
    return proc


def write(folder: Path, name: str, data: str | bytes) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.encode("utf-8") if isinstance(data, str) else data)
    return path


def tiny_config(folder: Path, extra: str = "") -> Path:
    """The tiny CPU recipe with its bundled data paths made absolute (the folder is a temporary one)."""
    text = TINY.read_text()
    text = text.replace(
        '"@packcfg/data/sample_sft/tokenizer.json"', str(ROOT / "packcfg/data/sample_sft/tokenizer.json")
    )
    text = text.replace('"@packcfg/data/sample_sft"', str(ROOT / "packcfg/data/sample_sft"))
    return write(folder, "exp.yaml", text + extra)


# The matrices (every hostile input x every variant): hundreds of cases, run through `packcfg.cli.main` in this
# process (`in_process`); every other case here starts the real command.
slow = pytest.mark.slow


def test_the_checks_can_fail(tmp_path: Path) -> None:
    """The controls: a success where a refusal is expected, and a changed protected file, are caught."""
    write(tmp_path, "a.yaml", MINIMAL)
    with pytest.raises(AssertionError, match="expected a refusal"):
        attempt(tmp_path, ["lint", "a.yaml"], expect="refuse")
    shutil.copy(CASES / "PK110_offline_mbs4.yaml", tmp_path / "exp.yaml")
    with pytest.raises(AssertionError, match="changed: \\['exp.yaml'\\]"):
        attempt(tmp_path, ["lint", "exp.yaml", "--fix"], protect=("exp.yaml",))
    before = fingerprint(tmp_path / "a.yaml")
    os.chmod(tmp_path / "a.yaml", 0o600)
    assert fingerprint(tmp_path / "a.yaml") != before  # the mode counts too
    os.symlink("a.yaml", tmp_path / "l.yaml")
    assert fingerprint(tmp_path / "l.yaml") == ("link", "a.yaml")


def test_the_in_process_checks_can_fail(tmp_path: Path, monkeypatch) -> None:
    """In process, an exception escaping `main` is the user's traceback, and the exit status and the working
    folder are the command's own: each is caught or kept."""
    import packcfg.cli

    write(tmp_path, "a.yaml", MINIMAL)
    proc = attempt(tmp_path, ["lint", "a.yaml", "--format", "json"], expect="ok", in_process=True)
    assert json.loads(proc.stdout) == []  # the command's own stdout, captured: no findings
    here = os.getcwd()

    def crash(argv):
        raise KeyError("boom")

    monkeypatch.setattr(packcfg.cli, "main", crash)
    with pytest.raises(AssertionError, match="Traceback"):
        attempt(tmp_path, ["lint", "a.yaml"], in_process=True)
    monkeypatch.setattr(packcfg.cli, "main", lambda argv: sys.exit(3))
    with pytest.raises(AssertionError, match="exit 3"):
        attempt(tmp_path, ["lint", "a.yaml"], in_process=True)
    assert os.getcwd() == here


# ---------------------------------------------------------------------------------------------------- lint

MINIMAL = "model:\n  tensor_model_parallel_size: 1\ntrain:\n  micro_batch_size: 1\n  global_batch_size: 8\n"

BAD_YAML: dict[str, bytes | str] = {
    "empty": "",
    "comment_only": "# nothing\n",
    "binary": bytes(range(256)) * 4,
    "latin1": "model:\n  name: caf\xe9\n".encode("latin-1"),
    "bom_crlf": "\ufeffmodel:\r\n  tensor_model_parallel_size: 2\r\n",
    "tabs": "model:\n\ttensor_model_parallel_size: 2\n",
    "duplicate": "train:\n  micro_batch_size: 1\n  micro_batch_size: 2\n",
    "top_list": "- a\n- b\n",
    "top_scalar": "42\n",
    "unclosed": "model: {tensor_model_parallel_size: 2\n",
    "python_tag": "model: !!python/object/apply:os.system ['touch pwned']\n",
    "alias_bomb": "a: &a [x, x, x, x, x, x, x, x, x]\n"
    + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}]\n"
        for i in range(12)
    ),
    "deep": "a: " + "[" * 5000 + "]" * 5000 + "\n",
    "huge_int": "train:\n  micro_batch_size: " + "9" * 5000 + "\n",
    "nan": "train:\n  micro_batch_size: .nan\n",
    "inf_float": "optimizer:\n  lr: .inf\n",
    "neg": "train:\n  micro_batch_size: -1\n",
    "bool_tp": "model:\n  tensor_model_parallel_size: yes\n",
    "string_mbs": "train:\n  micro_batch_size: two\n",
    "sci_float": "optimizer:\n  lr: 1e-5\n  min_lr: 5e-7\n",
    "interp": "model:\n  seq_length: 4096\ndataset:\n  seq_length: ${model.seq_length}\n",
    "interp_cycle": "a:\n  b: ${a.c}\n  c: ${a.b}\n",
    "interp_missing": "dataset:\n  seq_length: ${model.nope}\n",
    "interp_env": "dataset:\n  seq_length: ${oc.env:SEQ}\n",
    "interp_bad": "dataset:\n  seq_length: ${model.\n",
    "multi_doc": "model: {}\n---\ntrain: {}\n",
    "null_sections": "model:\ntrain:\ndataset:\n",
    "list_sections": "model: [1, 2]\ntrain: 3\n",
    "control_chars": 'model:\n  name: "\\x1b[31mred\\n::warning::x"\n',
    "unknown_keys": "model:\n  tensor_model_paralel_size: 2\nlaunch:\n  bakend: slurm\n",
    "long_line": "model:\n  name: " + "x" * 2_000_000 + "\n",
    "builder": "model:\n  _builder_: megatron.bridge.models.gpt_provider.GPTModelProvider\n  transformer:\n    context_parallel_size: 2\n",
    "enum_dump": "model:\n  cuda_graph_scope:\n  - _target_: megatron.core.transformer.enums.CudaGraphScope\n    _args_: [attn]\n    _name_: attn\n",
}

BAD_OVERRIDES = [
    "=",
    "=1",
    "a",
    "+",
    "~",
    "++",
    "a..b=1",
    "a.=1",
    ".a=1",
    "a=[1,",
    "a={b:",
    "a='x",
    "train.micro_batch_size=[",
    "~train.nope",
    "+train.micro_batch_size=2",
    "++train.micro_batch_size=2",
    "train.micro_batch_size=1e400",
    "model.tensor_model_parallel_size=${oc.env:TP}",
    "a=\x1b[31m",
    "a.b.c.d.e.f=1",
    "train=3",
    "train.micro_batch_size.x=1",
]


@slow
@pytest.mark.parametrize("name", list(BAD_YAML))
def test_lint_hostile_yaml(tmp_path: Path, name: str) -> None:
    write(tmp_path, "exp.yaml", BAD_YAML[name])
    attempt(tmp_path, ["lint", "exp.yaml"], protect=("exp.yaml",), in_process=True)


@slow
@pytest.mark.parametrize("name", list(BAD_YAML))
def test_lint_fix_hostile_yaml(tmp_path: Path, name: str) -> None:
    write(tmp_path, "exp.yaml", BAD_YAML[name])
    attempt(tmp_path, ["lint", "exp.yaml", "--fix"], in_process=True)


@pytest.mark.parametrize("fmt", ["json", "sarif", "github", "junit"])
def test_every_reporter_takes_every_hostile_yaml(tmp_path: Path, fmt: str) -> None:
    """All the hostile files in one folder, through each reporter: still the contract, and the machine
    formats stay parseable."""
    names = [f"{name}.yaml" for name in BAD_YAML]
    for name in BAD_YAML:
        write(tmp_path, f"{name}.yaml", BAD_YAML[name])
    proc = attempt(tmp_path, ["lint", ".", "--format", fmt], protect=tuple(names), timeout=300)
    if fmt in ("json", "sarif"):
        json.loads(proc.stdout)
    if fmt == "junit":
        import xml.etree.ElementTree as ET

        ET.fromstring(proc.stdout)


@slow
@pytest.mark.parametrize("flag", ["positional", "-o"])
@pytest.mark.parametrize("override", BAD_OVERRIDES)
def test_lint_hostile_override(tmp_path: Path, override: str, flag: str) -> None:
    write(tmp_path, "exp.yaml", MINIMAL)
    args = [override] if flag == "positional" else ["-o", override]
    attempt(tmp_path, ["lint", "exp.yaml", *args], protect=("exp.yaml",), in_process=True)


def _output_dev_full(d: Path) -> list[str]:
    return ["lint", "a.yaml", "--output", "/dev/full"]


def _output_symlink(d: Path) -> list[str]:
    write(d, "precious.txt", "keep me\n")
    os.symlink("precious.txt", d / "report.txt")
    return ["lint", "a.yaml", "--output", "report.txt"]


def _output_fifo(d: Path) -> list[str]:
    os.mkfifo(d / "pipe")
    return ["lint", "a.yaml", "--output", "pipe"]


def _output_dir(d: Path) -> list[str]:
    (d / "out").mkdir()
    return ["lint", "a.yaml", "--output", "out"]


@pytest.mark.parametrize(
    "setup, protect",
    [
        (_output_dev_full, ("a.yaml",)),
        (_output_symlink, ("a.yaml", "precious.txt", "report.txt")),
        (_output_fifo, ("a.yaml", "pipe")),
        (_output_dir, ("a.yaml", "out")),
    ],
    ids=lambda x: x.__name__.lstrip("_") if callable(x) else "",
)
def test_lint_output_that_cannot_take_a_report_is_refused(tmp_path: Path, setup: Callable, protect) -> None:
    write(tmp_path, "a.yaml", MINIMAL)
    attempt(tmp_path, setup(tmp_path), expect="refuse", protect=protect)


def _select_empty(d: Path) -> list[str]:
    write(d, "a.yaml", "train:\n  micro_batch_size: -1\n")
    return ["lint", "a.yaml", "--select", ""]


def _select_unknown(d: Path) -> list[str]:
    write(d, "a.yaml", "train:\n  micro_batch_size: -1\n")
    return ["lint", "a.yaml", "--select", "ZZ999"]


def _broken_link(d: Path) -> list[str]:
    os.symlink("nowhere.yaml", d / "a.yaml")
    return ["lint", "a.yaml"]


def _dir_loop(d: Path) -> list[str]:
    write(d, "sub/a.yaml", MINIMAL)
    os.symlink("..", d / "sub" / "up")
    return ["lint", "."]


def _missing(d: Path) -> list[str]:
    return ["lint", "nope.yaml"]


def _control_chars_in_name(d: Path) -> list[str]:
    write(d, "x\n::warning::evil\x1b[2J.yaml", "train:\n  micro_batch_size: -1\n")
    return ["lint", ".", "--format", "github"]


def _unknown_recipe(d: Path) -> list[str]:
    write(d, "a.yaml", MINIMAL)
    return ["lint", "a.yaml", "--recipe", "llama3_8b_sft_confg"]


def _base_recipe_with_mbs2(d: Path) -> list[str]:
    write(d, "a.yaml", "train:\n  micro_batch_size: 2\n")
    return ["lint", "a.yaml", "--recipe", "llama3_8b_sft_config"]


@pytest.mark.parametrize(
    "setup, expect",
    [
        (_select_empty, "refuse"),
        (_select_unknown, "any"),
        (_broken_link, "refuse"),
        (_dir_loop, "any"),
        (_missing, "refuse"),
        (_control_chars_in_name, "refuse"),
        (_unknown_recipe, "refuse"),
        (_base_recipe_with_mbs2, "refuse"),
    ],
    ids=lambda x: x.__name__.lstrip("_") if callable(x) else str(x),
)
def test_lint_odd_arguments_and_paths(tmp_path: Path, setup: Callable, expect: str) -> None:
    attempt(tmp_path, setup(tmp_path), expect=expect, timeout=60)


def test_fix_with_an_override_is_refused(tmp_path: Path) -> None:
    shutil.copy(CASES / "PK110_offline_mbs4.yaml", tmp_path / "exp.yaml")
    attempt(
        tmp_path,
        ["lint", "exp.yaml", "--fix", "train.micro_batch_size=4"],
        expect="refuse",
        protect=("exp.yaml",),
    )


def test_fix_through_a_symlink_keeps_the_link(tmp_path: Path) -> None:
    shutil.copy(CASES / "LS301_cp_no_per_token_loss.yaml", tmp_path / "real.yaml")
    os.symlink("real.yaml", tmp_path / "exp.yaml")
    attempt(tmp_path, ["lint", "exp.yaml", "--fix"], protect=("exp.yaml",))


def test_fix_of_a_hard_linked_file_is_refused(tmp_path: Path) -> None:
    shutil.copy(CASES / "LS301_cp_no_per_token_loss.yaml", tmp_path / "exp.yaml")
    os.link(tmp_path / "exp.yaml", tmp_path / "other.yaml")
    attempt(tmp_path, ["lint", "exp.yaml", "--fix"], expect="refuse", protect=("exp.yaml", "other.yaml"))


def test_fix_of_a_file_shared_through_c_is_refused(tmp_path: Path) -> None:
    specs = (
        "dataset:\n  enable_offline_packing: true\n  offline_packing_specs:\n    packed_sequence_size: {}\n"
    )
    write(tmp_path, "a/exp.yaml", specs.format(4096))
    write(tmp_path, "b/exp.yaml", specs.format(2048))
    write(tmp_path, "shared.yaml", "train:\n  micro_batch_size: 4\n  global_batch_size: 128\n")
    attempt(
        tmp_path,
        ["lint", "a", "b", "-c", "shared.yaml", "--fix"],
        expect="refuse",
        protect=("a/exp.yaml", "b/exp.yaml", "shared.yaml"),
    )


def test_fix_of_a_read_only_file(tmp_path: Path) -> None:
    shutil.copy(CASES / "PK110_offline_mbs4.yaml", tmp_path / "exp.yaml")
    os.chmod(tmp_path / "exp.yaml", 0o444)
    attempt(tmp_path, ["lint", "exp.yaml", "--fix"], in_process=True)


# ---------------------------------------------------------------------------------------------- pack, verify

JSONL = {
    "null_id": '{"input_ids": [1, null, 3]}\n',
    "string_id": '{"input_ids": [1, "2", 3]}\n',
    "float_id": '{"input_ids": [1, 2.5, 3]}\n',
    "bool_id": '{"input_ids": [true, 2]}\n',
    "negative": '{"input_ids": [1, -5, 3]}\n',
    "huge": '{"input_ids": [1, 99999999999999, 3]}\n',
    "nested": '{"input_ids": [[1, 2], [3]]}\n',
    "empty_list": '{"input_ids": []}\n',
    "no_field": '{"tokens": [1, 2]}\n',
    "not_json": "{input_ids: [1, 2]\n",
    "empty_file": "",
    "blank_lines": "\n\n\n",
    "top_array": "[1, 2, 3]\n",
    "bom": '\ufeff{"input_ids": [1, 2]}\n',
    "crlf": '{"input_ids": [1, 2]}\r\n{"input_ids": [3]}\r\n',
    "oversize": '{"input_ids": ' + json.dumps(list(range(1, 2000))) + "}\n",
    "binary": bytes(range(256)),
    "mixed_ok_then_bad": '{"input_ids": [1, 2]}\n' * 100 + '{"input_ids": [1, null]}\n',
}


def _pack_expectation(name: str, oversize: str) -> str:
    if name in ("crlf", "bom", "blank_lines", "empty_list"):
        return "any"
    if name == "oversize":
        # split/truncate pack the sample; error refuses it; drop would leave nothing, which must not be
        # written as an empty pack
        return "any" if oversize in ("split", "truncate") else "refuse"
    return "refuse"


@slow
@pytest.mark.parametrize("oversize", ["error", "drop", "truncate", "split"])
@pytest.mark.parametrize("name", list(JSONL))
def test_pack_hostile_jsonl(tmp_path: Path, name: str, oversize: str) -> None:
    write(tmp_path, "data.jsonl", JSONL[name])
    argv = ["pack", "data.jsonl", "--capacity", "512", "--oversize", oversize, "--out", "out.parquet", "-q"]
    attempt(
        tmp_path, argv, expect=_pack_expectation(name, oversize), protect=("data.jsonl",), in_process=True
    )


GOOD = "".join(json.dumps({"input_ids": list(range(1, 1 + (i % 50) + 5))}) + "\n" for i in range(200))
PACK = ["pack", "data.jsonl", "--capacity", "256"]


def _out_hardlink_input(d: Path) -> list[str]:
    os.link(d / "data.jsonl", d / "out.parquet")
    return [*PACK, "--out", "out.parquet"]


def _out_symlink(d: Path) -> list[str]:
    write(d, "precious.bin", "keep\n")
    os.symlink("precious.bin", d / "out.parquet")
    return [*PACK, "--out", "out.parquet"]


def _out_dev_full(d: Path) -> list[str]:
    return [*PACK, "--out", "/dev/full"]


def _out_fifo(d: Path) -> list[str]:
    os.mkfifo(d / "out.parquet")
    return [*PACK, "--out", "out.parquet"]


def _foreign_parquet(d: Path) -> list[str]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"x": [1, 2, 3]}), d / "out.parquet")
    return [*PACK, "--out", "out.parquet"]


def _capacity_zero(d: Path) -> list[str]:
    return ["pack", "data.jsonl", "--capacity", "0", "--out", "o.parquet"]


def _capacity_negative(d: Path) -> list[str]:
    return ["pack", "data.jsonl", "--capacity", "-3", "--out", "o.parquet"]


def _align_above_capacity(d: Path) -> list[str]:
    return [*PACK, "--align", "1000", "--out", "o.parquet"]


def _corrupt_parquet_input(d: Path) -> list[str]:
    write(d, "data.parquet", b"PAR1" + os.urandom(500) + b"PAR1")
    return ["pack", "data.parquet", "--capacity", "256", "--out", "o.parquet"]


def _config_out_is_the_config(d: Path) -> list[str]:
    tiny_config(d)
    return ["pack", "exp.yaml", "--out", "exp.yaml"]


@pytest.mark.parametrize(
    "setup, protect",
    [
        (_out_hardlink_input, ("data.jsonl", "out.parquet")),
        (_out_symlink, ("data.jsonl", "precious.bin", "out.parquet")),
        (_out_dev_full, ("data.jsonl",)),
        (_out_fifo, ("data.jsonl", "out.parquet")),
        (_foreign_parquet, ("data.jsonl", "out.parquet")),
        (_capacity_zero, ("data.jsonl",)),
        (_capacity_negative, ("data.jsonl",)),
        (_align_above_capacity, ("data.jsonl",)),
        (_corrupt_parquet_input, ("data.parquet",)),
        (_config_out_is_the_config, ("exp.yaml",)),
    ],
    ids=lambda x: x.__name__.lstrip("_") if callable(x) else "",
)
def test_pack_refuses_what_it_cannot_do(tmp_path: Path, setup: Callable, protect: tuple[str, ...]) -> None:
    write(tmp_path, "data.jsonl", GOOD)
    attempt(tmp_path, setup(tmp_path), expect="refuse", protect=protect)


@pytest.fixture(scope="module")
def packed_once(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("packed")
    write(folder, "data.jsonl", GOOD)
    attempt(folder, [*PACK, "--out", "p.parquet", "-q"], expect="ok")
    return folder


@pytest.fixture
def packed(packed_once: Path, tmp_path: Path) -> Path:
    """A folder holding data.jsonl, p.parquet and its metadata, fresh for each test."""
    for f in packed_once.iterdir():
        shutil.copy(f, tmp_path / f.name)
    return tmp_path


def _tamper(folder: Path, mutate: Callable[[list[dict]], None]) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = pq.read_table(folder / "p.parquet").to_pylist()
    mutate(rows)
    pq.write_table(pa.Table.from_pylist(rows), folder / "p.parquet")


def _reversed_starts(rows: list[dict]) -> None:
    rows[0]["seq_start_id"] = [*reversed(rows[0]["seq_start_id"]), 10**6]


TAMPER = {
    "duplicate_row": lambda rows: rows.append(dict(rows[0])),
    "dropped_row": lambda rows: rows.pop(),
    "negative_id": lambda rows: rows[0]["input_ids"].__setitem__(0, -7),
    "bad_starts": _reversed_starts,
    "short_mask": lambda rows: rows[0].__setitem__("loss_mask", rows[0]["loss_mask"][:-3]),
}


@pytest.mark.parametrize("name", list(TAMPER))
def test_verify_refuses_a_tampered_file(packed: Path, name: str) -> None:
    _tamper(packed, TAMPER[name])
    attempt(packed, ["verify", "p.parquet"], expect="refuse", protect=("p.parquet",))


def test_verify_passes_the_file_it_packed(packed: Path) -> None:
    attempt(packed, ["verify", "p.parquet", "--source", "data.jsonl"], expect="ok")


def test_verify_without_metadata(packed: Path) -> None:
    for meta in packed.glob("*.json"):
        meta.unlink()
    attempt(packed, ["verify", "p.parquet"])


def test_verify_refuses_garbage_metadata(packed: Path) -> None:
    for meta in packed.glob("*.json"):
        meta.write_text("{not json")
    attempt(packed, ["verify", "p.parquet"], expect="refuse")


def test_verify_refuses_another_source(packed: Path) -> None:
    write(packed, "other.jsonl", GOOD.replace("[1, 2, 3, 4, 5]", "[9, 9, 9, 9, 9]"))
    attempt(packed, ["verify", "p.parquet", "--source", "other.jsonl"], expect="refuse")


def _corrupt(d: Path) -> None:
    write(d, "p.parquet", b"PAR1garbagePAR1")


def _wrong_columns(d: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"a": [1]}), d / "p.parquet")


def _a_folder(d: Path) -> None:
    (d / "p.parquet").mkdir()


@pytest.mark.parametrize("setup", [_corrupt, _wrong_columns, _a_folder], ids=lambda f: f.__name__.lstrip("_"))
def test_verify_refuses_what_is_not_a_packed_file(tmp_path: Path, setup: Callable) -> None:
    setup(tmp_path)
    attempt(tmp_path, ["verify", "p.parquet"], expect="refuse")


# ---------------------------------------------------------------------------------------- render, job records


def _render_into_the_config_folder(d: Path) -> list[str]:
    write(d, "config.yaml", "# my own config, comments matter\nmodel: {}\n")
    write(d, "sbatch.sh", "#!/bin/bash\necho mine\n")
    return ["render", "exp.yaml", "--out", "."]


def _render_dash_o_into_the_config_folder(d: Path) -> list[str]:
    write(d, "config.yaml", "# mine\n")
    return ["render", "exp.yaml", "-o", "."]


def _render_over_the_config(d: Path) -> list[str]:
    return ["render", "exp.yaml", "--out", "exp.yaml"]


def _render_through_a_symlink(d: Path) -> list[str]:
    write(d, "real/keep.txt", "x")
    os.symlink("real", d / "bundle")
    return ["render", "exp.yaml", "--out", "bundle"]


def _edit(d: Path, old: str, new: str) -> None:
    path = d / "exp.yaml"
    text = path.read_text()
    assert old in text, old
    path.write_text(text.replace(old, new))


def _literal_secret(d: Path) -> list[str]:
    _edit(
        d, "logger:\n  log_interval: 1\n", "logger:\n  log_interval: 1\n  wandb_api_key: abcdef0123456789\n"
    )
    return ["render", "exp.yaml", "--out", "b"]


def _literal_secret_in_env(d: Path) -> list[str]:
    _edit(d, "  engine: packcfg\n", "  engine: packcfg\n  env:\n    MY_SECRET_THING: hunter2\n")
    return ["render", "exp.yaml", "--out", "b"]


def _token_file_is_no_secret(d: Path) -> list[str]:
    _edit(d, "  engine: packcfg\n", "  engine: packcfg\n  env:\n    MY_TOKEN_FILE: /secrets/tok\n")
    return ["render", "exp.yaml", "--out", "b"]


def _shell_in_the_name(d: Path) -> list[str]:
    _edit(d, "name: tiny_cpu_sft", 'name: "x$(touch pwned);`id`"')
    return ["render", "exp.yaml", "--out", "b"]


def _unknown_backend(d: Path) -> list[str]:
    return ["render", "exp.yaml", "--out", "b", "launch.backend=kubernetes"]


def _gate_blocks(d: Path) -> list[str]:
    return ["render", "exp.yaml", "--out", "b", "train.micro_batch_size=4"]


@pytest.mark.parametrize(
    "setup, expect, protect",
    [
        (_render_into_the_config_folder, "refuse", ("exp.yaml", "config.yaml", "sbatch.sh")),
        (_render_dash_o_into_the_config_folder, "refuse", ("exp.yaml", "config.yaml")),
        (_render_over_the_config, "refuse", ("exp.yaml",)),
        (_render_through_a_symlink, "refuse", ("exp.yaml", "bundle", "real/keep.txt")),
        (_literal_secret, "refuse", ("exp.yaml",)),
        (_literal_secret_in_env, "refuse", ("exp.yaml",)),
        (_token_file_is_no_secret, "ok", ("exp.yaml",)),
        (_shell_in_the_name, "any", ("exp.yaml", "pwned")),
        (_unknown_backend, "refuse", ("exp.yaml",)),
        (_gate_blocks, "refuse", ("exp.yaml",)),
    ],
    ids=lambda x: x.__name__.lstrip("_") if callable(x) else "",
)
def test_render(tmp_path: Path, setup: Callable, expect: str, protect: tuple[str, ...]) -> None:
    tiny_config(tmp_path)
    attempt(tmp_path, setup(tmp_path), expect=expect, protect=protect)


CORRUPT_RECORDS = {
    "empty": b"",
    "truncated": b'{"job_id": "j1", "backend": "lo',
    "wrong_type": b"[1, 2, 3]",
    "binary": bytes(range(256)),
    "missing_fields": b'{"job_id": "j1"}',
    "unknown_backend": b'{"job_id": "j1", "backend": "nope", "status": "RUNNING"}',
}


@slow
@pytest.mark.parametrize("command", ["status", "logs", "cancel"])
@pytest.mark.parametrize("record", list(CORRUPT_RECORDS))
def test_job_commands_on_a_corrupt_record(tmp_path: Path, record: str, command: str) -> None:
    write(tmp_path, "store/jobs/j1.json", CORRUPT_RECORDS[record])
    argv = [command] if command == "status" else [command, "j1"]
    attempt(
        tmp_path, argv, protect=("store/jobs/j1.json",), env={"PACKCFG_STATE_DIR": "store"}, in_process=True
    )


# ---------------------------------------------------------------------------------------------------- train

TRAIN_REFUSALS = {
    "cp2_no_per_token_loss": ["model.context_parallel_size=2", "model.calculate_per_token_loss=false"],
    "offline_mbs4": ["train.micro_batch_size=4"],
    "heads_not_divisible_by_groups": ["model.num_attention_heads=3"],  # query groups stay 2
    "vocab_below_the_tokenizer": ["model.vocab_size=100"],
    "hidden_not_divisible_by_heads": ["model.hidden_size=66", "~model.kv_channels"],
    "bad_override": ["train.micro_batch_size=["],
    "missing_tokenizer": ["tokenizer.tokenizer_model=/nope/tokenizer.json"],
}


@pytest.mark.parametrize("name", list(TRAIN_REFUSALS))
def test_train_refuses_before_it_starts(tmp_path: Path, name: str) -> None:
    tiny_config(tmp_path)
    argv = ["train", "exp.yaml", *TRAIN_REFUSALS[name], "train.train_iters=1"]
    attempt(tmp_path, argv, expect="refuse", protect=("exp.yaml",), timeout=300)


def test_train_refuses_an_empty_latest_file(tmp_path: Path) -> None:
    tiny_config(tmp_path)
    write(tmp_path, "runs/tiny_cpu_sft/checkpoints/latest_checkpointed_iteration.txt", "")
    attempt(tmp_path, ["train", "exp.yaml", "--resume", "train.train_iters=2"], expect="refuse", timeout=300)
