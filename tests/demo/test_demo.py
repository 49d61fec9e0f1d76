"""`packcfg demo` at a reduced size: the summary's numbers must agree with the files it points at.

One real run (4 steps per training run) serves the consistency checks; the output-directory rules
(replace a previous demo, refuse anything else, Ctrl-C leaves no trace) are checked on their own.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

for _module in ("torch", "megatron.core", "pyarrow"):
    if importlib.util.find_spec(_module) is None:  # find_spec: the demo runs in a child, no import here
        pytest.skip(f"the demo needs {_module}", allow_module_level=True)

from packcfg.cli import main  # noqa: E402
from packcfg.demo import outdir  # noqa: E402
from packcfg.demo.pipeline import demo_overrides  # noqa: E402

QUICK_STEPS = 3  # --quick, shortened further: the padded run dominates the time


def _metrics(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _leftovers(parent: Path) -> list[str]:
    """Staging or moved-aside directories the demo should have removed."""
    return sorted(p.name for p in parent.iterdir() if ".partial-" in p.name or ".old-" in p.name)


def _demo_command(out: Path) -> list[str]:
    return [sys.executable, "-m", "packcfg", "demo", "--quick", "--train-iters", str(QUICK_STEPS),
            "--out", str(out)]  # fmt: skip


def _restore_sigint() -> None:
    """In the child: Ctrl-C as in a terminal, even when this runner ignores SIGINT (background jobs)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """`python -m packcfg demo --quick` once, in a child process (the real command, its real stdout),
    from an empty working directory (so a stray relative write shows)."""
    work = tmp_path_factory.mktemp("demo_cwd")
    out = work / "out" / "demo"
    proc = subprocess.run(
        _demo_command(out), cwd=work, capture_output=True, text=True, timeout=600, preexec_fn=_restore_sigint
    )
    yield {"rc": proc.returncode, "out": out, "work": work, "stdout": proc.stdout, "stderr": proc.stderr}


@pytest.fixture(scope="module")
def summary(demo_run: dict[str, Any]) -> dict[str, Any]:
    assert demo_run["rc"] == 0, demo_run["stdout"][-3000:] + demo_run["stderr"][-3000:]
    return json.loads((demo_run["out"] / "summary.json").read_text())


def test_everything_lands_in_the_output_dir(demo_run: dict[str, Any], summary: dict[str, Any]) -> None:
    out: Path = demo_run["out"]
    assert sorted(p.name for p in demo_run["work"].iterdir()) == ["out"]  # nothing relative to the CWD
    assert sorted(p.name for p in out.parent.iterdir()) == ["demo"]  # no staging left behind
    for rel in ("summary.json", "summary.md", "demo.svg", "lint.json", "analyze.json"):
        assert (out / rel).is_file(), rel
    for rel in (summary["packing"]["packed_file"], summary["packing"]["metadata_file"]):
        assert (out / rel).is_file(), rel
    for run in ("packed", "padded"):
        assert (out / summary["train"][run]["metrics"]).is_file()
        for ckpt in summary["train"][run]["checkpoints"]:
            assert (out / ckpt).is_dir()
    assert summary["train"]["packed"]["checkpoints"], "the packed run keeps its final checkpoint"


def test_progress_and_printed_summary(demo_run: dict[str, Any], summary: dict[str, Any]) -> None:
    text = demo_run["stdout"]
    for n in range(1, 8):
        assert f"== [{n}/7]" in text
    assert f"step     {QUICK_STEPS}/{QUICK_STEPS}" in text  # the trainer's progress lines
    assert "packcfg demo summary" in text
    assert f"speedup {summary['train']['speedup']:.2f}x" in text
    # only final paths: the checkpoint is announced where it is once the demo ends, never in the staging folder
    assert ".partial-" not in text
    ckpt = summary["train"]["packed"]["checkpoints"][-1]
    assert f"saved {demo_run['out'] / ckpt}" in text


def test_throughput_panel_leads_with_length_grouped(summary: dict[str, Any]) -> None:
    """The picture's title and bars lead with length-grouped padding, the padded run second, labelled as the
    worst case; the numbers are the printed summary's."""
    from packcfg.demo.plot import throughput_bars, throughput_title

    train = summary["train"]
    names, rates, _ = throughput_bars(train)
    assert names[:2] == ["packed", "length-grouped\npadding"] and names[2].startswith("worst case:")
    assert "seq_length 512" in names[2]  # the tiny recipe pads every row to seq_length
    assert rates == [train[r]["tokens_per_s"] for r in ("packed", "length_grouped", "padded")]
    title = throughput_title(train)
    grouped, worst = f"{train['speedup_length_grouped']:.2f}x", f"{train['speedup']:.2f}x"
    assert grouped in title and worst in title and title.index(grouped) < title.index(worst)
    assert "length-grouped" in title and "worst case" in title


def test_training_numbers_match_the_metrics_files(demo_run: dict[str, Any], summary: dict[str, Any]) -> None:
    out: Path = demo_run["out"]
    train = summary["train"]
    rows = {run: _metrics(out / train[run]["metrics"]) for run in ("packed", "padded")}
    for run, lines in rows.items():
        s = train[run]
        assert len(lines) == s["steps"] == train["steps"] == QUICK_STEPS
        assert s["final_loss"] == lines[-1]["loss"]
        assert s["real_tokens"] == sum(r["real_tokens"] for r in lines)
        assert s["computed_tokens"] == sum(r["padded_tokens"] for r in lines)
        timed = [r for r in lines if r["step"] >= s["timed_from_step"]]
        assert s["timed_from_step"] == 2  # the first step is warm-up
        expected = sum(r["real_tokens"] for r in timed) / sum(r["step_time"] for r in timed)
        assert s["tokens_per_s"] == pytest.approx(expected, rel=1e-12)
    assert train["speedup"] == pytest.approx(
        train["packed"]["tokens_per_s"] / train["padded"]["tokens_per_s"]
    )

    # The fair comparison: same steps and the same real tokens in every step, hence (same data, per-token
    # loss) the same loss curve up to float noise; padding makes the padded run compute more tokens.
    assert [r["real_tokens"] for r in rows["packed"]] == [r["real_tokens"] for r in rows["padded"]]
    assert train["same_real_tokens_per_step"] is True
    diffs = [abs(a["loss"] - b["loss"]) for a, b in zip(rows["packed"], rows["padded"], strict=True)]
    assert train["max_abs_loss_diff"] == max(diffs) < 1e-3
    assert train["padded"]["computed_tokens"] > train["packed"]["computed_tokens"]


def test_packing_numbers_match_the_packed_file(demo_run: dict[str, Any], summary: dict[str, Any]) -> None:
    out: Path = demo_run["out"]
    pk = summary["packing"]
    import pyarrow.parquet as pq

    table = pq.read_table(out / pk["packed_file"])
    assert pk["packs"] == table.num_rows == pk["planned_packs"]
    assert pk["lower_bound"] <= pk["packs"]
    ids = table.column("input_ids").to_pylist()
    starts = table.column("seq_start_id").to_pylist()
    assert pk["samples"] == sum(len(s) for s in starts)
    # runtime tokens: every sample trains on its stored tokens but the last
    runtime = sum(len(i) - len(s) for i, s in zip(ids, starts, strict=True))
    assert pk["tokens"] == runtime
    assert pk["padding_tokens_packed"] == pk["packs"] * pk["pack_size"] - runtime
    assert pk["padding_tokens_padded"] == pk["samples"] * pk["seq_length"] - runtime
    assert pk["padding_removed_tokens"] == pk["padding_tokens_padded"] - pk["padding_tokens_packed"]
    assert pk["padding_tokens_packed"] == pk["bin_waste_tokens"] + pk["alignment_waste_tokens"]
    assert pk["packing_factor"] == pytest.approx(pk["samples"] / pk["packs"])
    metadata = json.loads((out / pk["metadata_file"]).read_text())
    assert metadata[0]["packs"] == pk["packs"]


def test_lint_numbers(demo_run: dict[str, Any], summary: dict[str, Any]) -> None:
    from packcfg.lint.rules import all_rules

    lint = summary["lint"]
    diagnostics = json.loads((demo_run["out"] / lint["file"]).read_text())
    assert lint["diagnostics"] == len(diagnostics)
    assert lint["errors"] == sum(d["severity"] == "error" for d in diagnostics) == 0
    assert lint["rules_checked"] == len(all_rules()) > 0


def test_picture_shows_the_summary_numbers(demo_run: dict[str, Any], summary: dict[str, Any]) -> None:
    """demo.svg is a well-formed SVG whose throughput bars are the summary's tokens/s, length-grouped padding
    first after packed, and whose title leads with the speedup against it."""
    from xml.etree import ElementTree

    assert summary["plot"] == "demo.svg"
    root = ElementTree.fromstring((demo_run["out"] / summary["plot"]).read_text())
    ns = "{http://www.w3.org/2000/svg}"
    assert root.tag == f"{ns}svg"
    panels = root.findall(f"{ns}g")
    assert len(panels) == 3  # loss, pack fill, throughput
    text = lambda g: " ".join("".join(t.itertext()) for t in g.iter(f"{ns}text"))  # noqa: E731
    train = summary["train"]
    speed = panels[2]
    assert text(speed).startswith(f"throughput: packed {train['speedup_length_grouped']:.2f}x")
    bars = [r for r in speed.iter(f"{ns}rect") if r.get("fill") != "none"]
    heights = [float(r.get("height")) for r in bars]
    rates = [train[run]["tokens_per_s"] for run in ("packed", "length_grouped", "padded")]
    assert len(heights) == 3 and all(h > 0 for h in heights)
    for h, r in zip(heights, rates, strict=True):  # bar heights proportional to the numbers (0.1 px rounding)
        assert abs(h / heights[0] - r / rates[0]) < 0.01
    assert "worst case" in text(speed)
    assert len(panels[0].findall(f"{ns}polyline")) == 2  # the packed and the padded loss curves
    md = (demo_run["out"] / "summary.md").read_text()
    assert f"**{summary['train']['speedup']:.2f}x**" in md


def test_ctrl_c_keeps_the_previous_results(demo_run: dict[str, Any], summary: dict[str, Any]) -> None:
    """A rerun interrupted with SIGINT once it has written packed data: exit 130, one line on stderr,
    the previous results untouched, and no staging directory left."""
    out: Path = demo_run["out"]
    before = {p.relative_to(out): p.stat().st_mtime_ns for p in out.rglob("*")}
    child = subprocess.Popen(
        _demo_command(out),
        cwd=demo_run["work"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_restore_sigint,
    )
    try:
        deadline = time.monotonic() + 300
        while not list(out.parent.glob(".demo.partial-*/data/train.parquet")):
            assert child.poll() is None, "the demo ended before it could be interrupted"
            assert time.monotonic() < deadline, "the rerun never wrote its packed data"
            time.sleep(0.05)
        child.send_signal(signal.SIGINT)
        _, err = child.communicate(timeout=120)
    finally:
        if child.poll() is None:
            child.kill()
    assert child.returncode == 130
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "interrupted" in lines[0], err
    assert {p.relative_to(out): p.stat().st_mtime_ns for p in out.rglob("*")} == before
    assert _leftovers(out.parent) == []


# ---------------------------------------------------------------------------- the output directory rules


def test_refuses_a_directory_that_is_not_a_demo_output(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "mine"
    target.mkdir()
    (target / "notes.txt").write_text("keep me")
    assert main(["demo", "--quick", "--out", str(target)]) == 2
    assert "not a packcfg demo output" in capsys.readouterr().err
    assert sorted(p.name for p in target.iterdir()) == ["notes.txt"]
    assert _leftovers(tmp_path) == []


def test_replaces_a_previous_demo_output_only_when_complete(tmp_path: Path) -> None:
    target = tmp_path / "demo"
    target.mkdir()
    (target / outdir.SUMMARY_NAME).write_text(json.dumps({"kind": outdir.SUMMARY_KIND, "run": 1}))
    (target / "stale.txt").write_text("from run 1")

    with pytest.raises(RuntimeError), outdir.staged_output(target) as stage:
        (stage / "half.txt").write_text("x")
        raise RuntimeError("a failed run")
    assert sorted(p.name for p in target.iterdir()) == ["stale.txt", "summary.json"]
    assert _leftovers(tmp_path) == []

    with outdir.staged_output(target) as stage:
        (stage / outdir.SUMMARY_NAME).write_text(json.dumps({"kind": outdir.SUMMARY_KIND, "run": 2}))
        assert sorted(p.name for p in target.iterdir()) == ["stale.txt", "summary.json"]  # not yet
    assert sorted(p.name for p in target.iterdir()) == ["summary.json"]
    assert json.loads((target / outdir.SUMMARY_NAME).read_text())["run"] == 2
    assert _leftovers(tmp_path) == []


def test_removes_staging_left_by_a_killed_run(tmp_path: Path) -> None:
    dead_pid = 2**22 + 12345  # above the default pid_max: no such process
    stale = tmp_path / f".demo.partial-{dead_pid}-abcd"
    stale.mkdir()
    (stale / "x").write_text("half")
    live = tmp_path / f".demo.partial-{os.getpid()}-beef"  # a live process's staging is not touched
    live.mkdir()
    with outdir.staged_output(tmp_path / "demo"):
        pass
    assert not stale.exists() and live.exists()


def test_overrides_keep_every_written_path_under_the_stage(tmp_path: Path) -> None:
    from packcfg.core.config import load_config
    from packcfg.resources import tiny_recipe

    overrides = demo_overrides(load_config([tiny_recipe()]), tmp_path / "stage dir: #1", 7)
    config = load_config([tiny_recipe()], overrides)
    specs = config["dataset"]["offline_packing_specs"]
    for value in (
        specs["packed_train_data_path"],
        specs["packed_metadata_path"],
        config["checkpoint"]["save"],
    ):
        assert Path(value).is_relative_to(tmp_path / "stage dir: #1")
    assert config["train"]["train_iters"] == config["scheduler"]["lr_decay_iters"] == 7
    assert config["scheduler"]["lr_warmup_iters"] <= 7 // 5


def test_overrides_follow_the_configs_own_specs_spelling(tmp_path: Path) -> None:
    """A recipe in Bridge < 0.6's spelling keeps one specs section: the demo's paths go into it."""
    from packcfg.core.config import load_config
    from packcfg.resources import tiny_recipe

    legacy = tmp_path / "legacy.yaml"
    legacy.write_text(
        tiny_recipe()
        .read_text()
        .replace("  enable_offline_packing: true\n", "")
        .replace("offline_packing_specs:", "packed_sequence_specs:")
    )
    config = load_config([legacy], demo_overrides(load_config([legacy]), tmp_path / "stage", 3))
    assert "offline_packing_specs" not in config["dataset"]
    specs = config["dataset"]["packed_sequence_specs"]
    assert Path(specs["packed_train_data_path"]).is_relative_to(tmp_path / "stage")
    assert specs["packed_sequence_size"] == 512  # the rest of the section as written
