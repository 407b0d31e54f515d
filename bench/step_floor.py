"""How much of an exact 8-bit Adam step is the re-encoding of its state, against torch's fused fp32 step.

    PYTHONPATH=/tmp/site-x python bench/step_floor.py [--size 2^24] [--threads 2] [--repeats 15]

An 8-bit Adam step must at least re-encode m and v (one exact block-wise quantize each) and decode them
(one dequantize each). This script times, in one process and with one thread count, octopt's
``quantize_blockwise`` and ``dequantize_blockwise`` (``out=``, the step's own kernels), octopt's fused 8-bit
Adam step and ``torch.optim.Adam(fused=True)`` on the same number of parameters, and prints each as a
multiple of torch's step: the re-encoding's share of the step, the part the closed-form encoder and the
one-pass block loop of issue 12 cut (bench/README.md, "Where an exact 8-bit step spends its time now", has
the current decomposition, by ablation at 1.51 ns/param on one thread: encode 48%, update 30% (its square
root and two divisions alone 25%), decode 17%, gradient check and loop 6%).
``2 x quantize`` is a floor only for a step that re-encodes through separate quantize calls; the fused step
shares the division and the absmax pass with its update loop.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np

import octopt


def parse_size(text: str) -> int:
    if "^" in text:
        base, exp = text.split("^")
        return int(base) ** int(exp)
    return int(text)


def median_ms(fn, repeats: int, pause_s: float = 0.02) -> tuple[float, float]:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        time.sleep(pause_s)  # let other runtimes' spinning workers go idle (see README, Method)
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3, min(times) * 1e3


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", default="2^24", help="parameters (2^E or an integer; default 2^24)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=15)
    args = ap.parse_args()
    n = parse_size(args.size)
    octopt.set_num_threads(args.threads)
    import torch

    torch.set_num_threads(args.threads)
    print(
        f"octopt {octopt.__version__} from {os.path.dirname(octopt.__file__)}, simd {octopt.info()['simd']}; "
        f"torch {torch.__version__}; n = {n:,}; threads {args.threads}; load average {os.getloadavg()[0]:.2f}"
    )

    rng = np.random.default_rng(0)
    x = rng.standard_normal(n, dtype=np.float32)
    codes = np.empty(n, np.uint8)
    absmax = np.empty(-(-n // 256), np.float32)
    y = np.empty(n, np.float32)
    rows = {}
    rows["octopt quantize_blockwise"] = median_ms(
        lambda: octopt.quantize_blockwise(x, block_size=256, out=(codes, absmax)), args.repeats
    )
    rows["octopt dequantize_blockwise"] = median_ms(
        lambda y=y: octopt.dequantize_blockwise(codes, absmax, block_size=256, out=y), args.repeats
    )
    del y

    p = torch.from_numpy(rng.standard_normal(n, dtype=np.float32)).requires_grad_()
    p.grad = torch.from_numpy(rng.standard_normal(n, dtype=np.float32))
    fused = torch.optim.Adam([p], lr=1e-3, fused=True)
    rows["torch Adam fused (fp32 state)"] = median_ms(fused.step, args.repeats)
    del fused, p

    q = rng.standard_normal(n, dtype=np.float32)
    g = rng.standard_normal(n, dtype=np.float32)
    opt = octopt.Adam([q], lr=1e-3, bits=8)
    rows["octopt Adam 8-bit step"] = median_ms(lambda: opt.step([g]), args.repeats)

    base = rows["torch Adam fused (fp32 state)"][0]
    quant, dequant = rows["octopt quantize_blockwise"][0], rows["octopt dequantize_blockwise"][0]
    rows["2 x quantize (m and v)"] = (2 * quant, float("nan"))
    rows["2 x (quantize + dequantize)"] = (2 * (quant + dequant), float("nan"))
    print(f"\n{'':36} {'median ms':>10} {'min ms':>8} {'ns/param':>9} {'x torch fused':>14}")
    for name, (med, low) in rows.items():
        print(f"{name:36} {med:10.2f} {low:8.2f} {med * 1e6 / n:9.3f} {med / base:14.2f}")
    print(f"\nload average at the end {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
