"""Packing is safe with the user's data (issue 10): outputs never clobber inputs, special files, symlinks or
packed files packcfg did not write; bad token ids are named, never packed as garbage; nothing to pack is an
error; signals and kills leave no temporary files behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from packcfg.cli import main
from packcfg.core.atomic import OutputRefused
from packcfg.packing import PackingError, PackSettings, ensure_packed, pack_dataset
from packcfg.packing.errors import PackOutputRefused

from .conftest import random_token_rows, write_jsonl

ROOT = Path(__file__).resolve().parents[2]


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def one_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


@pytest.fixture
def src(tmp_path: Path) -> Path:
    return write_jsonl(tmp_path / "data.jsonl", random_token_rows(50, seed=2))


def temps(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith(".") and p.name.endswith(".tmp"))


# --------------------------------------------------------------------------- outputs vs inputs


@pytest.mark.parametrize("flag", ["--parquet", "--metadata"])
def test_output_equal_to_the_source_is_refused(tmp_path, capsys, src, flag):
    before = src.read_bytes()
    rc, _, err = run_cli(capsys, "pack", src, "--capacity", "128", flag, src)
    assert rc == 2
    line = one_line(err)
    assert str(src) in line and "input of this command" in line
    assert src.read_bytes() == before


def test_output_through_a_symlink_or_hard_link_to_the_source_is_refused(tmp_path, capsys, src):
    before = src.read_bytes()
    link = tmp_path / "link.parquet"
    link.symlink_to(src)
    hard = tmp_path / "hard.parquet"
    os.link(src, hard)
    for out in (link, hard):
        rc, _, err = run_cli(capsys, "pack", src, "--capacity", "128", "--parquet", out)
        assert rc == 2 and "input of this command" in one_line(err)
    assert src.read_bytes() == before and link.is_symlink()


def test_parquet_source_packed_onto_itself_is_refused(tmp_path, capsys):
    path = tmp_path / "s.parquet"
    pq.write_table(pa.table({"input_ids": pa.array([[1, 2, 3]] * 5, pa.list_(pa.int32()))}), path)
    before = path.read_bytes()
    rc, _, err = run_cli(capsys, "pack", path, "--capacity", "16", "--parquet", path)
    assert rc == 2 and "input of this command" in one_line(err) and path.read_bytes() == before


def test_output_equal_to_the_config_or_the_other_output_is_refused(tmp_path, capsys, tiny_recipe):
    cfg = tmp_path / "exp.yaml"
    cfg.write_bytes(tiny_recipe.read_bytes())
    before = cfg.read_bytes()
    for flag in ("--parquet", "--metadata"):
        rc, _, err = run_cli(
            capsys, "pack", cfg, flag, cfg, "-o", f"dataset.dataset_root={_root(tiny_recipe)}"
        )
        assert rc == 2 and "exp.yaml" in one_line(err) and "input of this command" in err
    assert cfg.read_bytes() == before
    same = tmp_path / "x.parquet"
    rc, _, err = run_cli(capsys, "pack", tiny_recipe, "--parquet", same, "--metadata", same)
    assert rc == 2 and "x.parquet" in one_line(err)
    assert not same.exists()


def _root(recipe: Path) -> str:
    from packcfg.core.config import load_config
    from packcfg.packing import settings_from_config

    return str(settings_from_config(load_config([recipe])).source.parent)


def test_out_through_a_symlink_is_refused_and_the_link_kept(tmp_path, capsys, src):
    target = tmp_path / "elsewhere.parquet"
    target.write_bytes(b"precious")
    link = tmp_path / "out.parquet"
    link.symlink_to(target)
    rc, _, err = run_cli(capsys, "pack", src, "--capacity", "128", "--parquet", link)
    assert rc == 2 and "symlink" in one_line(err) and "out.parquet" in err
    assert link.is_symlink() and target.read_bytes() == b"precious"


def test_out_to_a_special_file_is_refused(tmp_path, capsys, src):
    fifo = tmp_path / "pipe.parquet"
    os.mkfifo(fifo)
    rc, _, err = run_cli(capsys, "pack", src, "--capacity", "128", "--parquet", fifo)
    assert rc == 2 and "FIFO" in one_line(err)
    assert fifo.exists() and not fifo.is_file()
    if os.path.exists("/dev/full"):
        rc, _, err = run_cli(capsys, "pack", src, "--capacity", "128", "--parquet", "/dev/full")
        assert rc == 2 and "/dev/full" in one_line(err) and "character device" in err
        assert not Path("/dev/full").is_file()
    rc, _, err = run_cli(capsys, "pack", src, "--capacity", "128", "--metadata", "/dev/null")
    assert rc == 2 and "/dev/null" in one_line(err)
    assert temps(tmp_path) == []


# --------------------------------------------------------------------------- packed files packcfg did not write


def test_a_packed_file_packcfg_did_not_write_needs_force(tmp_path, capsys, src):
    out = tmp_path / "packed.parquet"
    theirs = pa.table({"input_ids": pa.array([[7, 7, 7]], pa.list_(pa.int32()))})
    pq.write_table(theirs, out)
    before = out.read_bytes()
    rc, _, err = run_cli(capsys, "pack", src, "--capacity", "128", "--parquet", out)
    line = one_line(err)
    assert rc == 2 and "packed.parquet" in line and "not written by packcfg" in line and "--force" in line
    assert out.read_bytes() == before
    rc, _, err = run_cli(capsys, "pack", src, "--capacity", "128", "--parquet", out, "--force", "-q")
    assert rc == 0, err
    # now it is ours: a changed setting repacks without --force
    rc, out_text, err = run_cli(capsys, "pack", src, "--capacity", "256", "--parquet", out)
    assert rc == 0 and "packed" in out_text, err


def test_a_user_file_at_the_metadata_path_needs_force(tmp_path, capsys, src):
    meta = tmp_path / "notes.json"
    meta.write_text("my notes, not JSON\n")
    rc, _, err = run_cli(capsys, "pack", src, "--capacity", "128", "--metadata", meta)
    assert rc == 2 and "notes.json" in one_line(err) and "--force" in err
    assert meta.read_text() == "my notes, not JSON\n"
    assert not (tmp_path / "data.packed.parquet").exists()


def test_packed_files_from_before_the_file_entry_are_still_ours(tmp_path, src):
    """A packed file whose Parquet has no packcfg entry but whose packcfg metadata JSON names it."""
    s = PackSettings(src, tmp_path / "p.parquet", tmp_path / "m.json", capacity=128)
    pack_dataset(s, progress=False)
    table = pq.read_table(s.output).replace_schema_metadata(None)
    pq.write_table(table, s.output)  # as an older packcfg wrote it: no key-value entry
    s.capacity = 256
    assert pack_dataset(s, progress=False).created


def test_ensure_packed_refuses_a_foreign_packed_file_with_a_packing_error(tmp_path, tiny_recipe):
    from packcfg.core.config import load_config

    config = load_config([tiny_recipe])
    spec = config["dataset"]["offline_packing_specs"]
    out = tmp_path / "train.parquet"
    spec["packed_train_data_path"] = str(out)
    spec["packed_metadata_path"] = str(tmp_path / "metadata.json")
    config["dataset"]["dataset_root"] = _root(tiny_recipe)
    pq.write_table(pa.table({"input_ids": pa.array([[1, 2]], pa.list_(pa.int32()))}), out)
    before = out.read_bytes()
    with pytest.raises(PackOutputRefused) as info:
        ensure_packed(config, progress=False)
    assert isinstance(info.value, PackingError) and isinstance(info.value, OutputRefused)
    assert "not written by packcfg" in str(info.value) and str(out) in str(info.value)
    assert out.read_bytes() == before
    assert ensure_packed(config, progress=False, force=True).created


# --------------------------------------------------------------------------- nothing to pack, bad ids


def test_oversize_drop_of_every_sample_is_an_error(tmp_path, capsys):
    src = write_jsonl(tmp_path / "long.jsonl", [{"input_ids": list(range(1, 50))}] * 3)
    rc, _, err = run_cli(capsys, "pack", src, "--capacity", "10", "--oversize", "drop")
    line = one_line(err)
    assert rc == 2 and "long.jsonl" in line and "dropped all 3" in line
    assert not (tmp_path / "long.packed.parquet").exists()
    assert not (tmp_path / "long.packed.metadata.json").exists()
    assert temps(tmp_path) == []


@pytest.mark.parametrize(
    ("ids", "shown"),
    [
        ("[5, null, 7]", "input_ids[1] is null"),
        ("[5, true, 7]", "input_ids[1] is true"),
        ("[false, 5]", "input_ids[0] is false"),
        ("[5, 2.5]", "input_ids[1] is 2.5"),
        ("[5, 6.0]", "input_ids[1] is 6.0"),
        ("[5, -3]", "input_ids[1] is -3"),
        ("[5, 2147483648]", "input_ids[1] is 2147483648"),
        ("[5, 123456789012345678901234567890]", "input_ids[1] is 123456789012345678901234567890"),
        ('[5, "6"]', 'input_ids[1] is "6"'),
    ],
)
def test_bad_token_ids_in_jsonl_are_named(tmp_path, capsys, ids, shown):
    src = tmp_path / "bad.jsonl"
    src.write_text('{"input_ids": [1, 2, 3]}\n\n{"input_ids": ' + ids + "}\n")
    rc, _, err = run_cli(capsys, "pack", src, "--capacity", "16")
    line = one_line(err)
    assert rc == 2 and "bad.jsonl:3:" in line and shown in line
    assert not (tmp_path / "bad.packed.parquet").exists()


@pytest.mark.parametrize(
    ("column", "shown"),
    [
        (pa.array([[1, 2], [3, None, 5]], pa.list_(pa.int32())), "row 2: input_ids[1] is null"),
        (pa.array([[1, 2], [3, 4, -9]], pa.list_(pa.int64())), "row 2: input_ids[2] is -9"),
        (pa.array([[1, 2], [3, 2**33]], pa.list_(pa.int64())), "row 2: input_ids[1] is 8589934592"),
    ],
)
def test_bad_token_ids_in_parquet_are_named(tmp_path, capsys, column, shown):
    src = tmp_path / "bad.parquet"
    pq.write_table(pa.table({"input_ids": column}), src)
    rc, _, err = run_cli(capsys, "pack", src, "--capacity", "16")
    line = one_line(err)
    assert rc == 2 and "bad.parquet" in line and shown in line
    assert not (tmp_path / "bad.packed.parquet").exists()


def _multi_group_parquet(path, rows=400, per_group=37, bad_row=None):
    rng = np.random.default_rng(12)
    ids = [rng.integers(0, 500, int(n)).tolist() for n in rng.integers(1, 30, rows)]
    answer = [int(rng.integers(0, len(x) + 1)) for x in ids]
    if bad_row is not None:
        ids[bad_row - 1][-1] = -7
    table = pa.table({"input_ids": pa.array(ids, pa.list_(pa.int32())), "answer_start_idx": answer})
    pq.write_table(table, path, row_group_size=per_group)
    return path


def test_parquet_row_groups_read_in_parallel_give_the_batches_of_the_sequential_reader(tmp_path, monkeypatch):
    from packcfg.packing import sources

    src = _multi_group_parquet(tmp_path / "g.parquet")
    assert pq.ParquetFile(src).metadata.num_row_groups > 5
    monkeypatch.setattr(sources.threads, "READ_WORKERS", 2)
    parallel = list(sources.iter_batches(src, batch_size=16))
    monkeypatch.setattr(sources.parquet, "PARALLEL_ROW_GROUP_BYTES", 0)  # every group "too big": sequential
    sequential = list(sources.iter_batches(src, batch_size=16))
    flat = [np.concatenate([getattr(b, f) for b in parallel]) for f in ("values", "mask")]
    assert np.array_equal(flat[0], np.concatenate([b.values for b in sequential]))
    assert np.array_equal(flat[1], np.concatenate([b.mask for b in sequential]))
    lines = np.concatenate([b.sample_lines() for b in parallel])
    assert lines.tolist() == list(range(1, 401))
    assert lines.tolist() == np.concatenate([b.sample_lines() for b in sequential]).tolist()


@pytest.mark.parametrize("parallel", [True, False])
def test_bad_value_in_a_later_parquet_row_group_names_its_row(tmp_path, capsys, monkeypatch, parallel):
    from packcfg.packing import sources

    monkeypatch.setattr(sources.threads, "READ_WORKERS", 2)
    if not parallel:
        monkeypatch.setattr(sources.parquet, "PARALLEL_ROW_GROUP_BYTES", 0)
    src = _multi_group_parquet(tmp_path / "bad.parquet", bad_row=301)
    rc, _, err = run_cli(capsys, "pack", src, "--capacity", "4096")
    line = one_line(err)
    assert rc == 2 and "row 301: input_ids[" in line and "is -7" in line, line


def test_null_in_parquet_loss_mask_is_named(tmp_path, capsys):
    src = tmp_path / "m.parquet"
    table = pa.table(
        {
            "input_ids": pa.array([[1, 2, 3]], pa.list_(pa.int32())),
            "loss_mask": pa.array([[0, None, 1]], pa.list_(pa.int8())),
        }
    )
    pq.write_table(table, src)
    rc, _, err = run_cli(capsys, "pack", src, "--capacity", "16")
    assert rc == 2 and "row 1: loss_mask[1] is null" in one_line(err)


# --------------------------------------------------------------------------- signals and kills


@pytest.fixture(scope="module")
def big_source(tmp_path_factory) -> Path:
    """Enough tokens (~12M) that a pack takes a moment: signals land mid-run."""
    folder = tmp_path_factory.mktemp("big")
    path = folder / "big.parquet"
    rng = np.random.default_rng(0)
    n = 120_000
    lengths = rng.integers(20, 180, size=n)
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    values = rng.integers(3, 32000, size=int(offsets[-1]), dtype=np.int32)
    ids = pa.ListArray.from_arrays(pa.array(offsets), pa.array(values))
    pq.write_table(pa.table({"input_ids": ids}), path)
    return path


def _start_pack(src: Path, out: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "packcfg",
            "pack",
            str(src),
            "--capacity",
            "4096",
            "--parquet",
            str(out),
            "-q",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_for_temps(folder: Path, proc: subprocess.Popen, want_file: bool, timeout: float = 60) -> list[str]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        found = [
            p for p in folder.iterdir() if p.name.startswith(".out.parquet.") and p.name.endswith(".tmp")
        ]
        if found and (not want_file or any(p.is_file() for p in found)):
            return [p.name for p in found]
        time.sleep(0.005)
    pytest.skip("the pack finished before its temporary files could be observed (machine too fast)")


@pytest.mark.slow
@pytest.mark.parametrize(
    ("sig", "code", "want_file"), [(signal.SIGTERM, 143, True), (signal.SIGINT, 130, False)]
)
def test_signal_during_pack_removes_its_temporary_files(tmp_path, big_source, sig, code, want_file):
    out = tmp_path / "out.parquet"
    proc = _start_pack(big_source, out)
    seen = _wait_for_temps(tmp_path, proc, want_file)
    assert seen
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == code, err
    assert "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no temp, no spool, no partial output


@pytest.mark.slow
def test_a_killed_packs_leftovers_are_removed_by_the_next_run(tmp_path, big_source):
    out = tmp_path / "out.parquet"
    proc = _start_pack(big_source, out)
    _wait_for_temps(tmp_path, proc, want_file=True)
    proc.kill()
    proc.wait()
    left = temps(tmp_path)
    assert left, "SIGKILL runs no cleanup: something must be left for this test to mean anything"
    size = sum(
        f.stat().st_size
        for p in left
        for f in ([tmp_path / p] if (tmp_path / p).is_file() else (tmp_path / p).rglob("*"))
    )
    assert size > 0
    time.sleep(0.1)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "packcfg",
            "pack",
            str(big_source),
            "--capacity",
            "4096",
            "--parquet",
            str(out),
            "-q",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert temps(tmp_path) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.metadata.json", "out.parquet"]
    assert json.loads((tmp_path / "out.metadata.json").read_text())[0]["packs"] > 0


def test_analyze_plot_never_over_an_input_or_a_special_file(tmp_path, capsys, src):
    before = src.read_bytes()
    rc, _, err = run_cli(capsys, "analyze", src, "--capacity", "128", "--plot", src)
    assert rc == 2 and "input of this command" in one_line(err) and src.read_bytes() == before
    rc, _, err = run_cli(capsys, "analyze", src, "--capacity", "128", "--plot", "/dev/null")
    assert rc == 2 and "/dev/null" in one_line(err) and "character device" in err


# --------------------------------------------------------------------------- --bridge-npy output rule


def test_bridge_npy_never_replaces_the_source_and_is_refused_before_packing(tmp_path, capsys):
    """`pack a.jsonl --bridge-npy a.jsonl --force` replaced the source with the .npy (data loss)."""
    src = write_jsonl(tmp_path / "a.jsonl", random_token_rows(30, seed=4))
    before = src.read_bytes()
    for extra in ([], ["--force"]):
        rc, _, err = run_cli(capsys, "pack", src, "--capacity", "4096", "--bridge-npy", src, *extra)
        assert rc == 2 and "is an input of this command" in one_line(err), err
        assert src.read_bytes() == before
        assert not (tmp_path / "a.packed.parquet").exists()  # refused before any packing


@pytest.mark.parametrize("target", ["packed", "metadata"])
def test_bridge_npy_never_replaces_the_packed_file_or_its_metadata(tmp_path, capsys, target):
    src = write_jsonl(tmp_path / "a.jsonl", random_token_rows(30, seed=4))
    out = tmp_path / ("a.packed.parquet" if target == "packed" else "a.packed.metadata.json")
    rc, _, err = run_cli(capsys, "pack", src, "--capacity", "4096", "--bridge-npy", out, "--force")
    assert rc == 2 and "is an input of this command" in one_line(err), err


def test_bridge_npy_replaces_a_npy_but_another_file_only_with_force(tmp_path, capsys):
    src = write_jsonl(tmp_path / "a.jsonl", random_token_rows(30, seed=4))
    npy = tmp_path / "train.npy"
    for _ in range(2):  # written, then replaced (a .npy: a previous run's)
        rc, _, err = run_cli(capsys, "pack", src, "--capacity", "4096", "-q", "--bridge-npy", npy)
        assert rc == 0, err
        assert len(np.load(npy, allow_pickle=True)) > 0
    note = tmp_path / "note.txt"
    note.write_text("mine\n")
    rc, _, err = run_cli(capsys, "pack", src, "--capacity", "4096", "-q", "--bridge-npy", note)
    assert rc == 2 and "pass --force" in one_line(err) and note.read_text() == "mine\n"
    rc, _, err = run_cli(capsys, "pack", src, "--capacity", "4096", "-q", "--bridge-npy", note, "--force")
    assert rc == 0 and note.read_bytes().startswith(b"\x93NUMPY"), err


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_an_interrupted_spool_stops_its_reader_thread_at_once(tmp_path, suffix):
    """Ctrl-C while the source is read: the reader thread (a daemon, one batch ahead) is stopped and joined
    before the interrupt leaves `spool`, even while the exception's traceback still holds the frames. Left
    running, a daemon thread still inside pyarrow when the interpreter exits can abort the process (once,
    `pack` died of SIGABRT, -6, instead of exiting 130 in the signal test above). Control: the same read
    without closing the batches leaves the thread alive."""
    import contextlib
    import threading

    from packcfg.packing.sources import spooling

    rows = random_token_rows(400, seed=3)
    src = write_jsonl(tmp_path / "src.jsonl", rows)
    if suffix == ".parquet":
        table = pa.table({"input_ids": [r["input_ids"] for r in rows]})
        src = tmp_path / "src.parquet"
        pq.write_table(table, src, row_group_size=20)

    class Interrupt:
        def update(self, n: int) -> None:
            raise KeyboardInterrupt

    def readers() -> list[threading.Thread]:
        return [t for t in threading.enumerate() if t.name == "packcfg-prefetch" and t.is_alive()]

    def interrupted() -> list[threading.Thread]:
        try:
            spooling.spool(src, None, tmp_path / "work", Interrupt(), batch_size=8)
        except KeyboardInterrupt as exc:
            held = exc.__traceback__  # the frames stay referenced, as while the interrupt unwinds
            alive = readers()
            del held
            return alive
        raise AssertionError("not interrupted")

    assert interrupted() == []
    with pytest.MonkeyPatch.context() as m:  # control: the generator left open until collected
        m.setattr(spooling, "closing", contextlib.nullcontext)
        left = interrupted()
        assert left, "the control should leave the reader running"
    for t in left:  # the control's generator is collected by now, which stops its thread
        t.join(timeout=10)
        assert not t.is_alive()
