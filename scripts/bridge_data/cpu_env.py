"""Run Megatron Bridge 0.3.1's config layer on a CPU machine without the Hugging Face Hub.

Used only by developer tooling: `scripts/gen_bridge_recipes.py` (the base-recipe snapshots in
packcfg/data/bridge_recipes/) and the oracle suite in tests/oracle/. Never imported by packcfg itself.
It must run inside the oracle venv (.venv-oracle, see .ci/oracle.sh): megatron-bridge 0.3.1 installed with
--no-deps beside megatron-core 0.16.1 and torch 2.13.0 (CPU), without transformer-engine.

Stand-ins, each limited to what a GPU node would show Bridge (see shared/spec/environment.md,
"Megatron Bridge on CPU"):

1. A `transformer_engine` stand-in module. Bridge 0.3.1's `megatron.bridge.peft.lora` and
   `megatron.bridge.peft.lora_layers` run `import transformer_engine.pytorch as te` without a guard, and
   every recipe imports them (through `megatron.bridge.models`). The stand-in offers only the names those two
   modules touch when they are imported (`te.Linear`, `te.LayerNormLinear`, `te.ops.*` as placeholder classes
   nothing can instantiate, `te.fp8_autocast`); any other attribute raises AttributeError, so a guarded
   `from transformer_engine... import X` elsewhere raises ImportError and takes its no-TE branch, as before.
   megatron-core (with its layer-spec, MoE and tensor-parallel modules, NO_TE_MODULES) is imported *before*
   the stand-in is put in place, so its module-level "is TE installed" flags stay False, its TE extension
   modules (TE_EXTENSIONS) included; those only pick layer specs and kernels at model-build time,
   which the config layer never reaches.
2. TE version probes. megatron-core's `TransformerConfig.__post_init__` asks `get_te_version()` /
   `is_te_min_version()` and requires fused RoPE functions to exist when `apply_rope_fusion` is on; without
   TE those raise "install TE" errors that a GPU node would never show. The stand-in reports
   `TE_VERSION` (the lowest TE that megatron-bridge 0.3.1 declares, `transformer-engine>=2.10.0a0,<2.13.0`)
   and puts placeholder fused-RoPE functions in `rope_utils` that raise if anything calls them.
   Bridge's validate() never calls them; it only checks they are not None.

   The same for megatron-core's fused MoE kernels (`moe_utils.fused_permute` & co., TE >= 2.1): with
   `moe_permute_fusion` on, TransformerConfig imports them and checks they are not None.
3. GPU-node capabilities the config layer asks about directly: `torch.cuda.get_device_properties(0)`
   (Bridge's DeepEP/HybridEP selection in MoE recipes and validate()) reports `GPU` (an H100, sm 9.0, the
   GPU Bridge's recipes are tuned for), and `fused_weight_gradient_mlp_cuda` (Apex's extension, present in
   NeMo containers) imports, so `GPTModelProvider.gradient_accumulation_fusion` defaults to True as there.
   Without the latter, Bridge turns the fusion off and then rejects recipes that defer embedding wgrad
   (llama31_405b) for a reason no GPU node has.

And an offline Hugging Face cache: recipe functions call `AutoBridge.from_hf_pretrained(<model id>)`,
which reads the model's `config.json`. `hf_cache(dir)` writes one config.json per model id listed in
HF_CONFIGS (hf_configs.py: the models' published hyper-parameters, no weights) into `dir/hub/` in the Hub
cache layout and sets HF_HOME, HF_HUB_OFFLINE=1 and TRANSFORMERS_OFFLINE=1.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import json
import os
import sys
import types
import warnings
from pathlib import Path

# The lowest transformer-engine release megatron-bridge 0.3.1 declares (>=2.10.0a0,<2.13.0).
TE_VERSION = "2.10.0"
BRIDGE_VERSION = "0.3.1"
CORE_VERSION = "0.16.1"

# What torch.cuda.get_device_properties(0) reports (the fields Bridge 0.3.1 reads: name, major, minor).
GPU = types.SimpleNamespace(
    name="NVIDIA H100 80GB HBM3", major=9, minor=0, total_memory=80 * 2**30, multi_processor_count=132
)
# megatron-core's TE-backed MoE kernels that TransformerConfig imports when moe_permute_fusion is on.
MOE_FUSED = (
    "fused_compute_score_for_moe_aux_loss",
    "fused_moe_aux_loss",
    "fused_permute",
    "fused_permute_with_probs",
    "fused_sort_chunks_by_index",
    "fused_sort_chunks_by_index_with_probs",
    "fused_topk_with_score_function",
    "fused_unpermute",
    "te_general_gemm",
)

# Imported before the stand-in, so their module-level "is TE installed" flags stay False.
NO_TE_MODULES = (
    "megatron.core.models.gpt.gpt_layer_specs",
    "megatron.core.models.mamba.mamba_layer_specs",
    "megatron.core.transformer.moe.experts",
    "megatron.core.tensor_parallel.layers",
)
TE_EXTENSIONS = (
    "megatron.core.extensions.transformer_engine",
    "megatron.core.extensions.transformer_engine_spec_provider",
)

# Hub commits that megatron-bridge 0.6.2's recipes load their model config at (recipes/qwen/h100/qwen3.py:
# _QWEN3_8B_MODEL_REVISION, _QWEN3_30B_A3B_MODEL_REVISION); 0.3.1's recipes read `main`.
PINNED_REVISIONS = {
    "Qwen/Qwen3-8B": ("b968826d9c46dd6066d109eabc6255188de91218",),
    "Qwen/Qwen3-30B-A3B": ("ad44e777bcd18fa416d9da3bd8f70d33ebb85d39",),
}

_HERE = Path(__file__).resolve().parent
_INSTALLED = False


class _StandInOnly:
    """A placeholder TE class: exists for `isinstance`/`==` checks, cannot be built."""

    def __init__(self, *args, **kwargs):
        raise RuntimeError(
            "transformer_engine stand-in (scripts/bridge_data/cpu_env.py): not a real TE class"
        )


def _placeholder_class(name: str) -> type:
    return type(name, (_StandInOnly,), {"__module__": "transformer_engine.pytorch"})


def _placeholder_function(name: str):
    def fn(*args, **kwargs):
        raise RuntimeError(
            f"{name} is a CPU stand-in (scripts/bridge_data/cpu_env.py); it must not be called"
        )

    fn.__name__ = name
    return fn


class _StrictModule(types.ModuleType):
    """A module whose unknown attributes raise AttributeError (so `from m import X` raises ImportError)."""

    def __getattr__(self, name: str):
        raise AttributeError(f"transformer_engine stand-in has no attribute {name!r}")


def _make_te_standin() -> dict[str, types.ModuleType]:
    te = _StrictModule("transformer_engine")
    te.__version__ = TE_VERSION
    te.__path__ = []  # a package, so `import transformer_engine.pytorch` resolves through sys.modules
    te.__file__ = __file__
    pt = _StrictModule("transformer_engine.pytorch")
    pt.__path__ = []
    pt.__file__ = __file__
    for name in ("Linear", "LayerNormLinear"):
        setattr(pt, name, _placeholder_class(name))
    ops = _StrictModule("transformer_engine.pytorch.ops")
    ops.__file__ = __file__
    for name in (
        "Sequential",
        "Linear",
        "LayerNorm",
        "RMSNorm",
        "Identity",
        "AddExtraInput",
        "MakeExtraOutput",
    ):
        setattr(ops, name, _placeholder_class(name))
    pt.ops = ops

    @contextlib.contextmanager
    def fp8_autocast(*args, **kwargs):
        raise RuntimeError("transformer_engine stand-in: fp8_autocast must not be entered")
        yield  # pragma: no cover

    pt.fp8_autocast = fp8_autocast
    te.pytorch = pt
    return {"transformer_engine": te, "transformer_engine.pytorch": pt, "transformer_engine.pytorch.ops": ops}


def install_standins() -> None:
    """Import megatron-core as it is (no TE), then put the stand-ins in place. Idempotent."""
    global _INSTALLED
    if _INSTALLED:
        return
    if "transformer_engine" in sys.modules and not isinstance(
        sys.modules["transformer_engine"], _StrictModule
    ):
        raise RuntimeError("a real transformer_engine is imported; the CPU stand-ins must not replace it")
    warnings.filterwarnings("ignore", message=r".*(Transformer Engine|Apex|absl).*")
    import megatron.core  # noqa: F401  (sees no TE: module-level flags stay as on this machine)
    import megatron.core.utils as mcore_utils
    import torch
    from megatron.core.models.common.embeddings import rope_utils
    from megatron.core.transformer import transformer_config  # noqa: F401
    from megatron.core.transformer.moe import moe_utils

    # megatron-core modules that probe for TE at import time see this machine as it is (HAVE_TE False),
    # including its TE extension modules (imported now, or blocked if they cannot import without TE).
    for name in NO_TE_MODULES:
        importlib.import_module(name)
    for name in TE_EXTENSIONS:
        if name not in sys.modules:
            try:
                importlib.import_module(name)
            except ImportError:
                sys.modules[name] = None  # later imports raise ImportError, as without TE
    sys.modules.update(_make_te_standin())
    # Version probes: get_te_version() imports transformer_engine and reads __version__ (now TE_VERSION).
    mcore_utils._te_version = None
    assert str(mcore_utils.get_te_version()) == TE_VERSION, mcore_utils.get_te_version()
    # Fused RoPE: TransformerConfig only asks whether these exist.
    for name in ("fused_apply_rotary_pos_emb", "fused_apply_rotary_pos_emb_thd"):
        if getattr(rope_utils, name, None) is None:
            setattr(rope_utils, name, _placeholder_function(name))
    for name in MOE_FUSED:
        if getattr(moe_utils, name, None) is None:
            setattr(moe_utils, name, _placeholder_function(name))
    # GPU-node capabilities (3).
    torch.cuda.get_device_properties = _device_properties
    sys.modules.setdefault(
        "fused_weight_gradient_mlp_cuda", types.ModuleType("fused_weight_gradient_mlp_cuda")
    )
    _INSTALLED = True


def install_nvrx_standin() -> bool:
    """Bridge 0.6.x's `megatron.bridge.training.pretrain` imports `nvidia_resiliency_ext.inprocess.CallWrapper`
    unguarded (a type for its in-process restart, off unless `inprocess_restart.enabled`). No
    nvidia-resiliency-ext fits Python 3.11 and megatron-core 0.19.2 at once (0.6.0 is cp312-only; 0.4.1
    fails megatron-core's import-time check for >= 0.6.0), so where none is installed, a stand-in offers
    that one name, a class nothing can build; any other attribute raises AttributeError, and megatron-core's
    own `import nvidia_resiliency_ext...checkpointing` probes still fail as without the package.
    Returns True when the stand-in was put in place. Only the end-to-end worker (tests/oracle) uses it."""
    try:
        if importlib.util.find_spec("nvidia_resiliency_ext.inprocess") is not None:
            return False
    except ImportError:
        pass
    root = _StrictModule("nvidia_resiliency_ext")
    root.__path__ = []
    root.__file__ = __file__
    inprocess = _StrictModule("nvidia_resiliency_ext.inprocess")
    inprocess.__file__ = __file__
    inprocess.CallWrapper = type("CallWrapper", (_StandInOnly,), {"__module__": inprocess.__name__})
    root.inprocess = inprocess
    sys.modules.update({root.__name__: root, inprocess.__name__: inprocess})
    return True


def _device_properties(device=None):
    return GPU


def hf_cache(root: Path, model_ids: list[str] | None = None) -> Path:
    """Write an offline HF Hub cache with config.json files under root/hub and point HF at it."""
    sys.path.insert(0, str(_HERE))
    try:
        from hf_configs import HF_CONFIGS
    finally:
        sys.path.remove(str(_HERE))
    root = Path(root)
    hub = root / "hub"
    for model_id in model_ids or sorted(HF_CONFIGS):
        cfg = HF_CONFIGS[model_id]
        repo = hub / ("models--" + model_id.replace("/", "--"))
        (repo / "refs").mkdir(parents=True, exist_ok=True)
        (repo / "refs" / "main").write_text("0" * 40)
        # main, and the commits Bridge 0.6.x recipes pin (`revision=`): the same published config
        for commit in ("0" * 40, *PINNED_REVISIONS.get(model_id, ())):
            snap = repo / "snapshots" / commit
            snap.mkdir(parents=True, exist_ok=True)
            (snap / "config.json").write_text(json.dumps(cfg, indent=1, sort_keys=True))
    os.environ["HF_HOME"] = str(root)
    os.environ["HF_HUB_CACHE"] = str(hub)
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    os.environ["HF_HUB_DISABLE_TELEMETRY"] = "1"
    return hub


def setup(root: Path) -> None:
    """Everything a recipe function + validate() needs here: HF cache first (read at import), then stand-ins."""
    hf_cache(root)
    os.environ.setdefault("WORLD_SIZE", "1")
    os.environ.setdefault("RANK", "0")
    os.environ.setdefault("LOCAL_RANK", "0")
    install_standins()
