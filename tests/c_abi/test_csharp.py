"""A C# program (LeastSquares.cs, P/Invoke) compiled with Mono's mcs and run with mono against the
shipped C ABI library steps a least-squares problem with 8-bit Adam; its parameters must equal, bit for
bit, those of octopt.Adam in Python on the same problem. Skipped with the reason where Mono is missing
(Debian: apt-get install mono-mcs mono-runtime; .ci/run installs them where it can)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import octopt
import pytest

HERE = Path(__file__).resolve().parent
MCS, MONO = shutil.which("mcs"), shutil.which("mono")
pytestmark = pytest.mark.skipif(
    MCS is None or MONO is None, reason="Mono is not installed (apt-get install mono-mcs mono-runtime)"
)
N, STEPS = 4097, 40


def mono_env() -> dict:
    """Mono finds DllImport("octopt_c") as liboctopt_c.so on the library path."""
    env = dict(os.environ)
    folder = os.path.dirname(octopt.c_library())
    env["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in (folder, env.get("LD_LIBRARY_PATH")) if p)
    return env


def test_csharp_program_matches_python_bit_for_bit(tmp_path):
    rng = np.random.default_rng(5)
    a = rng.uniform(0.5, 2.0, N).astype(np.float32)
    b = rng.standard_normal(N).astype(np.float32)
    w0 = rng.standard_normal(N).astype(np.float32)
    (tmp_path / "problem.bin").write_bytes(a.astype("<f4").tobytes() + b.astype("<f4").tobytes() + w0.tobytes())

    exe = tmp_path / "LeastSquares.exe"
    proc = subprocess.run(
        [MCS, "-nologo", f"-out:{exe}", str(HERE / "LeastSquares.cs")], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = tmp_path / "w.bin"
    proc = subprocess.run(
        [MONO, str(exe), str(tmp_path / "problem.bin"), str(out), str(STEPS)],
        capture_output=True, text=True, env=mono_env(), timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "octopt C ABI version 1" in proc.stdout
    assert "create(\"adamx\"): status 1: octopt_optimizer_create: argument 'name' is 'adamx'" in proc.stdout

    w = w0.copy()
    opt = octopt.Adam([w], lr=0.1, bits=8)
    for _ in range(STEPS):
        opt.step([np.float32(2) * a * (a * w - b)])
    assert f"state bytes {opt.state_bytes()}" in proc.stdout
    c_sharp = np.frombuffer(out.read_bytes(), np.float32)
    assert c_sharp.tobytes() == w.tobytes()
    loss = float(proc.stdout.split("loss ")[1].split()[0])
    start = float(np.sum((a.astype(np.float64) * w0 - b) ** 2))
    assert loss < 0.1 * start
