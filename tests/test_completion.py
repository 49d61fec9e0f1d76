"""`packcfg completion`: the generated scripts complete real subcommands, flags and choices in a real shell."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from packcfg.cli import build_parser
from packcfg.completion import bash_script, command_options, fish_script


def complete_bash(script: str, words: list[str]) -> list[str]:
    """Run the bash completion function for `words` (the last one is being typed) and return COMPREPLY."""
    quoted = " ".join(f"'{w}'" for w in words)
    program = (
        f"{script}\n"
        f"COMP_WORDS=({quoted}); COMP_CWORD={len(words) - 1}\n"
        '_packcfg; printf "%s\\n" "${COMPREPLY[@]}"\n'
    )
    out = subprocess.run(["bash", "-c", program], capture_output=True, text=True, check=True)
    return [line for line in out.stdout.splitlines() if line]


@pytest.fixture(scope="module")
def bash() -> str:
    if shutil.which("bash") is None:
        pytest.skip("bash is not installed")
    return bash_script(build_parser())


def test_every_subcommand_is_offered(bash: str) -> None:
    offered = complete_bash(bash, ["packcfg", ""])
    for name in ("lint", "pack", "verify", "train", "render", "launch", "completion"):
        assert name in offered
    assert complete_bash(bash, ["packcfg", "la"]) == ["launch"]


def test_flags_and_choices_come_from_the_parser(bash: str) -> None:
    flags = complete_bash(bash, ["packcfg", "lint", "--for"])
    assert flags == ["--format"]
    assert set(complete_bash(bash, ["packcfg", "lint", "--format", ""])) == {
        "text",
        "json",
        "sarif",
        "github",
        "junit",
    }
    assert complete_bash(bash, ["packcfg", "completion", "f"]) == ["fish"]
    # a flag of another subcommand is not offered here
    assert "--fix" not in complete_bash(bash, ["packcfg", "pack", "--f"])


def test_options_table_matches_argparse() -> None:
    table = command_options(build_parser())
    assert "--exit-zero" in table["lint"][0]
    assert table["completion"][1][""] == ["bash", "zsh", "fish"]


def test_fish_and_zsh_scripts_render(tmp_path) -> None:
    script = fish_script(build_parser())
    assert "__fish_seen_subcommand_from lint" in script
    zsh = subprocess.run(
        [sys.executable, "-m", "packcfg", "completion", "zsh"], capture_output=True, text=True, check=True
    ).stdout
    assert zsh.startswith("#compdef packcfg")


def test_completion_imports_no_heavy_flow() -> None:
    code = (
        "import sys; from packcfg.cli import main; import io, contextlib\n"
        "with contextlib.redirect_stdout(io.StringIO()): main(['completion', 'bash'])\n"
        "heavy = [m for m in ('torch', 'megatron', 'nemo_run') if m in sys.modules]\n"
        "print(','.join(heavy))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert out == ""
