"""Ctrl-C at any point of a command, its imports included, is one line and exit 130, never a traceback (a
SIGINT that landed while `packcfg pack` was still importing printed Python's KeyboardInterrupt traceback and
died by the signal: found by sending SIGINT to `pack` at random times on a loaded machine)."""

from __future__ import annotations

import subprocess
import sys

import pytest

INTERRUPT_IMPORT = """
import sys
class Interrupt:
    def find_spec(self, name, path=None, target=None):
        if name == {module!r}:
            raise KeyboardInterrupt
sys.meta_path.insert(0, Interrupt())
"""


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("command", ["pack", "lint", "train"])
def test_ctrl_c_while_a_command_module_imports_is_one_line(command):
    from packcfg.cli import COMMANDS

    module = COMMANDS[command][0]
    proc = _run(
        INTERRUPT_IMPORT.format(module=module)
        + f"from packcfg.cli import main\nraise SystemExit(main([{command!r}, 'x']))\n"
    )
    assert proc.returncode == 130, proc.stderr
    assert proc.stderr == "packcfg: interrupted\n"


def test_ctrl_c_while_python_m_packcfg_imports_its_cli_is_one_line():
    proc = _run(
        INTERRUPT_IMPORT.format(module="packcfg.cli")
        + "import runpy\nrunpy.run_module('packcfg', run_name='__main__')\n"
    )
    assert proc.returncode == 130, proc.stderr
    assert proc.stderr == "packcfg: interrupted\n"


def test_control_an_interrupt_outside_the_cli_is_pythons_traceback():
    """The harness itself: the same interrupted import outside packcfg's CLI is Python's traceback."""
    proc = _run(INTERRUPT_IMPORT.format(module="json.decoder") + "import json\n")
    assert proc.returncode != 130 and "KeyboardInterrupt" in proc.stderr
