"""Threads, build information and the ``octopt info`` command."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import octopt
import pytest


def _run_python(*args: str, **env_vars: str) -> subprocess.CompletedProcess:
    # the child must import the same octopt as this process
    package_root = str(Path(octopt.__file__).resolve().parent.parent)
    env = dict(os.environ, **env_vars)
    env["PYTHONPATH"] = os.pathsep.join([package_root] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, timeout=120)


def _run_cli(*args: str, **env_vars: str) -> subprocess.CompletedProcess:
    return _run_python("-m", "octopt", *args, **env_vars)


def test_set_get_num_threads_round_trip(restore_threads):
    for n in (1, 2, 3, 1):
        octopt.set_num_threads(n)
        assert octopt.get_num_threads() == n
    assert octopt.info()["threads"] == 1


@pytest.mark.parametrize("n", [0, -1])
def test_set_num_threads_rejects_non_positive(restore_threads, n):
    with pytest.raises(ValueError, match=f"set_num_threads: argument 'n' must be >= 1, got {n}"):
        octopt.set_num_threads(n)
    assert octopt.get_num_threads() == restore_threads


@pytest.mark.parametrize("n", [True, 2.0, "2", None])
def test_set_num_threads_rejects_non_int(restore_threads, n):
    with pytest.raises(TypeError, match="set_num_threads: argument 'n' must be an int"):
        octopt.set_num_threads(n)


@pytest.mark.parametrize("bits", [8, 4])
@pytest.mark.parametrize("block_size", [32, 4096])
def test_results_identical_with_one_and_two_threads(restore_threads, bits, block_size):
    # 2^18 + 5 elements: more blocks than one thread's share at either block size
    x = np.random.default_rng(1).standard_normal(2**18 + 5).astype(np.float32)
    results = []
    for threads in (1, 2):
        octopt.set_num_threads(threads)
        codes, absmax = octopt.quantize_blockwise(x, block_size=block_size, bits=bits)
        y = octopt.dequantize_blockwise(codes, absmax, block_size=block_size, bits=bits, shape=x.shape)
        results.append((codes, absmax, y))
    for a, b in zip(*results):
        np.testing.assert_array_equal(a, b)


SWITCH_THREADS = """
import numpy as np, octopt
x = np.random.default_rng(0).standard_normal(2**15).astype(np.float32)
want = octopt.quantize_blockwise(x, block_size=32)[0]
for i in range(1000):
    octopt.set_num_threads(1 + i % 2)
    assert (octopt.quantize_blockwise(x, block_size=32)[0] == want).all(), i
print("ok")
"""


def test_switching_thread_count_repeatedly():
    """Restarted workers once took the previous region's cleared job and crashed (SIGSEGV); run in a
    child process so that a crash fails this test instead of ending the session."""
    proc = _run_python("-c", SWITCH_THREADS)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", (proc.returncode, proc.stderr[-2000:])


def test_cuda_flags_are_consistent():
    assert isinstance(octopt.cuda_built(), bool) and isinstance(octopt.cuda_available(), bool)
    assert not (octopt.cuda_available() and not octopt.cuda_built())


def test_info_dict():
    info = octopt.info()
    assert info["version"] == octopt.__version__
    assert info["threads"] == octopt.get_num_threads()
    assert info["cuda_built"] == octopt.cuda_built()
    assert info["cuda_available"] == octopt.cuda_available()
    assert info["compiler"] and info["simd"]
    assert (info["cuda_devices"] > 0) == info["cuda_available"]
    # why not (bench/gpu_check.sh prints it): a string exactly when CUDA is unavailable
    assert (info["cuda_unavailable_reason"] is None) == info["cuda_available"]
    assert not octopt.cuda_built() or info["cuda_available"] or info["cuda_unavailable_reason"]
    assert isinstance(info["xla_ffi_built"], bool)
    assert isinstance(info["xla_ffi_cuda_built"], bool)
    # the CUDA handler needs both CUDA and the XLA FFI headers
    assert not info["xla_ffi_cuda_built"] or (info["xla_ffi_built"] and info["cuda_built"])


def _rows(stdout: str) -> dict[str, str]:
    """'name  value' lines (name padded, two spaces before the value)."""
    return dict(re.split(r"\s{2,}", line.strip(), maxsplit=1) for line in stdout.splitlines() if line.strip())


def test_cli_info():
    proc = _run_cli("info")
    assert proc.returncode == 0, proc.stderr
    rows = _rows(proc.stdout)
    info = octopt.info()
    assert rows["octopt"] == octopt.__version__
    assert rows["compiler"] == info["compiler"]
    assert rows["SIMD level in use"] == info["simd"]
    assert int(rows["CPU threads"]) >= 1  # the child's default; test_cli_threads_follow_environment pins it
    assert rows["CUDA built"].startswith("yes" if octopt.cuda_built() else "no")
    assert rows["CUDA available"].startswith("yes" if octopt.cuda_available() else "no")
    assert rows["XLA FFI handler"].startswith("yes" if info["xla_ffi_built"] else "no")
    assert rows["XLA FFI handler"].endswith("CUDA)") == info["xla_ffi_cuda_built"]


def test_cli_threads_follow_environment():
    proc = _run_cli("info", OCTOPT_NUM_THREADS="3")
    assert proc.returncode == 0, proc.stderr
    assert _rows(proc.stdout)["CPU threads"] == "3"


def test_cli_needs_a_command():
    proc = _run_cli()
    assert proc.returncode != 0
    assert "info" in proc.stderr
