"""A dependency-free progress bar on stderr, shown only on a terminal."""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    """`with Progress("pack", total) as bar: bar.update(n)`; silent when disabled or not a TTY."""

    def __init__(self, label: str, total: int | None, enabled: bool = True, stream: TextIO | None = None):
        self.stream = stream if stream is not None else sys.stderr
        isatty = getattr(self.stream, "isatty", lambda: False)
        self.enabled = bool(enabled) and bool(isatty())
        self.label = label
        self.total = total
        self.done = 0
        self._start = time.monotonic()
        self._last = 0.0

    def update(self, n: int = 1) -> None:
        self.done += n
        if not self.enabled:
            return
        now = time.monotonic()
        if now - self._last < 0.1 and (self.total is None or self.done < self.total):
            return  # redraw at most ten times a second: the bar must not cost what it measures
        self._last = now
        rate = self.done / max(now - self._start, 1e-9)
        if self.total:
            frac = min(1.0, self.done / self.total)
            bar = "#" * int(frac * 30)
            text = f"\r{self.label} [{bar:<30}] {100 * frac:5.1f}% {self.done}/{self.total} ({rate:,.0f}/s)"
        else:
            text = f"\r{self.label} {self.done} ({rate:,.0f}/s)"
        self.stream.write(text)
        self.stream.flush()

    def close(self) -> None:
        if self.enabled and self._last:
            self.stream.write("\n")
            self.stream.flush()

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
