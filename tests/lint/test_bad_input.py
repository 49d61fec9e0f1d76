"""Bad input never gives a traceback or a hang: a diagnostic, or a one-line error with exit 2.

Everything that could hang or exhaust memory runs `python -m packcfg` in a subprocess with a timeout.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

TIMEOUT = 120


def _lint(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [sys.executable, "-m", "packcfg", "lint", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        cwd=cwd,
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


def _codes(proc: subprocess.CompletedProcess[str]) -> list[str]:
    return [d["code"] for d in json.loads(proc.stdout)]


CASES: dict[str, tuple[bytes, str]] = {
    # an empty file is an empty mapping (rules.md rev 3, SC001): tests/core/test_bridge_reading.py
    "list_top_level": (b"- a\n- b\n", "SC001"),
    "scalar_top_level": (b"42\n", "SC001"),
    "duplicate_keys": (b"train:\n  micro_batch_size: 1\n  micro_batch_size: 2\n", "SC001"),
    "tab_indentation": (b"train:\n\tmicro_batch_size: 1\n", "SC001"),
    "invalid_utf8": (b"train:\n  name: \xff\xfe\n", "SC001"),
    "utf16": ("train: 1\n".encode("utf-16"), "SC001"),
    "nul_byte": (b"train: \x00\n", "SC001"),
    "unclosed_flow": (b"train: {a: 1\n", "SC001"),
    "two_documents": (b"a: 1\n---\nb: 2\n", "SC001"),
    "python_tag": (b"train: !!python/object/apply:os.system ['echo pwned']\n", "SC004"),
    "python_name": (b"model: !!python/name:builtins.eval\n", "SC004"),
    "custom_tag": (b"model: !Ref x\n", "SC004"),
    "recursive_alias": (b"a: &a [*a]\n", "SC004"),
    "deep_nesting": (b"a: " + b"[" * 100_000 + b"]" * 100_000 + b"\n", "SC004"),
    "gigantic_int": (b"train:\n  micro_batch_size: " + b"9" * 10_000 + b"\n", "SC002"),
    "gigantic_float": (b"train:\n  micro_batch_size: 1.0e+99999\n", "SC002"),
}


def _alias_bomb() -> bytes:
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for prev, name in zip("abcdefgh", "bcdefghi", strict=True):
        lines.append(f"{name}: &{name} [{','.join(['*' + prev] * 9)}]")
    return ("\n".join(lines) + "\n").encode()


CASES["alias_bomb"] = (_alias_bomb(), "SC004")


@pytest.mark.parametrize("name", sorted(CASES))
def test_bad_file_is_a_finding_with_a_position(name: str, tmp_path: Path) -> None:
    content, code = CASES[name]
    path = tmp_path / f"{name}.yaml"
    path.write_bytes(content)
    proc = _lint(path, "--format", "json")
    assert proc.returncode == 1, proc.stderr
    found = json.loads(proc.stdout)
    assert code in [d["code"] for d in found]
    lines = max(1, content.count(b"\n") + (0 if content.endswith(b"\n") else 1))
    for d in found:
        assert 1 <= d["line"] <= lines and d["column"] >= 1


@pytest.mark.parametrize("fmt", ["text", "sarif", "github", "junit"])
def test_bad_files_in_every_format(fmt: str, tmp_path: Path) -> None:
    for name in ("invalid_utf8", "python_tag", "alias_bomb", "gigantic_int", "nul_byte"):
        (tmp_path / f"{name}.yaml").write_bytes(CASES[name][0])
    proc = _lint(tmp_path, "--format", fmt)
    assert proc.returncode == 1 and proc.stdout


@pytest.mark.slow
def test_fifty_megabyte_file_is_refused_quickly(tmp_path: Path) -> None:
    path = tmp_path / "huge.yaml"
    line = b"  key_%08d: some value that is long enough to fill the file quickly\n"
    with open(path, "wb") as fh:
        fh.write(b"train:\n")
        chunk = b"".join(line % i for i in range(10_000))
        while fh.tell() < 50 * 1024 * 1024:
            fh.write(chunk)
    proc = _lint(path, "--format", "json")
    assert proc.returncode == 1
    (d,) = json.loads(proc.stdout)
    assert d["code"] == "SC004" and "larger than" in d["message"] and d["line"] == 1


@pytest.mark.slow
def test_directory_of_ten_thousand_files(tmp_path: Path) -> None:
    folder = tmp_path / "many"
    folder.mkdir()
    for i in range(10_000):
        sub = folder / f"d{i // 1000}"
        sub.mkdir(exist_ok=True)
        text = "train: [\n" if i == 7777 else f"recipe:\n  name: r{i}\n"
        (sub / f"r{i:05}.yaml").write_text(text)
    proc = _lint(folder, "--format", "json", "--select", "SC001")
    assert proc.returncode == 1, proc.stderr
    (d,) = json.loads(proc.stdout)
    assert d["file"].endswith("r07777.yaml")


def test_nonexistent_path_exit_2_one_line(tmp_path: Path) -> None:
    proc = _lint(tmp_path / "missing.yaml")
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "missing.yaml" in proc.stderr


def test_broken_symlink_exit_2(tmp_path: Path) -> None:
    link = tmp_path / "x.yaml"
    link.symlink_to(tmp_path / "gone.yaml")
    proc = _lint(link)
    assert proc.returncode == 2 and "x.yaml" in proc.stderr and "no such file" in proc.stderr


def test_broken_symlink_inside_a_directory_exit_2_but_others_linted(tmp_path: Path) -> None:
    (tmp_path / "ok.yaml").write_text("train: [\n")
    (tmp_path / "x.yaml").symlink_to(tmp_path / "gone.yaml")
    proc = _lint(tmp_path)
    assert proc.returncode == 2
    assert "ok.yaml:1:9: SC001" in proc.stdout
    assert "x.yaml" in proc.stderr


def test_fifo_named_yaml_does_not_block(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.yaml"
    os.mkfifo(fifo)
    proc = _lint(fifo)
    assert proc.returncode == 2 and "not a regular file" in proc.stderr


def test_directory_named_yaml_is_searched_not_read(tmp_path: Path) -> None:
    folder = tmp_path / "dir.yaml"
    folder.mkdir()
    (folder / "inner.yaml").write_text("- 1\n")
    proc = _lint(folder)
    assert proc.returncode == 1 and "inner.yaml:1:1: SC001" in proc.stdout


def test_directory_given_as_config_file_exit_2(tmp_path: Path) -> None:
    proc = _lint("-c", tmp_path)
    assert proc.returncode == 2 and "is a directory" in proc.stderr


def test_unreadable_by_permission(tmp_path: Path) -> None:
    path = tmp_path / "secret.yaml"
    path.write_text("a: 1\n")
    path.chmod(0)
    if os.access(path, os.R_OK):
        pytest.skip("running as root: permission bits do not stop reads (broken symlink and FIFO cover this)")
    proc = _lint(path)
    assert proc.returncode == 2 and "secret.yaml" in proc.stderr


def test_output_to_unwritable_place_exit_2(tiny_recipe: Path, tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    proc = _lint(tiny_recipe, "--output", blocker / "out.txt")  # a folder that cannot exist
    # refused before any work by the output rule (packcfg.core.atomic.check_output): one line naming --output
    assert proc.returncode == 2 and "--output" in proc.stderr and "cannot" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert "Traceback" not in proc.stderr


def test_output_creates_missing_folders(tiny_recipe: Path, tmp_path: Path) -> None:
    out = tmp_path / "reports" / "lint.sarif"
    proc = _lint(tiny_recipe, "--format", "sarif", "--output", out)
    assert proc.returncode == 0 and out.read_text().lstrip().startswith("{")
