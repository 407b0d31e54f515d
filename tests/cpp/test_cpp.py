"""Builds the C++ test program of the core (this folder's CMakeLists.txt, OCTOPT_BUILD_TESTS=ON) with
CMake and runs it as CTest runs it (``ctest``); a failing C++ check fails the test with ctest's output.

The build directories live under build/ in the repository root and are reused, so a rerun only
recompiles what changed. A second configuration builds the core and the tests with AddressSanitizer
and UndefinedBehaviorSanitizer, and runs them with LeakSanitizer on (``detect_leaks=1``, after checking
that it reports a deliberate leak): this is the leak check of the native core. Both compile a whole
project, so they are marked ``build`` (``pytest -m build``).
"""

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# the harness's closing line, as ctest -V shows it (prefixed with the test's number)
SUMMARY = re.compile(r"^(?:\d+: )?(\d+) passed, (\d+) failed$", re.MULTILINE)
BUILD_TIMEOUT_S = 900
RUN_TIMEOUT_S = 600

CMAKE = shutil.which("cmake")
# ctest ships with cmake: the one beside it first
CTEST = next((str(p) for p in ([Path(CMAKE).with_name("ctest")] if CMAKE else []) if p.exists()), shutil.which("ctest"))
pytestmark = [
    pytest.mark.build,
    pytest.mark.skipif(CMAKE is None, reason="cmake is not on PATH"),
    pytest.mark.skipif(CTEST is None, reason="ctest is not on PATH"),
]


def _run(cmd, timeout, env=None):
    proc = subprocess.run(
        cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout, env=env
    )
    return proc.returncode, proc.stdout


def _tail(text, limit=20000):
    return text if len(text) <= limit else "...\n" + text[-limit:]


def _cache_matches(build_dir, options):
    cache = build_dir / "CMakeCache.txt"
    if not cache.exists():
        return False
    text = cache.read_text(errors="replace")
    for name, value in options.items():
        m = re.search(rf"^{re.escape(name)}:\w+=(.*)$", text, re.MULTILINE)
        if m is None or m.group(1).strip().upper() != value.upper():
            return False
    return True


def build(build_dir, extra_options=None):
    """Configures build_dir (once) and builds the test programs; returns the build log."""
    options = {
        "OCTOPT_BUILD_TESTS": "ON",
        "OCTOPT_BUILD_PYTHON": "OFF",
        "OCTOPT_ENABLE_CUDA": "OFF",
        "OCTOPT_SANITIZE": "",
    }
    options.update(extra_options or {})
    log = ""
    if not _cache_matches(build_dir, options):
        cmd = [CMAKE, "-S", str(ROOT), "-B", str(build_dir)]
        if not (build_dir / "CMakeCache.txt").exists() and shutil.which("ninja"):
            cmd += ["-G", "Ninja"]  # the generator is chosen once, when the directory is created
        cmd += [f"-D{k}={v}" for k, v in options.items()]
        rc, out = _run(cmd, BUILD_TIMEOUT_S)
        assert rc == 0, f"CMake configure failed:\n{_tail(out)}"
        log += out
    targets = ["octopt_cpp_tests", "octopt_encoder_check"]  # every program CTest runs
    rc, out = _run([CMAKE, "--build", str(build_dir), "-j", "2", "--target", *targets], BUILD_TIMEOUT_S)
    assert rc == 0, f"building {' and '.join(targets)} failed:\n{_tail(out)}"
    return log + out


def run_ctest(build_dir, env=None):
    """Runs the build's CTest tests (the C++ test program), asserts that they and every check in them
    passed, returns ctest's output (with the program's, -V)."""
    rc, out = _run(
        [CTEST, "--test-dir", str(build_dir), "-V", "--timeout", str(RUN_TIMEOUT_S)], RUN_TIMEOUT_S + 60, env=env
    )
    assert rc == 0, f"ctest exited with {rc}:\n{_tail(out)}"
    assert "100% tests passed" in out, f"ctest ran no test or not all passed:\n{_tail(out)}"
    m = SUMMARY.search(out)
    assert m is not None and int(m.group(2)) == 0 and int(m.group(1)) > 0, (
        f"octopt_cpp_tests did not report its checks:\n{_tail(out)}"
    )
    return out


def test_cpp_program():
    build_dir = ROOT / "build" / "cpp-tests"
    log = build(build_dir)
    # The core and the tests compile warning-free with -Wall -Wextra (only what was recompiled shows).
    warnings = [line for line in log.splitlines() if "warning:" in line]
    assert not warnings, "compiler warnings:\n" + "\n".join(warnings[:50])
    run_ctest(build_dir)


ASAN_OPTIONS = "detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1"


def _leak_detection_error(flags, env):
    """None when LeakSanitizer reports a deliberate leak in a program built with flags, else why not.

    On Linux x86-64 ASan turns leak detection on by default, but LeakSanitizer needs ptrace-like access
    to the process's threads (it stops working under a debugger or some container seccomp profiles); a
    clean run is only evidence of no leaks when a leaking program is seen to fail the same way.
    """
    cxx = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")
    with tempfile.TemporaryDirectory() as tmp:
        src, exe = Path(tmp) / "leak.cpp", Path(tmp) / "leak"
        src.write_text(
            "#include <cstdlib>\nvoid* volatile p;\nint main() { p = std::malloc(77); p = nullptr; return 0; }\n"
        )
        proc = subprocess.run(
            [cxx, *flags, str(src), "-o", str(exe)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        if proc.returncode != 0:
            return f"cannot build the leak probe: {proc.stdout.strip()[-500:]}"
        proc = subprocess.run(
            [str(exe)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60, env=env
        )
    if proc.returncode != 0 and "LeakSanitizer: detected memory leaks" in proc.stdout and "77 byte" in proc.stdout:
        return None
    return f"LeakSanitizer did not report a deliberate leak (exit {proc.returncode}): {proc.stdout.strip()[-500:]}"


def test_cpp_program_sanitized(sanitizer_flags):
    flags = sanitizer_flags
    env = dict(os.environ)
    env["ASAN_OPTIONS"] = ASAN_OPTIONS
    env["UBSAN_OPTIONS"] = "print_stacktrace=1:halt_on_error=1"
    # The run below is also the leak check of the native core: make sure leak detection is live.
    leak_reason = _leak_detection_error(flags, env)
    assert leak_reason is None, leak_reason
    build_dir = ROOT / "build" / "cpp-tests-asan"
    # -O1 with line tables: the usual sanitizer setting, and a third of the compile time of -O2 -g.
    options = {
        "OCTOPT_SANITIZE": "address,undefined",
        "CMAKE_BUILD_TYPE": "RelWithDebInfo",
        "CMAKE_CXX_FLAGS_RELWITHDEBINFO": "-O1 -g1",
    }
    log = build(build_dir, options)
    warnings = [line for line in log.splitlines() if "warning:" in line]
    assert not warnings, "compiler warnings:\n" + "\n".join(warnings[:50])
    out = run_ctest(build_dir, env=env)
    # LeakSanitizer makes a leaking run exit non-zero (run_ctest asserts 0) and prints its report.
    assert "runtime error:" not in out and "Sanitizer" not in out, _tail(out)
