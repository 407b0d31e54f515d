"""Runs the cases: every implementation on its own copy of the parameters, one after the other."""

from __future__ import annotations

import gc

import numpy as np

from .cases import Case
from .peers import Impl
from .rows import Row
from .table import ms
from .timing import Progress, time_steps

ALWAYS_RUN_UP_TO = 1 << 24  # a slow peer's first single-tensor case up to this size runs without an estimate


def run_case(case: Case, impls: list[Impl], args, progress: Progress, per_param: dict, rows: list[Row]) -> None:
    """Appends one Row per implementation. `per_param` carries each slow peer's measured seconds per
    parameter from one single-tensor case to the next (its cost estimate)."""
    rng = np.random.default_rng(0)
    master = rng.standard_normal(case.n, dtype=np.float32)
    grads = np.split(rng.standard_normal(case.n, dtype=np.float32) * np.float32(1e-2), case.tensors)
    for impl in impls:
        row = Row(case.label, case.n, case.tensors, impl.name, impl.family, impl.bits)
        warmup, repeats = args.warmup, args.repeats
        if impl.slow:
            warmup, repeats = 1, args.slow_repeats
            progress.start(f"{case.label} {impl.name}: cost estimate")
            skip = slow_skip_reason(
                case, impl, per_param.get(impl.name), args.slow_budget, warmup + repeats, master, grads[0]
            )
            if skip:
                row.note = f"skipped: {skip}"
                rows.append(row)
                progress.finish(f"{case.label:>10}  {impl.name:<22} {row.note}")
                continue
        progress.start(f"{case.label} {impl.name}")
        params = [p.copy() for p in np.split(master, case.tensors)]
        step = impl.make(params, grads)
        row.times_s = time_steps(step, warmup, repeats, row.cpu_s)
        del step, params
        gc.collect()
        if impl.slow and case.tensors == 1:
            per_param[impl.name] = row.median / case.n
        rows.append(row)
        progress.finish(
            f"{case.label:>10}  {impl.name:<22} {ms(row.median):>9} ms/step  "
            f"({ms(min(row.times_s))}-{ms(max(row.times_s))}, {len(row.times_s)} steps)"
        )


def slow_skip_reason(
    case: Case, impl: Impl, per_param: float | None, budget: float, steps: int, master: np.ndarray, grad: np.ndarray
) -> str:
    """A slow peer runs only where its estimated cost fits `budget` seconds. A single tensor is estimated from
    the seconds per parameter of an earlier single-tensor case (the first one up to 2^24 parameters just
    runs); a split case from a second step on one of its tensors (the first may compile, as torchao's does),
    because the cost per tensor of these peers is far from proportional to its size."""
    if budget <= 0:
        return "--slow-budget 0"
    if case.tensors > 1:
        size = case.tensor_size
        step = impl.make([master[:size].copy()], [grad])
        per_tensor = time_steps(step, 1, 1)[0]
        del step
        estimate = per_tensor * case.tensors * steps
        basis = f"one {size}-element tensor took {ms(per_tensor)} ms/step, x{case.tensors} tensors"
    elif per_param is None:
        if case.n <= ALWAYS_RUN_UP_TO:
            return ""
        return "no cost estimate yet and the case exceeds 2^24 parameters"
    else:
        estimate = per_param * case.n * steps
        basis = f"at the measured {per_param * 1e9:.0f} ns/param"
    if estimate > budget:
        return f"est. {estimate:.3g} s for {steps} steps ({basis}) > --slow-budget {budget:g} s"
    return ""
