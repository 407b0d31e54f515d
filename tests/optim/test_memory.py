"""No leaks over long runs (issue "Reliability", item 2).

10k optimizer steps (8-bit Adam on a few small NumPy tensors) and 1k save/load cycles must not grow
the process: the resident set size (``/proc/self/statm``) measured after a warm-up and at the end
grows by less than ``RSS_BOUND``, and ``tracemalloc`` (Python objects and NumPy's data buffers, which
NumPy reports to it) grows by less than ``TRACED_BOUND``. The native core's own allocations are
checked by the LeakSanitizer run of the C++ test program (tests/test_cpp.py).
"""

from __future__ import annotations

import gc
import os
import sys
import tracemalloc

import numpy as np
import octopt
import pytest

pytestmark = [
    pytest.mark.slow,  # 10k steps and 1k save/load cycles: left out of the everyday run (pytest -m slow)
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/statm"),
]

STEPS = 10_000
CYCLES = 1_000
WARMUP_STEPS = 500
WARMUP_CYCLES = 50
RSS_BOUND = 3 * 2**20  # bytes
TRACED_BOUND = 64 * 2**10  # bytes: a 7-byte-per-step or 64-byte-per-cycle leak fails
SHAPES = ((33,), (300,), (17, 29), (1000,))  # ragged: partial blocks of 256


def rss_bytes() -> int:
    gc.collect()
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _params(rng):
    return [rng.standard_normal(s).astype(np.float32) for s in SHAPES]


def _grads(rng):
    return [rng.standard_normal(s).astype(np.float32) for s in SHAPES]


def _measure(warmup, body):
    """(RSS growth, traced growth) of body() run after warmup(), each measured with tracemalloc on."""
    warmup()
    tracemalloc.start()
    try:
        warmup()  # tracemalloc's own tables settle
        rss0 = rss_bytes()
        traced0 = tracemalloc.get_traced_memory()[0]
        body()
        rss1 = rss_bytes()
        traced1 = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    return rss1 - rss0, traced1 - traced0


def test_no_leak_over_optimizer_steps():
    rng = np.random.default_rng(0)
    params = _params(rng)
    grads = _grads(rng)  # fixed gradients: the loop itself allocates nothing that persists
    opt = octopt.Adam(params, lr=1e-4, bits=8, min_8bit_size=0)
    assert all(slot["bits"] == 8 for row in opt.state_layout() for slot in row["slots"].values())

    def run(n):
        for _ in range(n):
            opt.step(grads)

    rss, traced = _measure(lambda: run(WARMUP_STEPS), lambda: run(STEPS))
    print(f"\n{STEPS} steps: RSS growth {rss / 1024:.0f} KiB, traced growth {traced / 1024:.1f} KiB")
    assert rss < RSS_BOUND, f"RSS grew by {rss} bytes over {STEPS} steps"
    assert traced < TRACED_BOUND, f"Python allocations grew by {traced} bytes over {STEPS} steps"
    assert all(np.isfinite(p).all() for p in params)


def test_no_leak_over_save_load_cycles(tmp_path):
    rng = np.random.default_rng(1)
    params = _params(rng)
    opt = octopt.Adam(params, lr=1e-4, bits=8, min_8bit_size=0)
    opt.step(_grads(rng))
    other = octopt.Adam([p.copy() for p in params], lr=1e-4, bits=8, min_8bit_size=0)
    path = tmp_path / "state.safetensors"

    def run(n):
        for _ in range(n):
            opt.save(path)
            other.load(path)

    rss, traced = _measure(lambda: run(WARMUP_CYCLES), lambda: run(CYCLES))
    print(f"\n{CYCLES} save/load cycles: RSS growth {rss / 1024:.0f} KiB, traced growth {traced / 1024:.1f} KiB")
    assert rss < RSS_BOUND, f"RSS grew by {rss} bytes over {CYCLES} save/load cycles"
    assert traced < TRACED_BOUND, f"Python allocations grew by {traced} bytes over {CYCLES} save/load cycles"
    assert path.stat().st_size > 0
    assert len(list(tmp_path.iterdir())) == 1, "save left temporary files behind"
