"""CLI tests: packcfg pack / verify / analyze, idempotence, atomicity and one-line errors (exit 2)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from packcfg.cli import main
from packcfg.packing import PackSettings, pack_dataset, read_packed

from .conftest import random_token_rows, write_jsonl


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def assert_one_line_error(rc: int, err: str, *needles: str) -> None:
    assert rc == 2
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])


def test_pack_recipe_with_no_other_arguments(tmp_path, monkeypatch, capsys, tiny_recipe):
    monkeypatch.chdir(tmp_path)
    rc, out, _ = run_cli(capsys, "pack", str(tiny_recipe))
    assert rc == 0
    packed = tmp_path / "runs/tiny_cpu_sft/packed/train.parquet"
    meta = tmp_path / "runs/tiny_cpu_sft/packed/metadata.json"
    assert packed.is_file() and meta.is_file()
    assert "packed 4,000 samples" in out
    # idempotent: same inputs and settings -> nothing rewritten
    mtime = packed.stat().st_mtime_ns
    rc, out, _ = run_cli(capsys, "pack", str(tiny_recipe))
    assert rc == 0 and "up to date" in out
    assert packed.stat().st_mtime_ns == mtime
    # --force rewrites, a changed setting rewrites
    rc, out, _ = run_cli(capsys, "pack", str(tiny_recipe), "--force")
    assert rc == 0 and "packed" in out and packed.stat().st_mtime_ns != mtime
    rc, out, _ = run_cli(capsys, "pack", str(tiny_recipe), "--algorithm", "ffd")
    assert rc == 0 and "packed" in out
    assert json.loads(meta.read_text())[0]["algorithm"] == "ffd"
    # and the result verifies against its source (given by the recipe)
    rc, out, err = run_cli(capsys, "verify", str(tiny_recipe))
    assert rc == 0, err
    assert "checked rows and source: ok" in out


def test_changed_source_makes_output_stale(tmp_path, capsys):
    src = write_jsonl(tmp_path / "d.jsonl", random_token_rows(50, seed=1))
    rc, out, _ = run_cli(capsys, "pack", str(src), "--capacity", "128", "-q")
    assert rc == 0 and out == ""
    rc, out, _ = run_cli(capsys, "pack", str(src), "--capacity", "128")
    assert "up to date" in out
    write_jsonl(src, random_token_rows(50, seed=2))
    rc, out, _ = run_cli(capsys, "pack", str(src), "--capacity", "128")
    assert rc == 0 and "packed 50 samples" in out


def test_atomic_write_leaves_no_partial_file(tmp_path):
    src = write_jsonl(tmp_path / "d.jsonl", random_token_rows(300, seed=3, max_len=30))
    s = PackSettings(
        source=src, output=tmp_path / "o" / "p.parquet", metadata=tmp_path / "o" / "m.json", capacity=32
    )
    with pytest.raises(OSError, match="injected"):
        pack_dataset(s, progress=False, _fail_after_rows=1)
    assert not s.output.exists() and not s.metadata.exists()
    assert [p.name for p in s.output.parent.iterdir()] == []  # no temp file, no spool left behind
    # an existing good file survives a failed repack untouched
    good = pack_dataset(s, progress=False)
    before = s.output.read_bytes()
    with pytest.raises(OSError, match="injected"):
        pack_dataset(s, progress=False, force=True, _fail_after_rows=1)
    assert s.output.read_bytes() == before
    assert json.loads(s.metadata.read_text())[0]["fingerprint"] == good.metadata["fingerprint"]
    assert sorted(p.name for p in s.output.parent.iterdir()) == ["m.json", "p.parquet"]


def test_verify_detects_violations(tmp_path, capsys):
    src = write_jsonl(tmp_path / "d.jsonl", random_token_rows(80, seed=4))
    rc, _, _ = run_cli(
        capsys,
        "pack",
        str(src),
        "--capacity",
        "200",
        "-q",
        "--parquet",
        str(tmp_path / "p.parquet"),
        "--metadata",
        str(tmp_path / "metadata.json"),
    )
    assert rc == 0
    rows = list(read_packed(tmp_path / "p.parquet"))

    def write(mutated: list[dict], name: str) -> Path:
        path = tmp_path / name
        pq.write_table(
            pa.table(
                {
                    "input_ids": pa.array([r["input_ids"].tolist() for r in mutated], pa.list_(pa.int32())),
                    "loss_mask": pa.array([r["loss_mask"].tolist() for r in mutated], pa.list_(pa.int8())),
                    "seq_start_id": pa.array(
                        [r["seq_start_id"].tolist() for r in mutated], pa.list_(pa.int32())
                    ),
                }
            ),
            path,
        )
        return path

    ok = write(rows, "ok.parquet")
    rc, out, err = run_cli(
        capsys, "verify", str(ok), "--source", str(src), "--metadata", str(tmp_path / "metadata.json")
    )
    assert rc == 0, err

    altered = [dict(r) for r in rows]
    altered[0]["input_ids"] = altered[0]["input_ids"].copy()
    altered[0]["input_ids"][1] += 1
    bad = write(altered, "altered.parquet")
    rc, _, err = run_cli(
        capsys, "verify", str(bad), "--source", str(src), "--metadata", str(tmp_path / "metadata.json")
    )
    assert rc == 1 and "not found in" in err and "sample missing" in err

    dup = write(rows + rows[:1], "dup.parquet")
    rc, _, err = run_cli(
        capsys, "verify", str(dup), "--source", str(src), "--metadata", str(tmp_path / "metadata.json")
    )
    assert rc == 1 and "duplicate of source line" in err

    masked = [dict(r) for r in rows]
    masked[0]["loss_mask"] = 1 - masked[0]["loss_mask"]
    rc, _, err = run_cli(capsys, "verify", str(write(masked, "mask.parquet")), "--source", str(src))
    assert rc == 1 and "loss_mask" in err

    starts = [dict(r) for r in rows]
    starts[1]["seq_start_id"] = starts[1]["seq_start_id"] + 1
    rc, _, err = run_cli(capsys, "verify", str(write(starts, "starts.parquet")))
    assert rc == 1 and "seq_start_id must start at 0" in err

    short = [dict(r) for r in rows]
    short[2]["loss_mask"] = short[2]["loss_mask"][:-1]
    rc, _, err = run_cli(capsys, "verify", str(write(short, "short.parquet")))
    assert rc == 1 and "loss_mask has" in err

    rc, _, err = run_cli(capsys, "verify", str(ok), "--capacity", "10")
    assert rc == 1 and "exceed pack_size 10" in err


def test_verify_unreadable_input_exits_2(tmp_path, capsys):
    rc, _, err = run_cli(capsys, "verify", str(tmp_path / "nope.parquet"))
    assert_one_line_error(rc, err, "nope.parquet", "no such file")
    junk = tmp_path / "junk.parquet"
    junk.write_bytes(b"not parquet at all")
    rc, _, err = run_cli(capsys, "verify", str(junk))
    assert_one_line_error(rc, err, "junk.parquet", "not a readable Parquet file")
    other = tmp_path / "other.parquet"
    pq.write_table(pa.table({"x": [1, 2]}), other)
    rc, _, err = run_cli(capsys, "verify", str(other))
    assert_one_line_error(rc, err, "missing column")


def test_pack_reads_the_pre_0_6_section_name_and_names_it_back(tmp_path, monkeypatch, capsys, sample_sft):
    """A config in Bridge < 0.6's spelling (`packed_sequence_specs`) packs at its own size into its own path,
    and a missing key is named as the file spells it; control: the same values under the current name."""
    monkeypatch.chdir(tmp_path)
    for section in ("packed_sequence_specs", "offline_packing_specs"):
        specs = {"packed_sequence_size": 1024, "pad_seq_to_mult": 8}
        config = {
            "dataset": {"dataset_root": str(sample_sft), "seq_length": 512, section: specs},
            "tokenizer": {"tokenizer_model": str(sample_sft / "tokenizer.json")},
        }
        (tmp_path / "exp.yaml").write_text(json.dumps(config))
        rc, _, err = run_cli(capsys, "pack", "exp.yaml")
        assert_one_line_error(rc, err, f"dataset.{section}.packed_train_data_path: not set")
        specs["packed_train_data_path"] = f"{section}/train.parquet"
        (tmp_path / "exp.yaml").write_text(json.dumps(config))
        rc, _, err = run_cli(capsys, "pack", "exp.yaml")
        assert rc == 0, err
        meta = json.loads((tmp_path / section / "metadata.json").read_text())[0]
        assert (
            (meta["max_samples_per_bin"] > 0) and meta["pack_size"] == 1024 and meta["pad_seq_to_mult"] == 8
        ), meta


def test_analyze_table_json_and_plot(tmp_path, capsys, sample_sft):
    png = tmp_path / "plot.svg"
    rc, out, err = _analyze_sample(
        capsys,
        sample_sft,
        "--plot",
        str(png),
        "--gbs",
        "64",
    )
    assert rc == 0, err
    assert "lower bound" in out and "pack-tail (bin) waste" in out and "unpacked 64 -> packed" in out
    lines = [line for line in out.splitlines() if line and not line.startswith(("source:", "wrote"))]
    value_columns = {re.match(r"^(\s*\S.*?)\s{2,}(\S)", line).start(2) for line in lines}
    assert len(value_columns) == 1  # values start in one aligned column
    _check_plot(png, out)
    rc, out, _ = _analyze_sample(capsys, sample_sft, "--format", "json")
    stats = json.loads(out)
    assert rc == 0 and stats["packs"] >= stats["lower_bound"] > 0
    assert stats["padding_tokens"] == stats["bin_waste_tokens"] + stats["alignment_waste_tokens"]
    assert not list(tmp_path.glob("*.parquet"))  # analyze writes no packs


def _analyze_sample(capsys, sample_sft, *args: str):
    """`packcfg analyze` of the bundled sample data at capacity 512, with `args` added."""
    source, tokenizer = str(sample_sft / "training.jsonl"), str(sample_sft / "tokenizer.json")
    return run_cli(capsys, "analyze", source, "--tokenizer", tokenizer, "--capacity", "512", *args)


def _check_plot(path, table: str) -> None:
    """The SVG's two histograms count what the table reports: every sample, every pack."""
    from xml.etree import ElementTree

    ns = "{http://www.w3.org/2000/svg}"
    root = ElementTree.fromstring(path.read_text())
    lengths, fills = root.findall(f"{ns}g")

    def counted(panel) -> int:  # each drawn bin says its count in its tooltip: "12 in [a, b]"
        return sum(int(t.text.split(" in ")[0].replace(",", "")) for t in panel.iter(f"{ns}title"))

    packs = int(re.search(r"^packs\s+([\d,]+)", table, re.M).group(1).replace(",", ""))
    samples = int(re.search(r"^samples\s+([\d,]+)", table, re.M).group(1).replace(",", ""))
    assert counted(fills) == packs and counted(lengths) == samples
    assert f"{packs:,} packs" in "".join(fills.itertext())


def test_analyze_plot_must_be_svg(tmp_path, capsys, sample_sft):
    """A --plot name that is not .svg is one line naming the value and the name to use, before any work."""
    rc, _, err = _analyze_sample(capsys, sample_sft, "--plot", str(tmp_path / "plot.png"))
    assert_one_line_error(rc, err, "plot.png", "SVG", "plot.svg")
    assert list(tmp_path.iterdir()) == []


def test_analyze_recipe_and_compare(capsys, tiny_recipe):
    rc, out, _ = run_cli(capsys, "analyze", str(tiny_recipe), "--format", "json")
    s = json.loads(out)
    assert rc == 0 and s["capacity"] == 512 and s["advice"]["config_packed_global_batch_size"] == 8
    assert "unpacked_global_batch_size" not in s["advice"]  # the recipe's GBS already counts packs
    rc, out, _ = run_cli(capsys, "analyze", str(tiny_recipe), "--compare")
    assert rc == 0
    for algo in ("bfd", "ffd", "first_fit_shuffle", "histogram", "sequential", "greedy_buffer"):
        assert algo in out


@pytest.mark.parametrize(
    ("content", "args", "needles"),
    [
        (None, ["--capacity", "10"], ["missing.jsonl", "no such file"]),
        (
            '{"input_ids": [1, 2]}\n{"input_ids": [1, 2\n',
            ["--capacity", "10"],
            ["bad.jsonl:2", "malformed JSON"],
        ),
        (
            '{"input_ids": [1, "x"]}\n',
            ["--capacity", "10"],
            ["bad.jsonl:1", 'input_ids[1] is "x"', "token ids must be integers"],
        ),
        ('{"input_ids": []}\n', ["--capacity", "10"], ["bad.jsonl:1", "non-empty"]),
        ('{"input_ids": [1, 2], "loss_mask": [1]}\n', ["--capacity", "10"], ["bad.jsonl:1", "loss_mask"]),
        (
            '{"input_ids": [1, 2], "answer_start_idx": 9}\n',
            ["--capacity", "10"],
            ["bad.jsonl:1", "answer_start_idx"],
        ),
        ('{"text": "hi"}\n', ["--capacity", "10"], ["bad.jsonl:1", "got keys: text"]),
        (
            '{"input": "a", "output": 3}\n',
            ["--capacity", "10", "--tokenizer", "@tok"],
            ["bad.jsonl:1", "'output' must be a string"],
        ),
        ('{"input": "a", "output": "b"}\n', ["--capacity", "10"], ["needs a tokenizer"]),
        ("\n\n", ["--capacity", "10"], ["empty dataset"]),
        ('{"input_ids": [1, 2]}\n', ["--capacity", "0"], ["--capacity must be > 0"]),
        ('{"input_ids": [1, 2]}\n', [], ["needs --capacity"]),
        (
            '{"input_ids": [1, 2]}\n{"input_ids": [1, 2, 3, 4, 5, 6]}\n',
            ["--capacity", "3"],
            ["bad.jsonl:2", "sample 1 has length 5", "> capacity 3"],
        ),
    ],
)
@pytest.mark.parametrize("command", ["pack", "analyze"])
def test_bad_input_is_one_line_exit_2(tmp_path, capsys, sample_sft, command, content, args, needles):
    path = tmp_path / ("missing.jsonl" if content is None else "bad.jsonl")
    if content is not None:
        path.write_text(content)
    args = [str(sample_sft / "tokenizer.json") if a == "@tok" else a for a in args]
    rc, _, err = run_cli(capsys, command, str(path), *args)
    assert_one_line_error(rc, err, *needles)
    assert not list(tmp_path.glob("*.parquet"))


@pytest.mark.parametrize(
    "command, args, needles",
    [
        # -o is an override, not an output path: the word is named, and pack's output flags are
        ("pack", ["-o", "out.parquet"], ["'out.parquet' is not an override", "--parquet FILE or --out DIR"]),
        ("pack", ["out.parquet"], ["'out.parquet' is not an override", "--parquet FILE"]),
        ("analyze", ["-o", "out.json"], ["'out.json' is not an override (KEY=VALUE)"]),
        # well-formed overrides (or -c) with a data file: named, with what they apply to
        ("analyze", ["-o", "a=1", "-c", "x.yaml"], ["data.jsonl: -c x.yaml, a=1:", "not to a data file"]),
        ("pack", ["seed=3"], ["data.jsonl: seed=3:", "not to a data file", "--capacity"]),
        # a flag that stands for an override is named as typed
        ("analyze", ["--recipe", "llama3_8b"], ["data.jsonl: --recipe llama3_8b:", "not to a data file"]),
    ],
)
def test_overrides_with_a_data_file_name_what_was_given(tmp_path, capsys, command, args, needles):
    path = tmp_path / "data.jsonl"
    path.write_text('{"input_ids": [1, 2]}\n')
    rc, _, err = run_cli(capsys, command, str(path), "--capacity", "8", *args)
    assert_one_line_error(rc, err, *needles)
    assert not list(tmp_path.glob("*.parquet")) and not (tmp_path / "out.parquet").exists()
    if command == "pack":  # the same line from verify, for a packed file
        rc, _, err = run_cli(capsys, "verify", str(path), *args)
        assert_one_line_error(rc, err, *needles[:1] if "override" in needles[0] else ["not to a packed file"])


@pytest.mark.parametrize(
    "command, needles, control",
    [
        ("pack", ["'out.parquet' is not an override", "--parquet FILE or --out DIR"], "> capacity 16"),
        ("analyze", ["'out.parquet' is not an override (KEY=VALUE)"], "> capacity 16"),
        ("verify", ["'out.parquet' is not an override (KEY=VALUE)"], "metadata.json: no such file"),
    ],
)
def test_a_stray_word_with_an_experiment_yaml_names_the_output_flags(
    tmp_path, monkeypatch, capsys, tiny_recipe, command, needles, control
):
    """`-o out.parquet` after a YAML: the word is named (as with a data file), pack's output flags with it, and
    nothing is written; a well-formed override next to it does not hide it."""
    monkeypatch.chdir(tmp_path)
    size = "dataset.offline_packing_specs.packed_sequence_size=16"
    before = sorted(tiny_recipe.parent.rglob("*"))
    rc, _, err = run_cli(capsys, command, str(tiny_recipe), "-o", size, "-o", "out.parquet")
    assert_one_line_error(rc, err, *needles)
    assert not list(tmp_path.iterdir()) and sorted(tiny_recipe.parent.rglob("*")) == before
    # the control: the same override alone is read and applied (the recipe's samples pass 16 tokens; verify
    # goes on to look for the recipe's packed files, not made here)
    rc, _, err = run_cli(capsys, command, str(tiny_recipe), "-o", size)
    assert_one_line_error(rc, err, control)


def test_bad_parquet_column_types(tmp_path, capsys):
    path = tmp_path / "bad.parquet"
    pq.write_table(pa.table({"input_ids": ["a", "b"]}), path)
    rc, _, err = run_cli(capsys, "pack", str(path), "--capacity", "10")
    assert_one_line_error(rc, err, "bad.parquet", "'input_ids' has type string, expected list<int>")
    pq.write_table(pa.table({"input_ids": [[1, 2]], "loss_mask": [["x", "y"]]}), path)
    rc, _, err = run_cli(capsys, "pack", str(path), "--capacity", "10")
    assert_one_line_error(rc, err, "'loss_mask' has type")


def test_bad_config_is_one_line_exit_2(tmp_path, capsys, tiny_recipe):
    bad = tmp_path / "bad.yaml"
    bad.write_text("dataset: [unclosed\n")
    rc, _, err = run_cli(capsys, "pack", str(bad))
    assert_one_line_error(rc, err, "bad.yaml:")
    rc, _, err = run_cli(
        capsys, "pack", str(tiny_recipe), "-o", "dataset.offline_packing_specs.packed_sequence_size=16"
    )
    assert_one_line_error(rc, err, "training.jsonl:", "> capacity 16")
    cfg = tmp_path / "nodata.yaml"
    cfg.write_text("dataset:\n  offline_packing_specs:\n    packed_sequence_size: 64\n")
    rc, _, err = run_cli(capsys, "pack", str(cfg))
    assert_one_line_error(rc, err, "dataset.dataset_root")


def test_progress_bar_only_on_a_tty(tmp_path):
    import io

    from packcfg.packing.progress import Progress

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    tty, pipe = Tty(), io.StringIO()
    for stream in (tty, pipe):
        with Progress("write", 10, True, stream) as bar:
            for _ in range(10):
                bar.update(1)
    assert "100.0%" in tty.getvalue() and pipe.getvalue() == ""
    quiet = Tty()
    with Progress("write", 10, False, quiet) as bar:
        bar.update(10)
    assert quiet.getvalue() == ""


def test_import_is_light():
    code = (
        "import sys, packcfg.packing, packcfg.cli; packcfg.cli.build_parser(); "
        "heavy = [m for m in ('pyarrow', 'tokenizers', 'torch') if m in sys.modules]; "
        "print(heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_bundled_sample_data_shape(sample_sft):
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(sample_sft / "tokenizer.json"))
    assert tok.get_vocab_size() <= 2048 and tok.token_to_id("<eos>") is not None
    assert tok.token_to_id("<pad>") is not None
    from packcfg.packing.sources import spool

    lengths = spool(sample_sft / "training.jsonl", sample_sft / "tokenizer.json").lengths()
    assert 1000 <= len(lengths) and lengths.max() <= 512
    assert np.median(lengths) < 100 and np.percentile(lengths, 99) > 150  # short body, long tail
    assert sum((sample_sft / f).stat().st_size for f in ("training.jsonl", "validation.jsonl")) < 4_000_000


def test_cli_algorithm_names_match_the_planner():
    from packcfg.packing import ALGORITHMS
    from packcfg.packing.commands._common import ALGORITHM_NAMES

    assert tuple(ALGORITHM_NAMES) == tuple(ALGORITHMS)


def test_analyze_of_an_already_packed_config_does_not_divide_its_gbs_again(capsys):
    """Issue 16: the tiny recipe packs offline with GBS 8 (packs per step); analyze used to advise
    "GBS unpacked 8 -> packed 1"."""
    from packcfg.cli import main

    recipe = str(Path(__file__).parents[2] / "recipes" / "tiny_cpu_sft.yaml")
    assert main(["analyze", recipe]) == 0
    out = capsys.readouterr().out
    assert "-> packed" not in out
    assert "8 packs per step (the config already packs)" in out
