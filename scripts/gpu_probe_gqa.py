"""Probe, on a CUDA GPU: does the flash kernel under torch's `varlen_attn` take grouped keys/values as they
are (GQA without repeating them per query head), forward and backward, on this torch? Prints what it found
and one timing (fwd+bwd of 16,384 packed tokens, 32/8 heads x 64, bf16): repeated groups through
`varlen_attn` vs the groups as they are through the same aten kernels (packcfg.train.varlen's
GroupedFlashVarlen). Then cuDNN's ragged attention (`aten._cudnn_attention_forward` with cu_seqlens, the
kernel behind nested-tensor SDPA, which torch's `varlen_attn` carries but leaves switched off): does it run,
with the groups as they are or repeated, does it match the flash kernel, and how fast. On one H100 the cuDNN
kernel SDPA picks for padded rows took 1.30 ms per 1k tokens against flash varlen's 1.77 (docs/train.md), so
this says whether a cuDNN varlen method could close that gap. Asserts nothing; exit 0."""

from __future__ import annotations

import math
import time

import torch


def max_diffs(ref: tuple[torch.Tensor, ...], got: tuple[torch.Tensor, ...]) -> str:
    """Max |difference| of (out, dq, dk, dv), printed."""
    return ", ".join(
        f"{name} {float((a.float() - b.float()).abs().max()):.2e}"
        for name, a, b in zip(("out", "dq", "dk", "dv"), ref, got, strict=True)
    )


def main() -> None:
    if not torch.cuda.is_available():
        print("- GQA / cuDNN probe: no CUDA device visible; nothing probed")
        return
    from torch.nn.attention.varlen import varlen_attn

    from packcfg.train.varlen import GroupedFlashVarlen

    dev, dt = torch.device("cuda"), torch.bfloat16
    heads, groups, dim = 32, 8, 64
    lengths = [3000, 17, 900, 4096, 1200, 513, 2200, 4458]  # 16,384 tokens
    cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32, device=dev)
    total, longest, scale = sum(lengths), max(lengths), 1 / math.sqrt(dim)
    g = torch.Generator(device=dev).manual_seed(0)
    q = torch.randn(total, heads, dim, device=dev, dtype=dt, generator=g)
    k, v = (torch.randn(total, groups, dim, device=dev, dtype=dt, generator=g) for _ in range(2))
    grad = torch.randn(total, heads, dim, device=dev, dtype=dt, generator=g)
    import inspect

    params = inspect.signature(varlen_attn).parameters
    causal = {"window_size": (-1, 0)} if "window_size" in params else {"is_causal": True}

    def repeated() -> tuple[torch.Tensor, ...]:
        qq, kk, vv = (t.detach().requires_grad_() for t in (q, k, v))
        kr, vr = (t.repeat_interleave(heads // groups, dim=1) for t in (kk, vv))
        out = varlen_attn(qq, kr, vr, cu, cu, longest, longest, **causal)
        out.backward(grad)
        return out, qq.grad, kk.grad, vv.grad

    def native() -> tuple[torch.Tensor, ...]:  # packcfg's path where varlen_attn lacks enable_gqa
        qq, kk, vv = (t.detach().requires_grad_() for t in (q, k, v))
        out = GroupedFlashVarlen.apply(qq, kk, vv, cu, longest, scale)
        out.backward(grad)
        return out, qq.grad, kk.grad, vv.grad

    print(
        f"- torch {torch.__version__}: varlen_attn keywords {sorted(set(params) - {'query', 'key', 'value'})}"
    )
    try:
        ref, mine = repeated(), native()
    except Exception as exc:  # noqa: BLE001 - a probe reports, it does not crash the check
        print(
            f"- GQA through GroupedFlashVarlen (aten flash fwd/bwd): fails ({type(exc).__name__}: {exc})"[
                :400
            ]
        )
        return
    print(
        "- GroupedFlashVarlen (aten flash fwd/bwd, groups as they are) vs varlen_attn on repeated groups: max |diff| "
        + max_diffs(ref, mine)
    )

    def timed(fn) -> float:
        fn()
        torch.cuda.synchronize()
        best = float("inf")
        for _ in range(10):
            t0 = time.perf_counter()
            fn()
            torch.cuda.synchronize()
            best = min(best, time.perf_counter() - t0)
        return best * 1e3

    print(
        f"- fwd+bwd, 16,384 tokens in 8 samples: repeated groups {timed(repeated):.2f} ms, "
        f"groups as they are {timed(native):.2f} ms"
    )

    def cudnn(repeat_groups: bool) -> tuple[torch.Tensor, ...]:  # autograd through the aten op's formula
        qq, kk, vv = (t.detach().requires_grad_() for t in (q, k, v))
        kr, vr = (
            (t.repeat_interleave(heads // groups, dim=1) for t in (kk, vv)) if repeat_groups else (kk, vv)
        )
        out = torch.ops.aten._cudnn_attention_forward(
            qq, kr, vr, None, cu, cu, longest, longest, True, 0.0, True, False, scale=scale
        )[0]
        out.backward(grad)
        return out, qq.grad, kk.grad, vv.grad

    for repeat_groups in (False, True):
        how = "groups repeated" if repeat_groups else "groups as they are"
        try:
            got = cudnn(repeat_groups)
            diffs = max_diffs(mine, got)
            ms = timed(lambda r=repeat_groups: cudnn(r))
        except Exception as exc:  # noqa: BLE001 - a probe reports, it does not crash the check
            print(f"- cuDNN ragged attention, {how}: fails ({type(exc).__name__}: {exc})"[:400])
            continue
        print(
            f"- cuDNN ragged attention, {how}: max |diff| against the flash kernel "
            + diffs
            + f"; fwd+bwd {ms:.2f} ms"
        )


if __name__ == "__main__":
    main()
