"""The one error type the packing flow reports to users."""

from __future__ import annotations


class PackingError(Exception):
    """Bad input or settings: the message is one line naming the file, line and value; exit code 2."""
