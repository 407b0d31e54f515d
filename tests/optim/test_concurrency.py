"""Stepping from several Python threads: the core releases the GIL during a CPU step.

Different optimizers stepped at once must give bit-identical results to the same steps run one
after the other; two threads stepping the *same* optimizer must get a RuntimeError for the step that
overlaps (never a race on the state), and the steps that went through must equal a sequential run of
that many steps; changing ``set_num_threads`` between or during steps must change no result.
"""

from __future__ import annotations

import sys
import threading

import numpy as np
import octopt
import pytest

SHAPES = ((4097,), (33, 65), (70001,))
STEPS = 4

# name -> (optimizer class, options): 8-bit and 4-bit states, a 32-bit one, SGD with momentum
CONFIGS = {
    "adam8": (octopt.Adam, dict(bits=8, min_8bit_size=0)),
    "adamw4": (octopt.AdamW, dict(bits=4, min_8bit_size=0)),
    "sgd8": (octopt.SGD, dict(bits=8, momentum=0.9, min_8bit_size=0, lr=1e-2)),
    "adam32": (octopt.Adam, dict(bits=32)),
    "lion8": (octopt.Lion, dict(bits=8, min_8bit_size=0)),
}


def _problem(name: str, seed: int):
    """A fresh optimizer over random parameters, and the gradients of each step."""
    rng = np.random.default_rng(seed)
    params = [rng.standard_normal(s).astype(np.float32) for s in SHAPES]
    grads = [[rng.standard_normal(s).astype(np.float32) for s in SHAPES] for _ in range(STEPS)]
    cls, options = CONFIGS[name]
    return cls(params, seed=seed, **options), params, grads


def _snapshot(opt, params) -> list[np.ndarray]:
    out = [p.copy() for p in params]
    for s in opt.state_dict()["state"]:
        for slot in s["slots"].values():
            out.append(np.asarray(slot["data"]).copy())
            if "absmax" in slot:
                out.append(np.asarray(slot["absmax"]).copy())
    return out


def _assert_identical(a: list[np.ndarray], b: list[np.ndarray], what: str) -> None:
    assert len(a) == len(b), what
    for k, (x, y) in enumerate(zip(a, b)):
        # bit-identical: compare the raw bytes, so that NaN and -0.0 count too
        assert x.dtype == y.dtype and x.shape == y.shape, f"{what}: array {k}"
        assert x.tobytes() == y.tobytes(), f"{what}: array {k} differs ({np.count_nonzero(x != y)} elements)"


def _sequential(name: str, seed: int) -> list[np.ndarray]:
    opt, params, grads = _problem(name, seed)
    for g in grads:
        opt.step(g)
    return _snapshot(opt, params)


@pytest.fixture
def restore_threads():
    old = octopt.get_num_threads()
    yield
    octopt.set_num_threads(old)


def _run_threads(targets) -> None:
    errors: list[BaseException] = []

    def wrap(fn):
        def run():
            try:
                fn()
            except BaseException as e:  # noqa: BLE001 - reported by the main thread
                errors.append(e)

        return run

    threads = [threading.Thread(target=wrap(fn)) for fn in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
        assert not t.is_alive(), "a stepping thread hung"
    if errors:
        raise errors[0]


def test_different_optimizers_in_threads_match_sequential(restore_threads):
    octopt.set_num_threads(2)
    jobs = [(name, seed) for seed in (1, 2) for name in CONFIGS]
    expected = {job: _sequential(*job) for job in jobs}
    problems = {job: _problem(*job) for job in jobs}
    start = threading.Barrier(len(jobs))

    def stepper(job):
        def run():
            opt, _, grads = problems[job]
            start.wait()
            for g in grads:
                opt.step(g)

        return run

    _run_threads([stepper(job) for job in jobs])
    for job in jobs:
        opt, params, _ = problems[job]
        _assert_identical(_snapshot(opt, params), expected[job], f"{job} stepped in a thread")


def test_same_optimizer_from_two_threads_is_refused(restore_threads):
    """Every overlapping step is refused with a clear message; the steps that went through equal a
    sequential run of as many steps (the step counts and the state stay consistent)."""
    octopt.set_num_threads(2)
    n = 1 << 16  # long enough a step for the threads to overlap, short enough for many attempts
    rng = np.random.default_rng(7)
    init = rng.standard_normal(n).astype(np.float32)
    grad = rng.standard_normal(n).astype(np.float32)
    param = init.copy()
    opt = octopt.Adam([param], bits=8, seed=3)
    attempts = 150
    ok = [0, 0]
    refused: list[str] = []
    start = threading.Barrier(2)
    old_interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # hand the GIL over often: the worst case for the step's bookkeeping

    def stepper(k):
        def run():
            start.wait()
            for _ in range(attempts):
                try:
                    opt.step([grad])
                    ok[k] += 1
                except RuntimeError as e:
                    refused.append(str(e))

        return run

    try:
        _run_threads([stepper(0), stepper(1)])
    finally:
        sys.setswitchinterval(old_interval)
    assert refused, "no step overlapped: the test did not exercise the guard"
    for msg in refused:
        assert "already being stepped" in msg
    done = sum(ok)
    assert done >= attempts  # the thread that steps first never waits on the other
    assert done + len(refused) == 2 * attempts

    ref_param = init.copy()
    ref = octopt.Adam([ref_param], bits=8, seed=3)
    for _ in range(done):
        ref.step([grad])
    assert opt.state_dict()["state"][0]["step"] == done
    assert opt.state_dict()["global_step"] == done
    _assert_identical(_snapshot(opt, [param]), _snapshot(ref, [ref_param]), "after the refused steps")


def test_set_num_threads_between_steps(restore_threads):
    expected = {name: _sequential(name, 5) for name in CONFIGS}
    for name in CONFIGS:
        opt, params, grads = _problem(name, 5)
        for k, g in enumerate(grads):
            octopt.set_num_threads((1, 3, 2, 4)[k % 4])
            opt.step(g)
        _assert_identical(_snapshot(opt, params), expected[name], f"{name} with the thread count changed")


def test_set_num_threads_while_steps_run(restore_threads):
    jobs = [(name, 11) for name in CONFIGS]
    expected = {}
    problems = {job: _problem(*job) for job in jobs}
    stop = threading.Event()
    changes = [0]

    def changer():
        k = 0
        while not stop.is_set():
            octopt.set_num_threads(1 + k % 4)
            k += 1
        changes[0] = k

    def stepper(job):
        def run():
            opt, _, grads = problems[job]
            for _ in range(3):  # the same gradients again: more steps overlap the changes
                for g in grads:
                    opt.step(g)

        return run

    for job in jobs:  # the expected state after the same 3 passes
        opt, params, grads = _problem(*job)
        for _ in range(3):
            for g in grads:
                opt.step(g)
        expected[job] = _snapshot(opt, params)

    t = threading.Thread(target=changer)
    t.start()
    try:
        _run_threads([stepper(job) for job in jobs])
    finally:
        stop.set()
        t.join(timeout=60)
    assert changes[0] > 0
    for job in jobs:
        opt, params, _ = problems[job]
        _assert_identical(_snapshot(opt, params), expected[job], f"{job} while the thread count changed")
