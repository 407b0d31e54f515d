"""A C program (least_squares.c) built with CMake against the installed package (find_package(octopt)
with octopt_DIR = octopt.cmake_dir(), target octopt::c) and run by CTest: 8-bit Adam on a least-squares
problem, and a run saved and loaded halfway continues bit for bit as the uninterrupted one."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import octopt
import pytest

HERE = Path(__file__).resolve().parent
CMAKE = shutil.which("cmake")
CC = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
pytestmark = [
    pytest.mark.skipif(CMAKE is None, reason="cmake is not on PATH"),
    pytest.mark.skipif(CC is None, reason="no C compiler found (cc, gcc or clang)"),
]


def _run(cmd, timeout=300):
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{' '.join(map(str, cmd))}:\n{proc.stdout[-10000:]}{proc.stderr[-10000:]}"
    return proc.stdout


def test_c_program_through_ctest(tmp_path):
    build = tmp_path / "build"
    gen = ["-G", "Ninja"] if shutil.which("ninja") else []
    _run([CMAKE, "-S", HERE, "-B", build, *gen, f"-Doctopt_DIR={octopt.cmake_dir()}"])
    _run([CMAKE, "--build", build])
    ctest = Path(CMAKE).with_name("ctest")
    out = _run([ctest if ctest.exists() else "ctest", "--test-dir", build, "-V", "--timeout", "120"])
    assert "100% tests passed" in out, out
    assert "save/load: resumed run bit-identical: yes" in out and "all checks passed" in out, out
