"""Process groups: the torch.distributed world (torchrun's, or a world of 1 set up here) and
megatron's TP x CP x DP x PP groups; plus the two collectives the plain training loop needs."""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch
import torch.distributed as dist

from packcfg.train import mcore_compat
from packcfg.train.mcore_compat import parallel_state


def free_port() -> int:
    """A TCP port free right now on this host (for a world of 1 or a test's torchrun)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def under_torchrun() -> bool:
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ and "MASTER_ADDR" in os.environ


@dataclass(frozen=True)
class Layout:
    """This rank's place in the TP x CP x DP x PP grid."""

    world: int
    rank: int
    tp: int
    cp: int
    dp: int
    tp_rank: int
    cp_rank: int
    dp_rank: int
    device: torch.device
    pp: int = 1
    pp_rank: int = 0

    @property
    def is_first_stage(self) -> bool:
        return self.pp_rank == 0

    @property
    def is_last_stage(self) -> bool:
        return self.pp_rank == self.pp - 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0


@contextlib.contextmanager
def distributed(tp: int = 1, cp: int = 1, pp: int = 1) -> Iterator[Layout]:
    """Join (or create) the process group and build megatron's groups; tear down what was created here.

    Under torchrun the env:// variables are used; a bare process becomes a world of 1 on a free port.
    NCCL with CUDA, gloo otherwise. Re-entrant: groups already built with the same sizes are reused.
    """
    created_world = False
    if not dist.is_initialized():
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        if backend == "nccl":
            local_rank, gpus = int(os.environ.get("LOCAL_RANK", "0")), torch.cuda.device_count()
            if local_rank >= gpus:  # else CUDA's "invalid device ordinal" traceback on every extra rank
                raise ValueError(
                    f"local rank {local_rank}: this node has {gpus} visible GPU(s) (CUDA_VISIBLE_DEVICES="
                    f"{os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')}); start at most {gpus} process(es) per node "
                    "(--nproc-per-node, launch.gpus_per_node)"
                )
            torch.cuda.set_device(local_rank)
        if under_torchrun():
            dist.init_process_group(backend=backend)
        else:
            # A world of 1 without touching os.environ (child processes must not inherit a fake rank).
            dist.init_process_group(
                backend=backend, init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1
            )
        created_world = True
    world = dist.get_world_size()
    if world % (tp * cp * pp):
        raise ValueError(f"world size {world} is not divisible by TP*CP*PP = {tp * cp * pp}")
    created_groups = not parallel_state.model_parallel_is_initialized()
    if created_groups:
        mcore_compat.initialize_model_parallel(tp, cp, pp)
    elif (
        parallel_state.get_tensor_model_parallel_world_size(),
        parallel_state.get_context_parallel_world_size(),
        parallel_state.get_pipeline_model_parallel_world_size(),
    ) != (tp, cp, pp):
        raise RuntimeError("model-parallel groups already exist with other TP/CP/PP sizes")
    try:
        yield Layout(
            world=world,
            rank=dist.get_rank(),
            tp=tp,
            cp=cp,
            dp=parallel_state.get_data_parallel_world_size(),
            tp_rank=parallel_state.get_tensor_model_parallel_rank(),
            cp_rank=parallel_state.get_context_parallel_rank(),
            dp_rank=parallel_state.get_data_parallel_rank(),
            device=torch.device("cuda", torch.cuda.current_device())
            if torch.cuda.is_available()
            else torch.device("cpu"),
            pp=pp,
            pp_rank=parallel_state.get_pipeline_model_parallel_rank(),
        )
    finally:
        if created_groups:
            parallel_state.destroy_model_parallel()
        if created_world:
            dist.destroy_process_group()


def barrier() -> None:
    """All ranks wait here (a no-op outside a multi-rank run)."""
    if dist.is_initialized() and dist.get_world_size() > 1:
        dist.barrier()


def data_context_group() -> dist.ProcessGroup:
    """Ranks holding the same model shard and different tokens (DP x CP): gradients and token counts
    are summed over it."""
    return parallel_state.get_data_parallel_group(with_context_parallel=True)


def context_group() -> dist.ProcessGroup:
    return parallel_state.get_context_parallel_group()


def all_reduce_sum(values: Sequence[float], group: dist.ProcessGroup | None = None) -> list[float]:
    """Sum a few scalars over a group in one collective (float64, so token counts stay exact)."""
    t = torch.tensor(list(values), dtype=torch.float64)
    if dist.is_initialized() and dist.get_world_size(group) > 1:
        if torch.cuda.is_available():
            t = t.cuda()
        dist.all_reduce(t, group=group)
    return [float(v) for v in t.cpu()]


def grad_of(p: torch.nn.Parameter) -> torch.Tensor | None:
    """The gradient the step reduces, clips and applies: the fp32 `main_grad` when the parameter has
    one (bf16 with `ddp.grad_reduce_in_fp32`, see `optim.MasterWeights`), else `.grad`."""
    main = getattr(p, "main_grad", None)
    return main if main is not None else p.grad


def _all_reduce_flat(grads: Sequence[torch.Tensor], group: dist.ProcessGroup) -> None:
    """Sum tensors over a group in one collective (one flat buffer per dtype)."""
    by_dtype: dict[torch.dtype, list[torch.Tensor]] = {}
    for g in grads:
        by_dtype.setdefault(g.dtype, []).append(g)
    for same in by_dtype.values():
        flat = torch.cat([g.reshape(-1) for g in same])
        dist.all_reduce(flat, group=group)
        offset = 0
        for g in same:
            n = g.numel()
            g.copy_(flat[offset : offset + n].view_as(g))
            offset += n


def all_reduce_gradients(params: Sequence[torch.nn.Parameter], group: dist.ProcessGroup) -> None:
    """Plain DP gradient sum (the loss is already divided by the global token count), one flat
    buffer so it is one collective per step (fp32 when the grads are fp32 main grads)."""
    if dist.get_world_size(group) == 1:
        return
    grads = [g for g in map(grad_of, params) if g is not None]
    if grads:
        _all_reduce_flat(grads, group)


def tp_partial_grad_params(model: torch.nn.Module) -> list[torch.nn.Parameter]:
    """Parameters replicated over TP whose gradient each TP rank holds only a part of, as megatron-core
    0.16.1 `distributed/finalize_model_grads.py` (`_allreduce_non_tensor_model_parallel_grads`) picks
    them: norm weights marked `sequence_parallel` when SP is on (each rank saw only its share of the
    tokens), and q/k norm weights when `qk_layernorm` is on (each rank saw only its heads)."""
    config = getattr(model, "config", None)
    sp = bool(getattr(config, "sequence_parallel", False))
    qk = bool(getattr(config, "qk_layernorm", False))
    return [
        p
        for name, p in model.named_parameters()
        if p.requires_grad
        and (
            (sp and getattr(p, "sequence_parallel", False))
            or (qk and ("q_layernorm" in name or "k_layernorm" in name))
        )
    ]


def finalize_model_grads(
    model: torch.nn.Module, *, reduce_tp_partial: bool = True, reduce_embedding: bool = True
) -> None:
    """What megatron-core 0.16.1's `distributed/finalize_model_grads.py` does, in its order: sum the
    gradients over DP x CP, then the TP-partial gradients of replicated parameters
    (`tp_partial_grad_params`) over the TP group, then, under PP with tied embeddings, the word
    embedding's gradient over the embedding group (first and last stage, `_allreduce_word_embedding_grads`).
    `reduce_tp_partial=False` is the `sp_grads_not_reduced` control, `reduce_embedding=False` the
    `pp_embedding_grads_not_reduced` one."""
    params = [p for p in model.parameters() if p.requires_grad]
    all_reduce_gradients(params, data_context_group())
    tp_group = parallel_state.get_tensor_model_parallel_group()
    if reduce_tp_partial and dist.get_world_size(tp_group) > 1:
        grads = [g for g in map(grad_of, tp_partial_grad_params(model)) if g is not None]
        if grads:
            _all_reduce_flat(grads, tp_group)
    if reduce_embedding:
        _all_reduce_tied_embedding_grad(model)


def _all_reduce_tied_embedding_grad(model: torch.nn.Module) -> None:
    """PP > 1 with `share_embeddings_and_output_weights`: the first stage's word embedding and the
    last stage's copy of it (the output layer) each hold part of the tied weight's gradient; both get
    the sum, so both copies take the same update (megatron's `_allreduce_word_embedding_grads`)."""
    if parallel_state.get_pipeline_model_parallel_world_size() == 1:
        return
    if not getattr(model, "share_embeddings_and_output_weights", False):
        return
    if not parallel_state.is_rank_in_embedding_group(ignore_virtual=True):
        return
    group = parallel_state.get_embedding_group()
    grad = grad_of(model.shared_embedding_or_output_weight())  # type: ignore[operator]
    if grad is not None and dist.get_world_size(group) > 1:
        dist.all_reduce(grad, group=group)


def clip_grad_norm(
    params: Sequence[torch.nn.Parameter], max_norm: float, *, sum_over_tp: bool = True
) -> float:
    """Global grad norm over the whole model, as megatron-core's `get_grad_norm_fp32`: squares of
    TP-sharded gradients on every TP rank plus those of TP-replicated parameters on TP rank 0 only
    (`param_is_not_tensor_parallel_duplicate`), summed over the TP group, then over the pipeline
    stages. Replicated gradients are equal on all TP ranks by then (`finalize_model_grads` summed the
    SP/q-k norm ones), so each counts once; the last stage's copy of a tied embedding (`shared`, as
    megatron marks it) is skipped (`param_is_not_shared`). Scales grads in place when above
    `max_norm`. `sum_over_tp=False` is the `grad_norm_not_summed_over_tp` control."""
    tp_group = parallel_state.get_tensor_model_parallel_group()
    tp_rank = dist.get_rank(tp_group)
    grads = [(p, g) for p in params if (g := grad_of(p)) is not None]
    device = grads[0][1].device if grads else torch.device("cpu")
    total = torch.zeros((), dtype=torch.float64, device=device)
    for p, g in grads:
        if getattr(p, "shared", False):
            continue
        if getattr(p, "tensor_model_parallel", False) or tp_rank == 0:
            total += g.detach().double().pow(2).sum()
    if sum_over_tp and dist.get_world_size(tp_group) > 1:
        dist.all_reduce(total, group=tp_group)
    pp_group = parallel_state.get_pipeline_model_parallel_group()
    if dist.get_world_size(pp_group) > 1:
        dist.all_reduce(total, group=pp_group)
    norm = float(total.sqrt())
    if max_norm > 0 and norm > max_norm:
        scale = max_norm / (norm + 1e-6)
        for _, g in grads:
            g.mul_(scale)
    return norm
