#!/usr/bin/env python3
"""Write tiny random Hugging Face models (a Llama and a Qwen3) from local `transformers` code; no downloads.

Each folder holds config.json + model.safetensors, as `save_pretrained` writes them, with the vocabulary
of packcfg's bundled tokenizer (packcfg/data/sample_sft/tokenizer.json), so `recipes/tiny_hf_sft.yaml`
can fine-tune it on the bundled sample data:

    python scripts/make_tiny_hf_model.py                 # runs/tiny_hf/llama and runs/tiny_hf/qwen3
    python scripts/make_tiny_hf_model.py --out DIR --family llama

Shape: 2 layers, hidden 64, 4 query heads in 2 KV groups (GQA) of dim 16, SwiGLU 160; the Llama one
has Llama 3.1's RoPE (theta 500000, `llama3` scaling factor 8), the Qwen3 one q/k norms.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

LLAMA31_ROPE = {
    "rope_theta": 500000.0,
    "rope_scaling": {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
    },
    "max_position_embeddings": 16384,
}


def bundled_vocab_size() -> int:
    from tokenizers import Tokenizer

    from packcfg.resources import resolve_path

    return Tokenizer.from_file(str(resolve_path("@packcfg/data/sample_sft/tokenizer.json"))).get_vocab_size()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="runs/tiny_hf", help="parent folder (default runs/tiny_hf)")
    parser.add_argument("--family", choices=["llama", "qwen3", "all"], default="all")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    import warnings

    warnings.filterwarnings("ignore")
    from packcfg.train.hf.tiny import make_tiny_hf_model

    vocab = bundled_vocab_size()
    for family in ("llama", "qwen3") if args.family == "all" else (args.family,):
        folder = Path(args.out) / family
        if folder.exists() and any(folder.iterdir()) and not (folder / "config.json").is_file():
            print(
                f"{folder}: exists and is not a Hugging Face folder; refusing to write into it",
                file=sys.stderr,
            )
            return 2
        t0 = time.perf_counter()
        make_tiny_hf_model(
            family, folder, vocab, seed=args.seed, **(LLAMA31_ROPE if family == "llama" else {})
        )
        print(f"wrote {folder} ({family}, vocab {vocab}) in {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
