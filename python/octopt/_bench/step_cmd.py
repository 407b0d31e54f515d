"""``octopt bench`` and ``python bench/step.py``: one CPU optimizer step of octopt Adam/AdamW (32/8/4-bit
state) against torch.optim.Adam (fused, foreach), bitsandbytes' Adam8bit, torchao's AdamW8bit and optax's
adam under jax.jit with donation, in one process, one run and one thread count; a STREAM-style copy/triad
bandwidth figure; the peak resident memory of a step (one subprocess per implementation); and the
per-tensor overhead of a step of many small tensors (octopt.Adam on NumPy, octopt.torch.AdamW, against one
tensor of the same total size; torch.optim.Adam as reference).

Prints the tables and writes step.json, step.png and overhead.png into the results folder. bench/README.md
explains every column.
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import statistics
import sys

import numpy as np

import octopt

from . import bandwidth, memory, overhead
from .cases import BYTES_PER_PARAM, DEFAULT_SIZES, QUICK_SIZES, parse_case, parse_size
from .chart import plot_overhead, plot_step
from .peers import FAMILIES, implementations
from .results import results_dir, save_json
from .rows import Row, fused_of, step_table, targets
from .runner import run_case
from .table import ms
from .timing import Progress

DEFAULT_ROOT = "octopt-bench-results"  # under the current directory; bench/step.py uses bench/results


def add_arguments(p: argparse.ArgumentParser, default_root: str = DEFAULT_ROOT) -> None:
    p.add_argument(
        "--threads", type=int, default=2, help="threads of octopt, torch, XLA and the STREAM kernels (default 2)"
    )
    p.add_argument("--repeats", type=int, default=20, help="timed steps per implementation (default 20)")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps first, state allocation included")
    p.add_argument(
        "--pause-ms",
        type=float,
        default=20.0,
        help="idle time before each timed step of the implementations that take turns (default 20)",
    )
    p.add_argument(
        "--sizes",
        nargs="+",
        metavar="N[xK]",
        help=f"cases: 2^E or an integer, xK = split into K tensors (default {' '.join(DEFAULT_SIZES)})",
    )
    p.add_argument(
        "--skip",
        nargs="+",
        default=[],
        choices=FAMILIES,
        metavar="FAMILY",
        help=f"leave these out: {', '.join(FAMILIES)}",
    )
    p.add_argument(
        "--slow-repeats",
        "--bnb-repeats",
        type=int,
        default=2,
        help="timed steps of the slow peers, bitsandbytes and torchao (default 2, after 1 warm-up)",
    )
    p.add_argument(
        "--slow-budget",
        "--bnb-budget",
        type=float,
        default=8.0,
        help="skip a slow peer where its estimated cost exceeds this many seconds (default 8)",
    )
    p.add_argument(
        "--stream-size",
        type=parse_size,
        default=bandwidth.N,
        help="float32 elements per array of the STREAM copy/triad (default 2^26)",
    )
    p.add_argument(
        "--memory-size", type=parse_size, default=1 << 26, help="parameters of the memory row (default 2^26)"
    )
    p.add_argument("--memory-steps", type=int, default=5, help="steps watched for the memory peak (default 5)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--memory-only", action="store_true", help="only the memory table")
    mode.add_argument("--no-memory", action="store_true", help="skip the memory table")
    mode.add_argument("--overhead-only", action="store_true", help="only the per-tensor overhead table")
    p.add_argument("--no-overhead", action="store_true", help="skip the per-tensor overhead table")
    overhead.add_options(p, prefix="overhead-")
    p.add_argument(
        "--quick",
        action="store_true",
        help=f"fast check: {' '.join(QUICK_SIZES)}, 3 steps, STREAM and memory rows at 2^22, "
        "overhead in 3 rounds of 10 steps",
    )
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
        args.overhead_rounds, args.overhead_steps = min(args.overhead_rounds, 3), min(args.overhead_steps, 10)
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
    if args.overhead_only and args.no_overhead:
        print("octopt bench: --overhead-only and --no-overhead exclude each other", file=sys.stderr)
        return 2
    over_opts = overhead.options(args, "overhead-")
    bad = overhead.check_options(over_opts)
    if bad:
        print(f"octopt bench: --overhead-*: {bad}", file=sys.stderr)
        return 2
    do_steps = not (args.memory_only or args.overhead_only)
    do_memory = not (args.no_memory or args.overhead_only)
    do_overhead = not (args.no_overhead or args.memory_only)
    out = results_dir(args.out, args.default_root)
    load_start = os.getloadavg()
    if args.overhead_only:  # no peer is imported: torch only by the overhead rows that need it
        impls, left_out = [], []
        versions = {"numpy": np.__version__, "octopt": octopt.__version__, "octopt_simd": octopt.info().get("simd")}
    else:
        impls, left_out, versions = implementations(args.threads, tuple(args.skip))
    versions["python"] = platform.python_version()
    print(
        f"octopt step benchmark: {args.threads} thread(s), {args.repeats} timed steps after {args.warmup} "
        f"warm-up; {platform.machine()} x{os.cpu_count()}; load avg {load_start}"
    )
    print(f"octopt from {os.path.dirname(os.path.dirname(os.path.abspath(__file__)))}")
    print("versions: " + ", ".join(f"{k} {v}" for k, v in versions.items() if v))
    for s in left_out:
        print(f"skipped {s}")

    stream_rounds = 2 * 2 * len({1, args.threads}) if do_steps else 0
    mem_impls = memory.IMPLS if "torch" not in args.skip else [i for i in memory.IMPLS if "torch" not in i]
    n_mem = len(mem_impls) if do_memory else 0
    over_rows = (
        overhead.plan_rows(
            tuple(over_opts["paths"]), over_opts["tensors"], tuple(over_opts["sizes"]), tuple(over_opts["bits"])
        )
        if do_overhead
        else []
    )
    # per case: one line for the implementations that take turns, one per slow peer
    per_case = int(any(not i.slow for i in impls)) + sum(i.slow for i in impls)
    progress = Progress(stream_rounds + (len(cases) * per_case if do_steps else 0) + n_mem + len(over_rows))
    streams: dict = {}
    rows: list[Row] = []
    if do_steps:
        _stream_round(streams, args, progress, "start")
        per_param: dict = {}
        for case in cases:
            run_case(case, impls, args, progress, per_param, rows)
            gc.collect()
        _stream_round(streams, args, progress, "end")  # the load on a shared machine drifts
    over_data = None
    if over_rows:
        overhead.run_rows(
            over_rows, over_opts["threads"], over_opts["rounds"], over_opts["steps"], over_opts["warmup"], progress
        )
        over_data = {
            "options": over_opts,
            "targets_us": overhead.TARGETS_US,
            "method": overhead.EXPLAIN,
            "rows": [r.to_json() for r in over_rows],
        }
        gc.collect()
    mem, mem_failed = (
        memory.run_all(args.memory_size, args.threads, args.memory_steps, mem_impls, progress)
        if do_memory
        else ([], [])
    )
    progress.close()
    load_end = os.getloadavg()

    floor_gbps = max((r.gbps for r in streams.values()), default=None)
    data = {
        "args": {k: v for k, v in vars(args).items() if k != "func"},
        "versions": versions,
        "left_out": left_out,
        "load_avg": [load_start, load_end],
        "bytes_per_param": {str(k): v for k, v in BYTES_PER_PARAM.items()},
        "stream": [
            {"kernel": r.kernel, "threads": r.threads, "n": r.n, "times_s": r.times_s, "gbps": r.gbps}
            for r in streams.values()
        ],
        "floor_gbps": floor_gbps,
        "rows": [r.to_json(floor_gbps, fused_of(rows, r.case)) for r in rows] if rows else [],
        "targets": targets(rows, versions.get("octopt_simd", "")),
        "memory": mem,
        "memory_failed": mem_failed,
        "overhead": over_data,
    }
    print()
    if rows:
        _print_step(rows, streams, floor_gbps, data["targets"])
    if over_rows:
        overhead.print_section(over_rows, over_opts["threads"], over_opts["rounds"], over_opts["steps"])
        print()
    if do_memory:
        _print_memory(mem, mem_failed, args.memory_size, args.memory_steps)
    print(f"load average: start {load_start}, end {load_end}")
    print(f"saved {save_json(os.path.join(out, 'step.json'), data)}")
    if not args.no_chart and rows:
        title = (
            f"octopt bench: one optimizer step, {args.threads} thread(s), median of {args.repeats}; "
            f"load avg {load_start[0]:.1f}-{load_end[0]:.1f}"
        )
        png = plot_step(rows, floor_gbps, mem, os.path.join(out, "step.png"), title)
        if png:
            print(f"saved {png}")
    if not args.no_chart and any(r.step_rounds_s for r in over_rows):
        title = f"octopt bench: per-tensor overhead of a CPU step, {over_opts['threads']} thread(s)"
        png = plot_overhead(over_rows, os.path.join(out, "overhead.png"), title)
        if png:
            print(f"saved {png}")
    return 0


def _print_step(rows: list[Row], streams: dict, floor_gbps: float, results: list[dict]) -> None:
    for r in streams.values():
        ts = r.times_s
        print(
            f"STREAM {r.kernel:<5} {r.n:,} float32 on {r.threads} thread(s): "
            f"{ms(statistics.median(ts))} ms ({ms(min(ts))}-{ms(max(ts))}), {r.gbps:.1f} GB/s"
        )
    print(
        f"bandwidth floor: a row's bytes (fp32 28, 8-bit {BYTES_PER_PARAM[8]:.2f}, 4-bit "
        f"{BYTES_PER_PARAM[4]:.2f} B/param) / {floor_gbps:.1f} GB/s, the best STREAM figure above;\n"
        "'of floor' = floor time / median time (= GB/s / floor GB/s); 'x fused': time / torch fused Adam's "
        "in the same case (lower is better);\n'cpu ms': the process's CPU time per step (all threads, "
        "median); 'cores' = cpu ms / ms (below --threads: other processes held the cores)."
    )
    print()
    print(step_table(rows, floor_gbps))
    print()
    for t in results:
        print(f"{'PASS' if t['ok'] else 'FAIL'}  {t['case']:>10}  {t['target']}: {t['text']}")
    print()


def _print_memory(mem: list[dict], failed: list[str], n: int, steps: int) -> None:
    print(
        f"memory: one fresh process per implementation, {n:,} fp32 params in one tensor, peak resident "
        f"memory over {steps} steps after 2 warm-up steps\n'temporaries' = peak during the steps - RSS "
        "before them (what a step allocates and touches); 'other' = RSS before - baseline after imports - "
        "params+grads - state"
    )
    if mem:
        print(memory.memory_table(mem))
    for f in failed:
        print(f"memory row failed: {f}")
    print()


def main(argv: list[str] | None = None, default_root: str = DEFAULT_ROOT) -> int:
    p = argparse.ArgumentParser(
        prog="bench/step.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_arguments(p, default_root)
    return run(p.parse_args(argv))
