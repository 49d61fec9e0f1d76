"""The launch flow: gate (lint) -> job bundle (rendered scripts, manifest) -> backend -> job record.

Import-light: the command modules import only the standard library at top level, and heavy
dependencies (jinja2, yaml, nemo_run) are imported inside the functions that need them.
"""

from __future__ import annotations


class LaunchError(Exception):
    """A launch that cannot proceed; the message is one line for the user (no traceback)."""
