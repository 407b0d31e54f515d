"""C++ consumers: find_package(octopt CONFIG) against an installed prefix and against the wheel, and
state files shared between octopt::Optimizer (C++) and octopt.Optimizer (Python).

The core is built once under build/cpp-consumer (reused across runs) and installed into a temporary
prefix; examples/cpp is configured and built against it. examples/cpp/interop.cpp mirrors the
setup of `_py_setup` below, so both sides can step, save and load each other's files.
"""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
CMAKE = shutil.which("cmake")
CXX = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")
TIMEOUT_S = 900

pytestmark = [
    pytest.mark.build,
    pytest.mark.skipif(CMAKE is None, reason="cmake is not on PATH"),
    pytest.mark.skipif(CXX is None, reason="no C++ compiler found (CXX, c++, g++ or clang++)"),
]

SHAPES = [(64, 80), (100,), (4097,)]  # as kShapes in examples/cpp/interop.cpp
EXE = ".exe" if sys.platform == "win32" else ""


def _run(cmd, cwd=ROOT, check=True):
    proc = subprocess.run(
        [str(c) for c in cmd], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=TIMEOUT_S
    )
    if check:
        what = " ".join(map(str, cmd))
        assert proc.returncode == 0, f"{what} exited with {proc.returncode}:\n{proc.stdout[-20000:]}"
    return proc


def _generator(build_dir):
    if not (build_dir / "CMakeCache.txt").exists() and shutil.which("ninja"):
        return ["-G", "Ninja"]  # chosen once, when the directory is created
    return []


@pytest.fixture(scope="module")
def prefix(tmp_path_factory):
    """The core (CPU only, no Python) built under build/cpp-consumer and installed into a temp prefix."""
    build_dir = ROOT / "build" / "cpp-consumer"
    if not (build_dir / "CMakeCache.txt").exists():
        _run(
            [
                CMAKE,
                "-S",
                ROOT,
                "-B",
                build_dir,
                *_generator(build_dir),
                "-DOCTOPT_BUILD_PYTHON=OFF",
                "-DOCTOPT_ENABLE_CUDA=OFF",
                "-DOCTOPT_BUILD_TESTS=OFF",
                "-DCMAKE_BUILD_TYPE=Release",
            ]
        )
    _run([CMAKE, "--build", build_dir, "-j", "2", "--target", "octopt", "octopt_c"])  # what --install installs
    dest = tmp_path_factory.mktemp("prefix")
    _run([CMAKE, "--install", build_dir, "--prefix", dest])
    return dest


def _build_examples(build_dir, find_arg):
    proc = _run(
        [CMAKE, "-S", ROOT / "examples" / "cpp", "-B", build_dir, *_generator(build_dir), find_arg], check=False
    )
    if proc.returncode != 0:
        return proc
    log = _run([CMAKE, "--build", build_dir, "-j", "2"]).stdout
    warnings = [line for line in log.splitlines() if "warning:" in line]
    assert not warnings, "compiler warnings:\n" + "\n".join(warnings[:50])
    return proc


@pytest.fixture(scope="module")
def examples(prefix, tmp_path_factory):
    """examples/cpp built against the installed prefix; returns its build folder."""
    build_dir = tmp_path_factory.mktemp("examples-prefix")
    proc = _build_examples(build_dir, f"-DCMAKE_PREFIX_PATH={prefix}")
    assert proc.returncode == 0, f"configuring examples/cpp failed:\n{proc.stdout[-20000:]}"
    return build_dir


def _check_least_squares(build_dir, tmp_path):
    out = _run([build_dir / f"least_squares{EXE}", tmp_path / "ls.safetensors"]).stdout
    losses = [float(x) for x in re.findall(r"loss ([0-9.eE+-]+)$", out, re.MULTILINE)]
    assert len(losses) >= 3 and losses[-1] < losses[0], out
    assert "resumed run matches the uninterrupted one" in out, out
    import octopt

    # the C++ example's file is an ordinary octopt state file
    w = np.zeros((64, 512), np.float32)
    opt = octopt.AdamW([w], lr=1e-2, weight_decay=1e-4)
    opt.load(tmp_path / "ls.safetensors")
    assert opt.state_layout()[0]["step"] == 100


def test_least_squares_installed_prefix(examples, prefix, tmp_path):
    for part in ("include/octopt/optimizer.hpp", "include/octopt/octopt.hpp", "share/cmake/octopt/octoptConfig.cmake"):
        assert (prefix / part).exists(), part
    assert list(prefix.glob("lib*/liboctopt.a")), "liboctopt.a was not installed"
    _check_least_squares(examples, tmp_path)


def test_least_squares_wheel(tmp_path):
    import octopt

    cmake_dir = Path(octopt.cmake_dir())
    pkg = Path(octopt.__file__).parent
    for part in (
        cmake_dir / "octoptConfig.cmake",
        cmake_dir / "octoptConfigVersion.cmake",
        pkg / "include" / "octopt" / "optimizer.hpp",
        pkg / "lib" / "liboctopt.a",
    ):
        if not part.exists():
            if pkg.resolve() == (ROOT / "python" / "octopt").resolve():
                pytest.skip(
                    "octopt is imported from the source tree (editable install): there is no wheel "
                    "layout with headers, liboctopt.a and the CMake config to test"
                )
            pytest.fail(f"the installed octopt does not ship {part}")
    build_dir = tmp_path / "examples-wheel"
    proc = _build_examples(build_dir, f"-Doctopt_DIR={cmake_dir}")
    if proc.returncode != 0 and octopt.cuda_built() and "CUDAToolkit" in proc.stdout:
        pytest.skip(
            "this wheel was built with CUDA, and its CMake config needs a CUDA toolkit "
            "(find_dependency(CUDAToolkit)) that CMake cannot find here"
        )
    assert proc.returncode == 0, f"configuring examples/cpp against the wheel failed:\n{proc.stdout[-20000:]}"
    _check_least_squares(build_dir, tmp_path)


# ---- state files across languages ---------------------------------------------------------------


def _py_setup(bits, kind="AdamW", shapes=SHAPES):
    import octopt

    params = []
    for k, shape in enumerate(shapes):
        i = np.arange(int(np.prod(shape)), dtype=np.int64)
        params.append((((7 * i + 3 * k) % 61 - 30).astype(np.float32) / np.float32(64)).reshape(shape))
    opt = getattr(octopt, kind)(params, lr=1e-2, weight_decay=1e-2, bits=bits)
    return params, opt


def _py_step(opt, params, s):
    grads = []
    for k, p in enumerate(params):
        i = np.arange(p.size, dtype=np.int64)
        grads.append((((13 * i + 5 * s + k) % 53 - 26).astype(np.float32) / np.float32(32)).reshape(p.shape))
    opt.step(grads)


def _read(path):
    from octopt import state_file

    tensors, metadata = state_file.load(str(path))
    return tensors, metadata


def _assert_same_state(a, b):
    (ta, ma), (tb, mb) = _read(a), _read(b)
    assert sorted(ta) == sorted(tb)
    for name in ta:
        assert ta[name].dtype == tb[name].dtype and ta[name].shape == tb[name].shape, name
        np.testing.assert_array_equal(ta[name], tb[name], err_msg=name)
    for key in ("octopt.optimizer", "octopt.step"):
        assert ma[key] == mb[key], key
    for key in ("octopt.hparams", "octopt.tensors"):
        assert json.loads(ma[key]) == json.loads(mb[key]), key


@pytest.mark.parametrize("bits", [8, 4])
def test_state_files_cpp_python(examples, tmp_path, bits):
    interop = examples / f"interop{EXE}"
    cpp_file, py_file = tmp_path / "cpp.safetensors", tmp_path / "py.safetensors"

    # Three steps in C++ and in Python give the same file: same layout, metadata and state, bit for bit.
    _run([interop, "write", cpp_file, bits])
    params, opt = _py_setup(bits)
    for s in (1, 2, 3):
        _py_step(opt, params, s)
    opt.save(py_file)
    _assert_same_state(cpp_file, py_file)

    # C++ -> Python: the C++ file loads, with identical state.
    params2, opt2 = _py_setup(bits)
    opt2.load(cpp_file)
    tensors, _ = _read(cpp_file)
    sd = opt2.state_dict()
    assert sd["global_step"] == 3 and [s["step"] for s in sd["state"]] == [3, 3, 3]
    for i, s in enumerate(sd["state"]):
        for name, e in s["slots"].items():
            if e["bits"] == 32:
                np.testing.assert_array_equal(e["data"], tensors[f"state.{i}.{name}"])
            else:
                np.testing.assert_array_equal(e["data"], tensors[f"state.{i}.{name}.codes"])
                np.testing.assert_array_equal(e["absmax"], tensors[f"state.{i}.{name}.absmax"])

    # Python -> C++: both continue the Python file by one step and agree on parameters and state.
    cpp_next, cpp_params = tmp_path / "cpp_next.safetensors", tmp_path / "cpp_params.bin"
    _run([interop, "continue", py_file, cpp_next, cpp_params, bits])
    params3, opt3 = _py_setup(bits)
    opt3.load(py_file)
    _py_step(opt3, params3, 4)
    opt3.save(tmp_path / "py_next.safetensors")
    got = np.fromfile(cpp_params, dtype=np.float32)
    np.testing.assert_array_equal(got, np.concatenate([p.ravel() for p in params3]))
    _assert_same_state(cpp_next, tmp_path / "py_next.safetensors")
    assert not np.array_equal(got, np.concatenate([p.ravel() for p in _py_setup(bits)[0]]))


def test_state_file_mismatch_refused(examples, tmp_path):
    interop = examples / f"interop{EXE}"
    # another optimizer
    params, opt = _py_setup(8, "Adam")
    opt.save(tmp_path / "adam.safetensors")
    out, out_params = tmp_path / "o", tmp_path / "p"
    proc = _run([interop, "continue", tmp_path / "adam.safetensors", out, out_params], check=False)
    assert proc.returncode == 2, proc.stdout
    assert "optimizer 'adam' but this optimizer is 'adamw'" in proc.stdout, proc.stdout
    # other bits, either direction
    _run([interop, "write", tmp_path / "b4.safetensors", 4])
    proc = _run([interop, "continue", tmp_path / "b4.safetensors", out, out_params, 8], check=False)
    assert proc.returncode == 2 and "bits=4 in the file but 8 here" in proc.stdout, proc.stdout
    assert not out.exists()
    params, opt = _py_setup(8)
    with pytest.raises(ValueError, match="bits=4 in the file but 8 here"):
        opt.load(tmp_path / "b4.safetensors")
    # another shape with the same element count
    params, opt = _py_setup(8, shapes=[SHAPES[0], (10, 10), SHAPES[2]])
    opt.save(tmp_path / "shape.safetensors")
    proc = _run([interop, "continue", tmp_path / "shape.safetensors", out, out_params], check=False)
    assert proc.returncode == 2, proc.stdout
    assert "tensor 1 has shape (10, 10) in the file but parameter 1 has shape (100,)" in proc.stdout, proc.stdout
