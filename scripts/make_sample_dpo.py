#!/usr/bin/env python3
"""Generate packcfg's bundled sample DPO pairs (deterministic; no downloads).

Writes packcfg/data/sample_dpo/training.jsonl: Megatron Bridge SFT JSONL ({"input", "output"}), one
pair per two lines, chosen then rejected (what `packcfg pack` with `pairs` keeps adjacent in one pack:
samples 2k and 2k+1). Both answers share the prompt; the chosen one is right, the rejected one is a
near miss (an off-by-some sum, a list reversed with two words swapped), so a policy can learn the
preference in a few steps. Tokenized with the bundled SFT tokenizer (packcfg/data/sample_sft).

Usage: python scripts/make_sample_dpo.py [--out DIR] [--seed 4321] [--pairs 512]
"""

from __future__ import annotations

import argparse
import json
import os
import random
from pathlib import Path

WORDS = "apple banana cherry grape lemon cat dog cow pig red blue green sun moon star one two three cup bowl".split()


def pair(rng: random.Random) -> tuple[dict[str, str], dict[str, str]]:
    """(chosen, rejected) for one prompt."""
    if rng.random() < 0.5:
        a, b = rng.randint(1, 99), rng.randint(1, 99)
        prompt = f"Add: {a} + {b} ="
        wrong = a + b + rng.choice([-10, -2, -1, 1, 2, 10])
        return {"input": prompt, "output": str(a + b)}, {"input": prompt, "output": str(wrong)}
    words = [rng.choice(WORDS) for _ in range(rng.randint(3, 12))]
    right = list(reversed(words))
    wrong = list(right)
    i = rng.randrange(len(wrong) - 1)
    wrong[i], wrong[i + 1] = wrong[i + 1], wrong[i]
    if wrong == right:  # equal neighbours: drop one word instead
        wrong = wrong[:-1]
    prompt = "Reverse the words: " + " ".join(words)
    return {"input": prompt, "output": " ".join(right)}, {"input": prompt, "output": " ".join(wrong)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    root = Path(__file__).resolve().parents[1]
    ap.add_argument("--out", type=Path, default=root / "packcfg" / "data" / "sample_dpo")
    ap.add_argument("--seed", type=int, default=4321)
    ap.add_argument("--pairs", type=int, default=512)
    args = ap.parse_args(argv)
    rng = random.Random(args.seed)
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "training.jsonl"
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        for _ in range(args.pairs):
            for row in pair(rng):
                f.write(json.dumps(row) + "\n")
    os.replace(tmp, path)
    print(f"wrote {path} ({args.pairs} pairs)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
