"""bench/gpu_check.sh, the first-contact script of a lent GPU machine, run here without a GPU: it must never
pass by skipping. A fake ``nvidia-smi`` on PATH that lists an H200 while octopt cannot use a GPU (this
machine: no driver at all) must give exit status 3 and say "visible but unusable"; with no nvidia-smi it
must give 2 at once. Both write the log and the summary table under $OUT."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import octopt
import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "gpu_check.sh"
FAKE_SMI = """#!/bin/sh
# a driver that lists one GPU, as a machine with a too-old driver does
case "$1" in
  -L) echo "GPU 0: NVIDIA H200 (UUID: GPU-00000000-fake)" ;;
  *) echo "NVIDIA H200, 143771 MiB, 570.86.15" ;;
esac
"""

BASH = shutil.which("bash")
pytestmark = pytest.mark.skipif(BASH is None, reason="needs bash")


def _run(tmp_path: Path, path: str, timeout: int = 120) -> subprocess.CompletedProcess:
    out = tmp_path / "out"
    env = dict(os.environ, PATH=path, OUT=str(out), GPU_CHECK_SITE=str(Path(octopt.__file__).parents[1]))
    env.pop("OCTOPT_REQUIRE_GPU", None)
    return subprocess.run([BASH, str(SCRIPT)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


def test_script_parses():
    r = subprocess.run([BASH, "-n", str(SCRIPT)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_visible_but_unusable_gpu_fails(tmp_path):
    if octopt.cuda_available():
        pytest.skip("this machine has a usable GPU: the fake driver would not be the one octopt sees")
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "nvidia-smi").write_text(FAKE_SMI)
    (fake / "nvidia-smi").chmod(0o755)
    r = _run(tmp_path, f"{fake}:{os.environ['PATH']}")
    assert r.returncode == 3, r.stdout[-3000:] + r.stderr[-2000:]
    assert "GPU VISIBLE BUT UNUSABLE" in r.stdout
    summary = (tmp_path / "out" / "gpu_check_summary.md").read_text()
    assert "| GPU visible (nvidia-smi) | PASS |" in summary
    assert "| octopt can use the GPU | FAIL |" in summary
    assert "NVIDIA H200" in (tmp_path / "out" / "gpu_check.log").read_text()


def test_no_driver_fails_fast(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("date", "mktemp", "mkdir", "tee", "grep", "tail", "head", "timeout", "dirname", "cat", "rm"):
        found = shutil.which(tool)
        if found:
            (bin_dir / tool).symlink_to(found)
    r = _run(tmp_path, str(bin_dir), timeout=30)  # nvidia-smi is not on this PATH
    assert r.returncode == 2, r.stdout[-3000:] + r.stderr[-2000:]
    assert "nvidia-smi not found" in r.stdout
    assert "| GPU visible (nvidia-smi) | FAIL |" in (tmp_path / "out" / "gpu_check_summary.md").read_text()


def test_require_gpu_stops_a_test_run_without_a_usable_gpu(tmp_path):
    """OCTOPT_REQUIRE_GPU=1 (set by the script for the GPU test suite) turns "every GPU test skipped" into a
    usage error that names why octopt cannot use a GPU."""
    if octopt.cuda_available():
        pytest.skip("this machine has a usable GPU")
    env = dict(os.environ, OCTOPT_REQUIRE_GPU="1")
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/core/test_runtime.py", "-k", "info"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 4, r.stdout[-2000:] + r.stderr[-2000:]
    assert "OCTOPT_REQUIRE_GPU=1 but octopt cannot use a GPU" in r.stdout + r.stderr
