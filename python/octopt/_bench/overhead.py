"""Per-tensor overhead of a CPU optimizer step: what a step of many small tensors costs beyond the arithmetic.

For each path (octopt.Adam on NumPy arrays, octopt.torch.AdamW on torch tensors with ``.grad`` set, and
torch.optim.Adam with foreach=False and fused=True as references) and each case (tensors x elements, state
bits), two optimizers are timed in the same rounds:

- *step*: N tensors of E float32 elements each;
- *kernel*: ONE tensor of N * E elements, same path, same options.

Both do the same arithmetic on the same number of elements; the single tensor pays the per-tensor costs
(Python loop, conversions, checks, native per-tensor setup) once instead of N times. So

    overhead per tensor = (step - kernel) / (N - 1)

(N - 1: the kernel figure still holds one tensor's overhead and the fixed per-call cost, which are not
per-tensor). Only the public API is used, so the figure means the same before and after a rewrite of the
step path. The kernel figure is thus "the step without the per-tensor part", not a native timer: the
bindings expose none, and a native timer would miss the binding's own per-tensor work, which is exactly
what is being measured. Partial blocks: a 64-element tensor is one partial block where the single tensor
has whole 256-element blocks; the per-element work is the same (bench/README.md, "Per-step overhead").

Timing: `rounds` rounds; in each, the two optimizers in turn take `steps` individually timed steps, and the
round's median is kept. A figure is the minimum over rounds of those medians (the round least disturbed by
other processes); the noise reported is the spread of the paired per-round overhead estimates. The process's
CPU time is recorded beside the wall time: at one thread it is the steadier figure on a shared machine.
Python's garbage collector is paused while timing, as timeit does.
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Callable

import numpy as np

import octopt

from .table import format_table

# The targets, microseconds of overhead per tensor for a CPU step of 256 small tensors.
TARGETS_US = {"numpy": 2.0, "torch": 4.0}
PATHS = ("numpy", "torch", "torch-foreach", "torch-fused")
PATH_NAMES = {
    "numpy": "octopt.Adam (NumPy)",
    "torch": "octopt.torch.AdamW",
    "torch-foreach": "torch Adam foreach=False",
    "torch-fused": "torch Adam fused",
}
DEFAULT_TENSORS = 256
DEFAULT_SIZES = (64, 4096)
DEFAULT_BITS = (32, 8)

Step = Callable[[], object]


@dataclass
class OverheadRow:
    path: str  # one of PATHS
    tensors: int
    elems: int  # float32 elements per tensor
    bits: int  # state width (32 for torch's own optimizers)
    step_rounds_s: list[float] = field(default_factory=list)  # per round: median seconds of an N-tensor step
    kernel_rounds_s: list[float] = field(default_factory=list)  # per round: the same for the single tensor
    step_cpu_rounds_s: list[float] = field(default_factory=list)  # the same in the process's CPU time
    kernel_cpu_rounds_s: list[float] = field(default_factory=list)
    state_bits: list[int] = field(default_factory=list)  # octopt: the bits the state really has
    note: str = ""  # why the row was not measured

    @property
    def name(self) -> str:
        return PATH_NAMES[self.path]

    @property
    def step_s(self) -> float:
        return min(self.step_rounds_s)

    @property
    def kernel_s(self) -> float:
        return min(self.kernel_rounds_s)

    @property
    def per_tensor_s(self) -> float:
        return (self.step_s - self.kernel_s) / max(self.tensors - 1, 1)

    @property
    def per_tensor_cpu_s(self) -> float:
        """The overhead from CPU time: at one thread it leaves out the time other processes held the core."""
        return (min(self.step_cpu_rounds_s) - min(self.kernel_cpu_rounds_s)) / max(self.tensors - 1, 1)

    @property
    def paired_s(self) -> list[float]:
        """The overhead estimate of each round alone (step and kernel timed side by side)."""
        return [(s - k) / max(self.tensors - 1, 1) for s, k in zip(self.step_rounds_s, self.kernel_rounds_s)]

    @property
    def target_us(self) -> float | None:
        return TARGETS_US.get(self.path)

    @property
    def ok(self) -> bool | None:
        t = self.target_us
        return None if t is None or not self.step_rounds_s else self.per_tensor_s * 1e6 <= t

    def to_json(self) -> dict:
        d = asdict(self)
        d["name"] = self.name
        if self.step_rounds_s:
            d.update(
                step_us=self.step_s * 1e6,
                kernel_us=self.kernel_s * 1e6,
                step_median_us=statistics.median(self.step_rounds_s) * 1e6,
                kernel_median_us=statistics.median(self.kernel_rounds_s) * 1e6,
                overhead_us_per_tensor=self.per_tensor_s * 1e6,
                overhead_cpu_us_per_tensor=self.per_tensor_cpu_s * 1e6,
                overhead_rounds_us=[x * 1e6 for x in self.paired_s],
                target_us=self.target_us,
                x_target=self.per_tensor_s * 1e6 / self.target_us if self.target_us else None,
                ok=self.ok,
            )
        return d


# -- the optimizers -------------------------------------------------------------------------------------
def _arrays(n: int, elems: int) -> tuple[list, list]:
    rng = np.random.default_rng(0)
    params = [rng.standard_normal(elems, dtype=np.float32) for _ in range(n)]
    grads = [rng.standard_normal(elems, dtype=np.float32) * np.float32(1e-2) for _ in range(n)]
    return params, grads


def _state_bits(layout: list[dict]) -> list[int]:
    return sorted({s["bits"] for t in layout for s in t["slots"].values()})


def make_step(path: str, n: int, elems: int, bits: int) -> tuple[Step, list[int]]:
    """A zero-argument step of `n` tensors of `elems` elements on `path`, and its state bits (octopt).
    Small tensors get quantized state as asked (min_8bit_size=0): octopt would otherwise keep tensors under
    4096 elements at 32 bits, and the 8-bit rows would measure the 32-bit path."""
    params, grads = _arrays(n, elems)
    if path == "numpy":
        opt = octopt.Adam(params, bits=bits, min_8bit_size=0)
        return (lambda: opt.step(grads)), _state_bits(opt.state_layout())
    import torch

    tensors = [torch.nn.Parameter(torch.from_numpy(p)) for p in params]
    for t, g in zip(tensors, grads):
        t.grad = torch.from_numpy(g)
    if path == "torch":
        import octopt.torch as ot

        topt = ot.AdamW(tensors, bits=bits, min_8bit_size=0)
        return topt.step, _state_bits(topt.state_layout())
    if path == "torch-foreach":
        return torch.optim.Adam(tensors, foreach=False).step, [32]
    if path == "torch-fused":
        return torch.optim.Adam(tensors, fused=True).step, [32]
    raise ValueError(f"overhead.make_step: unknown path {path!r}; expected one of {PATHS}")


# -- timing ---------------------------------------------------------------------------------------------
def _round_median(step: Step, steps: int) -> tuple[float, float]:
    """Median wall and median CPU seconds of `steps` steps."""
    clock, cpu = time.perf_counter, time.process_time
    times, cpus = [], []
    for _ in range(steps):
        c0, t0 = cpu(), clock()
        step()
        times.append(clock() - t0)
        cpus.append(cpu() - c0)
    return statistics.median(times), statistics.median(cpus)


def measure(row: OverheadRow, rounds: int, steps: int, warmup: int) -> None:
    many, row.state_bits = make_step(row.path, row.tensors, row.elems, row.bits)
    one, _ = make_step(row.path, 1, row.tensors * row.elems, row.bits)
    for _ in range(warmup):
        many()
        one()
    was_enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        for r in range(rounds):
            # alternate the order so that neither side always runs right after the other's cache footprint
            pair = (
                (row.step_rounds_s, row.step_cpu_rounds_s, many),
                (row.kernel_rounds_s, row.kernel_cpu_rounds_s, one),
            )
            for wall, cpu, step in pair if r % 2 == 0 else pair[::-1]:
                w, c = _round_median(step, steps)
                wall.append(w)
                cpu.append(c)
    finally:
        if was_enabled:
            gc.enable()


def plan_rows(paths: tuple[str, ...], tensors: int, sizes: tuple[int, ...], bits: tuple[int, ...]) -> list[OverheadRow]:
    rows = []
    for elems in sizes:
        for path in paths:
            for b in bits if path in ("numpy", "torch") else (32,):
                rows.append(OverheadRow(path, tensors, elems, b))
    return rows


def torch_missing() -> str:
    """'' when torch imports, else the reason (its rows are then left out)."""
    try:
        import torch  # noqa: F401
    except Exception as e:  # noqa: BLE001 - a broken native library is not an ImportError
        return f"torch not importable ({type(e).__name__}: {e})"
    return ""


def run_rows(rows: list[OverheadRow], threads: int, rounds: int, steps: int, warmup: int, progress=None) -> None:
    """Measures every row at `threads` threads (octopt and torch), restoring octopt's thread count after."""
    missing = torch_missing() if any(r.path != "numpy" for r in rows) else ""
    before = octopt.get_num_threads()
    octopt.set_num_threads(threads)
    if not missing:
        import torch

        torch_before = torch.get_num_threads()
        torch.set_num_threads(threads)
    try:
        for row in rows:
            label = f"overhead {row.name} {row.tensors}x{row.elems} {row.bits}-bit"
            if row.path != "numpy" and missing:
                row.note = f"skipped: {missing}"
                if progress:
                    progress.start(label)
                    progress.finish(f"{label}: {row.note}")
                continue
            if progress:
                progress.start(label)
            measure(row, rounds, steps, warmup)
            gc.collect()
            if progress:
                progress.finish(
                    f"{label}: step {row.step_s * 1e6:.0f} us, kernel {row.kernel_s * 1e6:.0f} us, "
                    f"{row.per_tensor_s * 1e6:.2f} us/tensor"
                )
    finally:
        octopt.set_num_threads(before)
        if not missing:
            torch.set_num_threads(torch_before)


# -- output ---------------------------------------------------------------------------------------------
def overhead_table(rows: list[OverheadRow]) -> str:
    head = (
        "path",
        "tensors",
        "elems each",
        "bits",
        "step us",
        "kernel us",
        "overhead us/tensor",
        "rounds min-max",
        "cpu-time est.",
        "target",
        "x target",
        "pass",
    )
    lines: list = []
    for elems in dict.fromkeys(r.elems for r in rows):
        if lines:
            lines.append(None)
        for r in (r for r in rows if r.elems == elems):
            bits = "/".join(map(str, r.state_bits)) if r.state_bits and r.state_bits != [r.bits] else str(r.bits)
            if not r.step_rounds_s:
                lines.append((r.name, str(r.tensors), str(r.elems), bits, r.note))
                continue
            paired = [x * 1e6 for x in r.paired_s]
            t = r.target_us
            lines.append(
                (
                    r.name,
                    str(r.tensors),
                    str(r.elems),
                    bits,
                    f"{r.step_s * 1e6:.1f}",
                    f"{r.kernel_s * 1e6:.1f}",
                    f"{r.per_tensor_s * 1e6:.2f}",
                    f"{min(paired):.2f}-{max(paired):.2f}",
                    f"{r.per_tensor_cpu_s * 1e6:.2f}",
                    f"<= {t:g}" if t else "-",
                    f"{r.per_tensor_s * 1e6 / t:.2f}" if t else "-",
                    ("PASS" if r.ok else "FAIL") if t else "-",
                )
            )
    return format_table(head, lines, left=1)


EXPLAIN = (
    "per-tensor overhead: 'step us' = one step of N tensors of E float32 elements; 'kernel us' = one "
    "step of ONE tensor of N*E elements through the same path (same arithmetic, per-tensor costs paid "
    "once);\n'overhead us/tensor' = (step - kernel) / (N - 1); each figure is the minimum over rounds of "
    "a round's median step, 'rounds min-max' the overhead estimated from each round alone (the noise);\n"
    "'cpu-time est.': the same from the process's CPU time (at 1 thread it leaves out the time other "
    "processes held the core; pass/fail uses wall time)."
)


def print_section(rows: list[OverheadRow], threads: int, rounds: int, steps: int) -> None:
    print(f"{EXPLAIN}\n{threads} thread(s), {rounds} round(s) of {steps} timed steps per optimizer")
    print(overhead_table(rows))
    for r in rows:
        if r.target_us and r.step_rounds_s:
            print(
                f"{'PASS' if r.ok else 'FAIL'}  {r.name} {r.tensors}x{r.elems} {r.bits}-bit: "
                f"{r.per_tensor_s * 1e6:.2f} us/tensor (target <= {r.target_us:g} us)"
            )


def add_options(p: argparse.ArgumentParser, prefix: str = "") -> None:
    """The section's options; `prefix` ("overhead-") when they sit beside the step benchmark's."""
    p.add_argument(
        f"--{prefix}tensors",
        type=int,
        default=DEFAULT_TENSORS,
        help=f"tensors per optimizer (default {DEFAULT_TENSORS})",
    )
    p.add_argument(
        f"--{prefix}sizes",
        type=int,
        nargs="+",
        default=list(DEFAULT_SIZES),
        metavar="E",
        help=f"float32 elements per tensor (default {' '.join(map(str, DEFAULT_SIZES))})",
    )
    p.add_argument(
        f"--{prefix}bits",
        type=int,
        nargs="+",
        default=list(DEFAULT_BITS),
        choices=(32, 8, 4),
        help="octopt state bits (default 32 8)",
    )
    p.add_argument(
        f"--{prefix}paths",
        nargs="+",
        default=list(PATHS),
        choices=PATHS,
        help=f"paths to measure (default all: {' '.join(PATHS)})",
    )
    p.add_argument(f"--{prefix}rounds", type=int, default=7, help="rounds (default 7)")
    p.add_argument(f"--{prefix}steps", type=int, default=30, help="timed steps per optimizer per round (default 30)")
    p.add_argument(f"--{prefix}warmup", type=int, default=3, help="untimed steps first (default 3)")
    p.add_argument(
        f"--{prefix}threads",
        type=int,
        default=1,
        help="octopt and torch threads (default 1: the per-tensor work is serial, and one thread "
        "keeps the figure steady on a shared machine)",
    )


def options(args: argparse.Namespace, prefix: str = "") -> dict:
    key = prefix.replace("-", "_")
    return {
        k: getattr(args, key + k) for k in ("tensors", "sizes", "bits", "paths", "rounds", "steps", "warmup", "threads")
    }


def check_options(o: dict) -> str:
    """'' or what is wrong with them."""
    if o["tensors"] < 2:
        return "tensors must be at least 2 (the overhead is a difference between N tensors and one)"
    if min(o["sizes"]) < 1 or o["rounds"] < 1 or o["steps"] < 1 or o["warmup"] < 0 or o["threads"] < 1:
        return "sizes, rounds, steps and threads must be >= 1 and warmup >= 0"
    return ""


def run_section(o: dict, progress=None) -> tuple[list[OverheadRow], dict]:
    """Measures the rows `o` (options()) asks for; returns them and their JSON."""
    rows = plan_rows(tuple(o["paths"]), o["tensors"], tuple(o["sizes"]), tuple(o["bits"]))
    run_rows(rows, o["threads"], o["rounds"], o["steps"], o["warmup"], progress)
    return rows, {"options": o, "targets_us": TARGETS_US, "method": EXPLAIN, "rows": [r.to_json() for r in rows]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="bench/overhead.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_options(p)
    p.add_argument("--out", metavar="FILE", help="also write the results as JSON to FILE")
    args = p.parse_args(argv)
    o = options(args)
    bad = check_options(o)
    if bad:
        print(f"bench/overhead.py: {bad}", file=sys.stderr)
        return 2
    from .timing import Progress

    n = len(plan_rows(tuple(o["paths"]), o["tensors"], tuple(o["sizes"]), tuple(o["bits"])))
    load_start = os.getloadavg()
    print(
        f"octopt per-tensor overhead: {platform.machine()} x{os.cpu_count()}, load avg {load_start}; octopt "
        f"{octopt.__version__} ({octopt.info().get('simd')}) from "
        f"{os.path.dirname(os.path.abspath(octopt.__file__))}"
    )
    progress = Progress(n)
    rows, data = run_section(o, progress)
    progress.close()
    data["load_avg"] = [load_start, os.getloadavg()]
    print()
    print_section(rows, o["threads"], o["rounds"], o["steps"])
    print(f"load average: start {load_start}, end {data['load_avg'][1]}")
    if args.out:
        from .results import save_json

        print(f"saved {save_json(args.out, data)}")
    return 0
