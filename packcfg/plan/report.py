"""The plan as a table (with its assumptions), as JSON, and one proposal as a reviewable override YAML."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from packcfg.plan.estimate import GIB
from packcfg.plan.search import PlanResult, Proposal

COLUMNS = (
    "#", "TP", "CP", "PP", "SP", "GBS", "pack", "mult", "recomp",
    "weights", "grads", "optim", "activ", "logits", "total", "pack eff", "step s", "tokens/s",
)  # fmt: skip
MIB = 1024**2


def _row(p: Proposal, unit: int) -> list[str]:
    e, lay, mem = p.estimate, p.estimate.layout, p.estimate.memory

    def _gib(value: float) -> str:
        return f"{value / unit:.2f}"

    return [
        str(p.rank), str(lay.tp), str(lay.cp), str(lay.pp), "on" if lay.sp else "off",
        str(lay.global_batch_size), str(lay.pack_size), str(lay.pad_seq_to_mult), lay.recompute,
        _gib(mem["weights"] + mem.get("reference", 0.0)), _gib(mem["gradients"]), _gib(mem["optimizer"]), _gib(mem["activations"]),
        _gib(mem["logits"]), _gib(mem["total"]), f"{p.profile.efficiency:.1%}",
        _seconds(e.step_seconds), f"{e.tokens_per_second:,.0f}",
    ]  # fmt: skip


def _seconds(value: float) -> str:
    """Step seconds with their trailing zeros (7.00, not 7), three significant digits below 0.1 s."""
    return f"{value:.2f}" if value >= 0.1 else f"{value:.3g}"


def _fmt_count(n: int) -> str:
    return f"{n / 1e9:.2f} B" if n >= 1e8 else f"{n / 1e6:.2f} M" if n >= 1e5 else f"{n:,}"


def assumptions(result: PlanResult) -> list[str]:
    hw, pr = result.hardware, result.precision
    precision = (
        f"bf16 weights, {'fp32' if pr.grad_bytes == 4 else 'bf16'} gradients, fp32 Adam state and master copy"
        if pr.bf16
        else "fp32 weights, gradients and Adam state"
    )
    opt = (
        "distributed optimizer (sharded over DP x CP)"
        if pr.distributed_optimizer
        else "optimizer state on every rank"
    )
    return [
        f"GPU: {hw.gpu_memory_bytes / GIB:g} GiB, {hw.headroom:.0%} kept free; peak {hw.peak_tflops:g} TFLOP/s, "
        f"MFU {hw.mfu:.0%} assumed for matmuls and attention",
        f"interconnect: {hw.intra_node_gbps:g} GB/s inside a node ({hw.gpus_per_node} GPUs), "
        f"{hw.inter_node_gbps:g} GB/s per GPU between nodes; TP, CP and PP traffic not overlapped",
        f"precision: {precision}; {opt}; activations for THD packs with flash attention, "
        "1F1B pipeline schedule, MBS 1 (offline packs)",
        "attention FLOPs from each sample's own length inside a pack; dense FLOPs over the full pack width",
        *(
            ["DPO: weights include the frozen reference model; one more forward pass per micro-batch"]
            if any("reference" in p.estimate.memory for p in result.proposals)
            else []
        ),
    ]


def format_table(result: PlanResult) -> str:
    s = result.shape
    lines = [
        f"model: {_fmt_count(s.total_params())} parameters, {s.num_layers} layers x {s.hidden_size}, "
        f"heads {s.num_attention_heads}/{s.num_query_groups} "
        f"({'GQA' if s.num_query_groups < s.num_attention_heads else 'MHA'}), ffn {s.ffn_hidden_size}, "
        f"vocab {s.vocab_size} {'tied' if s.tied_embeddings else 'untied'}",
        f"data: {result.samples} samples; {result.gpus} GPUs; {result.considered} layouts estimated",
    ]
    if result.infeasible:
        return "\n".join([*lines, f"no proposal: {result.infeasible}"])
    unit = GIB if max(p.estimate.memory["total"] for p in result.proposals) >= GIB else MIB
    rows = [list(COLUMNS), *(_row(p, unit) for p in result.proposals)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(COLUMNS))]
    for r in rows:
        lines.append("  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)).rstrip())
    lines.append(
        f"(memory in {'GiB' if unit == GIB else 'MiB'} per GPU of the most loaded rank; "
        "tokens/s: real tokens, padding excluded)"
    )
    lines.append("assumptions:")
    lines.extend(f"  {a}" for a in assumptions(result))
    dropped = {k: v for k, v in result.rejected.items() if k.startswith("lint")}
    for reason, n in sorted(dropped.items()):
        lines.append(f"left out by lint: {n} layout(s) ({reason[6:]})")
    lines.append("apply one: packcfg plan ... --apply N  (writes an override file; lint it with -c)")
    return "\n".join(lines)


def proposal_dict(p: Proposal) -> dict[str, Any]:
    e, lay = p.estimate, p.estimate.layout
    return {
        "rank": p.rank,
        "tp": lay.tp,
        "cp": lay.cp,
        "pp": lay.pp,
        "dp": lay.dp,
        "sequence_parallel": lay.sp,
        "micro_batch_size": lay.micro_batch_size,
        "global_batch_size": lay.global_batch_size,
        "pack_size": lay.pack_size,
        "pad_seq_to_mult": lay.pad_seq_to_mult,
        "recompute": lay.recompute,
        "memory_gib": {k: round(v / GIB, 3) for k, v in e.memory.items()},
        "counts_per_rank": e.counts,
        "fits": e.fits,
        "packing_efficiency": round(p.profile.efficiency, 4),
        "samples_per_pack": round(p.profile.samples_per_pack, 3),
        "samples_per_step": round(e.samples_per_step, 1),
        "step_seconds": e.step_seconds,
        "compute_seconds": e.compute_seconds,
        "comm_seconds": e.comm_seconds,
        "pipeline_bubble": round(e.bubble_fraction, 4),
        "tokens_per_second": e.tokens_per_second,
        "flops_per_step": e.flops_per_step,
        "overrides": p.overrides,
    }


def to_json(result: PlanResult) -> str:
    s = result.shape
    doc = {
        "model": {
            "parameters": s.total_params(),
            "num_layers": s.num_layers,
            "hidden_size": s.hidden_size,
            "ffn_hidden_size": s.ffn_hidden_size,
            "num_attention_heads": s.num_attention_heads,
            "num_query_groups": s.num_query_groups,
            "vocab_size": s.vocab_size,
            "tied_embeddings": s.tied_embeddings,
        },
        "gpus": result.gpus,
        "samples": result.samples,
        "assumptions": {**result.hardware.as_dict(), "notes": assumptions(result)},
        "layouts_estimated": result.considered,
        "left_out": dict(result.rejected),
        "infeasible": result.infeasible,
        "proposals": [proposal_dict(p) for p in result.proposals],
    }
    return json.dumps(doc, indent=2)


def _nested(flat: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for dotted, value in flat.items():
        node = out
        *parents, leaf = dotted.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return out


def override_yaml(p: Proposal, source: str, overrides: Sequence[str] = ()) -> str:
    """One proposal as an override YAML to merge over the config (`-c FILE`), its estimate in comments."""
    import yaml

    e, lay = p.estimate, p.estimate.layout
    head = [
        f"# packcfg plan: proposal {p.rank} for {source}",
        f"# TP {lay.tp}, CP {lay.cp}, PP {lay.pp}, DP {lay.dp}, SP {'on' if lay.sp else 'off'}, "
        f"pack {lay.pack_size} (pad_seq_to_mult {lay.pad_seq_to_mult}), GBS {lay.global_batch_size} packs, "
        f"recompute {lay.recompute}",
        f"# estimate: {e.memory['total'] / GIB:.2f} GiB per GPU, {e.step_seconds:.3g} s per step, "
        f"{e.tokens_per_second:,.0f} real tokens/s, packing efficiency {p.profile.efficiency:.1%}",
        f"# use: packcfg lint {' '.join([source, *overrides])} -c THIS_FILE",
    ]
    body = (
        yaml.safe_dump(_nested(p.overrides), sort_keys=False, default_flow_style=False)
        if p.overrides
        else "{}\n"
    )
    return "\n".join(head) + "\n" + body
