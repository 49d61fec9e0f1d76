"""The error types the packing flow reports to users."""

from __future__ import annotations

from packcfg.core.atomic import OutputRefused


class PackingError(Exception):
    """Bad input or settings: the message is one line naming the file, line and value; exit code 2."""


class PackOutputRefused(PackingError, OutputRefused):
    """`pack` (or `ensure_packed`) will not write its output there: an input of the same command, a
    special file, a symlink, or a packed file packcfg did not write (replaced only with force/--force).
    A PackingError (one line, exit 2) and the core OutputRefused (an OSError)."""
