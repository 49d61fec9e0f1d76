#!/usr/bin/env python3
"""Generate packcfg's bundled sample SFT data and its tokenizer (deterministic; no downloads).

Writes into packcfg/data/sample_sft/:
  training.jsonl, validation.jsonl   Megatron Bridge SFT JSONL: {"input": ..., "output": ...}
  tokenizer.json                     byte-level BPE (tokenizers library), vocab <= 2048, <eos> and <pad>
  tokenized.jsonl                    a few samples pre-tokenized ({"input_ids", "answer_start_idx"}) for tests

The tasks are templated (arithmetic, reversing and sorting word lists, counting, copying, key-value
lookup) so that a 2-layer model learns something measurable in a few dozen steps. The size of each
task is drawn from a log-normal, which gives the long-tailed lengths that make packing worth it: most
samples are far shorter than 512 tokens, a few approach 500.

Usage: python scripts/make_sample_data.py [--out DIR] [--seed 1234] [--train 4000] [--valid 200]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
from pathlib import Path

WORDS = (
    "apple banana cherry grape lemon mango melon olive peach pear plum berry kiwi lime fig date "
    "cat dog cow pig hen fox owl bee ant bat elk yak emu ram eel cod "
    "red blue green black white brown pink gray gold silver orange purple "
    "sun moon star rain snow wind fire stone river lake hill road tree leaf rock sand "
    "one two three four five six seven eight nine ten "
    "book door lamp desk cup bowl fork knife spoon chair table bed shoe hat coat bag box key "
    "run jump walk swim read sing cook draw play rest fly sit"
).split()

MAX_TOKENS = 500  # a sample's input_ids (with <eos>) stay within this: the tiny recipe packs to 512
EOS = "<eos>"
PAD = "<pad>"


def _size(rng: random.Random, mu: float, sigma: float, lo: int, hi: int) -> int:
    """A log-normal task size, clipped: most tasks small, a long tail of large ones."""
    return max(lo, min(hi, int(math.exp(rng.gauss(mu, sigma)))))


def _words(rng: random.Random, k: int) -> list[str]:
    return [rng.choice(WORDS) for _ in range(k)]


def task_add(rng: random.Random) -> tuple[str, str]:
    k = _size(rng, 0.8, 0.6, 2, 40)
    nums = [rng.randint(0, 99) for _ in range(k)]
    return f"Add: {' + '.join(map(str, nums))} =", str(sum(nums))


def task_reverse(rng: random.Random) -> tuple[str, str]:
    w = _words(rng, _size(rng, 2.6, 0.9, 2, 200))
    return f"Reverse the words: {' '.join(w)}", " ".join(reversed(w))


def task_sort(rng: random.Random) -> tuple[str, str]:
    w = _words(rng, _size(rng, 2.4, 0.9, 2, 200))
    return f"Sort the words: {' '.join(w)}", " ".join(sorted(w))


def task_count(rng: random.Random) -> tuple[str, str]:
    w = _words(rng, _size(rng, 2.8, 0.9, 3, 400))
    target = rng.choice(w)
    return f"Count '{target}' in: {' '.join(w)}", str(w.count(target))


def task_copy(rng: random.Random) -> tuple[str, str]:
    w = _words(rng, _size(rng, 2.7, 1.0, 2, 230))
    return f"Copy: {' '.join(w)}", " ".join(w)


def task_lookup(rng: random.Random) -> tuple[str, str]:
    k = _size(rng, 2.2, 0.9, 2, 120)
    keys = rng.sample(range(100, 1000), k)
    vals = _words(rng, k)
    pairs = "; ".join(f"k{a}={b}" for a, b in zip(keys, vals, strict=True))
    j = rng.randrange(k)
    return f"Lookup k{keys[j]} in: {pairs}", vals[j]


TASKS = (task_add, task_reverse, task_sort, task_count, task_copy, task_lookup)


def generate(rng: random.Random, n: int) -> list[dict[str, str]]:
    return [dict(zip(("input", "output"), rng.choice(TASKS)(rng), strict=True)) for _ in range(n)]


def train_tokenizer(texts: list[str], vocab_size: int = 2048):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[PAD, EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    return tok


def n_tokens(tok, sample: dict[str, str]) -> int:
    """Tokens of the sample as packcfg builds it: input, ' ' + output, <eos>."""
    return len(tok.encode(sample["input"]).ids) + len(tok.encode(" " + sample["output"]).ids) + 1


def _write_jsonl(path: Path, rows: list[dict]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    root = Path(__file__).resolve().parents[1]
    ap.add_argument("--out", type=Path, default=root / "packcfg" / "data" / "sample_sft")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--train", type=int, default=4000)
    ap.add_argument("--valid", type=int, default=200)
    args = ap.parse_args(argv)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # deterministic merges, quiet

    rng = random.Random(args.seed)
    train = generate(rng, args.train)
    valid = generate(rng, args.valid)
    tok = train_tokenizer([s["input"] + " " + s["output"] for s in train])

    # Keep every sample within MAX_TOKENS: draw replacements (same rng, so still deterministic).
    for rows in (train, valid):
        for i, sample in enumerate(rows):
            while n_tokens(tok, sample) > MAX_TOKENS:
                sample = generate(rng, 1)[0]
            rows[i] = sample

    args.out.mkdir(parents=True, exist_ok=True)
    _write_jsonl(args.out / "training.jsonl", train)
    _write_jsonl(args.out / "validation.jsonl", valid)
    tmp = args.out / "tokenizer.json.tmp"
    tok.save(str(tmp))
    os.replace(tmp, args.out / "tokenizer.json")

    eos = tok.token_to_id(EOS)
    tokenized = []
    for s in train[:64]:
        ctx = tok.encode(s["input"]).ids
        ans = tok.encode(" " + s["output"]).ids
        tokenized.append({"input_ids": ctx + ans + [eos], "answer_start_idx": len(ctx)})
    _write_jsonl(args.out / "tokenized.jsonl", tokenized)

    lengths = sorted(n_tokens(tok, s) for s in train)
    q = lambda p: lengths[min(len(lengths) - 1, int(p * len(lengths)))]  # noqa: E731
    print(
        f"wrote {args.out}: {len(train)} train / {len(valid)} validation samples, vocab {tok.get_vocab_size()}; "
        f"tokens per sample p50 {q(0.5)} p90 {q(0.9)} p99 {q(0.99)} max {lengths[-1]}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
