"""JSONL lines as objects: one-line errors naming the file and line (bad JSON, bad UTF-8, unreadable)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from packcfg.packing.errors import PackingError


def jsonl_records(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) for each non-blank line; bad JSON, bad UTF-8 or an unreadable file is a
    PackingError naming the file (and line). The file closes when the caller stops iterating."""
    for lineno, _, obj in jsonl_lines(path):
        yield lineno, obj


def jsonl_lines(path: Path) -> Iterator[tuple[int, str, dict[str, Any]]]:
    """(line number, raw line, object) for each non-blank line (see `jsonl_records`)."""
    for lineno, line in jsonl_text_lines(path):
        yield lineno, line, parse_line(path, lineno, line)


def jsonl_text_lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, raw line) for each non-blank line, unparsed; bad UTF-8 or an unreadable file is a
    PackingError naming the file."""
    try:
        f = open(path, encoding="utf-8")
    except OSError as exc:
        raise PackingError(f"{path}: cannot read ({exc.strerror or exc})") from None
    with f:
        try:
            for lineno, line in enumerate(f, 1):
                if line.strip():
                    yield lineno, line
        except UnicodeDecodeError as exc:
            raise PackingError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None


def parse_line(path: Path, lineno: int, line: str) -> dict[str, Any]:
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as exc:
        snippet = line.strip()[:60]
        raise PackingError(
            f"{path}:{lineno}: malformed JSON ({exc.msg} at column {exc.colno}): {snippet!r}"
        ) from None
    except RecursionError:
        raise PackingError(f"{path}:{lineno}: malformed JSON (nested too deeply)") from None
    if not isinstance(obj, dict):
        raise PackingError(f"{path}:{lineno}: expected a JSON object, got {type(obj).__name__}")
    return obj
