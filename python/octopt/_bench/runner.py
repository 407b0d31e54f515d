"""Runs the cases: every implementation on its own copy of the parameters. The fast ones take turns, one timed
step each per round, so that a slower or faster phase of a shared machine (seconds long on the development
machine) falls on all of them alike instead of on whichever ran then; the slow peers run one after the other."""

from __future__ import annotations

import gc
import random
import time

import numpy as np

from .cases import Case
from .peers import Impl
from .rows import Row
from .table import ms
from .timing import Progress, time_steps

ALWAYS_RUN_UP_TO = 1 << 24  # a slow peer's first single-tensor case up to this size runs without an estimate


def run_case(case: Case, impls: list[Impl], args, progress: Progress, per_param: dict, rows: list[Row]) -> None:
    """Appends one Row per implementation, in the order of `impls`. `per_param` carries each slow peer's measured
    seconds per parameter from one single-tensor case to the next (its cost estimate)."""
    rng = np.random.default_rng(0)
    master = rng.standard_normal(case.n, dtype=np.float32)
    grads = np.split(rng.standard_normal(case.n, dtype=np.float32) * np.float32(1e-2), case.tensors)
    by_impl = {}
    fast = [impl for impl in impls if not impl.slow]
    if fast:
        for row in run_in_turns(case, fast, args, progress, master, grads):
            by_impl[row.impl] = row
    for impl in impls:
        if impl.slow:
            by_impl[impl.name] = run_slow(case, impl, args, progress, per_param, master, grads)
    rows.extend(by_impl[impl.name] for impl in impls)


def run_in_turns(case: Case, impls: list[Impl], args, progress: Progress, master, grads) -> list[Row]:
    """Every implementation's warm-up steps, then `args.repeats` rounds of one timed step each, in an order
    shuffled for each round (seeded). Before each timed
    step the process sleeps `args.pause_ms`: torch's OpenMP workers keep spinning for a while after a parallel
    region, and would otherwise take cores from whichever step comes next. An implementation whose warm-up
    step took under 50 ms then makes one untimed step right before its timed one: after the pause the second
    core of a virtual machine takes a millisecond or more to come back, and a short step would otherwise run
    mostly on one core (measured at 2^22 parameters: 1.0 cores instead of 1.9, for octopt and torch alike)."""
    progress.start(f"{case.label}: {len(impls)} implementations in turns")
    rows, steps, short = [], [], []
    for impl in impls:
        rows.append(Row(case.label, case.n, case.tensors, impl.name, impl.family, impl.bits))
        steps.append(impl.make([p.copy() for p in np.split(master, case.tensors)], grads))
        warm = time_steps(steps[-1], max(args.warmup - 1, 0), 1)[0]
        short.append(warm < 0.05)
    turns = list(zip(rows, steps, short))
    order = random.Random(0)
    for _ in range(args.repeats):
        order.shuffle(turns)  # a new order each round: no implementation always follows the same other one
        for row, step, pre in turns:
            time.sleep(args.pause_ms / 1e3)
            if pre:
                step()
            row.times_s += time_steps(step, 0, 1, row.cpu_s)
    del steps
    gc.collect()
    progress.finish(
        f"{case.label:>10}  "
        + ", ".join(f"{row.impl} {ms(row.median)}" for row in rows)
        + f" ms/step (median of {args.repeats} rounds)"
    )
    return rows


def run_slow(case: Case, impl: Impl, args, progress: Progress, per_param: dict, master, grads) -> Row:
    """A slow peer's steps, one after the other, within its budget (slow_skip_reason)."""
    row = Row(case.label, case.n, case.tensors, impl.name, impl.family, impl.bits)
    warmup, repeats = 1, args.slow_repeats
    progress.start(f"{case.label} {impl.name}: cost estimate")
    skip = slow_skip_reason(case, impl, per_param.get(impl.name), args.slow_budget, warmup + repeats, master, grads[0])
    if skip:
        row.note = f"skipped: {skip}"
        progress.finish(f"{case.label:>10}  {impl.name:<22} {row.note}")
        return row
    progress.start(f"{case.label} {impl.name}")
    params = [p.copy() for p in np.split(master, case.tensors)]
    step = impl.make(params, grads)
    row.times_s = time_steps(step, warmup, repeats, row.cpu_s)
    del step, params
    gc.collect()
    if case.tensors == 1:
        per_param[impl.name] = row.median / case.n
    progress.finish(
        f"{case.label:>10}  {impl.name:<22} {ms(row.median):>9} ms/step  "
        f"({ms(min(row.times_s))}-{ms(max(row.times_s))}, {len(row.times_s)} steps)"
    )
    return row


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
