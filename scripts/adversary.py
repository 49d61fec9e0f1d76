"""Try packcfg as an adversarial user would and count the outcome classes per command.

Each case builds a fresh folder, runs one real `python -m packcfg ...` command in it and classifies the result:
- **traceback**: a Python traceback reached the user (stdout or stderr);
- **bad exit**: an exit code outside the documented contract (0, 1, 2; 130/143 on signals);
- **data lost**: a file the user had (every file the case marks as protected, the command's inputs included)
  changed content, kind (file, link, FIFO, device) or link target;
- **silent wrong result**: the case expects a refusal (exit 1 or 2) and the command exited 0;
- **clear error** / **ok** otherwise (an error exit with a one-line message, or success).

Usage: `python scripts/adversary.py [--only lint,pack] [--jobs 2] [--verbose]`. Prints a table; exit 1 when any
case lands in traceback, bad exit, data lost or silent wrong result. Not a test: it takes minutes.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections import Counter, defaultdict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "recipes" / "tiny_cpu_sft.yaml"
BAD_CLASSES = ("traceback", "bad exit", "data lost", "silent wrong result")


@dataclass
class Case:
    command: str
    name: str
    setup: Callable[[Path], list[str]]  # builds files in the folder, returns argv after `packcfg`
    expect: str = "any"  # "refuse": must exit non-zero; "ok": must exit 0; "any"
    protect: tuple[str, ...] = ()  # paths (relative) whose content/kind must not change
    timeout: float = 120.0
    env: dict[str, str] = field(default_factory=dict)


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


def run_case(case: Case) -> tuple[Case, str, str]:
    folder = Path(tempfile.mkdtemp(prefix="packcfg-adv-"))
    try:
        argv = case.setup(folder)
        before = {p: fingerprint(folder / p) for p in case.protect}
        env = {**os.environ, "PYTHONWARNINGS": "ignore", **case.env}
        try:
            proc = subprocess.run(
                [sys.executable, "-m", "packcfg", *argv],
                cwd=folder,
                capture_output=True,
                text=True,
                errors="replace",
                timeout=case.timeout,
                env=env,
                stdin=subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired:
            return case, "bad exit", "timed out"
        out = proc.stdout + proc.stderr
        after = {p: fingerprint(folder / p) for p in case.protect}
        last = (proc.stderr.strip().splitlines() or proc.stdout.strip().splitlines() or [""])[-1][:160]
        if "Traceback (most recent call last)" in out:
            return case, "traceback", last
        if proc.returncode not in (0, 1, 2, 130, 143):
            return case, "bad exit", f"rc {proc.returncode}: {last}"
        changed = [p for p in case.protect if before[p] != after[p]]
        if changed:
            return case, "data lost", f"changed: {', '.join(changed)} (rc {proc.returncode})"
        if case.expect == "refuse" and proc.returncode == 0:
            return case, "silent wrong result", f"exit 0: {last}"
        if case.expect == "ok" and proc.returncode != 0:
            return case, "bad exit", f"expected success, rc {proc.returncode}: {last}"
        return case, ("ok" if proc.returncode == 0 else "clear error"), f"rc {proc.returncode}: {last}"
    finally:
        shutil.rmtree(folder, ignore_errors=True)


# ----------------------------------------------------------------------------------------------------- inputs
def write(folder: Path, name: str, data: str | bytes) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, str):
        data = data.encode("utf-8")
    path.write_bytes(data)
    return path


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


def lint_cases() -> list[Case]:
    cases: list[Case] = []
    for name, text in BAD_YAML.items():

        def setup(d: Path, text=text) -> list[str]:
            write(d, "exp.yaml", text)
            return ["lint", "exp.yaml"]

        cases.append(Case("lint", f"yaml:{name}", setup, protect=("exp.yaml",)))
        for fmt in ("json", "sarif", "github", "junit"):

            def setup_fmt(d: Path, text=text, fmt=fmt) -> list[str]:
                write(d, "exp.yaml", text)
                return ["lint", "exp.yaml", "--format", fmt]

            cases.append(Case("lint", f"yaml:{name}:{fmt}", setup_fmt, protect=("exp.yaml",)))

        def setup_fix(d: Path, text=text) -> list[str]:
            write(d, "exp.yaml", text)
            return ["lint", "exp.yaml", "--fix"]

        cases.append(Case("lint", f"yaml:{name}:fix", setup_fix))
    for ov in BAD_OVERRIDES:

        def setup_ov(d: Path, ov=ov) -> list[str]:
            write(d, "exp.yaml", MINIMAL)
            return ["lint", "exp.yaml", ov]

        cases.append(Case("lint", f"override:{ov!r}", setup_ov, protect=("exp.yaml",)))

        def setup_o(d: Path, ov=ov) -> list[str]:
            write(d, "exp.yaml", MINIMAL)
            return ["lint", "exp.yaml", "-o", ov]

        cases.append(Case("lint", f"-o:{ov!r}", setup_o, protect=("exp.yaml",)))

    def output_over_input(d: Path) -> list[str]:
        write(d, "a.yaml", MINIMAL)
        return ["lint", "a.yaml", "--output", "a.yaml"]

    def output_over_c(d: Path) -> list[str]:
        write(d, "a.yaml", MINIMAL)
        write(d, "b.yaml", "# shared\n")
        return ["lint", "a.yaml", "-c", "b.yaml", "--output", "b.yaml"]

    def output_dev_full(d: Path) -> list[str]:
        write(d, "a.yaml", MINIMAL)
        return ["lint", "a.yaml", "--output", "/dev/full"]

    def output_symlink(d: Path) -> list[str]:
        write(d, "a.yaml", MINIMAL)
        write(d, "precious.txt", "keep me\n")
        os.symlink("precious.txt", d / "report.txt")
        return ["lint", "a.yaml", "--output", "report.txt"]

    def output_fifo(d: Path) -> list[str]:
        write(d, "a.yaml", MINIMAL)
        os.mkfifo(d / "pipe")
        return ["lint", "a.yaml", "--output", "pipe"]

    def output_dir(d: Path) -> list[str]:
        write(d, "a.yaml", MINIMAL)
        (d / "out").mkdir()
        return ["lint", "a.yaml", "--output", "out"]

    for fn, protect in (
        (output_over_input, ("a.yaml",)),
        (output_over_c, ("a.yaml", "b.yaml")),
        (output_dev_full, ("a.yaml",)),
        (output_symlink, ("a.yaml", "precious.txt", "report.txt")),
        (output_fifo, ("a.yaml", "pipe")),
        (output_dir, ("a.yaml", "out")),
    ):
        cases.append(Case("lint", fn.__name__, fn, expect="refuse", protect=protect))

    def select_empty(d: Path) -> list[str]:
        write(d, "a.yaml", "train:\n  micro_batch_size: -1\n")
        return ["lint", "a.yaml", "--select", ""]

    def select_unknown(d: Path) -> list[str]:
        write(d, "a.yaml", "train:\n  micro_batch_size: -1\n")
        return ["lint", "a.yaml", "--select", "ZZ999"]

    def symlink_loop(d: Path) -> list[str]:
        os.symlink("b.yaml", d / "a.yaml")
        os.symlink("a.yaml", d / "b.yaml")
        return ["lint", "."]

    def broken_link(d: Path) -> list[str]:
        os.symlink("nowhere.yaml", d / "a.yaml")
        return ["lint", "a.yaml"]

    def dir_loop(d: Path) -> list[str]:
        (d / "sub").mkdir()
        write(d, "sub/a.yaml", MINIMAL)
        os.symlink("..", d / "sub" / "up")
        return ["lint", "."]

    def missing(d: Path) -> list[str]:
        return ["lint", "nope.yaml"]

    def ctrl_name(d: Path) -> list[str]:
        write(d, "x\n::warning::evil\x1b[2J.yaml", "train:\n  micro_batch_size: -1\n")
        return ["lint", ".", "--format", "github"]

    def fifo_input(d: Path) -> list[str]:
        os.mkfifo(d / "a.yaml")
        return ["lint", "a.yaml"]

    def unknown_recipe(d: Path) -> list[str]:
        write(d, "a.yaml", MINIMAL)
        return ["lint", "a.yaml", "--recipe", "llama3_8b_sft_confg"]

    def base_override_mbs(d: Path) -> list[str]:
        write(d, "a.yaml", "train:\n  micro_batch_size: 2\n")
        return ["lint", "a.yaml", "--recipe", "llama3_8b_sft_config"]

    for fn, expect in (
        (select_empty, "refuse"),
        (select_unknown, "any"),
        (symlink_loop, "any"),
        (broken_link, "refuse"),
        (dir_loop, "any"),
        (missing, "refuse"),
        (ctrl_name, "refuse"),
        (fifo_input, "refuse"),
        (unknown_recipe, "refuse"),
        (base_override_mbs, "refuse"),
    ):
        cases.append(Case("lint", fn.__name__, fn, expect=expect, timeout=60))

    def fix_with_override(d: Path) -> list[str]:
        shutil.copy(ROOT / "tests" / "cases" / "PK110_offline_mbs4.yaml", d / "exp.yaml")
        return ["lint", "exp.yaml", "--fix", "train.micro_batch_size=4"]

    def fix_readonly(d: Path) -> list[str]:
        shutil.copy(ROOT / "tests" / "cases" / "PK110_offline_mbs4.yaml", d / "exp.yaml")
        os.chmod(d / "exp.yaml", 0o444)
        return ["lint", "exp.yaml", "--fix"]

    def fix_through_symlink(d: Path) -> list[str]:
        shutil.copy(ROOT / "tests" / "cases" / "LS301_cp_no_per_token_loss.yaml", d / "real.yaml")
        os.symlink("real.yaml", d / "exp.yaml")
        return ["lint", "exp.yaml", "--fix"]

    def fix_hard_link(d: Path) -> list[str]:
        shutil.copy(ROOT / "tests" / "cases" / "LS301_cp_no_per_token_loss.yaml", d / "exp.yaml")
        os.link(d / "exp.yaml", d / "other.yaml")
        return ["lint", "exp.yaml", "--fix"]

    def fix_shared_c(d: Path) -> list[str]:
        (d / "a").mkdir()
        (d / "b").mkdir()
        write(
            d,
            "a/exp.yaml",
            "dataset:\n  enable_offline_packing: true\n  offline_packing_specs:\n    packed_sequence_size: 4096\n",
        )
        write(
            d,
            "b/exp.yaml",
            "dataset:\n  enable_offline_packing: true\n  offline_packing_specs:\n    packed_sequence_size: 2048\n",
        )
        write(d, "shared.yaml", "train:\n  micro_batch_size: 4\n  global_batch_size: 128\n")
        return ["lint", "a", "b", "-c", "shared.yaml", "--fix"]

    cases.append(Case("lint", "fix_with_override", fix_with_override, expect="refuse", protect=("exp.yaml",)))
    cases.append(Case("lint", "fix_through_symlink", fix_through_symlink, protect=("exp.yaml",)))
    cases.append(
        Case("lint", "fix_hard_link", fix_hard_link, expect="refuse", protect=("exp.yaml", "other.yaml"))
    )
    cases.append(
        Case(
            "lint",
            "fix_shared_c",
            fix_shared_c,
            expect="refuse",
            protect=("a/exp.yaml", "b/exp.yaml", "shared.yaml"),
        )
    )
    cases.append(Case("lint", "fix_readonly_file", fix_readonly))
    return cases


def tiny_config(d: Path, extra: str = "") -> Path:
    text = TINY.read_text()
    text = text.replace(
        '"@packcfg/data/sample_sft/tokenizer.json"', str(ROOT / "packcfg/data/sample_sft/tokenizer.json")
    )
    text = text.replace('"@packcfg/data/sample_sft"', str(ROOT / "packcfg/data/sample_sft"))
    return write(d, "exp.yaml", text + extra)


def pack_cases() -> list[Case]:
    cases: list[Case] = []
    jsonl_inputs = {
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
    for name, text in jsonl_inputs.items():
        for oversize in ("error", "drop", "truncate", "split"):

            def setup(d: Path, text=text, oversize=oversize) -> list[str]:
                write(d, "data.jsonl", text)
                return [
                    "pack",
                    "data.jsonl",
                    "--capacity",
                    "512",
                    "--oversize",
                    oversize,
                    "--out",
                    "out.parquet",
                    "-q",
                ]

            ok_inputs = {"crlf", "bom", "blank_lines"}
            expect = "any" if name in ok_inputs or (name == "oversize" and oversize != "error") else "refuse"
            if name == "oversize" and oversize == "drop":
                expect = "refuse"  # dropping every sample must not write an empty pack
            if name == "mixed_ok_then_bad" or name == "empty_list":
                expect = "any" if name == "empty_list" else "refuse"
            cases.append(
                Case("pack", f"jsonl:{name}:{oversize}", setup, expect=expect, protect=("data.jsonl",))
            )

    good = "".join(json.dumps({"input_ids": list(range(1, 1 + (i % 50) + 5))}) + "\n" for i in range(200))

    def out_is_input(d: Path) -> list[str]:
        write(d, "data.jsonl", good)
        return ["pack", "data.jsonl", "--capacity", "256", "--out", "data.jsonl"]

    def out_hardlink_input(d: Path) -> list[str]:
        write(d, "data.jsonl", good)
        os.link(d / "data.jsonl", d / "out.parquet")
        return ["pack", "data.jsonl", "--capacity", "256", "--out", "out.parquet"]

    def out_symlink(d: Path) -> list[str]:
        write(d, "data.jsonl", good)
        write(d, "precious.bin", "keep\n")
        os.symlink("precious.bin", d / "out.parquet")
        return ["pack", "data.jsonl", "--capacity", "256", "--out", "out.parquet"]

    def out_dev_null(d: Path) -> list[str]:
        write(d, "data.jsonl", good)
        return ["pack", "data.jsonl", "--capacity", "256", "--out", "/dev/full"]

    def out_fifo(d: Path) -> list[str]:
        write(d, "data.jsonl", good)
        os.mkfifo(d / "out.parquet")
        return ["pack", "data.jsonl", "--capacity", "256", "--out", "out.parquet"]

    def metadata_is_input(d: Path) -> list[str]:
        write(d, "data.jsonl", good)
        return ["pack", "data.jsonl", "--capacity", "256", "--out", "o.parquet", "--metadata", "data.jsonl"]

    def foreign_parquet(d: Path) -> list[str]:
        import pyarrow as pa
        import pyarrow.parquet as pq

        write(d, "data.jsonl", good)
        pq.write_table(pa.table({"x": [1, 2, 3]}), d / "out.parquet")
        return ["pack", "data.jsonl", "--capacity", "256", "--out", "out.parquet"]

    def capacity_zero(d: Path) -> list[str]:
        write(d, "data.jsonl", good)
        return ["pack", "data.jsonl", "--capacity", "0", "--out", "o.parquet"]

    def capacity_neg(d: Path) -> list[str]:
        write(d, "data.jsonl", good)
        return ["pack", "data.jsonl", "--capacity", "-3", "--out", "o.parquet"]

    def align_huge(d: Path) -> list[str]:
        write(d, "data.jsonl", good)
        return ["pack", "data.jsonl", "--capacity", "256", "--align", "1000", "--out", "o.parquet"]

    def corrupt_parquet_in(d: Path) -> list[str]:
        write(d, "data.parquet", b"PAR1" + os.urandom(500) + b"PAR1")
        return ["pack", "data.parquet", "--capacity", "256", "--out", "o.parquet"]

    def config_out_is_config(d: Path) -> list[str]:
        tiny_config(d)
        return ["pack", "exp.yaml", "--out", "exp.yaml"]

    for fn, protect in (
        (out_is_input, ("data.jsonl",)),
        (out_hardlink_input, ("data.jsonl", "out.parquet")),
        (out_symlink, ("data.jsonl", "precious.bin", "out.parquet")),
        (out_dev_null, ("data.jsonl",)),
        (out_fifo, ("data.jsonl", "out.parquet")),
        (metadata_is_input, ("data.jsonl",)),
        (foreign_parquet, ("data.jsonl", "out.parquet")),
        (capacity_zero, ("data.jsonl",)),
        (capacity_neg, ("data.jsonl",)),
        (align_huge, ("data.jsonl",)),
        (corrupt_parquet_in, ("data.parquet",)),
        (config_out_is_config, ("exp.yaml",)),
    ):
        cases.append(Case("pack", fn.__name__, fn, expect="refuse", protect=protect))
    return cases


def verify_cases() -> list[Case]:
    cases: list[Case] = []
    good = "".join(json.dumps({"input_ids": list(range(1, 1 + (i % 50) + 5))}) + "\n" for i in range(200))

    def packed(d: Path) -> None:
        write(d, "data.jsonl", good)
        subprocess.run(
            [
                sys.executable,
                "-m",
                "packcfg",
                "pack",
                "data.jsonl",
                "--capacity",
                "256",
                "--out",
                "p.parquet",
                "-q",
            ],
            cwd=d,
            check=True,
            capture_output=True,
        )

    def tamper(mutate: Callable[[dict], None]) -> Callable[[Path], list[str]]:
        def setup(d: Path) -> list[str]:
            import pyarrow as pa
            import pyarrow.parquet as pq

            packed(d)
            rows = pq.read_table(d / "p.parquet").to_pylist()
            data = {"rows": rows}
            mutate(data)
            pq.write_table(pa.Table.from_pylist(data["rows"]), d / "p.parquet")
            return ["verify", "p.parquet"]

        return setup

    def dup_row(data: dict) -> None:
        data["rows"].append(dict(data["rows"][0]))

    def drop_row(data: dict) -> None:
        data["rows"].pop()

    def neg_id(data: dict) -> None:
        data["rows"][0]["input_ids"][0] = -7

    def bad_start(data: dict) -> None:
        data["rows"][0]["seq_start_id"] = list(reversed(data["rows"][0]["seq_start_id"])) + [10**6]

    def short_mask(data: dict) -> None:
        data["rows"][0]["loss_mask"] = data["rows"][0]["loss_mask"][:-3]

    for fn in (dup_row, drop_row, neg_id, bad_start, short_mask):
        cases.append(
            Case("verify", f"tampered:{fn.__name__}", tamper(fn), expect="refuse", protect=("p.parquet",))
        )

    def good_file(d: Path) -> list[str]:
        packed(d)
        return ["verify", "p.parquet", "--source", "data.jsonl"]

    def missing_meta(d: Path) -> list[str]:
        packed(d)
        for m in d.glob("*.json"):
            m.unlink()
        return ["verify", "p.parquet"]

    def garbage_meta(d: Path) -> list[str]:
        packed(d)
        for m in d.glob("*.json"):
            m.write_text("{not json")
        return ["verify", "p.parquet"]

    def corrupt(d: Path) -> list[str]:
        write(d, "p.parquet", b"PAR1garbagePAR1")
        return ["verify", "p.parquet"]

    def wrong_cols(d: Path) -> list[str]:
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.table({"a": [1]}), d / "p.parquet")
        return ["verify", "p.parquet"]

    def source_mismatch(d: Path) -> list[str]:
        packed(d)
        write(d, "other.jsonl", good.replace("[1, 2, 3, 4, 5]", "[9, 9, 9, 9, 9]"))
        return ["verify", "p.parquet", "--source", "other.jsonl"]

    def directory(d: Path) -> list[str]:
        (d / "x.parquet").mkdir()
        return ["verify", "x.parquet"]

    cases.append(Case("verify", "good", good_file, expect="ok"))
    for fn in (garbage_meta, corrupt, wrong_cols, source_mismatch, directory):
        cases.append(Case("verify", fn.__name__, fn, expect="refuse"))
    cases.append(Case("verify", "missing_meta", missing_meta))
    return cases


def launch_cases() -> list[Case]:
    cases: list[Case] = []

    def render_into_cwd(d: Path) -> list[str]:
        tiny_config(d)
        write(d, "config.yaml", "# my own config, comments matter\nmodel: {}\n")
        write(d, "sbatch.sh", "#!/bin/bash\necho mine\n")
        return ["render", "exp.yaml", "--out", "."]

    def render_dash_o(d: Path) -> list[str]:
        tiny_config(d)
        write(d, "config.yaml", "# mine\n")
        return ["render", "exp.yaml", "-o", "."]

    def render_over_config(d: Path) -> list[str]:
        tiny_config(d)
        return ["render", "exp.yaml", "--out", "exp.yaml"]

    def render_symlink_out(d: Path) -> list[str]:
        tiny_config(d)
        (d / "real").mkdir()
        write(d, "real/keep.txt", "x")
        os.symlink("real", d / "bundle")
        return ["render", "exp.yaml", "--out", "bundle"]

    def secret_literal(d: Path) -> list[str]:
        tiny_config(
            d, "\nlogger:\n  wandb_api_key: abcdef0123456789\n".replace("\nlogger:\n  log_interval: 1\n", "")
        )
        text = (d / "exp.yaml").read_text().replace("logger:\n  log_interval: 1\n", "")
        (d / "exp.yaml").write_text(text)
        return ["render", "exp.yaml", "--out", "b"]

    def secret_env(d: Path) -> list[str]:
        text = (
            tiny_config(d)
            .read_text()
            .replace("  engine: packcfg\n", "  engine: packcfg\n  env:\n    MY_SECRET_THING: hunter2\n")
        )
        (d / "exp.yaml").write_text(text)
        return ["render", "exp.yaml", "--out", "b"]

    def token_file_ok(d: Path) -> list[str]:
        text = (
            tiny_config(d)
            .read_text()
            .replace("  engine: packcfg\n", "  engine: packcfg\n  env:\n    MY_TOKEN_FILE: /secrets/tok\n")
        )
        (d / "exp.yaml").write_text(text)
        return ["render", "exp.yaml", "--out", "b"]

    def shell_name(d: Path) -> list[str]:
        text = tiny_config(d).read_text().replace("name: tiny_cpu_sft", 'name: "x$(touch pwned);`id`"')
        (d / "exp.yaml").write_text(text)
        return ["render", "exp.yaml", "--out", "b"]

    def bad_backend(d: Path) -> list[str]:
        tiny_config(d)
        return ["render", "exp.yaml", "--out", "b", "launch.backend=kubernetes"]

    def gate_blocks(d: Path) -> list[str]:
        tiny_config(d)
        return ["render", "exp.yaml", "--out", "b", "train.micro_batch_size=4"]

    for fn, expect, protect in (
        (render_into_cwd, "refuse", ("exp.yaml", "config.yaml", "sbatch.sh")),
        (render_dash_o, "refuse", ("exp.yaml", "config.yaml")),
        (render_over_config, "refuse", ("exp.yaml",)),
        (render_symlink_out, "refuse", ("exp.yaml", "bundle", "real/keep.txt")),
        (secret_literal, "refuse", ("exp.yaml",)),
        (secret_env, "refuse", ("exp.yaml",)),
        (token_file_ok, "ok", ("exp.yaml",)),
        (shell_name, "any", ("exp.yaml",)),
        (bad_backend, "refuse", ("exp.yaml",)),
        (gate_blocks, "refuse", ("exp.yaml",)),
    ):
        cases.append(Case("render", fn.__name__, fn, expect=expect, protect=protect))

    def store_with(records: dict[str, bytes]) -> Callable[[Path], None]:
        def build(d: Path) -> None:
            jobs = d / "store" / "jobs"
            jobs.mkdir(parents=True)
            for name, data in records.items():
                (jobs / name).write_bytes(data)

        return build

    corrupt_records = {
        "empty": {"j1.json": b""},
        "truncated": {"j1.json": b'{"job_id": "j1", "backend": "lo'},
        "wrong_type": {"j1.json": b"[1, 2, 3]"},
        "binary": {"j1.json": os.urandom(64)},
        "missing_fields": {"j1.json": b'{"job_id": "j1"}'},
        "bad_backend": {"j1.json": b'{"job_id": "j1", "backend": "nope", "status": "RUNNING"}'},
    }
    for name, recs in corrupt_records.items():
        for command in ("status", "logs", "cancel"):

            def setup(d: Path, recs=recs, command=command) -> list[str]:
                store_with(recs)(d)
                argv = [command] + (["j1"] if command != "status" else [])
                return argv

            cases.append(
                Case(command, f"record:{name}", setup, env={"PACKCFG_STATE_DIR": "store"}, timeout=60)
            )
    return cases


def train_cases() -> list[Case]:
    cases: list[Case] = []
    blocked = {
        "cp2_no_per_token": ["model.context_parallel_size=2", "model.calculate_per_token_loss=false"],
        "mbs4_offline": ["train.micro_batch_size=4"],
        "heads_3": ["model.num_attention_heads=3"],  # query groups stay 2
        "vocab_100": ["model.vocab_size=100"],
        "hidden_not_div": ["model.hidden_size=66", "~model.kv_channels"],
        "bad_override": ["train.micro_batch_size=["],
        "missing_tokenizer": ["tokenizer.tokenizer_model=/nope/tokenizer.json"],
    }
    for name, overrides in blocked.items():

        def setup(d: Path, overrides=overrides) -> list[str]:
            tiny_config(d)
            return ["train", "exp.yaml", *overrides, "train.train_iters=1"]

        cases.append(Case("train", name, setup, expect="refuse", protect=("exp.yaml",), timeout=300))

    def malicious_checkpoint(d: Path) -> list[str]:
        tiny_config(d)
        ckpt = d / "runs" / "tiny_cpu_sft" / "checkpoints"
        (ckpt / "iter_0000001").mkdir(parents=True)
        import pickle

        class Evil:
            def __reduce__(self):
                return (os.system, (f"touch {d / 'pwned'}",))

        for name in ("model_optim_tp00.pt", "model_optim_rng.pt", "rng_tp00.pt", "common.pt"):
            (ckpt / "iter_0000001" / name).write_bytes(pickle.dumps(Evil()))
        (ckpt / "latest_checkpointed_iteration.txt").write_text("1")
        return ["train", "exp.yaml", "--resume", "train.train_iters=2"]

    def empty_latest(d: Path) -> list[str]:
        tiny_config(d)
        ckpt = d / "runs" / "tiny_cpu_sft" / "checkpoints"
        ckpt.mkdir(parents=True)
        (ckpt / "latest_checkpointed_iteration.txt").write_text("")
        return ["train", "exp.yaml", "--resume", "train.train_iters=2"]

    cases.append(
        Case(
            "train",
            "malicious_checkpoint",
            malicious_checkpoint,
            expect="refuse",
            protect=("pwned",),
            timeout=300,
        )
    )
    cases.append(Case("train", "empty_latest", empty_latest, expect="refuse", timeout=300))
    return cases


GROUPS = {
    "lint": lint_cases,
    "pack": pack_cases,
    "verify": verify_cases,
    "launch": launch_cases,
    "train": train_cases,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="comma-separated groups: " + ",".join(GROUPS))
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--verbose", action="store_true", help="print every case, not only the bad ones")
    args = parser.parse_args(argv)
    groups = args.only.split(",") if args.only else list(GROUPS)
    cases = [c for g in groups for c in GROUPS[g]()]
    print(f"{len(cases)} cases", file=sys.stderr)
    table: dict[str, Counter] = defaultdict(Counter)
    bad: list[tuple[Case, str, str]] = []
    with ThreadPoolExecutor(args.jobs) as pool:
        for case, outcome, detail in pool.map(run_case, cases):
            table[case.command][outcome] += 1
            if outcome in BAD_CLASSES:
                bad.append((case, outcome, detail))
            if args.verbose or outcome in BAD_CLASSES:
                print(f"  {case.command:8} {case.name:40.40} {outcome:20} {detail}", file=sys.stderr)
    classes = ["ok", "clear error", *BAD_CLASSES]
    print(f"{'command':10}{'inputs':>8}" + "".join(f"{c:>22}" for c in classes))
    for command in sorted(table):
        row = table[command]
        print(f"{command:10}{sum(row.values()):>8}" + "".join(f"{row[c]:>22}" for c in classes))
    total = Counter()
    for row in table.values():
        total.update(row)
    print(f"{'total':10}{sum(total.values()):>8}" + "".join(f"{total[c]:>22}" for c in classes))
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
