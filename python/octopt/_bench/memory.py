"""Peak resident memory of optimizer steps, one fresh subprocess per implementation so peaks never mix.

In the child: import the libraries (their code and heaps are the baseline), allocate parameters and
gradients, build the optimizer, run warm-up steps (torch allocates its state lazily in the first one) and
collect garbage; read VmRSS ("before"). Then reset the kernel's high-water mark to the current RSS by
writing 5 to /proc/self/clear_refs (Linux >= 4.0), run the timed steps and read VmHWM ("peak"). The
difference is what the steps allocated and touched beyond what was resident before them: step-time
temporaries. Where clear_refs cannot be written, a thread samples VmRSS every 0.2 ms instead (it can miss
a peak shorter than that; the JSON names the method used).

    python -m octopt._bench.memory IMPL N THREADS STEPS    # the child: prints one JSON line
"""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import threading
import time

import numpy as np

IMPLS = ("octopt Adam 8-bit", "octopt Adam 4-bit", "octopt Adam 32-bit", "torch Adam fused", "torch Adam foreach")
MIB = 1 << 20


def _status_kib(key: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"memory: /proc/self/status has no {key} (not Linux?)")


def _reset_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        return False
    return _status_kib("VmHWM") <= _status_kib("VmRSS") + 4


class _Sampler:
    """Fallback peak: polls VmRSS from a thread while the steps run (the kernels release the GIL)."""

    def __init__(self):
        self.peak, self.stop = _status_kib("VmRSS"), threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.is_set():
            self.peak = max(self.peak, _status_kib("VmRSS"))
            time.sleep(2e-4)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join()


def _build(impl: str, params: list, grads: list):
    """(step callable, state bytes) once the warm-up has run."""
    if impl.startswith("octopt"):
        import octopt

        opt = octopt.Adam(params, bits=int(impl.split()[-1].split("-")[0]))
        return (lambda: opt.step(grads)), lambda: opt.state_bytes()
    import torch

    tensors = [torch.nn.Parameter(torch.from_numpy(p)) for p in params]
    for t, g in zip(tensors, grads):
        t.grad = torch.from_numpy(g)
    opt = torch.optim.Adam(tensors, **({"fused": True} if impl.endswith("fused") else {"foreach": True}))

    def state_bytes() -> int:
        return sum(v.nbytes for s in opt.state.values() for v in s.values() if torch.is_tensor(v))

    return opt.step, state_bytes


def child(impl: str, n: int, threads: int, steps: int) -> dict:
    import octopt

    octopt.set_num_threads(threads)
    if impl.startswith("torch"):
        import torch

        torch.set_num_threads(threads)
    baseline = _status_kib("VmRSS")
    rng = np.random.default_rng(0)
    params = [rng.standard_normal(n, dtype=np.float32)]
    grads = [rng.standard_normal(n, dtype=np.float32) * np.float32(1e-2)]
    step, state_bytes = _build(impl, params, grads)
    for _ in range(2):
        step()
    gc.collect()
    before = _status_kib("VmRSS")
    method = "clear_refs" if _reset_peak() else "sampling"
    if method == "clear_refs":
        for _ in range(steps):
            step()
        peak = _status_kib("VmHWM")
    else:
        with _Sampler() as s:
            for _ in range(steps):
                step()
        peak = s.peak
    return {
        "impl": impl,
        "n": n,
        "threads": threads,
        "steps": steps,
        "method": method,
        "params_grads_bytes": 8 * n,
        "state_bytes": int(state_bytes()),
        "rss_baseline_kib": baseline,
        "rss_before_kib": before,
        "peak_kib": peak,
        "temporaries_kib": peak - before,
    }


def run_all(n: int, threads: int, steps: int, impls=IMPLS, progress=None) -> tuple[list[dict], list[str]]:
    """One subprocess per implementation; (results, 'impl: why' for each that failed or was left out)."""
    import octopt

    env = dict(os.environ)
    root = os.path.dirname(os.path.dirname(os.path.abspath(octopt.__file__)))  # the same octopt in the child
    env["PYTHONPATH"] = os.pathsep.join([root, *filter(None, [env.get("PYTHONPATH")])])
    results, failed = [], []
    for impl in impls:
        if progress:
            progress.start(f"memory {impl}")
        cmd = [sys.executable, "-m", "octopt._bench.memory", impl, str(n), str(threads), str(steps)]
        p = subprocess.run(cmd, capture_output=True, text=True, env=env)
        lines = [x for x in p.stdout.splitlines() if x.startswith("{")]
        if p.returncode or not lines:
            last = (p.stderr.strip().splitlines() or ["no output"])[-1]
            failed.append(f"{impl}: the child exited with {p.returncode} ({last})")
            if progress:
                progress.finish(f"{'memory':>10}  {impl:<22} failed: {failed[-1]}")
            continue
        r = json.loads(lines[-1])
        results.append(r)
        if progress:
            progress.finish(f"{'memory':>10}  {impl:<22} temporaries {r['temporaries_kib'] / 1024:.1f} MiB")
    return results, failed


def other_bytes(r: dict) -> int:
    """Resident before the steps beyond the libraries, the arrays and the state: buffers kept from the
    warm-up (an allocator's cache would hide step temporaries there, so this column must stay small too)."""
    return (r["rss_before_kib"] - r["rss_baseline_kib"]) * 1024 - r["params_grads_bytes"] - r["state_bytes"]


def memory_table(results: list[dict]) -> str:
    from .table import format_table

    head = (
        "implementation",
        "params+grads MiB",
        "state MiB",
        "other MiB",
        "RSS before MiB",
        "peak in steps MiB",
        "temporaries MiB",
        "B/param",
        "method",
    )
    lines = [
        (
            r["impl"],
            f"{r['params_grads_bytes'] / MIB:.0f}",
            f"{r['state_bytes'] / MIB:.1f}",
            f"{other_bytes(r) / MIB:.1f}",
            f"{r['rss_before_kib'] / 1024:.0f}",
            f"{r['peak_kib'] / 1024:.0f}",
            f"{r['temporaries_kib'] / 1024:.1f}",
            f"{r['temporaries_kib'] * 1024 / r['n']:.2f}",
            r["method"],
        )
        for r in results
    ]
    return format_table(head, lines)


if __name__ == "__main__":
    if len(sys.argv) != 5 or sys.argv[1] not in IMPLS:
        sys.exit(f"usage: python -m octopt._bench.memory IMPL N THREADS STEPS; IMPL one of {IMPLS}")
    print(json.dumps(child(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))))
