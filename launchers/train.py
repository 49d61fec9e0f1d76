"""Cluster-side entry point of a rendered job, like Megatron-LM's `pretrain_gpt.py`:

    torchrun --nnodes N --nproc-per-node G ... launchers/train.py CONFIG [-c FILE] [-o KEY=VALUE] [--resume]

A thin shim over `packcfg train` (same arguments); under torchrun every process is one rank.
"""

from __future__ import annotations

import sys

from packcfg.cli import main

if __name__ == "__main__":
    raise SystemExit(main(["train", *sys.argv[1:]]))
