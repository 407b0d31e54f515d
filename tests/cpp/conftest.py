"""Fixtures of the C++ tests and of the tests that compile the project (all marked ``build``).

``pip install ".[test]"`` installs CMake and Ninja as Python packages, next to the interpreter. A venv
that was not activated does not have that folder on PATH, so it is put first on PATH here, before the
test modules look the tools up; the compiler is the one tool the machine itself must provide.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sysconfig
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest

_SCRIPTS = sysconfig.get_path("scripts")
if _SCRIPTS and any(os.path.exists(os.path.join(_SCRIPTS, tool)) for tool in ("cmake", "ninja")):
    os.environ["PATH"] = _SCRIPTS + os.pathsep + os.environ.get("PATH", "")

SANITIZER_FLAGS = ["-fsanitize=address,undefined"]


def cxx() -> str | None:
    return os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")


def _tail(text: str, limit: int = 20000) -> str:
    return text if len(text) <= limit else "...\n" + text[-limit:]


def _sanitizer_link_error(flags: list[str]) -> str | None:
    """None when the C++ compiler builds and runs a program with these flags, else why not."""
    compiler = cxx()
    if compiler is None:
        return "no C++ compiler found"
    with tempfile.TemporaryDirectory() as tmp:
        src, exe = Path(tmp) / "probe.cpp", Path(tmp) / "probe"
        src.write_text("#include <vector>\nint main() { std::vector<int> v(3); return v[1]; }\n")
        try:
            proc = subprocess.run(
                [compiler, *flags, str(src), "-o", str(exe)],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            if proc.returncode != 0:
                return f"{compiler} {' '.join(flags)} cannot link: {proc.stdout.strip()[-500:]}"
            proc = subprocess.run([str(exe)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60)
        except OSError as e:
            return f"{compiler} {' '.join(flags)}: {e}"
        if proc.returncode != 0:
            return f"a program built with {' '.join(flags)} does not run here: {proc.stdout.strip()[-500:]}"
    return None


@pytest.fixture(scope="session")
def sanitizer_flags() -> list[str]:
    """The ASan + UBSan compiler flags, when this machine's compiler builds and runs such a program;
    else the test is skipped with the reason."""
    reason = _sanitizer_link_error(SANITIZER_FLAGS)
    if reason is not None:
        pytest.skip(reason)
    return list(SANITIZER_FLAGS)


@pytest.fixture(scope="session")
def tail() -> Callable[..., str]:
    """``tail(text, limit=20000)``: the end of a long build or test log, for an assertion message."""
    return _tail
