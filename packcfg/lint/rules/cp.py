"""CP: context parallel and sequence alignment."""

from __future__ import annotations

import math
from collections.abc import Iterator

from packcfg.core.diagnostics import Fix, Severity
from packcfg.core.schema import value_repr
from packcfg.lint.context import RuleContext
from packcfg.lint.registry import Finding, RuleDocs, rule
from packcfg.lint.rules._examples import after, edit
from packcfg.lint.rules._helpers import is_pos_int, set_edit, spec_name, spec_path

# BASE with CP 2 and the loss settings CP fine-tuning needs (LS301/LS302/LS304 quiet).
CP2 = edit(
    (
        "  seq_length: 4096\n  calculate_per_token_loss: true\n",
        "  seq_length: 4096\n  context_parallel_size: 2\n  calculate_per_token_loss: true\n"
        "  cross_entropy_loss_fusion: false\n",
    )
)


def _cp2(specs_extra: str = "    pad_seq_to_mult: 4\n") -> str:
    return edit(
        ("    packed_sequence_size: 4096\n", "    packed_sequence_size: 4096\n" + specs_extra), base=CP2
    )


def _m_words(ctx: RuleContext) -> str:
    f = ctx.facts
    parts = [f"CP {f.cp}"]
    if f.eval_cp is not None:
        parts.append(f"eval CP {f.eval_cp}")
    if f.sp and f.tp is not None and f.tp > 1:
        parts.append(f"TP {f.tp} with SP")
    return ", ".join(parts) + ("; legacy profile" if ctx.profile == "legacy" else "")


@rule(
    "CP201",
    Severity.ERROR,
    "seq_length divisible by 2*CP",
    docs=RuleDocs(
        what="With `CP > 1`, `model.seq_length % (2*CP) == 0`.",
        why="Context parallelism splits each sequence into 2*CP chunks (load-balanced); Bridge asserts it.",
        failing=edit(
            (
                "  seq_length: 4096\n  context_parallel_size: 2\n",
                "  seq_length: 4094\n  context_parallel_size: 2\n",
            ),
            base=_cp2(),
        ),
        passing=_cp2(),
        source="Megatron Bridge training/config.py:1574-1577 (main 067f987); docs/training/packed-sequences.md",
    ),
)
def cp201(ctx: RuleContext) -> Iterator[Finding]:
    f = ctx.facts
    if f.cp is not None and f.cp > 1 and f.model_seq_length is not None and f.model_seq_length % (2 * f.cp):
        yield Finding(
            f"model.seq_length {f.model_seq_length} is not divisible by 2*CP = {2 * f.cp}",
            at=("model", "seq_length"),
        )


IN_BATCH_CP = """\
recipe:
  name: example
  family: qwen25_vl
  mode: vlm_sft
model:
  _target_: megatron.bridge.models.qwen_vl.qwen25_vl_provider.Qwen25VLModelProvider
  seq_length: 4096
  context_parallel_size: 2
  calculate_per_token_loss: true
  cross_entropy_loss_fusion: false
dataset:
  _target_: megatron.bridge.data.builders.direct_hf_sft.DirectHFSFTDatasetConfig
  seq_length: 4096
  enable_in_batch_packing: true
train:
  micro_batch_size: 2
  global_batch_size: 32
"""


@rule(
    "CP202",
    Severity.ERROR,
    "in-batch / Energon / HF dataset seq_length aligned to M",
    docs=RuleDocs(
        what="For in-batch or Energon-native packing and direct-HF / mock-VLM datasets, `dataset.seq_length % M == 0` "
        "where M = lcm(2*CP if CP>1, CP*TP if SP and TP>1), over the training and evaluation CP.",
        why="Each sequence is padded to M so the CP (and SP) split is even; Bridge checks the configured length.",
        failing=IN_BATCH_CP.replace(
            "  seq_length: 4096\n  enable_in_batch_packing", "  seq_length: 4090\n  enable_in_batch_packing"
        ),
        passing=IN_BATCH_CP,
        source="Megatron Bridge training/config.py:1354-1372 (main 067f987; v0.6.0: 1211-1229)",
    ),
)
def cp202(ctx: RuleContext) -> Iterator[Finding]:
    f = ctx.facts
    applies = f.packing_mode in ("in_batch", "energon_native") or f.dataset_kind in ("hf_sft", "mock_vlm")
    m, seq = f.align_multiple, f.dataset_seq_length
    if applies and m is not None and m > 1 and seq is not None and seq % m:
        yield Finding(
            f"dataset.seq_length {seq} is not a multiple of the alignment multiple M = {m} ({_m_words(ctx)})",
            at=("dataset", "seq_length"),
        )


@rule(
    "CP203",
    Severity.ERROR,
    "offline CP: pad_seq_to_mult aligned to M",
    fixable=True,
    docs=RuleDocs(
        what="Offline packing with `CP > 1`: `offline_packing_specs.pad_seq_to_mult % M == 0` (M includes the SP term).",
        why="Bridge does not check this; a misaligned multiple silently truncates sequences in the THD CP split.",
        failing=_cp2("    pad_seq_to_mult: 2\n"),
        passing=_cp2(),
        fixed=_cp2(),
        source='TransformerEngine issue 1930; Megatron Bridge docs/training/packed-sequences.md, "Choosing the Offline Pack Length" (main 067f987): pad_seq_to_mult = lcm(cp_multiple, sp_multiple)',
    ),
)
def cp203(ctx: RuleContext) -> Iterator[Finding]:
    f = ctx.facts
    cps = [c for c in (f.cp, f.eval_cp) if c is not None]
    if "offline" not in f.packing_modes or f.specs is None or not cps or max(cps) <= 1:
        return
    m, mult = f.align_multiple, f.pad_seq_to_mult
    if m is None or mult is None or mult % m == 0:
        return
    new = mult * m // math.gcd(mult, m)
    written = "pad_seq_to_mult" in f.specs
    yield Finding(
        f"{spec_name(ctx, 'pad_seq_to_mult')} {mult}{'' if written else ' (default)'} is not a multiple of "
        f"M = {m} ({_m_words(ctx)}); sequences would be truncated in the CP split",
        at=spec_path("pad_seq_to_mult"),
        fix=Fix(
            f"set pad_seq_to_mult to lcm({mult}, {m}) = {new}",
            (set_edit(ctx, spec_path("pad_seq_to_mult"), new),),
        ),
    )


@rule(
    "CP204",
    Severity.WARNING,
    "fixed-width packs divisible by M",
    docs=RuleDocs(
        what="Offline packing with `pad_to_max_length` and M > 1: `packed_sequence_size % M == 0`.",
        why="Otherwise the fixed-width row cannot be split evenly: the final padding segment is not divisible "
        "by 2*CP, or the row by TP.",
        failing=edit(
            ("    packed_sequence_size: 4096\n", "    packed_sequence_size: 4098\n"),
            base=_cp2("    pad_seq_to_mult: 4\n    max_single_sequence_length: 4096\n"),
        ),
        passing=_cp2(),
        source="TransformerEngine pytorch/attention thd_get_partitioned_indices (context-parallel THD split)",
    ),
)
def cp204(ctx: RuleContext) -> Iterator[Finding]:
    f = ctx.facts
    m, pss = f.align_multiple, f.packed_sequence_size
    if "offline" in f.packing_modes and f.pad_to_max_length and m is not None and m > 1 and pss is not None:
        if pss % m:
            yield Finding(
                f"packed_sequence_size {pss} is not a multiple of M = {m} ({_m_words(ctx)}); "
                "the fixed-width row cannot be split evenly",
                at=spec_path("packed_sequence_size"),
            )


@rule(
    "CP205",
    Severity.ERROR,
    "cp_comm_type consistency",
    docs=RuleDocs(
        what="A `cp_comm_type` list needs one entry per layer; `a2a+p2p` needs `hierarchical_context_parallel_sizes` "
        "whose product equals CP.",
        why="Bridge asserts both before building the model.",
        failing=after("  context_parallel_size: 2", "  cp_comm_type: a2a+p2p\n", base=_cp2()),
        passing=after(
            "  context_parallel_size: 2",
            "  cp_comm_type: a2a+p2p\n  hierarchical_context_parallel_sizes:\n  - 2\n  - 1\n",
            base=_cp2(),
        ),
        source="Megatron Bridge training/config.py:1665-1697 (main 067f987)",
    ),
)
def cp205(ctx: RuleContext) -> Iterator[Finding]:
    f = ctx.facts
    comm = ctx.get(("model", "cp_comm_type"))
    if comm is None:
        return
    types: list[str] = []
    if isinstance(comm, str):
        types = [comm]
    elif isinstance(comm, list) and all(isinstance(c, str) for c in comm):
        types = list(comm)
        layers = ctx.get(("model", "num_layers"))
        if is_pos_int(layers) and len(comm) != layers:
            yield Finding(
                f"model.cp_comm_type lists {len(comm)} entries but num_layers is {layers}",
                at=("model", "cp_comm_type"),
            )
    else:
        return
    if "a2a+p2p" in types and f.cp is not None:
        sizes = ctx.get(("model", "hierarchical_context_parallel_sizes"))
        if not (isinstance(sizes, list) and sizes and all(is_pos_int(s) for s in sizes)):
            # point at the key that asks for the sizes when they are missing altogether
            at = (
                ("model", "hierarchical_context_parallel_sizes")
                if sizes is not None
                else ("model", "cp_comm_type")
            )
            yield Finding(
                f"cp_comm_type a2a+p2p needs model.hierarchical_context_parallel_sizes, got {value_repr(sizes)}",
                at=at,
            )
        elif math.prod(sizes) != f.cp:
            yield Finding(
                f"hierarchical_context_parallel_sizes {sizes} multiply to {math.prod(sizes)}, not CP = {f.cp}",
                at=("model", "hierarchical_context_parallel_sizes"),
            )
