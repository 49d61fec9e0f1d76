"""Per-step metrics as JSONL (rank 0), TensorBoard and W&B when the config's `logger` asks for them, and the
human progress line."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Protocol, TextIO

from packcfg.train.settings import LoggerSettings, TrainSettings


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

    def __init__(
        self, path: Path, enabled: bool, resume_from: int = 0, sinks: Sequence[MetricsSink] = ()
    ) -> None:
        self.path = path
        self.enabled = enabled
        self.sinks = list(sinks)  # TensorBoard / W&B (`open_sinks`), each told every step after the JSON line
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
        for sink in self.sinks:
            sink.write(metrics)

    def close(self) -> None:
        """Flush and close the sinks (the W&B run is finished); the JSONL file is complete after each write."""
        for sink in self.sinks:
            sink.close()
        self.sinks = []


# ---- TensorBoard and W&B, with Megatron's names
#
# Tags as megatron-bridge v0.3.1 `training_log` writes them (src/megatron/bridge/training/utils/train_utils.py:
# "learning-rate", "batch-size", the loss_dict key "lm loss" from training/losses.py, "grad-norm",
# "iteration-time", each scalar also "<tag> vs samples" against consumed samples), at the step number, every
# `logger.tensorboard_log_interval` steps. W&B gets the same keys with the step (Bridge logs W&B inside the
# TensorBoard block, so it logs nothing without tensorboard_dir; here each logger stands alone). The packcfg
# throughput numbers go under "packcfg/" so they never collide with a Megatron tag.


def megatron_scalars(m: StepMetrics, batch_size: int) -> dict[str, float]:
    """One step's scalars under Bridge's tag names (plus packcfg's own token counts)."""
    return {
        "lm loss": m.loss,
        "learning-rate": m.lr,
        "grad-norm": m.grad_norm,
        "batch-size": float(batch_size),
        "iteration-time": m.step_time,
        "packcfg/real-tokens": float(m.real_tokens),
        "packcfg/padded-tokens": float(m.padded_tokens),
        "packcfg/tokens-per-second": m.tokens_per_s,
    }


# Bridge writes "<tag> vs samples" for these (x = consumed samples instead of the step).
VS_SAMPLES = ("lm loss", "learning-rate", "grad-norm", "batch-size")


class MetricsSink(Protocol):
    def write(self, metrics: StepMetrics) -> None: ...
    def close(self) -> None: ...


class TensorBoardSink:
    """Event files in `logger.tensorboard_dir` through torch's SummaryWriter, as Bridge's GlobalState opens it
    (training/state.py). On resume, `purge_step` hides the earlier run's events after the resumed step, so
    TensorBoard shows one curve, as `metrics.jsonl` does."""

    def __init__(self, folder: Path, interval: int, batch_size: int, resume_from: int) -> None:
        from torch.utils.tensorboard.writer import SummaryWriter

        folder.mkdir(parents=True, exist_ok=True)
        self.writer = SummaryWriter(log_dir=str(folder), purge_step=resume_from + 1 if resume_from else None)
        self.interval, self.batch_size = interval, batch_size

    def write(self, m: StepMetrics) -> None:
        if m.step % self.interval:
            return
        scalars = megatron_scalars(m, self.batch_size)
        for tag, value in scalars.items():
            self.writer.add_scalar(tag, value, m.step)
        for tag in VS_SAMPLES:
            self.writer.add_scalar(f"{tag} vs samples", scalars[tag], m.step * self.batch_size)
        self.writer.flush()  # a crash loses no logged step

    def close(self) -> None:
        self.writer.close()


class WandbSink:
    """A W&B run opened as Bridge's GlobalState opens it (training/state.py: dir, name, project, entity,
    the config). `WANDB_MODE` (offline, disabled) is wandb's own setting and is honoured as is."""

    def __init__(self, s: LoggerSettings, folder: Path, interval: int, batch_size: int):
        import wandb

        folder.mkdir(parents=True, exist_ok=True)
        try:
            self.run = wandb.init(
                dir=str(folder),
                project=s.wandb_project,
                entity=s.wandb_entity,
                name=s.wandb_exp_name,
                config=s.wandb_config,  # secrets redacted (settings.redacted)
            )
        except Exception as exc:  # noqa: BLE001 - wandb raises its own error types (no key, no network)
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise ValueError(
                f"logger.wandb_project {s.wandb_project}: wandb could not start a run ({first}); "
                "set WANDB_MODE=offline to log locally without an account"
            ) from None
        self.interval, self.batch_size = interval, batch_size

    def write(self, m: StepMetrics) -> None:
        if m.step % self.interval == 0:
            self.run.log(megatron_scalars(m, self.batch_size), step=m.step)

    def close(self) -> None:
        self.run.finish()


def open_sinks(s: TrainSettings, is_main: bool, resume_from: int) -> list[MetricsSink]:
    """The loggers the config names, on rank 0 only (the rank that writes `metrics.jsonl`). A logger whose
    package is missing raises MissingExtra naming the extra, before the first step."""
    from packcfg.core.extras import require

    lg = s.logger
    if not is_main:
        return []
    sinks: list[MetricsSink] = []
    if lg.tensorboard_dir is not None:
        require("train (logger.tensorboard_dir)", "tensorboard")
        sinks.append(
            TensorBoardSink(lg.tensorboard_dir, lg.tensorboard_log_interval, s.global_batch_size, resume_from)
        )
    if lg.wandb_project is not None:
        require("train (logger.wandb_project)", "wandb")
        folder = lg.wandb_save_dir or s.output_dir / "wandb"
        sinks.append(WandbSink(lg, folder, lg.tensorboard_log_interval, s.global_batch_size))
    return sinks


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
