"""The training loop, top to bottom: build, loop, log, save.

`train` is the train flow's entry: it parses the experiment config once into `TrainSettings`
(packcfg.train.settings); everything below it reads those typed settings, never the config dict."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from packcfg.train.batches import Sample, pad_for_sequence_parallel, split_for_context_parallel
from packcfg.train.checkpoint import load_checkpoint, load_weights, resolve_checkpoint, save_checkpoint
from packcfg.train.data import BatchPlan, PackedParquet, SampleUnits, Units
from packcfg.train.dpo import DpoStepMetrics as dpo_metrics
from packcfg.train.dpo import dpo_setup, dpo_step_on, frozen_reference
from packcfg.train.hf.convert import load_hf_weights
from packcfg.train.metrics import MetricsLog, StepMetrics, open_sinks, print_progress
from packcfg.train.model import attention_summary, build_model, use_transformer_engine
from packcfg.train.optim import LrSchedule, MasterWeights, build_optimizer
from packcfg.train.parallel import Layout, barrier, clip_grad_norm, context_group, distributed
from packcfg.train.preflight import pipeline_problems
from packcfg.train.settings import Batching, TrainSettings
from packcfg.train.step import forward_backward


@dataclass
class TrainOptions:
    batching: Batching | None = None  # default: the config's packing mode
    output_dir: str | Path | None = None  # default: runs/<recipe.name>
    resume: bool = False  # continue from checkpoint.save (or checkpoint.load) if one exists
    units: Units | None = None  # training data given directly (tests, bench) instead of from the config
    progress: bool = True
    # called (main rank) with each checkpoint's path instead of printing `saved PATH`: the demo names
    # the final folder, not its staging one
    on_saved: Callable[[Path], None] | None = None


@dataclass
class TrainResult:
    output_dir: Path
    start_step: int
    losses: list[float] = field(default_factory=list)  # one per step run by this call
    checkpoints: list[Path] = field(default_factory=list)


def train(config: dict[str, Any], options: TrainOptions | None = None) -> TrainResult:
    options = options or TrainOptions()
    settings = TrainSettings.from_config(
        config, batching=options.batching, output_dir=options.output_dir, data_source=options.units is None
    )
    if problems := pipeline_problems(config, settings.model):
        raise ValueError(problems[0])
    with distributed(tp=settings.model.tp, cp=settings.model.cp, pp=settings.model.pp) as layout:
        return _train(settings, options, layout)


def _train(s: TrainSettings, options: TrainOptions, layout: Layout) -> TrainResult:
    # ---- build
    if s.vision is not None:  # recipe.mode vlm_sft: image-text samples, InternVL-style packs, ViT + LM
        from packcfg.train import vlm

        units = options.units if options.units is not None else vlm.load_vlm_units(s.vision)
        plan: BatchPlan = vlm.VlmBatchPlan(
            units, s.data, s.micro_batch_size, s.global_batch_size, layout.dp, layout.dp_rank, vision=s.vision
        )
        model = vlm.build_vlm_model(s.model, s.vision, s.seed)
    else:
        units = options.units if options.units is not None else load_units(s, layout)
        plan = BatchPlan(units, s.data, s.micro_batch_size, s.global_batch_size, layout.dp, layout.dp_rank)
        model = build_model(s.model, s.seed)
    use_te = use_transformer_engine(s.model)
    params = [p for p in model.parameters() if p.requires_grad]
    master = None
    if s.model.bf16:  # bf16 model, fp32 master weights in the optimizer
        model.bfloat16()
        master = MasterWeights(params, grad_reduce_in_fp32=s.grad_reduce_in_fp32)
        params = master.master_params
    optimizer = build_optimizer(model, s.optim, params)
    schedule = LrSchedule(optimizer, s.optim)

    dpo = dpo_setup(s.dpo, s.data.batching, layout.cp)  # None unless recipe.mode is dpo

    start = consumed = 0  # steps done, and global units (samples or packs) consumed by them
    resume_dir = _resume_dir(s) if options.resume or s.load_dir else None
    if resume_dir is not None:
        resumed = load_checkpoint(
            resume_dir,
            layout,
            model,
            optimizer,
            schedule,
            master,
        )
        start, consumed = resumed.iteration, resumed.consumed_units
        _say(layout, f"resumed from {resume_dir} at step {start}")
    elif s.model.hf_dir is not None:  # a Hugging Face folder (packcfg.train.hf)
        family = load_hf_weights(s.model.hf_dir, model, master)
        _say(layout, f"initial weights from {s.model.hf_dir} (Hugging Face {family})")
    elif s.pretrained_dir is not None:
        pretrained = resolve_checkpoint(s.pretrained_dir)
        if pretrained is None:
            raise FileNotFoundError(f"checkpoint.pretrained_checkpoint: no checkpoint in {s.pretrained_dir}")
        load_weights(pretrained, layout, model, master)
        _say(layout, f"initial weights from {pretrained}")

    # DPO's reference: the initial weights (seed, HF folder or pretrained checkpoint), also on resume
    reference = frozen_reference(lambda: _initial_model(s, layout)) if dpo is not None else None
    sinks = open_sinks(s, layout.is_main, start)  # TensorBoard / W&B, as `logger` asks
    metrics = MetricsLog(s.output_dir / "metrics.jsonl", layout.is_main, resume_from=start, sinks=sinks)
    result = TrainResult(output_dir=s.output_dir, start_step=start)
    _say(
        layout,
        f"packcfg train: {s.name} | {s.data.batching} batches | world {layout.world} (TP {layout.tp}, "
        f"CP {layout.cp}, PP {layout.pp}, DP {layout.dp}) | GBS {s.global_batch_size}, MBS {s.micro_batch_size}, "
        f"{plan.micro_batches_per_step} micro-batches/rank/step | attention: "
        f"{attention_summary(s.model)}",
    )

    # ---- loop
    model.train()
    for step in range(start, s.train_iters):
        t0 = time.perf_counter()
        lr = schedule.advance()
        model.zero_grad(set_to_none=False)  # the model's grads (with bf16, the optimizer holds copies)
        micro_batches = plan.micro_batches_after(consumed + (step - start) * s.global_batch_size)
        if layout.cp > 1:
            if s.model.sequence_parallel:  # SP: each CP rank's share must divide by TP (pad before the split)
                micro_batches = [pad_for_sequence_parallel(mb, layout.tp, layout.cp) for mb in micro_batches]
            micro_batches = [
                split_for_context_parallel(mb, layout.cp, layout.cp_rank, context_group())
                for mb in micro_batches
            ]
        if dpo is not None:
            loss, tokens, dpo_step = dpo_step_on(model, reference, micro_batches, dpo, layout.device, use_te)
        else:
            loss, tokens = forward_backward(model, micro_batches, use_te=use_te, device=layout.device)
        if master is not None:
            master.grads_to_master()
        grad_norm = clip_grad_norm(params, s.optim.clip_grad)
        optimizer.step()
        if master is not None:
            master.master_to_model()
        step_time = time.perf_counter() - t0

        # ---- log
        m = (dpo_metrics if dpo is not None else StepMetrics)(
            step=step + 1,
            loss=loss,
            lr=lr,
            grad_norm=grad_norm,
            real_tokens=tokens.real_tokens,
            padded_tokens=tokens.padded_tokens,
            tokens_per_s=tokens.real_tokens / step_time,
            step_time=step_time,
            **(dpo_step.metrics() if dpo is not None else {}),
        )
        metrics.write(m)
        result.losses.append(loss)
        if (
            options.progress
            and layout.is_main
            and ((step + 1) % s.log_interval == 0 or step + 1 == s.train_iters)
        ):
            print_progress(m, s.train_iters)

        # ---- save
        done = step + 1
        if (
            s.save_dir is not None
            and s.save_interval > 0
            and (done % s.save_interval == 0 or done == s.train_iters)
        ):
            path = save_checkpoint(
                s.save_dir,
                done,
                layout,
                model,
                optimizer,
                schedule,
                consumed_units=consumed + (done - start) * s.global_batch_size,
                master=master,
                ckpt_format=s.ckpt_format,
            )
            result.checkpoints.append(path)
            if options.on_saved is None:
                _say(layout, f"saved {path}")
            elif layout.is_main:
                options.on_saved(Path(path))
    metrics.close()
    return result


def _initial_model(s: TrainSettings, layout: Layout) -> torch.nn.Module:
    """The model a fresh run starts from (what a resumed run started from): seed, then the HF folder or
    pretrained checkpoint, in the run's dtype."""
    model = build_model(s.model, s.seed)
    if s.model.hf_dir is not None:
        load_hf_weights(s.model.hf_dir, model)
    elif s.pretrained_dir is not None and (pretrained := resolve_checkpoint(s.pretrained_dir)) is not None:
        load_weights(pretrained, layout, model)
    return model.bfloat16() if s.model.bf16 else model


def _resume_dir(s: TrainSettings) -> Path | None:
    """checkpoint.load if set, else checkpoint.save; None when there is nothing to resume yet."""
    root = s.load_dir or s.save_dir
    return resolve_checkpoint(root) if root is not None else None


def _say(layout: Layout, text: str) -> None:
    if layout.is_main:
        print(text, flush=True)


def load_units(s: TrainSettings, layout: Layout) -> Units:
    """The run's training data (`s.pack`): the packed Parquet (packed on first use by rank 0) for packed
    batches, the tokenized samples for in-batch packing and the padded baseline."""
    from packcfg import packing

    assert s.pack is not None, "TrainSettings.from_config(..., data_source=True) reads the data source"
    if s.data.batching == "packed":
        if layout.is_main:
            packed = packing.pack_dataset(s.pack, progress=True)
        barrier()
        if not layout.is_main:
            packed = packing.pack_dataset(s.pack, progress=False)
        return PackedParquet(packed.train_path)
    return SampleUnits([as_sample(x) for x in packing.samples_of(s.pack)])


def as_sample(item: Any) -> Sample:
    """A tokenized sample from `packcfg.packing.tokenized_samples`: `(input_ids, loss_mask)`, the mask
    label-aligned as in the packed rows."""
    import numpy as np

    input_ids, loss_mask = item
    return Sample(np.asarray(input_ids, dtype=np.int64), np.asarray(loss_mask, dtype=np.int8))
