"""Block-wise quantize / dequantize throughput: octopt vs bitsandbytes' CPU path vs a NumPy copy.

    python bench/quantize.py [--size 2**24] [--block-size 256] [--threads 2] [--repeats 20] [--out DIR]

Everything is measured in one process and one run, the implementations interleaved round by round so
that background load hits them alike. quantize.json and quantize.png go to bench/results/<timestamp>/
(or --out). See bench/README.md for what each column means.
"""

from __future__ import annotations

import argparse
import logging
import os
import platform
import sys
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import octopt
from octopt._bench import bandwidth
from octopt._bench.results import pyplot, results_dir, save_json

GB = 1e9


def parse_size(text: str) -> int:
    """An element count written as an integer or as ``a**b`` / ``a<<b``."""
    for op, fn in (("**", pow), ("<<", lambda a, b: a << b)):
        if op in text:
            a, b = text.split(op, 1)
            return fn(int(a), int(b))
    return int(text)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", type=parse_size, default=2**24, help="float32 elements (default 2**24)")
    p.add_argument("--block-size", type=int, default=256)
    p.add_argument("--threads", type=int, default=2, help="threads for octopt and torch (same count)")
    p.add_argument("--repeats", type=int, default=20, help="timed calls per case after one warm-up call")
    p.add_argument(
        "--budget-s",
        type=float,
        default=8.0,
        help="cap on the timed seconds of one case: a slow case gets fewer repeats (at least 3)",
    )
    p.add_argument(
        "--pause-ms",
        type=float,
        default=20.0,
        help="untimed idle time before each call, so that one library's spinning worker threads "
        "do not steal a core from the next call",
    )
    p.add_argument("--sample", type=parse_size, default=2**18, help="elements checked for exactness")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--stream-size",
        type=parse_size,
        default=bandwidth.N,
        help="float32 elements per array of the STREAM copy/triad that sets the floor (default 2**26)",
    )
    p.add_argument("--out", metavar="DIR", help="results folder (default bench/results/<timestamp>/)")
    p.add_argument("--json", metavar="PATH", help="also write the JSON to this path")
    p.add_argument("--no-chart", action="store_true", help="no PNG (matplotlib not needed)")
    return p.parse_args(argv)


def import_bitsandbytes():
    """(torch, bitsandbytes.functional, version) or (None, None, reason)."""
    # Its CPU backend logs a warning about an optional 4-bit GEMM kernel that is unrelated to this benchmark.
    logging.getLogger("bitsandbytes.backends.cpu.ops").setLevel(logging.ERROR)
    try:
        import bitsandbytes
        import bitsandbytes.functional as bnbf
        import torch
    except Exception as e:  # noqa: BLE001 - any import failure means "skip this row"
        return None, None, f"{type(e).__name__}: {e}"
    return torch, bnbf, bitsandbytes.__version__


def make_data(n: int, block_size: int, seed: int) -> np.ndarray:
    """Standard normal float32 with exact zeros: the whole first block and ~1% of the other elements."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(n, dtype=np.float32)
    x[:block_size] = 0.0
    x[rng.random(n) < 0.01] = 0.0
    return x


@dataclass
class Case:
    op: str  # "quantize" or "dequantize"
    impl: str
    fn: Callable[[], object]
    bytes_moved: int  # bytes read plus bytes written by one call
    times: list[float] = field(default_factory=list)
    repeats: int = 0
    precall: bool = False  # an untimed call right before each timed one


def run_cases(cases: list[Case], repeats: int, budget_s: float, pause_s: float) -> None:
    """A warm-up call per case sizes its repeat count; then the cases take turns, one timed call a round each.

    Before each timed call the machine idles for pause_s: torch's OpenMP workers spin for milliseconds after
    a parallel region and would otherwise take a core from the next call. A case faster than 50 ms then
    makes one untimed call first, so that the timed one finds warm caches and awake worker threads (a cold
    call costs a fixed ~0.1-0.2 ms here, which matters only for the fast rows).
    """
    for c in cases:
        t0 = time.perf_counter()
        c.fn()
        warm = time.perf_counter() - t0
        c.repeats = max(3, min(repeats, int(budget_s / max(warm, 1e-9))))
        c.precall = warm < 0.05
    for r in range(max(c.repeats for c in cases)):
        for c in cases:
            if r < c.repeats:
                time.sleep(pause_s)
                if c.precall:
                    c.fn()
                t0 = time.perf_counter()
                c.fn()
                c.times.append(time.perf_counter() - t0)


def summary(c: Case) -> dict:
    t = np.array(c.times) * 1e3
    q1, med, q3 = np.percentile(t, [25, 50, 75])
    return {
        "op": c.op,
        "impl": c.impl,
        "repeats": len(t),
        "median_ms": float(med),
        "min_ms": float(t.min()),
        "max_ms": float(t.max()),
        "q1_ms": float(q1),
        "q3_ms": float(q3),
        "bytes_moved": c.bytes_moved,
        "gb_per_s": c.bytes_moved / (med * 1e-3) / GB,
        "times_ms": [float(v) for v in t],
    }


def add_ratios(rows: list[dict], floor_gbps: float) -> None:
    """vs_bnb: bitsandbytes' median time / this row's; of_copy: this row's GB/s / the same-size copy's, per
    op; of_floor: this row's GB/s / the best STREAM figure, i.e. the floor time (bytes moved / STREAM GB/s)
    over the median time, the same definition as bench/step.py's."""
    for op in ("quantize", "dequantize"):
        mine = [r for r in rows if r["op"] == op]
        bnb = next((r for r in mine if r["impl"].startswith("bitsandbytes")), None)
        copy = next((r for r in mine if r["impl"].startswith("numpy")), None)
        for r in mine:
            is_octopt = r["impl"].startswith("octopt")
            r["vs_bnb"] = bnb["median_ms"] / r["median_ms"] if bnb and is_octopt else None
            r["of_copy"] = r["gb_per_s"] / copy["gb_per_s"] if copy and r is not copy else None
            r["of_floor"] = r["gb_per_s"] / floor_gbps


def reference_codes(x: np.ndarray, qmap: np.ndarray, block_size: int) -> tuple[np.ndarray, np.ndarray]:
    """Exact nearest codes of whole blocks: r = float32(x / absmax), float64 argmin, ties to the lower one."""
    blocks = x.reshape(-1, block_size)
    absmax = np.abs(blocks).max(axis=1)
    scale = np.where(absmax == 0, np.float32(1), absmax)  # an all-zero block has r = 0 everywhere
    r = (blocks / scale[:, None]).astype(np.float32).reshape(-1).astype(np.float64)
    q = qmap.astype(np.float64)
    codes = np.empty(r.size, np.uint8)
    step = 8192
    for i in range(0, r.size, step):
        codes[i : i + step] = np.argmin(np.abs(r[i : i + step, None] - q[None, :]), axis=1)  # first minimum
    return codes, absmax


def exactness(
    name: str,
    x: np.ndarray,
    codes: np.ndarray,
    absmax: np.ndarray,
    y: np.ndarray,
    qmap: np.ndarray,
    block_size: int,
    sample_blocks: np.ndarray,
) -> dict:
    """Codes of the sampled blocks against the exact nearest codes; zero and dequantize round trips."""
    idx = (sample_blocks[:, None] * block_size + np.arange(block_size)).reshape(-1)
    xs, cs = x[idx], codes[idx]
    ref, ref_absmax = reference_codes(xs, qmap, block_size)
    wrong = cs != ref
    dist = np.abs(cs.astype(np.int16) - ref.astype(np.int16))
    nonzero = xs != 0
    zeros = x == 0  # all of them, not only the sample's
    expect_y = (qmap[cs] * absmax[sample_blocks].repeat(block_size)).astype(np.float32)
    return {
        "impl": name,
        "checked": int(idx.size),
        "code_mismatches": int(wrong.sum()),
        "mismatch_fraction": float(wrong.sum() / max(1, wrong.size)),
        "mismatches_nonzero_x": int((wrong & nonzero).sum()),
        "mismatch_fraction_nonzero_x": float((wrong & nonzero).sum() / max(1, nonzero.sum())),
        "max_code_distance_nonzero_x": int(dist[nonzero].max(initial=0)),
        "max_code_distance": int(dist.max(initial=0)),
        "absmax_mismatches": int((absmax[sample_blocks] != ref_absmax).sum()),
        "zero_inputs": int(zeros.sum()),
        "zeros_not_exact": int(np.count_nonzero(y[zeros] != 0)),
        "zeros_negative": int(np.count_nonzero(np.signbit(y[zeros]) & (y[zeros] == 0))),
        "dequantize_mismatches": int(np.count_nonzero(y[idx] != expect_y)),
    }


def fmt(v: float | None, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def print_table(rows: list[dict]) -> None:
    head = (
        f"{'op':<11}{'implementation':<27}{'n':>4}{'median ms':>11}{'min-max ms':>16}{'IQR ms':>8}"
        f"{'GB/s':>7}{'vs bnb':>8}{'of copy':>9}{'of floor':>10}"
    )
    print(head)
    print("-" * len(head))
    for r in rows:
        spread = f"{r['min_ms']:.2f}-{r['max_ms']:.2f}"
        speedup = "-" if r["vs_bnb"] is None else f"{r['vs_bnb']:.2f}x"
        iqr = r["q3_ms"] - r["q1_ms"]
        print(
            f"{r['op']:<11}{r['impl']:<27}{r['repeats']:>4}{r['median_ms']:>11.2f}{spread:>16}{iqr:>8.2f}"
            f"{r['gb_per_s']:>7.1f}{speedup:>8}{fmt(r['of_copy'], '.0%'):>9}{r['of_floor']:>10.0%}"
        )


def print_exactness(checks: list[dict]) -> None:
    cols = (
        ("exactness", 13, "<"),
        ("checked", 8, ">"),
        ("codes not nearest", 20, ">"),
        ("of which x!=0", 18, ">"),
        ("max|dcode|", 11, ">"),
        ("absmax!=", 9, ">"),
        ("zeros->0.0", 18, ">"),
        ("deq!=q[c]*a", 12, ">"),
    )
    line = "".join(f"{name:{align}{width}}" for name, width, align in cols)
    print("\n" + line)
    print("-" * len(line))
    for e in checks:
        values = (
            e["impl"],
            e["checked"],
            f"{e['code_mismatches']} ({e['mismatch_fraction']:.3%})",
            f"{e['mismatches_nonzero_x']} ({e['mismatch_fraction_nonzero_x']:.3%})",
            f"{e['max_code_distance']}/{e['max_code_distance_nonzero_x']}",
            e["absmax_mismatches"],
            "yes" if not e["zeros_not_exact"] else f"no {e['zeros_not_exact']}/{e['zero_inputs']}",
            e["dequantize_mismatches"],
        )
        print("".join(f"{v:{align}{width}}" for v, (_, width, align) in zip(values, cols)))
    negative = ", ".join(f"{e['impl']} {e['zeros_negative']}" for e in checks)
    print(
        "max|dcode|: all inputs / x != 0 only. zeros->0.0: dequantize(quantize(x)) == 0 at each exact zero "
        f"of x (whole array); -0.0 counts as 0 (results that are -0.0: {negative})"
    )


def sample_blocks_of(n: int, block_size: int, sample: int, seed: int) -> np.ndarray:
    """Whole blocks drawn at random for the exactness check, always including the all-zero block 0."""
    full = n // block_size
    if full == 0:
        return np.zeros(0, np.int64)
    k = min(full, max(1, sample // block_size))
    return np.union1d([0], np.random.default_rng(seed + 1).choice(full, size=k, replace=False))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    n, bs = args.size, args.block_size
    nb = -(-n // bs)
    octopt.set_num_threads(args.threads)
    torch, bnbf, bnb_version = import_bitsandbytes()
    if torch is not None:
        torch.set_num_threads(args.threads)

    info = octopt.info()
    # An editable install's import hook outranks PYTHONPATH, so say which build is being measured.
    print(
        f"octopt {octopt.__version__} from {os.path.dirname(octopt.__file__)} ({info['compiler']}, "
        f"simd: {info['simd']}), NumPy {np.__version__}, Python {platform.python_version()}"
    )
    threads = f"octopt {octopt.get_num_threads()}" + (f", torch {torch.get_num_threads()}" if torch else "")
    print(f"{n} float32 elements, block size {bs}, threads: {threads}, numpy copy 1")
    if torch is None:
        print(f"bitsandbytes: skipped ({bnb_version})")
    else:
        print(f"bitsandbytes {bnb_version}, torch {torch.__version__}")

    x = make_data(n, bs, args.seed)
    codes, absmax, y = np.empty(n, np.uint8), np.empty(nb, np.float32), np.empty(n, np.float32)
    q_bytes = 4 * n + n + 4 * nb  # read x; write codes and absmax
    dq_bytes = n + 4 * nb + 4 * n  # read codes and absmax; write the floats
    copy_src, copy_dst = np.ones(q_bytes, np.uint8), np.zeros(q_bytes, np.uint8)  # q_bytes == dq_bytes

    def copy():
        np.copyto(copy_dst, copy_src)

    cases = [
        Case(
            "quantize",
            "octopt (out=)",
            lambda: octopt.quantize_blockwise(x, block_size=bs, out=(codes, absmax)),
            q_bytes,
        ),
        Case("quantize", "octopt (allocating)", lambda: octopt.quantize_blockwise(x, block_size=bs), q_bytes),
        Case("quantize", "numpy copyto 5 B/elem", copy, 2 * copy_src.nbytes),
        Case(
            "dequantize",
            "octopt (out=)",
            lambda: octopt.dequantize_blockwise(codes, absmax, block_size=bs, out=y),
            dq_bytes,
        ),
        Case(
            "dequantize",
            "octopt (allocating)",
            lambda: octopt.dequantize_blockwise(codes, absmax, block_size=bs),
            dq_bytes,
        ),
        Case("dequantize", "numpy copyto 5 B/elem", copy, 2 * copy_src.nbytes),
    ]
    cases[0].fn()  # dequantize's input
    if torch is not None:
        xt = torch.from_numpy(x)  # the same memory
        bnb_codes, bnb_state = bnbf.quantize_blockwise(xt, blocksize=bs)
        # bitsandbytes 0.50 has no CPU kernel for its out= variants, so both of its calls allocate.
        cases.insert(
            2, Case("quantize", "bitsandbytes (allocating)", lambda: bnbf.quantize_blockwise(xt, blocksize=bs), q_bytes)
        )
        cases.insert(
            6,
            Case(
                "dequantize",
                "bitsandbytes (allocating)",
                lambda: bnbf.dequantize_blockwise(bnb_codes, bnb_state),
                dq_bytes,
            ),
        )

    streams = [
        bandwidth.measure(k, t, 5, args.stream_size) for k in ("copy", "triad") for t in sorted({1, args.threads})
    ]
    floor_gbps = max(r.gbps for r in streams)
    for r in streams:
        print(f"STREAM {r.kernel:<5} {r.n:,} float32 on {r.threads} thread(s): {r.gbps:.1f} GB/s")
    print(
        f"bandwidth floor: 5 bytes/element (+ 4 per block of absmax) / {floor_gbps:.1f} GB/s, the best "
        "STREAM figure; 'of floor' = floor time / median time"
    )
    t0 = time.perf_counter()
    run_cases(cases, args.repeats, args.budget_s, args.pause_ms * 1e-3)
    rows = [summary(c) for c in cases]
    add_ratios(rows, floor_gbps)
    print(f"(timed in {time.perf_counter() - t0:.1f} s; GB = 1e9 bytes; spread: min-max and interquartile range)\n")
    print_table(rows)

    blocks = sample_blocks_of(n, bs, args.sample, args.seed)
    qmap = octopt.dynamic_map()
    octopt.quantize_blockwise(x, block_size=bs, out=(codes, absmax))
    octopt.dequantize_blockwise(codes, absmax, block_size=bs, out=y)
    checks = [exactness("octopt", x, codes, absmax, y, qmap, bs, blocks)]
    same_map = None
    if torch is not None:
        bnb_map = bnb_state.code.numpy()
        same_map = bool(np.array_equal(bnb_map.view(np.uint32), qmap.view(np.uint32)))
        bnb_y = bnbf.dequantize_blockwise(bnb_codes, bnb_state).numpy()
        bnb_absmax = bnb_state.absmax.numpy()
        checks.append(exactness("bitsandbytes", x, bnb_codes.numpy(), bnb_absmax, bnb_y, bnb_map, bs, blocks))
    print_exactness(checks)
    if same_map is not None:
        print(f"octopt.dynamic_map() is bit-identical to bitsandbytes' default map: {same_map}")

    result = {
        "config": {
            "size": n,
            "block_size": bs,
            "threads": args.threads,
            "repeats": args.repeats,
            "budget_s": args.budget_s,
            "pause_ms": args.pause_ms,
            "seed": args.seed,
        },
        "versions": {
            "octopt": octopt.__version__,
            "numpy": np.__version__,
            "python": sys.version,
            "bitsandbytes": bnb_version if torch else None,
            "torch": torch.__version__ if torch else None,
        },
        "octopt_path": os.path.dirname(octopt.__file__),
        "octopt_info": info,
        "load_avg": os.getloadavg(),
        "stream": [
            {"kernel": r.kernel, "threads": r.threads, "n": r.n, "times_s": r.times_s, "gbps": r.gbps} for r in streams
        ],
        "floor_gbps": floor_gbps,
        "rows": rows,
        "exactness": checks,
        "same_dynamic_map": same_map,
    }
    out = results_dir(args.out, os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    for path in filter(None, (os.path.join(out, "quantize.json"), args.json)):
        print(f"wrote {save_json(path, result)}")
    if not args.no_chart:
        png = plot(
            rows,
            floor_gbps,
            os.path.join(out, "quantize.png"),
            f"{n:,} float32, block size {bs}, {args.threads} thread(s), load avg {os.getloadavg()[0]:.1f}",
        )
        if png:
            print(f"wrote {png}")
    return 0


def plot(rows: list[dict], floor_gbps: float, path: str, title: str) -> str | None:
    """GB/s of every row (median, with its min-max time as error bar), quantize and dequantize side by side,
    the bandwidth floor as a horizontal line."""
    plt = pyplot()
    if plt is None:
        return None
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5), dpi=110, sharey=True)
    for ax, op in zip(axes, ("quantize", "dequantize")):
        mine = [r for r in rows if r["op"] == op]
        gbps = [r["gb_per_s"] for r in mine]
        lo = [g - r["bytes_moved"] / (r["max_ms"] * 1e6) for g, r in zip(gbps, mine)]
        hi = [r["bytes_moved"] / (r["min_ms"] * 1e6) - g for g, r in zip(gbps, mine)]
        ax.bar(range(len(mine)), gbps, yerr=[lo, hi], capsize=3, color="tab:blue")
        ax.axhline(floor_gbps, color="black", linewidth=1.5, label=f"bandwidth floor ({floor_gbps:.1f} GB/s)")
        ax.set_xticks(range(len(mine)), [r["impl"] for r in mine], rotation=20, ha="right", fontsize=8)
        ax.set_title(op)
        ax.grid(True, axis="y", alpha=0.3)
    axes[0].set_ylabel("GB/s (bytes moved / median time; higher is better)")
    axes[0].legend(fontsize=8)
    fig.suptitle(f"octopt block-wise {title}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


if __name__ == "__main__":
    sys.exit(main())
