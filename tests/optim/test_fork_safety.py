"""The CPU thread pool across processes and threads.

A process forked after octopt stepped (``os.fork``, a torch ``DataLoader`` worker, ``multiprocessing``
with the fork start method) has the parent's pool but not its worker threads; it must step with
the same results as the parent, never hang. Each forking scenario runs as a script in its own
process group under a timeout, so a hang fails the test and leaves no process behind. Two
optimizers stepped from two Python threads must run their parallel regions at the same time and
stay bit-identical to a sequential run.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import numpy as np
import octopt
import pytest
from octopt import _octopt

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork (POSIX)")

PACKAGE_ROOT = Path(octopt.__file__).resolve().parent.parent
SCRIPT_TIMEOUT_S = 240

# Shared by the scripts: a 2^20-element Adam with 8-bit state is large enough for the pool to
# split every step between its caller and its worker.
PRELUDE = '''
import hashlib, os, sys, time
import numpy as np
import octopt
from octopt import _octopt

N = 1 << 20
octopt.set_num_threads(2)

def problem(seed, steps=3):
    rng = np.random.default_rng(seed)
    param = rng.standard_normal(N).astype(np.float32)
    grads = [rng.standard_normal(N).astype(np.float32) for _ in range(steps)]
    return octopt.Adam([param], bits=8, seed=seed), param, grads

def digest(opt, param):
    h = hashlib.sha256(param.tobytes())
    for s in opt.state_dict()["state"]:
        for slot in s["slots"].values():
            h.update(np.asarray(slot["data"]).tobytes())
            if "absmax" in slot:
                h.update(np.asarray(slot["absmax"]).tobytes())
    return h.hexdigest()

def stepped(seed, steps=3):
    opt, param, grads = problem(seed, steps)
    for g in grads:
        opt.step([g])
    return digest(opt, param)

def wait_child(pid, timeout=60.0):
    """The child's exit code; a child still running after `timeout` is killed and counts as hung."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.01)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    sys.exit(f"the forked child {pid} hung (killed after {timeout} s)")

def in_child(body):
    """Runs body() in a forked child, which exits 0 when it returns True; returns the exit code."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            code = 0 if body() else 2
        except BaseException:
            import traceback
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)  # not the parent's atexit handlers
    return wait_child(pid)
'''


def _run_script(body: str) -> str:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(PACKAGE_ROOT), env.get("PYTHONPATH", "")])
    proc = subprocess.Popen(
        [sys.executable, "-c", PRELUDE + textwrap.dedent(body)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=SCRIPT_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the script and every child it forked
        out, _ = proc.communicate()
        pytest.fail(f"the script hung (killed after {SCRIPT_TIMEOUT_S} s):\n{out}")
    assert proc.returncode == 0, f"the script exited with {proc.returncode}:\n{out}"
    return out


def test_os_fork_after_steps_child_steps_like_the_parent():
    out = _run_script("""
        opt, param, grads = problem(1)
        opt.step([grads[0]])  # the parent's workers are running from here on
        opt.step([grads[1]])
        r, w = os.pipe()

        def child():
            opt.step([grads[2]])  # the same third step as the parent's below
            os.write(w, digest(opt, param).encode())
            # and a fresh optimizer in the child: it equals a sequential run too
            return stepped(2) == expected_fresh

        expected_fresh = stepped(2)
        code = in_child(child)
        assert code == 0, f"the child exited with {code}"
        got = os.read(r, 64).decode()
        opt.step([grads[2]])
        assert got == digest(opt, param), "the child's step differs from the parent's"
        assert stepped(1) == got
        print("ok")
    """)
    assert out.strip().endswith("ok")


def test_os_fork_while_another_thread_steps():
    """Forks while a thread of the parent keeps stepping: some forks land inside a parallel region
    (the child reports how many were in flight); every child steps correctly, and so does the
    stepping thread."""
    out = _run_script("""
        import threading
        expected = stepped(3)
        opt, param, grads = problem(4, steps=1)
        stop = threading.Event()
        steps = [0]

        def stepper():
            while not stop.is_set():
                opt.step([grads[0]])
                steps[0] += 1

        t = threading.Thread(target=stepper)
        t.start()
        r, w = os.pipe()
        during, forks = 0, 0
        try:
            deadline = time.monotonic() + 120
            while (during < 3 or forks < 5) and time.monotonic() < deadline:
                def child():
                    os.write(w, bytes([_octopt._regions_at_last_fork()]))
                    return stepped(3) == expected
                code = in_child(child)
                assert code == 0, f"child {forks} exited with {code}"
                during += os.read(r, 1)[0] > 0
                forks += 1
        finally:
            stop.set()
            t.join(60)
        assert not t.is_alive(), "the stepping thread hung"
        assert during >= 3, f"only {during} of {forks} forks happened inside a region"
        ref, ref_param, ref_grads = problem(4, steps=1)
        for _ in range(steps[0]):
            ref.step([ref_grads[0]])
        assert digest(opt, param) == digest(ref, ref_param), "the parent's stepping thread went wrong"
        print("ok", forks, during)
    """)
    assert out.strip().splitlines()[-1].startswith("ok")


def test_torch_dataloader_fork_workers_step():
    pytest.importorskip("torch")
    out = _run_script("""
        import torch
        from torch.utils.data import DataLoader, Dataset

        class Steps(Dataset):
            def __len__(self):
                return 4
            def __getitem__(self, i):
                return stepped(10 + i)

        stepped(0)  # the parent's pool is running when the workers fork
        loader = DataLoader(Steps(), batch_size=None, num_workers=2, multiprocessing_context="fork", timeout=120)
        got = list(loader)
        assert got == [stepped(10 + i) for i in range(4)], "a DataLoader worker's step differs"
        print("ok")
    """)
    assert out.strip().endswith("ok")


def test_multiprocessing_fork_pool_steps():
    out = _run_script("""
        import multiprocessing as mp
        stepped(0)
        with mp.get_context("fork").Pool(2) as pool:
            got = pool.map_async(stepped, [20, 21, 22]).get(timeout=120)
        assert got == [stepped(s) for s in (20, 21, 22)], "a multiprocessing worker's step differs"
        print("ok")
    """)
    assert out.strip().endswith("ok")


# In-process: two Python threads, each stepping its own optimizer.

N = 1 << 20


def _problem(seed: int, steps: int):
    rng = np.random.default_rng(seed)
    param = rng.standard_normal(N).astype(np.float32)
    grads = [rng.standard_normal(N).astype(np.float32) for _ in range(steps)]
    return octopt.Adam([param], bits=8, seed=seed), param, grads


def _snapshot(opt, param) -> list[bytes]:
    out = [param.tobytes()]
    for s in opt.state_dict()["state"]:
        for slot in s["slots"].values():
            out.append(np.asarray(slot["data"]).tobytes())
            if "absmax" in slot:
                out.append(np.asarray(slot["absmax"]).tobytes())
    return out


@pytest.fixture
def two_threads():
    old = octopt.get_num_threads()
    octopt.set_num_threads(2)
    yield
    octopt.set_num_threads(old)


def test_two_optimizers_in_two_threads_overlap_and_match_sequential(two_threads):
    """Overlap is read from the pool's own count of regions running at once: under one region at a
    time (or a step that kept the GIL) it stays 1 however the threads are scheduled."""
    steps = 6
    expected = {}
    for seed in (31, 32):
        opt, param, grads = _problem(seed, steps)
        for g in grads:
            opt.step([g])
        expected[seed] = _snapshot(opt, param)
    overlapped = 0
    for attempt in range(10):
        problems = {seed: _problem(seed, steps) for seed in (31, 32)}
        start = threading.Barrier(2)
        errors: list[BaseException] = []

        def run(seed, problems=problems, start=start, errors=errors):
            try:
                opt, _, grads = problems[seed]
                start.wait()
                for g in grads:
                    opt.step([g])
            except BaseException as e:  # noqa: BLE001 - reported by the main thread
                errors.append(e)

        _octopt._max_concurrent_regions(True)
        threads = [threading.Thread(target=run, args=(seed,)) for seed in problems]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
            assert not t.is_alive(), "a stepping thread hung"
        if errors:
            raise errors[0]
        for seed, (opt, param, _) in problems.items():
            got = _snapshot(opt, param)
            assert got == expected[seed], f"seed {seed}, attempt {attempt}: differs from the sequential run"
        overlapped = _octopt._max_concurrent_regions()
        if overlapped >= 2:
            break
    assert overlapped >= 2, "the two optimizers' steps never ran at the same time"
