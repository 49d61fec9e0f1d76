"""The demo's summary: numbers gathered from the stages and the metrics files, as JSON, Markdown and text.

Every training number is derived from the metrics JSONL the trainer wrote (not from in-memory results),
so `summary.json` can be checked against those files: final loss = the last line's loss, real tokens =
the sum of `real_tokens`, tokens/s = real tokens over step time of the timed steps (see `throughput`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

WARMUP_STEPS = 1
"""Steps left out of tokens/s: the first step pays one-time costs (allocator growth, lazy init) that
would otherwise favour whichever run has more steps to amortise them over."""


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """The JSONL lines the trainer wrote, one dict per optimizer step."""
    return [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]


def timed_from_step(num_steps: int) -> int:
    """The first (1-based) step counted in tokens/s: after the warm-up, unless that would leave none."""
    return WARMUP_STEPS + 1 if num_steps > WARMUP_STEPS else 1


def throughput(rows: Sequence[dict[str, Any]]) -> float:
    """Real tokens per second over the timed steps: sum(real_tokens) / sum(step_time)."""
    first = timed_from_step(len(rows))
    timed = [r for r in rows if r["step"] >= first]
    seconds = sum(float(r["step_time"]) for r in timed)
    return sum(int(r["real_tokens"]) for r in timed) / seconds if seconds > 0 else 0.0


def run_summary(rows: Sequence[dict[str, Any]], metrics_file: str, wall_s: float) -> dict[str, Any]:
    """One training run's numbers, from its metrics lines."""
    if not rows:
        raise ValueError(f"{metrics_file}: no metrics lines")
    real = sum(int(r["real_tokens"]) for r in rows)
    computed = sum(int(r["padded_tokens"]) for r in rows)
    return {
        "metrics": metrics_file,
        "steps": len(rows),
        "final_loss": float(rows[-1]["loss"]),
        "first_loss": float(rows[0]["loss"]),
        "real_tokens": real,
        "computed_tokens": computed,  # real + padding: what the model actually processed
        "token_efficiency": real / computed if computed else 0.0,
        "tokens_per_s": throughput(rows),
        "timed_from_step": timed_from_step(len(rows)),
        "train_time_s": sum(float(r["step_time"]) for r in rows),
        "wall_s": round(wall_s, 3),
    }


def compare_runs(packed: Sequence[dict[str, Any]], padded: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """What makes the comparison fair, checked rather than assumed: same steps, same real tokens per
    step; and how far the two loss curves are apart (they train on identical data)."""
    same_steps = [r["step"] for r in packed] == [r["step"] for r in padded]
    same_tokens = same_steps and all(
        a["real_tokens"] == b["real_tokens"] for a, b in zip(packed, padded, strict=True)
    )
    diffs = [abs(float(a["loss"]) - float(b["loss"])) for a, b in zip(packed, padded, strict=False)]
    return {
        "same_steps": same_steps,
        "same_real_tokens_per_step": same_tokens,
        "max_abs_loss_diff": max(diffs) if diffs else 0.0,
    }


# ------------------------------------------------------------------------------------------------ render


def _pct(x: float) -> str:
    return f"{100 * x:.2f}%"


def format_text(s: dict[str, Any]) -> str:
    """The summary printed at the end of the demo (plain text, fits 110 columns)."""
    lint, pk, tr, t = s["lint"], s["packing"], s["train"], s["timings_s"]
    packed, padded, grouped = tr["packed"], tr["padded"], tr["length_grouped"]
    gap = pk["packs"] - pk["lower_bound"]
    lines = [
        f"packcfg demo summary  ({s['config_name']}, {s['output_dir']})",
        f"  lint      {lint['rules_checked']} rules checked: {lint['errors']} errors, "
        f"{lint['warnings']} warnings, {lint['infos']} info",
        f"  packing   {pk['samples']:,} samples -> {pk['packs']:,} packs of {pk['pack_size']} "
        f"(lower bound {pk['lower_bound']:,}, +{gap}); {pk['packing_factor']:.2f} samples/pack; "
        f"efficiency {_pct(pk['efficiency'])}",
        f"            padding: {pk['padding_tokens_padded']:,} tokens padded to seq_length "
        f"{pk['seq_length']} -> {pk['padding_tokens_packed']:,} packed "
        f"({_pct(pk['padding_removed_fraction'])} removed); alignment waste "
        f"{pk['alignment_waste_tokens']:,} (pad_seq_to_mult {pk['pad_seq_to_mult']})",
        f"  train     {tr['steps']} steps x {tr['global_batch_size']} packs, the same samples in the same "
        f"order in both runs ({packed['real_tokens']:,} real tokens each)",
        f"            packed  {packed['tokens_per_s']:>9,.0f} real tok/s   final loss {packed['final_loss']:.4f}"
        f"   ({_pct(packed['token_efficiency'])} of computed tokens real)",
        f"            padded  {padded['tokens_per_s']:>9,.0f} real tok/s   final loss {padded['final_loss']:.4f}"
        f"   ({_pct(padded['token_efficiency'])} of computed tokens real; {tr['padded_layout']})",
        f"            grouped {grouped['tokens_per_s']:>9,.0f} real tok/s"
        f"   ({_pct(grouped['token_efficiency'])} of computed tokens real; length-grouped padded rows)",
        f"            speedup {tr['speedup_length_grouped']:.2f}x real tokens/s vs length-grouped padding",
        f"            speedup {tr['speedup']:.2f}x real tokens/s vs the padded run ({tr['padded_layout']})",
        f"            max |loss difference| packed vs padded over the run {tr['max_abs_loss_diff']:.2e}",
        f"  time      {t['total']:.1f} s (lint {t['lint']:.1f}, analyze {t['analyze']:.1f}, pack {t['pack']:.1f}, "
        f"import torch {t['setup']:.1f}, train packed {t['train_packed']:.1f}, train padded + length-grouped "
        f"{t['train_padded']:.1f}, summary {t['summary']:.1f})",
        f"  files     {s['output_dir']}/: summary.json summary.md {s['plot']} {packed['metrics']} "
        f"{padded['metrics']} {pk['packed_file']}",
    ]
    return "\n".join(lines)


def format_markdown(s: dict[str, Any]) -> str:
    """summary.md: the same numbers as tables."""
    lint, pk, tr = s["lint"], s["packing"], s["train"]
    packed, padded = tr["packed"], tr["padded"]
    rows = [
        "# packcfg demo",
        "",
        f"Config `{s['config']}`, {tr['steps']} optimizer steps of {tr['global_batch_size']} packs each; "
        f"packcfg {s['packcfg_version']}; {s['threads']} CPU thread(s).",
        "",
        "## Lint",
        "",
        f"{lint['rules_checked']} rules checked: {lint['errors']} errors, {lint['warnings']} warnings, "
        f"{lint['infos']} info (details in `{lint['file']}`).",
        "",
        "## Packing",
        "",
        "| | |",
        "|---|---|",
        f"| samples | {pk['samples']:,} |",
        f"| packs (pack size {pk['pack_size']}) | {pk['packs']:,} |",
        f"| lower bound | {pk['lower_bound']:,} |",
        f"| samples per pack (packing factor) | {pk['packing_factor']:.2f} |",
        f"| efficiency (real / pack slots) | {_pct(pk['efficiency'])} |",
        f"| padding, every sample padded to seq_length {pk['seq_length']} | {pk['padding_tokens_padded']:,} |",
        f"| padding, packed | {pk['padding_tokens_packed']:,} |",
        f"| padding removed | {pk['padding_removed_tokens']:,} ({_pct(pk['padding_removed_fraction'])}) |",
        f"| of the packed padding: pack-tail waste | {pk['bin_waste_tokens']:,} |",
        f"| of the packed padding: alignment waste (pad_seq_to_mult {pk['pad_seq_to_mult']}) "
        f"| {pk['alignment_waste_tokens']:,} |",
        "",
        "## Training: packed vs padded on the same samples",
        "",
        "| | packed | padded |",
        "|---|---|---|",
        f"| real tokens/s (steps {packed['timed_from_step']}..{tr['steps']}) | "
        f"{packed['tokens_per_s']:,.0f} | {padded['tokens_per_s']:,.0f} |",
        f"| final loss | {packed['final_loss']:.4f} | {padded['final_loss']:.4f} |",
        f"| real tokens | {packed['real_tokens']:,} | {padded['real_tokens']:,} |",
        f"| computed tokens (real + padding) | {packed['computed_tokens']:,} | {padded['computed_tokens']:,} |",
        f"| train time (s) | {packed['train_time_s']:.1f} | {padded['train_time_s']:.1f} |",
        f"| metrics | `{packed['metrics']}` | `{padded['metrics']}` |",
        "",
        f"Speedup against length-grouped padding (similar-length samples share a micro-batch, "
        f"{_pct(tr['length_grouped']['token_efficiency'])} of computed tokens real, "
        f"{tr['length_grouped']['tokens_per_s']:,.0f} real tokens/s): "
        f"**{tr['speedup_length_grouped']:.2f}x** real tokens/s.",
        "",
        f"Speedup against the padded run above: **{tr['speedup']:.2f}x** real tokens/s. Largest loss difference between the runs at any "
        f"step: {tr['max_abs_loss_diff']:.2e} (same samples, same order, same real tokens per step: "
        f"{'yes' if tr['same_real_tokens_per_step'] else 'NO'}). Padded layout: {tr['padded_layout']}.",
        "",
        f"![loss curves and pack fill]({s['plot']})",
        "",
    ]
    return "\n".join(rows)
