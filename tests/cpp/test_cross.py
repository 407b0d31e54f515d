"""Cross-compiles the core, its C++ test program and the encoder check for aarch64 (cmake/aarch64-linux-gnu.cmake,
Debian's g++-aarch64-linux-gnu) and runs them under qemu-user (qemu-aarch64), so that the NEON and portable
kernels are checked on an x86 machine: the C++ tests (test_isa_hashes.cpp compares every path's quantize and
step outputs with hashes computed on x86-64, so aarch64 must give x86's bits) and the closed-form encoder on a
sample of the floats in [-1, 1] (every 101st bit pattern, plus the 129 floats around each threshold) for each
aarch64 kernel path.

Marked ``cross`` (deselected by default: it compiles the whole core, about a minute on two cores); ``.ci/run``
installs the tools with apt-get where it can and runs it in a step of its own. Skips, saying why, where the
cross compiler or qemu is missing.
"""

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / "build" / "cross-aarch64"
TOOLCHAIN = ROOT / "cmake" / "aarch64-linux-gnu.cmake"
SYSROOT = "/usr/aarch64-linux-gnu"
PREFIX = os.environ.get("OCTOPT_CROSS_PREFIX", "aarch64-linux-gnu-")
SUMMARY = re.compile(r"^(?:\d+: )?(\d+) passed, (\d+) failed$", re.MULTILINE)
ENCODER_STRIDE = 101
TIMEOUT_S = 900

CMAKE = shutil.which("cmake")
CTEST = next((str(p) for p in ([Path(CMAKE).with_name("ctest")] if CMAKE else []) if p.exists()), shutil.which("ctest"))
QEMU = shutil.which("qemu-aarch64")
pytestmark = [
    pytest.mark.cross,
    pytest.mark.skipif(CMAKE is None or CTEST is None, reason="cmake/ctest is not on PATH"),
    pytest.mark.skipif(
        shutil.which(PREFIX + "g++") is None,
        reason=f"no aarch64 cross compiler ({PREFIX}g++; Debian: apt-get install g++-aarch64-linux-gnu)",
    ),
    pytest.mark.skipif(QEMU is None, reason="no qemu-aarch64 (Debian: apt-get install qemu-user)"),
    pytest.mark.skipif(not Path(SYSROOT).is_dir(), reason=f"no aarch64 sysroot at {SYSROOT}"),
]


def _run(cmd, timeout=TIMEOUT_S):
    proc = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout)
    return proc.returncode, proc.stdout


def _tail(text, limit=20000):
    return text if len(text) <= limit else "...\n" + text[-limit:]


@pytest.fixture(scope="module")
def cross_build():
    """Configures build/cross-aarch64 (once) and builds the test programs; returns the build log."""
    log = ""
    if not (BUILD / "CMakeCache.txt").exists():
        cmd = [CMAKE, "-S", str(ROOT), "-B", str(BUILD), f"-DCMAKE_TOOLCHAIN_FILE={TOOLCHAIN}"]
        cmd += [f"-DOCTOPT_CROSS_PREFIX={PREFIX}"]
        cmd += ["-DOCTOPT_BUILD_TESTS=ON", "-DOCTOPT_BUILD_PYTHON=OFF", "-DOCTOPT_ENABLE_CUDA=OFF"]
        if shutil.which("ninja"):
            cmd += ["-G", "Ninja"]
        rc, out = _run(cmd)
        assert rc == 0, f"CMake configure (aarch64) failed:\n{_tail(out)}"
        log += out
    targets = ["octopt_cpp_tests", "octopt_encoder_check"]
    rc, out = _run([CMAKE, "--build", str(BUILD), "-j", "2", "--target", *targets])
    assert rc == 0, f"building {' and '.join(targets)} for aarch64 failed:\n{_tail(out)}"
    return log + out


def test_cross_build_is_warning_free(cross_build):
    warnings = [line for line in cross_build.splitlines() if "warning:" in line]
    assert not warnings, "compiler warnings (aarch64):\n" + "\n".join(warnings[:50])


def test_cpp_program_under_qemu(cross_build):
    # CTest runs the programs through CMAKE_CROSSCOMPILING_EMULATOR (qemu-aarch64 -L SYSROOT, the toolchain file)
    rc, out = _run([CTEST, "--test-dir", str(BUILD), "-V", "--timeout", str(TIMEOUT_S)], TIMEOUT_S + 60)
    assert rc == 0, f"ctest (aarch64 under qemu) exited with {rc}:\n{_tail(out)}"
    assert "100% tests passed" in out, f"ctest ran no test or not all passed:\n{_tail(out)}"
    m = SUMMARY.search(out)
    assert m is not None and int(m.group(2)) == 0 and int(m.group(1)) > 0, f"no check summary:\n{_tail(out)}"
    for isa in ("neon", "baseline"):
        assert f"isa_hashes: checking the {isa} kernels" in out, f"the x86 hash comparison skipped {isa}:\n{_tail(out)}"
    assert "kernels: neon" in out, f"aarch64 did not choose the NEON kernels by default:\n{_tail(out)}"


@pytest.mark.parametrize("isa", ["neon", "baseline"])
def test_encoder_check_under_qemu(cross_build, isa):
    exe = BUILD / "tests" / "cpp" / "octopt_encoder_check"
    rc, out = _run([QEMU, "-L", SYSROOT, str(exe), "--stride", str(ENCODER_STRIDE), "--isa", isa])
    assert rc == 0, f"encoder check ({isa}, aarch64) exited with {rc}:\n{out}"
    assert f"kernels: {isa}," in out, out
    lines = [line for line in out.splitlines() if "floats checked" in line]
    assert len(lines) == 12, out  # each map, then the same map at 24 block scales
    for line in lines:
        assert line.endswith(", 0 differ"), out
        assert int(re.search(r"(\d+) floats checked", line).group(1)) > 2_000_000, out
