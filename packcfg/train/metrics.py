"""Per-step metrics as JSONL (rank 0) and the human progress line."""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TextIO


@dataclass(frozen=True)
class StepMetrics:
    step: int  # 1-based: the number of optimizer steps taken
    loss: float
    lr: float
    grad_norm: float
    real_tokens: int
    padded_tokens: int
    tokens_per_s: float  # real tokens per second
    step_time: float


class MetricsLog:
    """Appends one JSON line per step to `metrics.jsonl`; on resume, lines after the resumed step are
    dropped first so the file holds exactly one curve."""

    def __init__(self, path: Path, enabled: bool, resume_from: int = 0) -> None:
        self.path = path
        self.enabled = enabled
        if not enabled:
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        kept = []
        if resume_from > 0 and path.is_file():
            kept = [
                line
                for line in path.read_text().splitlines()
                if line.strip() and json.loads(line)["step"] <= resume_from
            ]
        path.write_text("".join(line + "\n" for line in kept))

    def write(self, metrics: StepMetrics) -> None:
        if self.enabled:
            with self.path.open("a") as f:
                f.write(json.dumps(asdict(metrics)) + "\n")


def progress_line(m: StepMetrics, total: int) -> str:
    return (
        f"step {m.step:>5}/{total} | loss {m.loss:.4f} | lr {m.lr:.2e} | grad {m.grad_norm:.3f} | "
        f"{m.tokens_per_s:,.0f} tok/s | real {m.real_tokens} / padded {m.padded_tokens} | {m.step_time:.2f} s"
    )


def print_progress(m: StepMetrics, total: int, stream: TextIO | None = None) -> None:
    # sys.stdout is looked up per call: a default bound at import time misses later redirection.
    print(progress_line(m, total), file=stream if stream is not None else sys.stdout, flush=True)


def read_metrics(path: Path) -> list[dict[str, float]]:
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
