"""Pipeline parallelism with packed batches: stage models and a 1F1B schedule over torch.distributed.

megatron-core 0.16.1's `forward_backward_pipelining_without_interleaving`
(`pipeline_parallel/schedules.py`) is the reference, but it cannot run without CUDA: it allocates its
token counter with `device="cuda"`, and `p2p_communication.py` allocates receive buffers on
`torch.cuda.current_device()` and calls `torch.cuda.synchronize()` after every shape exchange. So the
executor runs the same schedule itself, on CPU (gloo) and GPU (NCCL) alike:

- warm-up: stage r runs PP-1-r forwards ahead; steady state: one forward, then one backward (of the
  oldest micro-batch in flight); cool-down: the remaining backwards. The order of sends and receives
  is megatron's (`send_forward_recv_backward`, `send_backward_recv_forward`), each pair posted together
  (`isend` + `irecv`) so neighbouring stages never wait on each other's blocking send.
- Only activations (forward) and their gradients (backward) cross stages. Every stage builds the same
  micro-batches from the same deterministic plan (`BatchPlan`, the CP split, the SP padding), so each
  already holds every micro-batch's THD metadata (cu_seqlens, positions, the CP key order) and hence
  the shape of the activation it will receive, `[tokens of this rank (/TP under SP), b, hidden]`. No
  shapes are sent (megatron's `variable_seq_lengths` sends them first) and packs are not padded to the
  pack size (megatron's fixed-shape path): packs keep their own widths at no extra round trip.
- The loss is the last stage's: per-token cross entropy over the global batch, divided by the global
  supervised-token count known on every stage before the step (`forward.count_tokens`); it is sent from
  the last stage to all stages after the step.

The stage model is megatron's: `GPTModel(pre_process=first stage, post_process=last stage)` with the
layers `get_num_layers_to_build` gives this stage (`get_transformer_layer_offset` numbers them), input
through `set_input_tensor`. Tied embeddings follow megatron (`LanguageModule.setup_embeddings_and_output_layer`):
the last stage holds a copy of the word embedding as its output weight, marked `shared`, whose gradient
is summed with the first stage's over the embedding group (`parallel.finalize_model_grads`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

import torch
import torch.distributed as dist
from torch import Tensor

from packcfg.train import mcore_compat
from packcfg.train.batches import MicroBatch
from packcfg.train.forward import (  # the PP 1 step's helpers too, so both paths lay batches out alike
    StepTokens,
    count_tokens,
    per_token_losses,
    scaled_loss,
    sequence_parallel_ready,
    to_device,
    zero_main_grads,
)
from packcfg.train.mcore_compat import cpu_current_device, parallel_state, quiet_megatron_import
from packcfg.train.parallel import all_reduce_sum, data_context_group, finalize_model_grads

with quiet_megatron_import():
    from megatron.core.transformer.transformer_block import get_num_layers_to_build
    from megatron.core.transformer.transformer_layer import get_transformer_layer_offset

TIED_EMBEDDING = "embedding.word_embeddings.weight"
_LAYER = re.compile(r"^decoder\.layers\.(\d+)\.")


# ---- the stage model


def build_stage_model(
    whole: Callable[[], torch.nn.Module],
    stage: Callable[[bool, bool, int], torch.nn.Module],
    config: object,
) -> torch.nn.Module:
    """This rank's pipeline stage, starting from the weights the whole model (PP 1) gets from the same
    seed: `whole()` is built first (so it draws exactly what a PP 1 run draws), then `stage(pre_process,
    post_process, num_layers)`, then the stage's parameters are copied from the whole model by their
    global names. Costs one whole-model initialisation per rank (on CPU, as `use_cpu_initialization`
    builds every model here)."""
    reference = dict(whole().named_parameters())
    first = parallel_state.is_pipeline_first_stage(ignore_virtual=True)
    last = parallel_state.is_pipeline_last_stage(ignore_virtual=True)
    with mcore_compat.cpu_tensor_cuda():  # megatron's tied-copy set-up calls .cuda() (mcore_compat)
        model = stage(first, last, get_num_layers_to_build(config))
    names = global_names(model)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(reference[names[name]])
    return model


def layer_offset(model: torch.nn.Module) -> int:
    """How many layers the stages before this one hold (megatron's `get_transformer_layer_offset`)."""
    return int(get_transformer_layer_offset(model.config))  # type: ignore[arg-type]


def global_names(model: torch.nn.Module) -> dict[str, str]:
    """Each parameter's name in the whole (PP 1) model: layers renumbered by the stage's offset; the
    last stage's copy of a tied embedding (`output_layer.weight`, marked `shared`) named after the word
    embedding it copies (`is_tied_copy` tells it apart)."""
    offset = layer_offset(model) if parallel_state.get_pipeline_model_parallel_world_size() > 1 else 0
    out = {}
    for name, p in model.named_parameters():
        if is_tied_copy(p):
            out[name] = TIED_EMBEDDING
        else:
            out[name] = _LAYER.sub(lambda m: f"decoder.layers.{int(m.group(1)) + offset}.", name)
    return out


def is_tied_copy(p: torch.nn.Parameter) -> bool:
    """The last stage's copy of the tied word embedding (megatron marks it `shared`)."""
    return bool(getattr(p, "shared", False))


# ---- point-to-point


def _post(send: Tensor | None, to: int | None, recv: Tensor | None, frm: int | None) -> None:
    """Post a send and a receive together, then wait for both (megatron's paired p2p calls)."""
    requests = []
    if send is not None:
        requests.append(dist.isend(send.contiguous(), to))
    if recv is not None:
        requests.append(dist.irecv(recv, frm))
    for request in requests:
        request.wait()


class _Stages:
    """This rank's neighbours and the activation shape of each micro-batch."""

    def __init__(self, model: torch.nn.Module, device: torch.device) -> None:
        self.first = parallel_state.is_pipeline_first_stage(ignore_virtual=True)
        self.last = parallel_state.is_pipeline_last_stage(ignore_virtual=True)
        self.next = None if self.last else parallel_state.get_pipeline_model_parallel_next_rank()
        self.prev = None if self.first else parallel_state.get_pipeline_model_parallel_prev_rank()
        config = model.config  # type: ignore[attr-defined]
        self.hidden = int(config.hidden_size)
        self.sp_tp = parallel_state.get_tensor_model_parallel_world_size() if config.sequence_parallel else 1
        self.dtype = next(model.parameters()).dtype
        self.device = device

    def activation(self, mb: MicroBatch) -> Tensor:
        """An empty buffer shaped like the hidden states of `mb` between two stages: `[s, b, h]`, s this
        rank's tokens (divided over TP under sequence parallel)."""
        b, s = mb.tokens.shape
        return torch.empty((s // self.sp_tp, b, self.hidden), dtype=self.dtype, device=self.device)


# ---- the schedule


def pipelined_forward_backward(
    model: torch.nn.Module,
    micro_batches: Sequence[MicroBatch],
    *,
    use_te: bool = False,
    device: torch.device,
) -> tuple[float, StepTokens]:
    """`step.forward_backward` for PP > 1: one 1F1B pass over this rank's micro-batches (the same on
    every stage), gradients reduced as megatron's `finalize_model_grads` does, the global loss sent
    from the last stage to every rank."""
    micro_batches = [to_device(sequence_parallel_ready(model, mb), device) for mb in micro_batches]
    tokens = count_tokens(micro_batches)
    stages = _Stages(model, device)
    zero_main_grads(model)
    sequence_parallel = bool(getattr(model.config, "sequence_parallel", False))
    local_loss = 0.0

    def forward(mb: MicroBatch, received: Tensor | None) -> Tensor:
        nonlocal local_loss
        if not stages.first:
            model.set_input_tensor(received)  # type: ignore[operator]
        with cpu_current_device(active=sequence_parallel):  # SP collectives on CPU (mcore_compat)
            out = per_token_losses(model, mb, use_te=use_te)
        if not stages.last:
            return out
        scaled = scaled_loss((out.float() * mb.loss_mask).sum(), mb, tokens)
        local_loss += float(scaled.detach())
        return scaled

    def backward(received: Tensor | None, out: Tensor, grad: Tensor | None) -> Tensor | None:
        with cpu_current_device(active=sequence_parallel):
            torch.autograd.backward(out, grad_tensors=grad)
        return None if received is None else received.grad

    def receive_input(i: int) -> Tensor | None:
        if stages.first:
            return None
        buffer = stages.activation(micro_batches[i])
        _post(None, None, buffer, stages.prev)
        return buffer.requires_grad_()

    n = len(micro_batches)
    pp, rank = (
        parallel_state.get_pipeline_model_parallel_world_size(),
        parallel_state.get_pipeline_model_parallel_rank(),
    )
    warmup = min(pp - rank - 1, n)
    in_flight: list[tuple[int, Tensor | None, Tensor]] = []  # (micro-batch, its input, its output)

    for i in range(warmup):  # warm-up: forwards only
        received = receive_input(i)
        out = forward(micro_batches[i], received)
        _post(out.detach(), stages.next, None, None)
        in_flight.append((i, received, out))

    received = receive_input(warmup) if warmup < n else None
    for i in range(warmup, n):  # steady state: one forward, one backward
        out = forward(micro_batches[i], received)
        in_flight.append((i, received, out))
        j, oldest_in, oldest_out = in_flight.pop(0)
        grad = None if stages.last else stages.activation(micro_batches[j])
        _post(None if stages.last else out.detach(), stages.next, grad, stages.next)
        input_grad = backward(oldest_in, oldest_out, grad)
        if i + 1 < n and not stages.first:  # send this gradient back, receive the next input
            received = stages.activation(micro_batches[i + 1]).requires_grad_()
            _post(input_grad, stages.prev, received, stages.prev)
        else:
            _post(input_grad, stages.prev, None, None)

    while in_flight:  # cool-down: the backwards left
        j, oldest_in, oldest_out = in_flight.pop(0)
        grad = None if stages.last else stages.activation(micro_batches[j])
        _post(None, None, grad, stages.next)
        _post(backward(oldest_in, oldest_out, grad), stages.prev, None, None)

    finalize_model_grads(model)
    (loss,) = all_reduce_sum([local_loss], data_context_group())
    (loss,) = all_reduce_sum([loss], parallel_state.get_pipeline_model_parallel_group())  # last stage's
    return loss, tokens
