"""Timing one step at a time, and the progress display."""

from __future__ import annotations

import sys
import time
from typing import Callable


def time_steps(step: Callable[[], object], warmup: int, repeats: int, cpu: list | None = None) -> list[float]:
    """Wall seconds of each timed step after `warmup` untimed ones; with `cpu`, the process's CPU seconds of
    each are appended to it (all its threads, spin-waiting included; unlike wall time it does not grow with
    other processes' use of the cores)."""
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


class Progress:
    """One line per measurement on stderr: a tqdm bar (with tqdm.write) on a terminal when tqdm is importable,
    numbered plain lines otherwise (a redirected log stays readable)."""

    def __init__(self, total: int):
        self.total, self.done = total, 0
        try:
            from tqdm import tqdm
        except ImportError:
            tqdm = None
        use_bar = tqdm is not None and sys.stderr.isatty()
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
