#!/usr/bin/env python3
"""Benchmark `packcfg lint`, process start to exit, as users and CI run it.

Prints a table: the median wall time (and min/max) of `python -m packcfg lint` on one recipe, and on a
directory of 1,000 recipe files (copies of recipes/*.yaml in a temporary folder), serial (`-j 1`) and with
the default worker pool. Also the CPU time of the serial run per file, and the machine's load average, since
wall times on a shared 2-core machine move with whatever else runs there.

Targets: one file < 0.3 s; 1,000 files < 3 s (on the 2-core dev machine).

Usage: python bench/lint.py [--runs N] [--files N]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RECIPES = sorted((REPO / "recipes").glob("*.yaml"))
LINT_ONLY = (
    "import argparse, sys; from packcfg.lint.commands import lint; p = argparse.ArgumentParser(); "
    "lint.add_arguments(p); raise SystemExit(lint.run(p.parse_args(sys.argv[1:])))"
)


def _time(argv: list[str]) -> tuple[float, float]:
    """(wall seconds, child CPU seconds) of one process run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=REPO)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode not in (0, 1):
        sys.exit(f"bench: {' '.join(argv)} exited {proc.returncode}: {proc.stderr.strip()}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _measure(label: str, argv: list[str], runs: int, target: float | None) -> list[str]:
    _time(argv)  # warm the page cache and the bytecode cache
    samples = [_time(argv) for _ in range(runs)]
    walls = [w for w, _ in samples]
    cpu = statistics.median(c for _, c in samples)
    med = statistics.median(walls)
    verdict = "" if target is None else ("ok" if med < target else "OVER")
    goal = "" if target is None else f"< {target:g} s"
    return [label, f"{med:.3f}", f"{min(walls):.3f}", f"{max(walls):.3f}", f"{cpu:.3f}", goal, verdict]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7, help="runs per measurement (median reported)")
    parser.add_argument("--files", type=int, default=1000, help="files in the batch measurement")
    args = parser.parse_args()
    if not RECIPES:
        sys.exit("bench: no recipes/*.yaml to copy")

    cmd = [sys.executable, "-m", "packcfg", "lint"]
    one = REPO / "recipes" / "tiny_cpu_sft.yaml"
    rows = [_measure("1 recipe", [*cmd, str(one)], args.runs, 0.3)]
    # The same lint without the CLI's parser, which imports every flow's command module: shows what the
    # lint path itself costs, apart from the other flows' import time.
    rows.append(
        _measure("1 recipe, lint command only", [sys.executable, "-c", LINT_ONLY, str(one)], args.runs, None)
    )
    with tempfile.TemporaryDirectory(prefix="packcfg-bench-") as tmp:
        folder = Path(tmp)
        for i in range(args.files):
            src = RECIPES[i % len(RECIPES)]
            shutil.copyfile(src, folder / f"{i:05d}_{src.name}")
        batch_runs = max(3, args.runs // 2)
        rows.append(_measure(f"{args.files} files, -j 1", [*cmd, "-j", "1", str(folder)], batch_runs, None))
        rows.append(_measure(f"{args.files} files", [*cmd, str(folder)], batch_runs, 3.0))
        rows.append(
            _measure(
                f"{args.files} files --format sarif",
                [*cmd, "--format", "sarif", str(folder)],
                batch_runs,
                None,
            )
        )

    header = ["case", "median s", "min s", "max s", "cpu s", "target", ""]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    print(
        f"packcfg lint, process start to exit; {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}"
    )
    print("  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)).rstrip())
    print("  ".join("-" * w for w in widths))
    for row in rows:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
