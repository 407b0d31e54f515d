"""Crash safety of state files.

A child process trains and checkpoints an 8-bit Adam over 2**22 parameters to one path in a loop,
resuming from that path when it starts, like a training job; the test SIGKILLs it at random times,
many times. After every kill the file at the path must be a complete file the writer had produced
(it loads, every checksum holds, and its state equals a reference advanced to the same step), never a
torn mix of two writes. A killed writer can leave at most its own temporary,
``<path>.tmp-<pid>-<16 hex digits>``: nothing else removes it (the writer is gone), so a job that
restarts after a crash should delete such leftovers of dead pids; this test does so after each kill.

Loading a corrupted or mismatched file must raise and leave the optimizer exactly as it was.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import numpy as np
import octopt
import pytest
from octopt import state_file

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs POSIX signals")

N = 1 << 22  # an 8.5 MB file: a write takes long enough to be interrupted
KILLS = 20

# The child's gradients and the reference's must be the same: the optimizer state (Adam without weight
# decay) is then a function of the step count alone, whatever the parameters are.
GRAD_CODE = """
def grad(base, k):
    return base * np.float32(1.0 + 0.125 * (k % 5))
"""

CHILD = (
    """
import os, sys
import numpy as np
import octopt
"""
    + GRAD_CODE
    + """
path, n = sys.argv[1], int(sys.argv[2])
base = np.random.default_rng(0).standard_normal(n).astype(np.float32)
opt = octopt.Adam([np.zeros(n, np.float32)], bits=8, seed=0)
if os.path.exists(path):
    opt.load(path)  # resume, as a training job restarted after a crash would
k = opt.state_dict()["global_step"]
print("ready", k, flush=True)
while True:
    k += 1
    opt.step([grad(base, k)])
    opt.save(path)
"""
)

namespace: dict = {"np": np}
exec(GRAD_CODE, namespace)  # noqa: S102 - the same definition the child runs
grad = namespace["grad"]


def _state_arrays(opt) -> tuple[int, list[np.ndarray]]:
    sd = opt.state_dict()
    out = []
    for s in sd["state"]:
        out.append(np.array([s["step"]], dtype=np.int64))
        for slot in s["slots"].values():
            out.append(np.asarray(slot["data"]).copy())
            if "absmax" in slot:
                out.append(np.asarray(slot["absmax"]).copy())
    return sd["global_step"], out


def _child_env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    return env


@pytest.mark.slow  # 20 kills of a writer of 8.5 MB files: left out of the everyday run (pytest -m slow)
def test_killed_writer_never_leaves_a_torn_file(tmp_path):
    path = tmp_path / "ckpt.octopt"
    temp_name = re.compile(re.escape(path.name) + r"\.tmp-(\d+)-[0-9a-f]{16}$")
    rng = np.random.default_rng(1234)
    base = np.random.default_rng(0).standard_normal(N).astype(np.float32)
    ref = octopt.Adam([np.zeros(N, np.float32)], bits=8, seed=0)  # advanced to each step found in the file
    ref_step = 0
    seen_step = 0
    interrupted = 0  # kills that landed inside a write (they left that write's temporary)
    t0 = time.monotonic()
    for kill in range(KILLS):
        proc = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(path), str(N)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=_child_env(),
            text=True,
        )
        try:
            line = proc.stdout.readline()
            assert line.startswith("ready"), f"the writer did not start: {line!r} {proc.stderr.read()}"
            assert int(line.split()[1]) == seen_step, "the writer resumed from another step than the file holds"
            time.sleep(rng.uniform(0.0, 0.12))  # a step and a write take about 15 ms each here
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            proc.stdout.close()
            proc.stderr.close()
        assert proc.returncode == -signal.SIGKILL, proc.returncode

        leftovers = [p for p in tmp_path.iterdir() if p != path]
        for p in leftovers:
            m = temp_name.fullmatch(p.name)
            assert m and int(m.group(1)) == proc.pid, f"unexpected file {p.name} after killing pid {proc.pid}"
        assert len(leftovers) <= 1, [p.name for p in leftovers]
        interrupted += len(leftovers)
        for p in leftovers:
            p.unlink()  # the cleanup a restarted job does for the temporaries of dead writers

        if not path.exists():  # killed before its first save: the "old" file is no file at all
            assert seen_step == 0
            continue
        tensors, metadata = state_file.load(path)  # a complete file: every checksum holds
        opt = octopt.Adam([np.zeros(N, np.float32)], bits=8, seed=0)
        opt.load(path)
        step, got = _state_arrays(opt)
        assert step == int(metadata["octopt.step"])
        assert step >= seen_step, f"kill {kill}: the file went back from step {seen_step} to {step}"
        seen_step = step
        while ref_step < step:
            ref_step += 1
            ref.step([grad(base, ref_step)])
        _, want = _state_arrays(ref)
        for k, (a, b) in enumerate(zip(got, want)):
            assert a.tobytes() == b.tobytes(), f"kill {kill}: array {k} of the file at step {step} is not that step's"
    elapsed = time.monotonic() - t0
    assert seen_step > 0, "the writer never completed a save"
    assert interrupted > 0, "no kill landed inside a write: the test did not exercise the atomic rename"
    assert elapsed < 60


# -- loading a bad file changes nothing ----------------------------------------------------------

SHAPES = ((4097,), (33, 65))


def _trained(seed: int = 0, shapes=SHAPES, cls=octopt.Adam, steps: int = 3, **options):
    rng = np.random.default_rng(seed)
    params = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    opt = cls(params, bits=8, min_8bit_size=0, seed=seed, **options)
    for _ in range(steps):
        opt.step([rng.standard_normal(s).astype(np.float32) for s in shapes])
    return opt, params


def _everything(opt, params) -> list[bytes]:
    """The optimizer's whole observable state: parameters, state arrays, step counts, hyper-parameters."""
    sd = opt.state_dict()
    out = [p.tobytes() for p in params]
    _, arrays = _state_arrays(opt)
    out += [a.tobytes() for a in arrays]
    out.append(repr((sd["global_step"], sd["param_groups"], sd["optimizer"])).encode())
    return out


def _corruptions(good: bytes, header_len: int):
    yield "empty", b""
    for cut in (4, 8, 9, header_len // 2, header_len + 7, header_len + 8, len(good) // 2, len(good) - 1):
        yield f"truncated at {cut}", good[:cut]
    for at in (
        0,
        3,
        7,
        12,
        header_len // 3,
        header_len // 2,
        header_len + 4,
        header_len + 9,
        (header_len + 8 + len(good)) // 2,
        len(good) - 1,
    ):
        b = bytearray(good)
        b[at] ^= 0x20
        yield f"byte {at} flipped", bytes(b)
    yield "junk appended", good + b"\0" * 8
    yield "length 2**64-1", b"\xff" * 8 + good[8:]


def test_corrupt_file_never_modifies_the_optimizer(tmp_path):
    src, _ = _trained(seed=1)
    good_path = tmp_path / "good.octopt"
    src.save(good_path)
    good = good_path.read_bytes()
    header_len = int.from_bytes(good[:8], "little")

    opt, params = _trained(seed=2)
    before = _everything(opt, params)
    bad_path = tmp_path / "bad.octopt"
    cases = 0
    for what, data in _corruptions(good, header_len):
        bad_path.write_bytes(data)
        with pytest.raises(ValueError):  # StateFileError is a ValueError
            opt.load(bad_path)
        assert _everything(opt, params) == before, f"a failed load ({what}) changed the optimizer"
        cases += 1
    assert cases > 15

    opt.load(good_path)  # the optimizer still loads a good file, and then steps like the source
    _, got = _state_arrays(opt)
    _, want = _state_arrays(src)
    assert [a.tobytes() for a in got] == [a.tobytes() for a in want]


@pytest.mark.parametrize("other", ["second tensor size", "optimizer kind", "bits", "tensor count"])
def test_mismatched_file_never_modifies_the_optimizer(tmp_path, other):
    """Valid files of another optimizer: refused after validating everything, before copying anything
    (the first tensor matches, so a loader that copied as it went would have changed it)."""
    if other == "second tensor size":
        src, _ = _trained(shapes=((4097,), (33, 64)), steps=2)
    elif other == "optimizer kind":
        src, _ = _trained(cls=octopt.AdamW, steps=2)
    elif other == "bits":
        rng = np.random.default_rng(0)
        src = octopt.Adam(
            [rng.standard_normal(s).astype(np.float32) for s in SHAPES], bits=8, min_8bit_size=0, first_moment_bits=32
        )
    else:
        src, _ = _trained(shapes=SHAPES + ((100,),), steps=2)
    path = tmp_path / "other.octopt"
    src.save(path)
    opt, params = _trained(seed=5)
    before = _everything(opt, params)
    with pytest.raises(ValueError):
        opt.load(path)
    assert _everything(opt, params) == before


@pytest.mark.parametrize("where", ["global_step", "tensor step"])
def test_out_of_range_step_never_modifies_the_optimizer(where):
    """A step count the native plan cannot hold (int64) is refused before anything is copied."""
    src, _ = _trained(seed=1, steps=2)
    sd = src.state_dict()
    if where == "global_step":
        sd["global_step"] = 2**64
    else:
        sd["state"][1]["step"] = 2**63
    opt, params = _trained(seed=5)
    before = _everything(opt, params)
    with pytest.raises(ValueError, match="step count"):
        opt.load_state_dict(sd)
    assert _everything(opt, params) == before
