"""``octopt bench`` and ``python bench/step.py``: one CPU optimizer step of octopt Adam/AdamW (32/8/4-bit
state) against torch.optim.Adam (fused, foreach), bitsandbytes' Adam8bit, torchao's AdamW8bit and optax's
adam under jax.jit with donation, in one process, one run and one thread count; a STREAM-style copy/triad
bandwidth figure; and the peak resident memory of a step (one subprocess per implementation).

Prints the tables and writes step.json and step.png into the results folder. bench/README.md explains
every column.
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import statistics
import sys

from . import bandwidth, memory
from .cases import BYTES_PER_PARAM, DEFAULT_SIZES, QUICK_SIZES, parse_case, parse_size
from .chart import plot_step
from .peers import FAMILIES, implementations
from .results import results_dir, save_json
from .rows import Row, fused_of, step_table, targets
from .runner import run_case
from .table import ms
from .timing import Progress

DEFAULT_ROOT = "octopt-bench-results"  # under the current directory; bench/step.py uses bench/results


def add_arguments(p: argparse.ArgumentParser, default_root: str = DEFAULT_ROOT) -> None:
    p.add_argument("--threads", type=int, default=2,
                   help="threads of octopt, torch, XLA and the STREAM kernels (default 2)")
    p.add_argument("--repeats", type=int, default=10, help="timed steps per implementation (default 10)")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps first, state allocation included")
    p.add_argument("--sizes", nargs="+", metavar="N[xK]",
                   help="cases: 2^E or an integer, xK = split into K tensors "
                        f"(default {' '.join(DEFAULT_SIZES)})")
    p.add_argument("--skip", nargs="+", default=[], choices=FAMILIES, metavar="FAMILY",
                   help=f"leave these out: {', '.join(FAMILIES)}")
    p.add_argument("--slow-repeats", "--bnb-repeats", type=int, default=2,
                   help="timed steps of the slow peers, bitsandbytes and torchao (default 2, after "
                        "1 warm-up)")
    p.add_argument("--slow-budget", "--bnb-budget", type=float, default=8.0,
                   help="skip a slow peer where its estimated cost exceeds this many seconds (default 8)")
    p.add_argument("--stream-size", type=parse_size, default=bandwidth.N,
                   help="float32 elements per array of the STREAM copy/triad (default 2^26)")
    p.add_argument("--memory-size", type=parse_size, default=1 << 26,
                   help="parameters of the memory row (default 2^26)")
    p.add_argument("--memory-steps", type=int, default=5,
                   help="steps watched for the memory peak (default 5)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--memory-only", action="store_true", help="only the memory table")
    mode.add_argument("--no-memory", action="store_true", help="skip the memory table")
    p.add_argument("--quick", action="store_true",
                   help=f"fast check: {' '.join(QUICK_SIZES)}, 3 steps, STREAM and memory rows at 2^22")
    p.add_argument("--out", metavar="DIR", help=f"results folder (default {default_root}/<timestamp>/)")
    p.add_argument("--no-chart", action="store_true", help="no PNG (matplotlib not needed)")
    p.set_defaults(func=run, default_root=default_root)


def _apply_quick(args: argparse.Namespace) -> None:
    if args.quick:
        args.sizes = args.sizes or list(QUICK_SIZES)
        args.repeats, args.warmup = min(args.repeats, 3), min(args.warmup, 1)
        args.stream_size = min(args.stream_size, 1 << 22)
        args.memory_size = min(args.memory_size, 1 << 22)
        args.memory_steps = min(args.memory_steps, 3)
    args.sizes = args.sizes or list(DEFAULT_SIZES)


def _stream_round(streams: dict, args, progress: Progress, when: str) -> None:
    for kernel in ("copy", "triad"):
        for t in sorted({1, args.threads}):  # on one thread, and split over --threads
            progress.start(f"STREAM {kernel}, {t} thread(s), {when}")
            r = streams.setdefault((kernel, t), bandwidth.StreamResult(kernel, t, args.stream_size))
            r.times_s += bandwidth.measure(kernel, t, max(args.repeats, 5), args.stream_size).times_s
            progress.finish(f"{'STREAM':>10}  {f'{kernel} x{t} ({when})':<22} {r.gbps:9.1f} GB/s")


def run(args: argparse.Namespace) -> int:
    _apply_quick(args)
    try:
        cases = [parse_case(s) for s in args.sizes]
    except ValueError as e:
        print(f"octopt bench: {e}", file=sys.stderr)
        return 2
    out = results_dir(args.out, args.default_root)
    load_start = os.getloadavg()
    impls, left_out, versions = implementations(args.threads, tuple(args.skip))
    versions["python"] = platform.python_version()
    print(f"octopt step benchmark: {args.threads} thread(s), {args.repeats} timed steps after {args.warmup} "
          f"warm-up; {platform.machine()} x{os.cpu_count()}; load avg {load_start}")
    print(f"octopt from {os.path.dirname(os.path.dirname(os.path.abspath(__file__)))}")
    print("versions: " + ", ".join(f"{k} {v}" for k, v in versions.items() if v))
    for s in left_out:
        print(f"skipped {s}")

    stream_rounds = 0 if args.memory_only else 2 * 2 * len({1, args.threads})
    mem_impls = memory.IMPLS if "torch" not in args.skip else [i for i in memory.IMPLS if "torch" not in i]
    n_mem = 0 if args.no_memory else len(mem_impls)
    progress = Progress(stream_rounds + (0 if args.memory_only else len(cases) * len(impls)) + n_mem)
    streams: dict = {}
    rows: list[Row] = []
    if not args.memory_only:
        _stream_round(streams, args, progress, "start")
        per_param: dict = {}
        for case in cases:
            run_case(case, impls, args, progress, per_param, rows)
            gc.collect()
        _stream_round(streams, args, progress, "end")  # the load on a shared machine drifts
    mem, mem_failed = ([], []) if args.no_memory else memory.run_all(
        args.memory_size, args.threads, args.memory_steps, mem_impls, progress)
    progress.close()
    load_end = os.getloadavg()

    floor_gbps = max((r.gbps for r in streams.values()), default=None)
    data = {"args": {k: v for k, v in vars(args).items() if k != "func"}, "versions": versions,
            "left_out": left_out, "load_avg": [load_start, load_end],
            "bytes_per_param": {str(k): v for k, v in BYTES_PER_PARAM.items()},
            "stream": [{"kernel": r.kernel, "threads": r.threads, "n": r.n, "times_s": r.times_s,
                        "gbps": r.gbps} for r in streams.values()],
            "floor_gbps": floor_gbps,
            "rows": [r.to_json(floor_gbps, fused_of(rows, r.case)) for r in rows] if rows else [],
            "targets": targets(rows), "memory": mem, "memory_failed": mem_failed}
    print()
    if rows:
        _print_step(rows, streams, floor_gbps, data["targets"])
    if not args.no_memory:
        _print_memory(mem, mem_failed, args.memory_size, args.memory_steps)
    print(f"load average: start {load_start}, end {load_end}")
    print(f"saved {save_json(os.path.join(out, 'step.json'), data)}")
    if not args.no_chart and rows:
        title = (f"octopt bench: one optimizer step, {args.threads} thread(s), median of {args.repeats}; "
                 f"load avg {load_start[0]:.1f}-{load_end[0]:.1f}")
        png = plot_step(rows, floor_gbps, mem, os.path.join(out, "step.png"), title)
        if png:
            print(f"saved {png}")
    return 0


def _print_step(rows: list[Row], streams: dict, floor_gbps: float, results: list[dict]) -> None:
    for r in streams.values():
        ts = r.times_s
        print(f"STREAM {r.kernel:<5} {r.n:,} float32 on {r.threads} thread(s): "
              f"{ms(statistics.median(ts))} ms ({ms(min(ts))}-{ms(max(ts))}), {r.gbps:.1f} GB/s")
    print(f"bandwidth floor: a row's bytes (fp32 28, 8-bit {BYTES_PER_PARAM[8]:.2f}, 4-bit "
          f"{BYTES_PER_PARAM[4]:.2f} B/param) / {floor_gbps:.1f} GB/s, the best STREAM figure above;\n"
          "'of floor' = floor time / median time (= GB/s / floor GB/s); 'x fused': time / torch fused Adam's "
          "in the same case (lower is better);\n'cpu ms': the process's CPU time per step (all threads, "
          "median); 'cores' = cpu ms / ms (below --threads: other processes held the cores).")
    print()
    print(step_table(rows, floor_gbps))
    print()
    for t in results:
        print(f"{'PASS' if t['ok'] else 'FAIL'}  {t['case']:>10}  {t['target']}: {t['text']}")
    print()


def _print_memory(mem: list[dict], failed: list[str], n: int, steps: int) -> None:
    print(f"memory: one fresh process per implementation, {n:,} fp32 params in one tensor, peak resident "
          f"memory over {steps} steps after 2 warm-up steps\n'temporaries' = peak during the steps - RSS "
          "before them (what a step allocates and touches); 'other' = RSS before - baseline after imports - "
          "params+grads - state")
    if mem:
        print(memory.memory_table(mem))
    for f in failed:
        print(f"memory row failed: {f}")
    print()


def main(argv: list[str] | None = None, default_root: str = DEFAULT_ROOT) -> int:
    p = argparse.ArgumentParser(prog="bench/step.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(p, default_root)
    return run(p.parse_args(argv))
