"""Hostile inputs to `packcfg pack`, `analyze` and `verify` (issue 22): special files and symlink loops as
inputs, permissions, outputs over files the command read, pad ids outside the vocabulary, and the row
length invariant under `--align`.

Every case runs the real command in a subprocess with a timeout (a FIFO or /dev/zero must never make it
wait) and asserts exit 2 with one stderr line naming the thing, no traceback, and nothing written.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from . import packcfg_cli
from .packcfg_cli import ROOT, refused

SAMPLE = ROOT / "packcfg" / "data" / "sample_sft"
TOKENIZER = SAMPLE / "tokenizer.json"
TIMEOUT = 120


def run(args: list[str], cwd: Path, *, unprivileged: bool = False, **kw) -> subprocess.CompletedProcess:
    return packcfg_cli.run(args, cwd, timeout=TIMEOUT, unprivileged=unprivileged, **kw)


def snapshot(folder: Path) -> dict[str, bytes | str]:
    out: dict[str, bytes | str] = {}
    for path in sorted(folder.rglob("*")):
        if path.is_symlink():
            out[str(path)] = "link:" + os.readlink(path)
        elif path.is_file():
            out[str(path)] = path.read_bytes()
        else:
            out[str(path)] = "other"
    return out


@pytest.fixture
def work(tmp_path: Path) -> Path:
    shutil.copy(SAMPLE / "tokenized.jsonl", tmp_path / "data.jsonl")
    shutil.copy(SAMPLE / "training.jsonl", tmp_path / "text.jsonl")
    tok = tmp_path / "tok"
    tok.mkdir()
    shutil.copy(TOKENIZER, tok / "tokenizer.json")
    return tmp_path


# ---------------------------------------------------------------------------------------- special inputs


@pytest.mark.parametrize(
    "args, name",
    [
        (["pack", "/dev/zero", "--capacity", "512", "--parquet", "o.parquet"], "/dev/zero"),
        (["analyze", "/dev/zero", "--capacity", "512"], "/dev/zero"),
        (
            ["pack", "text.jsonl", "--capacity", "512", "--tokenizer", "/dev/zero", "--parquet", "o.parquet"],
            "/dev/zero",
        ),
        (["verify", "/dev/zero"], "/dev/zero"),
        (["pack", "pipe.jsonl", "--capacity", "512", "--parquet", "o.parquet"], "pipe.jsonl"),
        (["analyze", "pipe.jsonl", "--capacity", "512"], "pipe.jsonl"),
        (["verify", "pipe.jsonl"], "pipe.jsonl"),
        (["pack", "pipe.yaml"], "pipe.yaml"),
        (["pack", "data.jsonl", "--capacity", "512", "--tokenizer", "pipe.jsonl"], "pipe.jsonl"),
    ],
    ids=[
        "pack-data-zero",
        "analyze-data-zero",
        "tokenizer-zero",
        "verify-packed-zero",
        "pack-data-fifo",
        "analyze-data-fifo",
        "verify-packed-fifo",
        "config-fifo",
        "tokenizer-fifo-unused",
    ],
)
def test_special_file_inputs_are_refused(work: Path, args: list[str], name: str) -> None:
    os.mkfifo(work / "pipe.jsonl")
    os.mkfifo(work / "pipe.yaml")
    before = snapshot(work)
    proc = run(args, work)
    if args[-1] == "pipe.jsonl" and "--tokenizer" in args:  # a tokenizer a token-id file never needs
        assert proc.returncode in (0, 2) and "Traceback" not in proc.stderr
        return
    line = refused(proc, name)
    assert any(word in line for word in ("FIFO", "character device"))
    assert snapshot(work) == before


def test_fifo_beside_the_tokenizer_is_refused(work: Path) -> None:
    os.mkfifo(work / "tok" / "tokenizer_config.json")
    refused(
        run(
            ["pack", "text.jsonl", "--capacity", "512", "--tokenizer", "tok", "--parquet", "o.parquet"], work
        ),
        "tokenizer_config.json",
        "FIFO",
    )
    assert not (work / "o.parquet").exists()


@pytest.fixture
def packed(work: Path) -> Path:
    proc = run(["pack", "data.jsonl", "--capacity", "512", "--parquet", "o.parquet", "-q"], work)
    assert proc.returncode == 0, proc.stderr
    return work / "o.parquet"


@pytest.mark.parametrize(
    "extra",
    [
        ["--metadata", "/dev/zero"],
        ["--metadata", "pipe.json"],
        ["--source", "pipe.json"],
        ["--source", "/dev/zero"],
    ],
    ids=["metadata-zero", "metadata-fifo", "source-fifo", "source-zero"],
)
def test_verify_special_metadata_or_source(packed: Path, extra: list[str]) -> None:
    os.mkfifo(packed.parent / "pipe.json")
    refused(run(["verify", "o.parquet", *extra], packed.parent), extra[1])


def test_symlink_loop_as_data_file(work: Path) -> None:
    os.symlink("loop.jsonl", work / "loop.jsonl")
    refused(
        run(["pack", "loop.jsonl", "--capacity", "512", "--parquet", "o.parquet"], work),
        "loop.jsonl",
        "symlink loop",
    )


def test_deep_or_huge_metadata_json(packed: Path) -> None:
    (packed.parent / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    refused(
        run(["verify", "o.parquet", "--metadata", "deep.json"], packed.parent),
        "deep.json",
        "nested too deeply",
    )
    with open(packed.parent / "big.json", "wb") as fh:
        fh.truncate(200 << 20)
    refused(run(["verify", "o.parquet", "--metadata", "big.json"], packed.parent), "big.json", "bytes")


# ---------------------------------------------------------------------------------------- permissions


def test_unreadable_data_file(work: Path) -> None:
    (work / "data.jsonl").chmod(0)
    try:
        proc = run(
            ["pack", "data.jsonl", "--capacity", "512", "--parquet", "o.parquet"], work, unprivileged=True
        )
    finally:
        (work / "data.jsonl").chmod(0o644)
    refused(proc, "data.jsonl", "ermission denied")
    assert not (work / "o.parquet").exists()


def test_output_in_a_read_only_folder(work: Path) -> None:
    ro = work / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        proc = run(
            ["pack", "data.jsonl", "--capacity", "512", "--parquet", "ro/o.parquet"], work, unprivileged=True
        )
    finally:
        ro.chmod(0o755)
    line = refused(proc, "ro/o.parquet", "ermission denied")
    assert ".tmp" not in line  # names the output, not packcfg's temporary
    assert list(ro.iterdir()) == []


# ---------------------------------------------------------------------------------------- outputs over inputs


@pytest.mark.parametrize(
    "args, victim",
    [
        (["pack", "text.jsonl", "--capacity", "512", "--tokenizer", "tok", "--parquet", "tok/tokenizer_config.json"],
         "tok/tokenizer_config.json"),
        (["pack", "text.jsonl", "--capacity", "512", "--tokenizer", "tok", "--parquet", "o.parquet",
          "--metadata", "tok/tokenizer_config.json"], "tok/tokenizer_config.json"),
        (["analyze", "text.jsonl", "--capacity", "512", "--tokenizer", "tok", "--plot", "tok/tokenizer_config.json"],
         "tok/tokenizer_config.json"),
        (["pack", "data.jsonl", "--capacity", "512", "--parquet", "o.parquet", "--metadata", "data.jsonl"], "data.jsonl"),
        (["pack", "data.jsonl", "--capacity", "512", "--parquet", "data.jsonl"], "data.jsonl"),
    ],
    ids=["out-tokenizer-config", "metadata-tokenizer-config", "plot-tokenizer-config", "metadata-source", "out-source"],
)  # fmt: skip
def test_outputs_never_replace_an_input(work: Path, args: list[str], victim: str) -> None:
    (work / "tok" / "tokenizer_config.json").write_text(json.dumps({"eos_token": "</s>"}) + "\n")
    before = snapshot(work)
    refused(run(args, work), victim, "input of this command")
    assert snapshot(work) == before


# ---------------------------------------------------------------------------------------- pad id


def _vocab() -> int:
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(TOKENIZER)).get_vocab_size(with_added_tokens=True)


@pytest.mark.parametrize("pad", ["-1", "VOCAB", "99999999", "5000000000"])
def test_pad_id_outside_the_vocabulary_is_refused(work: Path, pad: str) -> None:
    pytest.importorskip("tokenizers")
    pad = str(_vocab()) if pad == "VOCAB" else pad
    args = ["pack", "text.jsonl", "--capacity", "512", "--tokenizer", "tok", "--align", "8", "--pad-id", pad]
    refused(run([*args, "--parquet", "o.parquet"], work), f"pad id (--pad-id) {pad}", "[0, ")
    assert not (work / "o.parquet").exists() and not (work / "o.metadata.json").exists()


def test_negative_pad_id_without_a_tokenizer(work: Path) -> None:
    refused(
        run(["pack", "data.jsonl", "--capacity", "512", "--pad-id", "-1", "--parquet", "o.parquet"], work),
        "-1",
    )
    assert not (work / "o.parquet").exists()


def test_pad_id_at_the_config_vocab_size_is_refused(work: Path) -> None:
    text = (ROOT / "recipes" / "tiny_cpu_sft.yaml").read_text()
    text = text.replace('"@packcfg/data/sample_sft/tokenizer.json"', str(TOKENIZER))
    text = text.replace('"@packcfg/data/sample_sft"', str(SAMPLE))
    (work / "exp.yaml").write_text(text)
    # the sample rows are SFT text, so the tokenizer's vocabulary is the bound; without one, model.vocab_size
    refused(
        run(["pack", "exp.yaml", "--pad-id", "2048", "--parquet", "o.parquet", "--metadata", "m.json"], work),
        "2048",
    )
    assert not (work / "o.parquet").exists()


def test_valid_pad_id_is_written(work: Path) -> None:
    proc = run(
        [
            "pack",
            "data.jsonl",
            "--capacity",
            "512",
            "--align",
            "8",
            "--pad-id",
            "3",
            "--parquet",
            "o.parquet",
        ],
        work,
    )
    assert proc.returncode == 0, proc.stderr
    meta = json.loads((work / "o.metadata.json").read_text())
    assert meta[0]["pad_id"] == 3
    assert run(["verify", "o.parquet"], work).returncode == 0


# ---------------------------------------------------------------------------------------- rows vs pack_size


def _rows(path: Path) -> list[tuple[np.ndarray, np.ndarray]]:
    import pyarrow.parquet as pq

    table = pq.read_table(path, columns=["input_ids", "seq_start_id"])
    return [
        (np.asarray(ids), np.asarray(starts))
        for ids, starts in zip(table["input_ids"].to_pylist(), table["seq_start_id"].to_pylist(), strict=True)
    ]


@pytest.mark.parametrize(
    "algorithm", ["bfd", "ffd", "first_fit_shuffle", "histogram", "sequential", "greedy_buffer"]
)
@pytest.mark.parametrize("policy", ["split", "truncate", "pairs"])
def test_aligned_rows_fit_their_pack_size(work: Path, algorithm: str, policy: str) -> None:
    """With align 8 and a pack size that is not a multiple of it, every row's runtime tokens (a sample gives
    up one token: input and label are one shorter) fit pack_size, every sample's runtime length is a multiple
    of 8, and the row's stored tokens exceed pack_size by at most its sample count (Bridge's packed format)."""
    pytest.importorskip("pyarrow")
    from packcfg.packing.api import PackSettings, pack_dataset
    from packcfg.packing.verify import verify_packed

    capacity = 100
    settings = PackSettings(
        source=work / "data.jsonl",
        output=work / "o.parquet",
        metadata=work / "o.json",
        capacity=capacity,
        align=8,
        algorithm=algorithm,
        oversize="drop" if policy == "pairs" else policy,
        pairs=policy == "pairs",
        pad_id=0,
    )
    result = pack_dataset(settings, progress=False)
    assert result.metadata["pack_size"] == capacity
    for ids, starts in _rows(work / "o.parquet"):
        bounds = [*starts.tolist(), len(ids)]
        runtime = [b - a - 1 for a, b in zip(bounds, bounds[1:], strict=False)]
        assert sum(runtime) <= capacity
        assert all(r % 8 == 0 for r in runtime)
        assert len(ids) <= capacity + len(starts)
    assert verify_packed(work / "o.parquet", work / "o.json").ok


def test_pairs_that_are_all_dropped_are_one_line(work: Path) -> None:
    rows = "".join(json.dumps({"input_ids": list(range(1, 300))}) + "\n" for _ in range(4))
    (work / "long.jsonl").write_text(rows)
    args = [
        "pack",
        "long.jsonl",
        "--capacity",
        "64",
        "--pairs",
        "--oversize",
        "drop",
        "--parquet",
        "o.parquet",
    ]
    refused(run(args, work), "dropped all")
    proc = run(["analyze", "long.jsonl", "--capacity", "64", "--pairs", "--oversize", "drop"], work)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr and "dropped 4" in proc.stdout  # reported


def test_pairs_need_room_for_two(work: Path) -> None:
    args = [
        "pack",
        "data.jsonl",
        "--capacity",
        "512",
        "--pairs",
        "--max-per-pack",
        "1",
        "--parquet",
        "o.parquet",
    ]
    refused(run(args, work), "max_per_pack 1")


# ---------------------------------------------------------------------------------------- absurd values


def test_jsonl_line_nested_past_the_parser(work: Path) -> None:
    (work / "deep.jsonl").write_text('{"input_ids": ' + "[" * 100_000 + "]" * 100_000 + "}\n")
    refused(
        run(["pack", "deep.jsonl", "--capacity", "512", "--parquet", "o.parquet"], work),
        "deep.jsonl:1",
        "nested",
    )


@pytest.mark.parametrize(
    "extra, words",
    [
        (["--capacity", "99999999999999999999"], ("capacity 99999999999999999999", "int32")),
        (["--capacity", "512", "--seed", "-1"], ("--seed", "-1")),
    ],
    ids=["capacity-beyond-int32", "negative-seed"],
)
def test_absurd_numbers_are_one_line(work: Path, extra: list[str], words: tuple[str, ...]) -> None:
    refused(run(["pack", "data.jsonl", *extra, "--parquet", "o.parquet"], work), *words)
    assert not (work / "o.parquet").exists()
