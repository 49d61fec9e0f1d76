#!/usr/bin/env python3
"""Pack throughput: `pack` and `verify --source` on 1M samples, wall, CPU and peak RSS per run.

Three workloads (issue 23, items 3 and 4), each a fresh `python -m packcfg` process under `/usr/bin/time -v`
(wall = "Elapsed", CPU = user + sys of every thread, peak = "Maximum resident set size", which counts the
memory-mapped spool pages the process touched):

- `text`: Bridge SFT JSONL (`input`/`output`) that needs tokenizing, 1M rows made from the bundled sample data
  (`packcfg/data/sample_sft/training.jsonl`, 4,000 rows): row i is sample i mod 4000 with its words shuffled
  (seeded) for i >= 4000, so that most rows are new text; tokenized with the bundled tokenizer.json. Packed
  cold (no tokenized cache) and warm (a second run over the same source and tokenizer: the cache).
- `tokens`: token-id JSONL, 1M samples (~75M tokens, lognormal lengths, Zipf ids over a 32k vocabulary; the
  same generator as `bench/packing.py --e2e-only`).
- `verify --source` of the `tokens` pack against its source.

Generated inputs go to a folder under /tmp (`--data`, kept between runs so that they are made once; never in
git). Every row is the median of `--repeat` runs; the table states the machine and the load average.

Usage: python bench/pack_io.py [--n 1000000] [--repeat 3] [--data /tmp/packcfg-packio] [--only text,tokens,verify]
       [--capacity 4096]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "packcfg" / "data" / "sample_sft"


# --------------------------------------------------------------------------------------------- data


def write_text_source(path: Path, n: int, seed: int = 23) -> None:
    """n Bridge SFT rows from the bundled sample data: row i is sample i mod 4000, its input's and output's
    words shuffled (seeded) from the second repetition on. Written to a temp name, then renamed."""
    rows = [json.loads(x) for x in (SAMPLE / "training.jsonl").read_text(encoding="utf-8").splitlines() if x]
    rng = np.random.default_rng(seed)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        for i in range(n):
            row = rows[i % len(rows)]
            if i >= len(rows):
                words_in, words_out = row["input"].split(" "), row["output"].split(" ")
                rng.shuffle(words_in)
                rng.shuffle(words_out)
                row = {"input": " ".join(words_in), "output": " ".join(words_out)}
            f.write(json.dumps(row) + "\n")
    os.replace(tmp, path)


def write_token_source(path: Path, n: int) -> None:
    """n token-id JSONL samples, as `bench/packing.py --e2e-only` makes them (its generator, reused)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import packing as bench_packing  # bench/packing.py

    folder = path.parent / "gen.tmp"
    folder.mkdir(exist_ok=True)
    _, js, _ = bench_packing._write_sources(folder, n)
    os.replace(js, path)
    shutil.rmtree(folder)


# --------------------------------------------------------------------------------------------- runs


def timed(args: list[str], env: dict[str, str] | None = None) -> dict[str, float]:
    """`python -m packcfg ARGS` under /usr/bin/time -v: wall s, cpu s, peak RSS MiB, exit code."""
    cmd = ["/usr/bin/time", "-v", sys.executable, "-m", "packcfg", *args]
    full_env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=full_env)
    err = proc.stderr

    def field(name: str) -> str:
        m = re.search(rf"^\s*{re.escape(name)}: (.+)$", err, re.M)
        if m is None:
            raise SystemExit(f"packcfg {' '.join(args)}: no {name!r} in:\n{err[-3000:]}")
        return m.group(1).strip()

    wall_text = field("Elapsed (wall clock) time (h:mm:ss or m:ss)")
    wall = 0.0
    for part in wall_text.split(":"):
        wall = wall * 60 + float(part)
    cpu = float(field("User time (seconds)")) + float(field("System time (seconds)"))
    rss = int(field("Maximum resident set size (kbytes)")) / 1024
    rc = proc.returncode
    if rc != 0:
        raise SystemExit(f"packcfg {' '.join(args)} exited {rc}:\n{err[-3000:]}")
    return {"wall": wall, "cpu": cpu, "rss": rss, "rc": rc}


def median_row(name: str, runs: list[dict[str, float]]) -> list[str]:
    med = {k: statistics.median(r[k] for r in runs) for k in ("wall", "cpu", "rss")}
    return [
        name,
        f"{med['wall']:.1f}",
        " ".join(f"{r['wall']:.1f}" for r in runs),
        f"{med['cpu']:.1f}",
        f"{med['cpu'] / max(med['wall'], 1e-9):.2f}",
        f"{med['rss']:,.0f}",
        f"{max(r['rss'] for r in runs):,.0f}",
    ]


def print_table(header: list[str], rows: list[list[str]]) -> None:
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for r in rows:
        print("| " + " | ".join(r) + " |")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--capacity", type=int, default=4096)
    ap.add_argument("--data", type=Path, default=Path("/tmp/packcfg-packio"))
    ap.add_argument("--only", default="text,tokens,verify")
    args = ap.parse_args(argv)
    only = set(args.only.split(","))
    data = args.data
    data.mkdir(parents=True, exist_ok=True)
    text_src = data / f"text_{args.n}.jsonl"
    tok_src = data / f"tokens_{args.n}.jsonl"
    if "text" in only and not text_src.exists():
        write_text_source(text_src, args.n)
    if only & {"tokens", "verify"} and not tok_src.exists():
        write_token_source(tok_src, args.n)
    tokenizer = SAMPLE / "tokenizer.json"
    cap = str(args.capacity)
    rows = []
    load_before = os.getloadavg()
    if "text" in only:
        out = data / "out_text" / "packed.parquet"
        base = ["pack", str(text_src), "--tokenizer", str(tokenizer), "--capacity", cap, "--out", str(out)]
        # the tokenized cache in a folder of its own, emptied before each cold run (else every cold run
        # after the first reads the cache the one before stored)
        cache_env = {"PACKCFG_CACHE_DIR": str(data / "token_cache"), "PACKCFG_TOKEN_CACHE": "1"}
        cold, warm = [], []
        for _ in range(args.repeat):
            shutil.rmtree(out.parent, ignore_errors=True)
            shutil.rmtree(data / "token_cache", ignore_errors=True)
            cold.append(timed([*base, "-q", "--force"], cache_env))
            warm.append(timed([*base, "-q", "--force"], cache_env))  # same source and tokenizer: the cache
        rows.append(median_row(f"text {args.n:,} rows: pack (tokenize)", cold))
        rows.append(median_row(f"text {args.n:,} rows: pack again (cached tokens)", warm))
    if only & {"tokens", "verify"}:
        out = data / "out_tokens" / "packed.parquet"
        base = ["pack", str(tok_src), "--capacity", cap, "--out", str(out), "-q", "--force"]
        if "tokens" in only:
            rows.append(
                median_row(f"token JSONL {args.n:,}: pack", [timed(base) for _ in range(args.repeat)])
            )
        elif not out.exists():
            timed(base)
        if "verify" in only:
            vargs = ["verify", str(out), "--source", str(tok_src), "-q"]
            rows.append(
                median_row(
                    f"token JSONL {args.n:,}: verify --source", [timed(vargs) for _ in range(args.repeat)]
                )
            )
    load_after = os.getloadavg()
    print(
        f"\n## Pack throughput ({args.n:,} samples, capacity {cap}; median of {args.repeat} fresh processes)\n"
        f"\nmachine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}; load average (1 min) {load_before[0]:.1f} before, "
        f"{load_after[0]:.1f} after\n"
    )
    header = ["workload", "wall s (median)", "wall s (runs)", "CPU s", "cores used", "peak RSS MiB", "max"]
    print_table(header, rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
