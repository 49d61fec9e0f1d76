"""The planner's algorithms, one module per family, behind `packcfg.packing.planner.plan`.

- `common`: what every algorithm returns (`Packing`, CSR pack boundaries and item order), `PlanError`.
- `items`: lengths in, items out: validation, alignment and the oversize policy (`itemize`).
- `best_fit`: `bfd` and `histogram`, best-fit decreasing on the length histogram (the compiled kernel
  in `packing/_bfd_kernel.py` or the pure-Python path, chosen by measured cost).
- `first_fit`: `ffd` and `first_fit_shuffle` (a max segment tree over open packs).
- `next_fit`: `sequential` (order-preserving next fit).
- `greedy_buffer`: `greedy_buffer`, the streaming InternVL-style packer (`GreedyBufferPacker`).
- `pairs`: DPO pairs planned as one unit each, then expanded to adjacent items.
- `stats`: the lower bound and everything `analyze` reports.
"""
