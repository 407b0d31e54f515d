"""Optimizer-step benchmark: octopt Adam (8/4/32-bit state) against torch.optim.Adam (fused and foreach,
fp32 state) and bitsandbytes' Adam8bit, all on the CPU, in one process and with one thread count.

    PYTHONPATH=/tmp/site-x python bench/step.py [--threads 2] [--repeats 10] [--sizes 2^24 2^26 2^24x256]
                                               [--json PATH] [--quick]

A case is ``N`` fp32 parameters (``2^E`` or an integer), optionally split into ``xK`` equal tensors.
Every implementation gets its own copy of the parameters, warm-up steps (state allocation happens there
and is not timed) and then timed steps; the gradients are fixed random arrays set once. Its arrays are
freed before the next implementation starts. A STREAM-like copy gives the machine's bandwidth reference.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Callable

import numpy as np
import octopt

try:
    import torch
except ImportError:  # pragma: no cover - the torch rows are then skipped with a reason
    torch = None

try:
    from tqdm import tqdm
except ImportError:
    tqdm = None

# Bytes one step must move per parameter (reads + writes), the minimum for the algorithm:
# fp32 Adam reads p, g, m, v and writes p, m, v (7 x 4 B). 8-bit: p, g (4 + 4) + m, v codes (1 + 1) read,
# p, m, v (4 + 1 + 1) written, plus the absmax of m and v (2 x 4 B per 256-element block). 4-bit: codes
# are half a byte and blocks hold 128 elements.
BYTES_PER_PARAM = {32: 28.0, 8: 16.0 + 8 / 256, 4: 14.0 + 8 / 128}
COPY_N = 1 << 26
DEFAULT_SIZES = ["2^24", "2^26", "2^24x256"]
QUICK_SIZES = ["2^20", "2^22", "2^20x256"]


@dataclass
class Case:
    label: str
    n: int  # total fp32 parameters
    tensors: int  # equal-sized tensors the parameters are split into


@dataclass
class Row:
    case: str
    n: int
    tensors: int
    impl: str
    bits: int
    times_s: list[float] = field(default_factory=list)  # wall time of each timed step
    cpu_s: list[float] = field(default_factory=list)  # CPU time of the process (all its threads) in each step
    note: str = ""

    @property
    def median(self) -> float:
        return statistics.median(self.times_s)

    @property
    def cpu_median(self) -> float:
        return statistics.median(self.cpu_s)

    @property
    def gbps(self) -> float:
        return BYTES_PER_PARAM[self.bits] * self.n / self.median / 1e9


def parse_case(token: str) -> Case:
    size, _, parts = token.lower().partition("x")
    try:
        n = 2 ** int(size[2:]) if size.startswith("2^") else int(size)
        k = int(parts) if parts else 1
    except ValueError:
        n = k = 0
    if n <= 0 or k <= 0 or n % k:
        raise SystemExit(f"step.py: bad size '{token}': need N > 0 divisible by the tensor count K")
    return Case(token, n, k)


# -- implementations: each builds its optimizer over fresh parameter copies and returns a step callable --
def octopt_adam(bits: int) -> Callable:
    def make(params: list[np.ndarray], grads: list[np.ndarray]) -> Callable[[], object]:
        opt = octopt.Adam(params, bits=bits)
        return lambda: opt.step(grads)

    return make


def torch_adam(**mode: bool) -> Callable:
    def make(params: list[np.ndarray], grads: list[np.ndarray]) -> Callable[[], object]:
        tensors = [torch.nn.Parameter(torch.from_numpy(p)) for p in params]  # shares the NumPy buffers
        for t, g in zip(tensors, grads):
            t.grad = torch.from_numpy(g)
        return torch.optim.Adam(tensors, **mode).step

    return make


def bnb_adam8bit(bnb) -> Callable:
    def make(params: list[np.ndarray], grads: list[np.ndarray]) -> Callable[[], object]:
        tensors = [torch.nn.Parameter(torch.from_numpy(p)) for p in params]
        for t, g in zip(tensors, grads):
            t.grad = torch.from_numpy(g)
        return bnb.optim.Adam8bit(tensors).step

    return make


def import_bnb():
    if torch is None:
        return None, "torch is not importable"
    try:
        import bitsandbytes as bnb
    except (ImportError, OSError, RuntimeError) as e:  # a missing native library is not an ImportError
        return None, f"bitsandbytes is not importable ({type(e).__name__}: {e})"
    return bnb, ""


def time_steps(step: Callable[[], object], warmup: int, repeats: int, cpu: list | None = None) -> list[float]:
    """Wall seconds of each timed step; with `cpu`, the process's CPU seconds of each are appended to it
    (what its threads ran, spin-waiting included; unlike wall time it does not grow with other processes'
    use of the cores)."""
    for _ in range(warmup):
        step()
    times = []
    for _ in range(repeats):
        c0, t0 = time.process_time(), time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
        if cpu is not None:
            cpu.append(time.process_time() - c0)
    return times


def measure_copy(threads: int, repeats: int) -> list[float]:
    """np.copyto of a 2^26 float32 array, split over `threads` (np.copyto releases the GIL)."""
    src = np.random.default_rng(1).standard_normal(COPY_N, dtype=np.float32)
    dst = np.empty_like(src)
    pairs = list(zip(np.array_split(dst, threads), np.array_split(src, threads)))
    with ThreadPoolExecutor(threads) as pool:
        if threads == 1:
            def run():
                np.copyto(dst, src)
        else:
            def run():
                list(pool.map(lambda dp: np.copyto(*dp), pairs))
        return time_steps(run, 2, repeats)


class Progress:
    """One line per measurement: a tqdm bar with tqdm.write on a terminal when tqdm is importable, plain
    prints otherwise."""

    def __init__(self, total: int):
        self.total, self.done = total, 0
        use_bar = tqdm is not None and sys.stderr.isatty()  # a redirected log gets plain lines
        self.bar = tqdm(total=total, unit="meas", file=sys.stderr, dynamic_ncols=True) if use_bar else None

    def start(self, what: str) -> None:
        if self.bar:
            self.bar.set_description(what)
        else:
            print(f"[{self.done + 1}/{self.total}] {what} ...", file=sys.stderr, flush=True)

    def finish(self, line: str) -> None:
        self.done += 1
        if self.bar:
            self.bar.write(line, file=sys.stderr)
            self.bar.update()
        else:
            print(f"[{self.done}/{self.total}] {line}", file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.bar:
            self.bar.close()


def run_case(case: Case, impls: list[tuple[str, int, Callable]], args, progress: Progress, bnb_state: dict,
             rows: list[Row]) -> None:
    rng = np.random.default_rng(0)
    master = rng.standard_normal(case.n, dtype=np.float32)
    grads = np.split(rng.standard_normal(case.n, dtype=np.float32) * np.float32(1e-2), case.tensors)
    for name, bits, make in impls:
        row = Row(case.label, case.n, case.tensors, name, bits)
        warmup, repeats = args.warmup, args.repeats
        if name.startswith("bnb"):
            warmup, repeats = 1, args.bnb_repeats
            skip = bnb_skip_reason(case, bnb_state, args, warmup + repeats, make, master, grads[0])
            if skip:
                row.note = f"skipped: {skip}"
                rows.append(row)
                progress.finish(f"{case.label:>10}  {name:<22} {row.note}")
                continue
        progress.start(f"{case.label} {name}")
        params = [p.copy() for p in np.split(master, case.tensors)]
        step = make(params, grads)
        row.times_s = time_steps(step, warmup, repeats, row.cpu_s)
        del step, params
        gc.collect()
        if name.startswith("bnb") and case.tensors == 1:
            bnb_state["s_per_param"] = row.median / case.n
        rows.append(row)
        progress.finish(f"{case.label:>10}  {name:<22} {_ms(row.median):>9} ms/step  "
                        f"({_ms(min(row.times_s))}-{_ms(max(row.times_s))}, {len(row.times_s)} steps)")


def bnb_skip_reason(case: Case, bnb_state: dict, args, steps: int, make: Callable, master: np.ndarray,
                    grad: np.ndarray) -> str:
    """bitsandbytes' CPU Adam8bit is slow: run it only where the estimated cost fits --bnb-budget seconds.
    A single tensor is estimated from the per-parameter time of an earlier single-tensor case (the first
    one up to 2^24 parameters just runs); a split case from one step on one of its tensors, because
    bitsandbytes' cost per tensor is far from proportional to its size."""
    if bnb_state.get("error"):
        return bnb_state["error"]
    if args.bnb_budget <= 0:
        return "--bnb-budget 0"
    if case.tensors > 1:
        size = case.n // case.tensors
        step = make([master[:size].copy()], [grad])
        per_tensor = time_steps(step, 1, 1)[0]
        del step
        estimate = per_tensor * case.tensors * steps
        basis = f"one {size}-element tensor took {per_tensor * 1e3:.0f} ms/step, x{case.tensors} tensors"
    else:
        per = bnb_state.get("s_per_param")
        if per is None:
            return "" if case.n <= 1 << 24 else "no cost estimate yet and the case exceeds 2^24 parameters"
        estimate = per * case.n * steps
        basis = f"at the measured {per * 1e9:.0f} ns/param"
    if estimate > args.bnb_budget:
        return f"est. {estimate:.3g} s for {steps} steps ({basis}) > --bnb-budget {args.bnb_budget:g} s"
    return ""


def _ms(seconds: float) -> str:
    ms = seconds * 1e3
    return f"{ms:.2f}" if ms >= 1 else f"{ms:.3g}"


def fmt_table(rows: list[Row], copy_gbps: float) -> str:
    head = ("case", "implementation", "bits", "ms/step", "spread (min-max)", "ns/param", "GB/s", "of copy",
            "x fused", "vs bnb", "cpu ms", "cores")
    lines = []
    by_case: dict[str, list[Row]] = {}
    for r in rows:
        by_case.setdefault(r.case, []).append(r)
    for case_rows in by_case.values():
        fused = next((r for r in case_rows if r.impl == "torch Adam fused" and r.times_s), None)
        bnb = next((r for r in case_rows if r.impl.startswith("bnb") and r.times_s), None)
        for r in case_rows:
            if not r.times_s:
                lines.append((r.case, r.impl, str(r.bits), r.note))
                continue
            m = r.median
            lines.append((
                r.case, r.impl, str(r.bits), _ms(m), f"{_ms(min(r.times_s))}-{_ms(max(r.times_s))}",
                f"{m / r.n * 1e9:.3f}", f"{r.gbps:.1f}", f"{r.gbps / copy_gbps:.0%}",
                f"{m / fused.median:.2f}" if fused else "n/a",
                f"{bnb.median / m:.1f}x" if bnb else "n/a",
                _ms(r.cpu_median), f"{r.cpu_median / m:.2f}"))
    full = [x for x in lines if len(x) == len(head)]
    widths = [max(len(head[i]), *(len(x[i]) for x in full)) for i in range(len(head))]
    out = ["  ".join(h.ljust(w) for h, w in zip(head, widths)), "  ".join("-" * w for w in widths)]
    prev = None
    for x in lines:
        if prev is not None and x[0] != prev:
            out.append("")
        prev = x[0]
        cells = [v.ljust(w) if i < 2 else v.rjust(w) for i, (v, w) in enumerate(zip(x, widths))]
        if len(x) < len(head):  # a skipped row: its reason in place of the numbers
            cells[-1] = "  " + x[-1]
        out.append("  ".join(cells).rstrip())
    return "\n".join(out)


def targets(rows: list[Row]) -> list[dict]:
    """The issue's targets: octopt 8-bit Adam <= 1.0x torch fused fp32 Adam (single-tensor cases) and
    >= 20x faster than bitsandbytes' CPU Adam8bit (wherever that was measured)."""
    out = []
    for case in dict.fromkeys(r.case for r in rows):
        get = {r.impl: r for r in rows if r.case == case and r.times_s}
        ours = get.get("octopt Adam 8-bit")
        if ours is None:
            continue
        fused = get.get("torch Adam fused")
        if fused and ours.tensors == 1:
            ratio = ours.median / fused.median
            cpu = ours.cpu_median / fused.cpu_median
            out.append({"case": case, "target": "octopt 8-bit <= 1.0x time of torch fused fp32",
                        "value": ratio, "ok": ratio <= 1.0, "text": f"{ratio:.2f}x (CPU time {cpu:.2f}x)"})
        bnb = get.get("bnb Adam8bit")
        if bnb:
            speedup = bnb.median / ours.median
            cpu = bnb.cpu_median / ours.cpu_median
            out.append({"case": case, "target": "octopt 8-bit >= 20x faster than bnb Adam8bit",
                        "value": speedup, "ok": speedup >= 20.0,
                        "text": f"{speedup:.1f}x faster (CPU time {cpu:.1f}x less)"})
    return out


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2, help="threads of octopt, torch, copy (default 2)")
    ap.add_argument("--repeats", type=int, default=10, help="timed steps per implementation (default 10)")
    ap.add_argument("--warmup", type=int, default=2, help="untimed steps first, state allocation included")
    ap.add_argument("--sizes", nargs="+", metavar="N[xK]",
                    help="cases: 2^E or an integer, xK = split into K tensors "
                         f"(default {' '.join(DEFAULT_SIZES)})")
    ap.add_argument("--bnb-repeats", type=int, default=2, help="timed bitsandbytes steps (default 2)")
    ap.add_argument("--bnb-budget", type=float, default=8.0,
                    help="skip bitsandbytes where its estimated cost exceeds this many seconds (default 8)")
    ap.add_argument("--json", metavar="PATH", help="save the results as JSON")
    ap.add_argument("--quick", action="store_true", help=f"fast check: {' '.join(QUICK_SIZES)}, 3 steps each")
    args = ap.parse_args()
    if args.quick:
        args.sizes = args.sizes or QUICK_SIZES
        args.repeats, args.warmup = min(args.repeats, 3), 1
    args.sizes = args.sizes or DEFAULT_SIZES
    return args


def implementations(threads: int) -> tuple[list[tuple[str, int, Callable]], list[str], object, str]:
    """(name, state bits, factory) per implementation, what was left out and why, and bitsandbytes."""
    octopt.set_num_threads(threads)
    impls: list[tuple[str, int, Callable]] = [(f"octopt Adam {b}-bit", b, octopt_adam(b)) for b in (8, 4, 32)]
    left_out = []
    if torch is not None:
        torch.set_num_threads(threads)
        impls.append(("torch Adam fused", 32, torch_adam(fused=True)))
        impls.append(("torch Adam foreach", 32, torch_adam(foreach=True)))
    else:
        left_out.append("torch rows: torch is not importable")
    bnb, bnb_error = import_bnb()
    if bnb is not None:
        impls.append(("bnb Adam8bit", 8, bnb_adam8bit(bnb)))
    else:
        left_out.append(f"bnb Adam8bit: {bnb_error}")
    return impls, left_out, bnb, bnb_error


def copy_round(copies: dict, threads: int, repeats: int, progress: Progress, when: str) -> None:
    for t in sorted({1, threads}):  # plain np.copyto on one thread, and split over --threads
        progress.start(f"copy 2^26 f32, {t} thread(s), {when}")
        copies.setdefault(t, []).extend(measure_copy(t, max(repeats, 5)))
        median = _ms(statistics.median(copies[t]))
        progress.finish(f"{'copy':>10}  {f'np.copyto x{t} ({when})':<22} {median:>9} ms")


def main() -> int:
    args = parse_args()
    cases = [parse_case(s) for s in args.sizes]
    impls, left_out, bnb, bnb_error = implementations(args.threads)
    load_start = os.getloadavg()
    versions = {"python": platform.python_version(), "numpy": np.__version__, "octopt": octopt.__version__,
                "octopt_simd": octopt.info().get("simd"), "torch": getattr(torch, "__version__", None),
                "bitsandbytes": getattr(bnb, "__version__", None)}
    print(f"octopt step benchmark: {args.threads} thread(s), {args.repeats} timed steps after {args.warmup} "
          f"warm-up; {platform.machine()} x{os.cpu_count()}; load avg {load_start}")
    print("versions: " + ", ".join(f"{k} {v}" for k, v in versions.items() if v))
    for s in left_out:
        print(f"skipped {s}")

    progress = Progress(2 * len({1, args.threads}) + len(cases) * len(impls))
    copies: dict[int, list[float]] = {}
    copy_round(copies, args.threads, args.repeats, progress, "start")
    rows: list[Row] = []
    bnb_state = {"error": bnb_error}
    for case in cases:
        run_case(case, impls, args, progress, bnb_state, rows)
        gc.collect()
    copy_round(copies, args.threads, args.repeats, progress, "end")  # the load on a shared machine drifts
    progress.close()
    load_end = os.getloadavg()

    copy_gbps = {t: 8 * COPY_N / statistics.median(ts) / 1e9 for t, ts in copies.items()}
    ref = max(copy_gbps.values())
    print()
    for t, ts in copies.items():
        print(f"copy reference: np.copyto 2^26 float32 on {t} thread(s): {_ms(statistics.median(ts))} ms "
              f"({_ms(min(ts))}-{_ms(max(ts))}), {copy_gbps[t]:.1f} GB/s (read + write)")
    print(f"'of copy': GB/s over the faster copy ({ref:.1f} GB/s); 'x fused': time / time of torch fused "
          "Adam in the same case (lower is better);\n'vs bnb': bnb's time / the row's time; 'cpu ms': the "
          "process's CPU time per step (all threads, median);\n'cores' = cpu ms / ms, the cores the row "
          "really got (below --threads: other processes held them, or the implementation ran serially).")
    print()
    print(fmt_table(rows, ref))
    print()
    results = targets(rows)
    for t in results:
        print(f"{'PASS' if t['ok'] else 'FAIL'}  {t['case']:>10}  {t['target']}: {t['text']}")
    if not any("bnb" in t["target"] for t in results):
        print(f"SKIP  bnb target: bitsandbytes was not measured ({bnb_error or 'no case fitted the budget'})")
    print(f"load average: start {load_start}, end {load_end}")

    if args.json:
        data = {"args": vars(args), "versions": versions, "load_avg": [load_start, load_end],
                "bytes_per_param": {str(k): v for k, v in BYTES_PER_PARAM.items()},
                "copy": {str(t): {"times_s": ts, "gbps": copy_gbps[t]} for t, ts in copies.items()},
                "rows": [{**asdict(r), "median_s": r.median if r.times_s else None,
                          "cpu_median_s": r.cpu_median if r.times_s else None,
                          "gbps": r.gbps if r.times_s else None} for r in rows],
                "targets": results}
        with open(args.json, "w") as f:
            json.dump(data, f, indent=1)
        print(f"saved {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
