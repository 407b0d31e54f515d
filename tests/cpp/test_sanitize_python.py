"""The Python-facing core paths once under AddressSanitizer and UndefinedBehaviorSanitizer.

Builds the extension with ``OCTOPT_SANITIZE=address,undefined`` (CPU only, -O1) into a private
``--target`` folder under build/ (the CMake build folder next to it is reused, so a rerun only
recompiles what changed), then runs a short script in a fresh interpreter with the ASan runtime
preloaded (CPython itself is not instrumented). The script walks the maps, quantize/dequantize
(8/4 bits, float32/float16, nearest/stochastic, ragged sizes), every optimizer at 32/8/4 bits, a
save/load of a state file and the load of a corrupt one. Leak detection is off here: CPython does
not free everything at exit; the native core's leaks are checked by the C++ test program under
LeakSanitizer (test_cpp.py). The build needs what the [test] extra installs: scikit-build-core,
nanobind, CMake and Ninja (it runs pip with --no-build-isolation).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BASE = ROOT / "build" / "python-asan"
BUILD_TIMEOUT_S = 900
RUN_TIMEOUT_S = 300

pytestmark = [
    pytest.mark.build,
    pytest.mark.sanitize,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="preloads the ASan runtime (Linux only)"),
]

SCRIPT = textwrap.dedent(
    """
    import numpy as np
    import octopt
    from octopt import maps

    rng = np.random.default_rng(0)
    for bits in (8, 4):
        maps.dynamic_map(True, bits); maps.dynamic_map(False, bits)
        maps.linear_map(True, bits); maps.linear_map(False, bits, zero=False)
        maps.quantile_map(rng.standard_normal(1000).astype(np.float32), bits=bits)
    maps.log2_map(4); maps.fp8_map()

    for n in (1, 255, 257, 4097):
        for dtype in (np.float32, np.float16):
            x = rng.standard_normal(n).astype(dtype)
            for bits in (8, 4):
                for block in (64, 256):
                    for rounding in ("nearest", "stochastic"):
                        codes, absmax = octopt.quantize_blockwise(x, block_size=block, bits=bits, rounding=rounding)
                        y = octopt.dequantize_blockwise(codes, absmax, block_size=block, bits=bits, dtype=dtype,
                                                        shape=x.shape)
                        assert y.shape == x.shape and np.isfinite(y).all()
    try:
        octopt.quantize_blockwise(np.array([1.0, np.nan], np.float32))
    except ValueError:
        pass
    else:
        raise AssertionError("NaN input accepted")

    shapes = ((1,), (255,), (17, 29), (4097,))
    for name in ("Adam", "AdamW", "SGD", "RMSprop", "Adagrad", "Lion", "AdEMAMix", "LAMB", "LARS"):
        cls = getattr(octopt, name)
        for bits in (32, 8, 4):
            params = [rng.standard_normal(s).astype(np.float32) for s in shapes]
            extra = {"SGD": {"momentum": 0.9, "nesterov": True}, "RMSprop": {"momentum": 0.9, "centered": True}}
            opt = cls(params, lr=1e-3, bits=bits, min_8bit_size=0, **extra.get(name, {}))
            for _ in range(3):
                opt.step([rng.standard_normal(s).astype(np.float32) for s in shapes])
            assert all(np.isfinite(p).all() for p in params), (name, bits)

    import os, sys, tempfile
    with tempfile.TemporaryDirectory() as tmp:
        params = [rng.standard_normal(s).astype(np.float32) for s in shapes]
        opt = octopt.Adam(params, bits=8, min_8bit_size=0)
        opt.step([rng.standard_normal(s).astype(np.float32) for s in shapes])
        path = os.path.join(tmp, "state.safetensors")
        opt.save(path)
        other = octopt.Adam([p.copy() for p in params], bits=8, min_8bit_size=0)
        other.load(path)
        raw = bytearray(open(path, "rb").read())
        for cut, flip in ((len(raw) // 2, None), (len(raw), 20), (len(raw), len(raw) - 3), (5, None)):
            bad = bytearray(raw[:cut])
            if flip is not None:
                bad[flip] ^= 0x40
            badpath = os.path.join(tmp, "bad.safetensors")
            open(badpath, "wb").write(bytes(bad))
            try:
                other.load(badpath)
            except (octopt.StateFileError, ValueError):
                pass
            else:
                raise AssertionError(f"corrupt file (cut {cut}, flip {flip}) loaded")
    print("SANITIZED-RUN-OK")
    """
)


CONTROL = textwrap.dedent(
    """
    import ctypes
    libc = ctypes.CDLL(None)
    libc.malloc.restype = ctypes.c_void_p
    libc.free.argtypes = [ctypes.c_void_p]
    p = libc.malloc(16)
    libc.free(p)
    buf = ctypes.create_string_buffer(16)
    ctypes.memmove(buf, p, 8)
    """
)


def _preload() -> str | None:
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        return None
    libs = []
    for name in ("libasan.so", "libubsan.so"):
        out = subprocess.run([cc, f"-print-file-name={name}"], stdout=subprocess.PIPE, text=True).stdout.strip()
        if not os.path.isabs(out) or not os.path.exists(out):
            return None
        libs.append(out)
    return " ".join(libs)


def test_python_core_paths_under_asan(sanitizer_flags, tail):
    # sanitizer_flags: skipped, with the reason, where the compiler cannot build and run ASan/UBSan code
    preload = _preload()
    if preload is None:
        pytest.skip("gcc does not report the paths of libasan.so/libubsan.so to preload")
    site = BASE / "site"
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "install",
        "--no-build-isolation",
        "--no-deps",
        "--upgrade",
        "-q",
        "--target",
        str(site),
        str(ROOT),
        f"-Cbuild-dir={BASE / 'cmake'}",
        "-Ccmake.build-type=RelWithDebInfo",
        "-Ccmake.define.CMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1",
        "-Ccmake.define.OCTOPT_SANITIZE=address,undefined",
        "-Ccmake.define.OCTOPT_ENABLE_CUDA=OFF",
    ]
    env = dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1")
    proc = subprocess.run(
        cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=BUILD_TIMEOUT_S, env=env
    )
    if proc.returncode != 0 and "No module named pip" in proc.stdout:
        pytest.skip("pip is not available to build the sanitized extension")
    assert proc.returncode == 0, f"building the sanitized extension failed:\n{tail(proc.stdout)}"

    (so,) = (site / "octopt").glob("_octopt*.so")
    binary = so.read_bytes()
    assert b"__asan_report_load" in binary and b"__ubsan_handle" in binary, f"{so} is not instrumented"

    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "LD_PRELOAD")}
    env.update(
        PYTHONPATH=str(site),
        LD_PRELOAD=preload,
        ASAN_OPTIONS="detect_leaks=0:abort_on_error=0:halt_on_error=1",
        UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1",
        PYTHONMALLOC="malloc",  # every Python allocation goes through ASan's malloc
    )
    # Control: in this setup a use-after-free is reported (so a clean run below means something).
    control = subprocess.run(
        [sys.executable, "-c", CONTROL],
        cwd=BASE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        timeout=60,
        env=env,
    )
    assert control.returncode != 0 and "ERROR: AddressSanitizer: heap-use-after-free" in control.stderr, (
        f"the preloaded ASan runtime did not catch a use-after-free:\n{tail(control.stderr)}"
    )
    run = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        cwd=BASE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        timeout=RUN_TIMEOUT_S,
        env=env,
    )
    report = f"exit {run.returncode}\nstdout:\n{tail(run.stdout)}\nstderr:\n{tail(run.stderr)}"
    assert run.returncode == 0, report
    assert "SANITIZED-RUN-OK" in run.stdout, report
    assert "ERROR: AddressSanitizer" not in run.stderr, report
    assert "runtime error" not in run.stderr, report
    # the module really is the instrumented one
    check = subprocess.run(
        [sys.executable, "-c", "import octopt._octopt as m; print(m.__file__)"],
        cwd=BASE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        timeout=60,
        env=env,
    )
    assert check.returncode == 0 and str(site) in check.stdout, check.stdout + check.stderr
