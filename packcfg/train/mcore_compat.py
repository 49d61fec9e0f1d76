"""Every CPU shim and version gate packcfg needs around megatron-core, in one place.

megatron-core assumes CUDA in a few spots that the executor reaches (see the spec's environment
facts). Rather than patching megatron, the executor avoids those spots and this module says how:

- Stock `DotProductAttention` rejects THD and CP and allocates on `torch.cuda.current_device()`:
  the local layer spec gets packcfg's core attention instead (`local_layer_spec`).
- `RotaryEmbedding.get_emb` moves `inv_freq` to `torch.cuda.current_device()`, and the unfused THD
  RoPE path loops over sequences in Python: without Transformer Engine the model is built with
  `position_embedding_type="none"` and packcfg's core attention applies RoPE itself, vectorised.
- `model_parallel_cuda_manual_seed` reads the CUDA RNG state: on CPU the RNG tracker is set to
  megatron's inference tracker, whose `fork()` is a no-op, and `torch.manual_seed` seeds everything.
- megatron's local spec builds its norms with `WrappedTorchNorm`, which asserts `not sequence_parallel`:
  the local spec gets `SequenceParallelTorchNorm` instead (the same torch RMSNorm/LayerNorm, with the
  weights marked `sequence_parallel` as megatron's `FusedLayerNorm` and TE's norms mark them), and the
  block's final norm too (`local_block_spec`). The grads of those weights are partial sums per TP rank
  and are summed over the TP group by `parallel.finalize_model_grads`, as megatron-core 0.16.1's
  `distributed/finalize_model_grads.py` (`_allreduce_non_tensor_model_parallel_grads`) does.
- Sequence parallel's gathers and reduce-scatters (`tensor_parallel/mappings.py`, `layers.py`, the
  global memory buffer) allocate their outputs on `torch.cuda.current_device()`: on a machine without
  CUDA, where that call can only raise, `cpu_current_device` makes it answer "cpu" for the duration of
  a forward/backward with SP (`step.forward_backward`). Nothing changes where CUDA exists.
- dist_checkpointing's `torch_dist` save (0.16.1 `strategies/filesystem_async.py` `preload_tensors`,
  `strategies/state_dict_saver.py`) calls `torch.cuda.synchronize()` and allocates its failure flag on
  `torch.cuda.current_device()`: `cpu_checkpointing` makes the first a no-op and the second "cpu" for the
  duration of a save or load, without CUDA only. Its writer also collects results through a queue from a
  `spawn` multiprocessing Manager (`_get_write_results_queue`), a server process that re-imports the
  caller's `__main__` (it hangs under pytest): `cpu_checkpointing` hands it a `fork` queue instead, which
  its forked writer processes can use just as well.
- megatron's DDP, optimizer and schedules hard-code CUDA: the executor uses a plain torch loop, and
  for pipeline parallelism its own 1F1B schedule (`pipeline.py`): megatron-core 0.16.1
  `pipeline_parallel/schedules.py` allocates its token counter with `device="cuda"` and
  `p2p_communication.py` calls `torch.cuda.synchronize()` after every shape exchange.
- A tied output weight on the last pipeline stage is moved to CUDA before megatron's embedding-group
  all-reduce (`LanguageModule.setup_embeddings_and_output_layer`): `cpu_tensor_cuda` while building.
- Not a shim but a memory fix: the local MLP's unfused GLU keeps two more ffn-sized tensors per token than
  TE's fused SwiGLU; the local spec gets `activation.SwiGLU` instead, through megatron's own spec slot
  (`MLPSubmodules.activation_func`, used when `use_te_activation_func` is set), where this release has
  both (`spec_activation_supported`).

Version differences (0.16.1 is the newest for Python 3.11; later releases need 3.12) are handled
here by feature tests on signatures rather than version numbers where possible.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import inspect
import warnings
from collections.abc import Iterator
from typing import Any

import torch

# Messages megatron-core prints on import on a machine without TE/Apex; harmless on CPU.
_IMPORT_NOISE = (".*Transformer Engine.*", ".*Apex.*", ".*absl.*", "full scope is deprecated.*")


@contextlib.contextmanager
def quiet_megatron_import() -> Iterator[None]:
    """Silence megatron-core's import-time warnings about missing optional GPU packages."""
    with warnings.catch_warnings():
        for pattern in _IMPORT_NOISE:
            warnings.filterwarnings("ignore", message=pattern)
        warnings.filterwarnings("ignore", category=DeprecationWarning)
        yield


with quiet_megatron_import():
    import megatron.core as mcore
    from megatron.core import parallel_state, tensor_parallel
    from megatron.core.models.gpt import gpt_layer_specs
    from megatron.core.transformer.spec_utils import ModuleSpec
    from megatron.core.transformer.transformer_block import TransformerBlockSubmodules


def _version_tuple(text: str) -> tuple[int, ...]:
    parts = []
    for piece in text.split(".")[:3]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


MCORE_VERSION: tuple[int, ...] = _version_tuple(getattr(mcore, "__version__", "0.0.0"))


def has_transformer_engine() -> bool:
    """TE is used only with CUDA; on a CPU machine importing it raises RuntimeError (not ImportError)."""
    if not torch.cuda.is_available() or importlib.util.find_spec("transformer_engine") is None:
        return False
    try:
        importlib.import_module("transformer_engine.pytorch")
    except Exception:  # noqa: BLE001 - any failure to load TE means "no TE", never a crash
        return False
    return True


def accepts_kwarg(fn: Any, name: str) -> bool:
    """Feature test for keyword arguments that come and go between megatron-core releases."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return name in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


def initialize_model_parallel(tp: int, cp: int, pp: int = 1) -> None:
    """megatron's group set-up for TP x CP x DP x PP (megatron's default rank order, tp-cp-ep-dp-pp:
    a pipeline stage is a contiguous block of ranks); gloo groups only where they exist as an option."""
    kwargs: dict[str, Any] = {
        "tensor_model_parallel_size": tp,
        "context_parallel_size": cp,
        "pipeline_model_parallel_size": pp,
    }
    if accepts_kwarg(parallel_state.initialize_model_parallel, "create_gloo_process_groups"):
        # The executor's own collectives run on the default group; extra gloo groups cost start-up time.
        kwargs["create_gloo_process_groups"] = False
    parallel_state.initialize_model_parallel(**kwargs)


@contextlib.contextmanager
def cpu_current_device(active: bool = True) -> Iterator[None]:
    """While active and only without CUDA: `torch.cuda.current_device()` returns the CPU device, so
    megatron's SP collectives allocate their buffers on CPU (see the module docstring)."""
    if not active or torch.cuda.is_available():
        yield
        return
    original = torch.cuda.current_device
    torch.cuda.current_device = lambda: torch.device("cpu")  # type: ignore[assignment,return-value]
    try:
        yield
    finally:
        torch.cuda.current_device = original  # type: ignore[assignment]


@contextlib.contextmanager
def cpu_checkpointing() -> Iterator[None]:
    """dist_checkpointing's save/load runs on CPU and without a spawned Manager (see the module docstring)."""
    if torch.cuda.is_available():
        yield
        return
    import multiprocessing

    from megatron.core.dist_checkpointing.strategies import filesystem_async

    if filesystem_async._results_queue is None:
        filesystem_async._results_queue = multiprocessing.get_context("fork").Queue()
    original = torch.cuda.synchronize
    torch.cuda.synchronize = lambda device=None: None  # type: ignore[assignment]
    try:
        with cpu_current_device():
            yield
    finally:
        torch.cuda.synchronize = original  # type: ignore[assignment]


@contextlib.contextmanager
def cpu_tensor_cuda() -> Iterator[None]:
    """Only without CUDA: `Tensor.cuda()` returns the tensor itself while a pipeline stage is built.
    megatron-core 0.16.1 `LanguageModule.setup_embeddings_and_output_layer` moves the tied output
    weight of the last stage to CUDA before its embedding-group all-reduce (`weight.data.cuda()`)."""
    if torch.cuda.is_available():
        yield
        return
    original = torch.Tensor.cuda
    torch.Tensor.cuda = lambda self, *args, **kwargs: self  # type: ignore[method-assign,assignment]
    try:
        yield
    finally:
        torch.Tensor.cuda = original  # type: ignore[method-assign]


def seed_model_parallel_rng(seed: int) -> None:
    """Seed torch and megatron's RNG tracker; on CPU the tracker becomes a no-op (no CUDA RNG to fork)."""
    torch.manual_seed(seed)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(seed)
        tensor_parallel.model_parallel_cuda_manual_seed(seed)
        return
    random_mod = tensor_parallel.random
    if accepts_kwarg(random_mod.initialize_rng_tracker, "inference_rng_tracker"):
        random_mod.initialize_rng_tracker(inference_rng_tracker=True, force_reset=True)


class SequenceParallelTorchNorm:
    """megatron's `WrappedTorchNorm` without its `sequence_parallel` refusal: a torch RMSNorm (or
    LayerNorm) whose parameters carry `sequence_parallel`, so their TP-partial gradients are summed over
    the TP group like those of megatron's own SP norms (`FusedLayerNorm` sets the same attribute)."""

    def __new__(  # type: ignore[misc]
        cls,
        config: Any,
        hidden_size: int,
        eps: float = 1e-5,
        persist_layer_norm: bool = False,
        zero_centered_gamma: bool = False,
        normalization: str = "LayerNorm",
    ) -> torch.nn.Module:
        if getattr(config, "layernorm_zero_centered_gamma", False):
            raise ValueError("layernorm_zero_centered_gamma is not supported by torch norms")
        if config.normalization == "RMSNorm":
            norm: torch.nn.Module = torch.nn.RMSNorm(normalized_shape=hidden_size, eps=eps)
        elif config.normalization == "LayerNorm":
            norm = torch.nn.LayerNorm(normalized_shape=hidden_size, eps=eps)
        else:
            raise ValueError(f"normalization {config.normalization!r} is not supported by the local spec")
        for param in norm.parameters():
            param.sequence_parallel = bool(config.sequence_parallel)  # type: ignore[attr-defined]
        return norm


def spec_activation_supported() -> bool:
    """Whether megatron's MLP takes its activation from the spec (`MLPSubmodules.activation_func`, applied
    to the whole fc1 output when `TransformerConfig.use_te_activation_func` is set; megatron-core 0.16.1):
    both must exist, or the flag alone would apply plain silu to both halves."""
    from megatron.core.transformer.mlp import MLPSubmodules
    from megatron.core.transformer.transformer_config import TransformerConfig

    return "activation_func" in getattr(MLPSubmodules, "__dataclass_fields__", {}) and (
        "use_te_activation_func" in getattr(TransformerConfig, "__dataclass_fields__", {})
    )


def local_layer_spec(core_attention: ModuleSpec, qk_layernorm: bool = False) -> ModuleSpec:
    """megatron's local (no-TE) GPT layer spec, RMSNorm (q/k norms too when asked), with
    `core_attention` swapped in, every norm a `SequenceParallelTorchNorm`, and the MLP's activation
    packcfg's `SwiGLU` (it keeps only fc1's output for backward) where `spec_activation_supported`."""
    kwargs: dict[str, Any] = {"qk_layernorm": qk_layernorm}
    if accepts_kwarg(gpt_layer_specs.get_gpt_layer_local_spec, "normalization"):
        kwargs["normalization"] = "RMSNorm"
    spec = gpt_layer_specs.get_gpt_layer_local_spec(**kwargs)
    layer = spec.submodules
    layer.input_layernorm = SequenceParallelTorchNorm
    layer.pre_mlp_layernorm = SequenceParallelTorchNorm
    attention = layer.self_attention.submodules
    attention.core_attention = core_attention
    if spec_activation_supported():
        from packcfg.train.activation import SwiGLU

        layer.mlp.submodules.activation_func = SwiGLU
    if qk_layernorm:
        # q/k norms act on full-sequence heads: not sequence parallel (their TP sum is by name, below).
        attention.q_layernorm = attention.k_layernorm = _QkTorchNorm
    return spec


class _QkTorchNorm(SequenceParallelTorchNorm):
    """A q/k norm: same torch norm, never marked `sequence_parallel` (megatron sums its TP-partial grads
    because `qk_layernorm` is on, not because of SP)."""

    def __new__(cls, config: Any, hidden_size: int, eps: float = 1e-5, **kwargs: Any) -> torch.nn.Module:  # type: ignore[misc]
        norm = SequenceParallelTorchNorm.__new__(cls, config, hidden_size, eps, **kwargs)
        for param in norm.parameters():
            param.sequence_parallel = False  # type: ignore[attr-defined]
        return norm


def local_block_spec(core_attention: ModuleSpec, num_layers: int, qk_layernorm: bool = False) -> Any:
    """The whole decoder block for the local spec: `local_layer_spec` per layer and a final norm that
    accepts sequence parallel (megatron's default final norm for a layer spec is `WrappedTorchNorm`)."""
    layer = local_layer_spec(core_attention, qk_layernorm=qk_layernorm)
    return TransformerBlockSubmodules(layer_specs=[layer] * num_layers, layer_norm=SequenceParallelTorchNorm)


def te_layer_spec(qk_layernorm: bool = False) -> ModuleSpec:
    """Transformer Engine layer spec (CUDA + TE only): fused THD attention with cu_seqlens, fused RoPE."""
    return gpt_layer_specs.get_gpt_layer_with_transformer_engine_spec(qk_layernorm=qk_layernorm)


def check_supported(*, use_te: bool, sequence_parallel: bool, pipeline_parallel: int) -> None:
    """Refuse, with the reason, what this executor cannot run (rather than failing deep in megatron)."""
    del use_te, sequence_parallel  # both paths run SP (the local spec through SequenceParallelTorchNorm)
    if pipeline_parallel < 1:
        raise ValueError(f"pipeline_model_parallel_size {pipeline_parallel}: must be at least 1")


def model_config_kwargs(config_cls: type, wanted: dict[str, Any]) -> dict[str, Any]:
    """Drop TransformerConfig fields this megatron-core release does not know (older/newer releases)."""
    fields = getattr(config_cls, "__dataclass_fields__", {})
    return {k: v for k, v in wanted.items() if k in fields}
