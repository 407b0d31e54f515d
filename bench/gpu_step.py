"""Fused 8-bit Adam step on one GPU: time per step (CUDA events), effective bandwidth against a
device-to-device copy measured in the same run, and torch.optim.AdamW(fused=True) side by side.
Prints one table; writes it to $OUT/gpu_step.txt when OUT is set."""

from __future__ import annotations

import os
import sys

import octopt
import torch

CONFIGS = [("1 x 2^26", [1 << 26]), ("1 x 2^28", [1 << 28]), ("256 x 2^20", [1 << 20] * 256)]
WARMUP, ITERS = 3, 20


def timed(fn) -> float:
    """Milliseconds per call, from CUDA events around ITERS calls."""
    for _ in range(WARMUP):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(ITERS):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / ITERS


def copy_gbps(n: int) -> float:
    a = torch.empty(n, device="cuda")
    b = torch.empty_like(a)
    ms = timed(lambda: b.copy_(a))
    return 2 * 4 * n / ms / 1e6


def main() -> int:
    if not torch.cuda.is_available() or not octopt.cuda_available():
        print("gpu_step: no usable GPU", file=sys.stderr)
        return 1
    rows = []
    for label, sizes in CONFIGS:
        total = sum(sizes)
        copy_bw = copy_gbps(min(total, 1 << 28))
        params = [torch.randn(n, device="cuda") for n in sizes]
        grads = [torch.randn(n, device="cuda") * 1e-2 for n in sizes]
        opt = octopt.AdamW(params, bits=8)
        ms = timed(lambda o=opt, g=grads: o.step(g))
        # 8-bit Adam per element: read param, grad (4 + 4) and two codes; write param and two codes.
        octo_bw = 16 * total / ms / 1e6
        del opt
        tparams = [torch.nn.Parameter(p.clone()) for p in params]
        for p, g in zip(tparams, grads):
            p.grad = g
        topt = torch.optim.AdamW(tparams, fused=True)
        tms = timed(topt.step)
        torch_bw = 28 * total / tms / 1e6  # fp32 state: read p, g, m, v; write p, m, v
        rows.append((label, ms, octo_bw, 100 * octo_bw / copy_bw, tms, torch_bw, copy_bw, tms / ms))
        del topt, tparams, params, grads
        torch.cuda.empty_cache()
    head = ("tensors", "octopt ms", "octopt GB/s", "% of copy", "torch fused ms", "torch GB/s", "copy GB/s", "speedup")
    lines = [
        f"{torch.cuda.get_device_name()}  octopt 8-bit AdamW vs torch.optim.AdamW(fused=True), fp32 params",
        " | ".join(f"{h:>14}" for h in head),
    ]
    for r in rows:
        lines.append(" | ".join([f"{r[0]:>14}"] + [f"{v:>14.3f}" for v in r[1:]]))
    table = "\n".join(lines)
    print(table)
    out = os.environ.get("OUT")
    if out:
        with open(os.path.join(out, "gpu_step.txt"), "w") as f:
            f.write(table + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
