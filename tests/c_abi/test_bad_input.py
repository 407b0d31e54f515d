"""Bad input through the C ABI returns an error status and a message, never a crash: NULL pointers,
unknown names and options, wrong dtype codes, bad block sizes and hyper-parameters, corrupt state files.
Where the Python layer has the same mistake its exception's text is the expected message, computed here
by making that mistake in Python; the C-only mistakes state their message. The same cases run once more
against an AddressSanitizer + UBSan build of the library, in a process of their own (marked build)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import octopt
import pytest

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
E = {"value": 1, "type": 2, "format": 3, "file": 4, "state": 5, "null": 7}


def _p(n=1000):
    return [np.zeros(n, np.float32)]


def _nan_grad():
    g = np.zeros(1000, np.float32)
    g[::256] = np.nan
    return g


def _adam_step(grads, **group):
    opt = octopt.Adam(_p())
    opt.param_groups[0].update(group)
    p = opt.params[0]
    return opt.step([p if isinstance(g, str) else g for g in grads])


def _load(content=None, make_dir=False, corrupt=False):
    opt = octopt.Adam(_p())
    with CASE_DIR() as tmp:
        path = os.path.join(tmp, "state.safetensors")
        if make_dir:
            os.mkdir(path)
        elif corrupt:
            opt.save(path)
            data = bytearray(open(path, "rb").read())
            data[-5] ^= 0x10
            open(path, "wb").write(bytes(data))
        elif content is not None:
            open(path, "wb").write(content)
        opt.load(path)


def _q(x, **kw):
    octopt.quantize_blockwise(x, **kw)


X = np.zeros(300, np.float32)
CASE_DIR = None  # set by the capi fixture below: the folder both sides' file cases use, so paths match


@pytest.fixture(autouse=True)
def _case_dir(capi):
    global CASE_DIR
    CASE_DIR = capi.case_dir


# case -> (status, the same mistake in Python)
PY_SAME = {
    "unknown_option": ("type", lambda: octopt.Adam(_p(), foo=1.0)),
    "lr_negative": ("value", lambda: octopt.Adam(_p(), lr=-1.0)),
    "lr_nan": ("value", lambda: octopt.Adam(_p(), lr=float("nan"))),
    "beta1_one": ("value", lambda: octopt.Adam(_p(), betas=(1.0, 0.999))),
    "bits": ("value", lambda: octopt.Adam(_p(), bits=6)),
    "bits_fraction": ("value", lambda: octopt.Adam(_p(), bits=8.5)),
    "block_size": ("value", lambda: octopt.Adam(_p(), block_size=100)),
    "percentile": ("value", lambda: octopt.Adam(_p(), percentile=101.0)),
    "state_map": ("value", lambda: octopt.Adam(_p(), state_map="fp4")),
    "sgd_momentum_negative": ("value", lambda: octopt.SGD(_p(), momentum=-0.5)),
    "param_twice": ("value", lambda: octopt.Adam(2 * _p())),
    "param_overlap": ("value", lambda: octopt.Adam([(a := np.zeros(1000, np.float32)), a[10:20]])),
    "step_grad_count": ("value", lambda: _adam_step([])),
    "step_grad_dtype_code": ("type", lambda: _adam_step([np.zeros(1000, np.int32)])),
    "step_grad_is_param": ("value", lambda: _adam_step(["param"])),
    "step_lr_nan_in_group": ("value", lambda: _adam_step([np.zeros(1000, np.float32)], lr=float("nan"))),
    "step_strict_nan": ("value", lambda: octopt.Adam(_p(), strict=True).step([_nan_grad()])),
    "load_missing": ("file", lambda: _load()),
    "load_directory": ("file", lambda: _load(make_dir=True)),
    "load_empty": ("format", lambda: _load(b"")),
    "load_garbage": ("format", lambda: _load(b"\xff" * 64)),
    "load_corrupt": ("format", lambda: _load(corrupt=True)),
    "quantize_block_size": ("value", lambda: _q(X, block_size=100)),
    "quantize_bits": ("value", lambda: _q(X, bits=3)),
    "quantize_nan": ("value", lambda: _q(np.array([1.0, np.nan], np.float32))),
    "quantize_qmap_size": ("value", lambda: _q(X, qmap=np.zeros(17, np.float32))),
    "dequantize_block_size": (
        "value",
        lambda: octopt.dequantize_blockwise(np.zeros(300, np.uint8), np.zeros(3, np.float32), block_size=100),
    ),
    "map_bits": ("value", lambda: octopt.dynamic_map(True, 9)),
    "log2_step_nan": ("value", lambda: octopt.log2_map(4, float("nan"))),
}

# The mistakes Python cannot make (pointers, integer codes, the C functions' own arguments): their words.
C_ONLY = {
    "create_null_name": ("null", "octopt_optimizer_create: argument 'name' is NULL"),
    "create_null_out": ("null", "octopt_optimizer_create: argument 'out' is NULL"),
    "create_unknown_name": (
        "value",
        "octopt_optimizer_create: argument 'name' is 'adamx', which is no optimizer of the table (adam, adamw, ",
    ),
    "create_direction_step": (
        "value",
        "octopt_optimizer_create: argument 'name' is 'muon', whose step writes a direction for the caller's "
        "orthogonalization, which the C API does not run; step it with the C++ or Python API (docs/muon.md)",
    ),
    "null_handle": ("null", "octopt_set: argument 'opt' is NULL"),
    "step_null_handle": ("null", "step: argument 'opt' is NULL"),
    "param_dtype_code": (
        "type",
        "Adam: argument 'params[0]' must have dtype float32 or float16 or bfloat16, got dtype code 7",
    ),
    "param_null_shape": ("null", "Adam: argument 'shape' is NULL"),
    "param_bad_group": ("value", "Adam: argument 'group' is 3 but there are 0 param group(s)"),
    "step_grads_null": ("null", "step: argument 'grads' is NULL"),
    "group_set_layout": (
        "value",
        "octopt_group_set: 'bits' lays out the group's state; the state layout cannot change after the group was added",
    ),
    "group_set_bad_group": ("value", "octopt_group_set: argument 'group' is 5 but there are 1 param group(s)"),
    "save_null_path": ("null", "save: argument 'path' is NULL"),
    "save_no_group": ("state", "save: the optimizer has no param group yet"),
    "slot_of_no_param": ("value", "octopt_param_slot_count: argument 'param' is 0 but there are 0 parameter(s)"),
    "step_of_no_param": ("value", "octopt_param_step: argument 'param' is 2 but there are 0 parameter(s)"),
    "quantize_dtype_code": (
        "type",
        "quantize_blockwise: argument 'x' must have dtype float32 or float16 or bfloat16, got dtype code 5",
    ),
    "quantize_null_x": ("null", "quantize_blockwise: argument 'x' is NULL"),
    "map_out_short": ("value", "dynamic_map: argument 'out' must hold 256 values, got 16"),
}


def python_message(make_mistake) -> str:
    with pytest.raises(Exception) as info:  # noqa: B017 - each case's own exception type is compared via status
        make_mistake()
    return str(info.value)


def _python_exception_status(make_mistake) -> str:
    try:
        make_mistake()
    except octopt.StateFileError:
        return "format"
    except OSError:
        return "file"
    except TypeError:
        return "type"
    except ValueError:
        return "value"
    raise AssertionError("no exception")


def test_every_case_is_listed_once(capi):
    assert set(PY_SAME) | set(C_ONLY) == set(capi.CASES)
    assert not set(PY_SAME) & set(C_ONLY)


def expected_one(name: str) -> tuple[int, str, bool]:
    """(status, message, whole message (True) or its beginning) of a case."""
    if name in PY_SAME:
        status, mistake = PY_SAME[name]
        return E[status], python_message(mistake), True
    status, message = C_ONLY[name]
    return E[status], message, not message.endswith(", ")


def expected() -> dict[str, tuple[int, str, bool]]:
    return {name: expected_one(name) for name in [*PY_SAME, *C_ONLY]}


def check(results: dict, want: dict) -> list[str]:
    bad = []
    for name, (status, message, whole) in want.items():
        got_status, got = results[name]
        if got_status != status or (got != message if whole else not got.startswith(message)):
            bad.append(f"{name}: got ({got_status}, {got!r}), expected ({status}, {message!r})")
    return bad


@pytest.mark.parametrize("name", sorted(PY_SAME))
def test_python_raises_the_exception_the_status_names(name):
    status, mistake = PY_SAME[name]
    assert _python_exception_status(mistake) == status


@pytest.mark.parametrize("name", sorted(PY_SAME) + sorted(C_ONLY))
def test_bad_input_returns_the_python_message(clib, capi, name):
    assert check({name: capi.CASES[name](clib)}, {name: expected_one(name)}) == []


def _sanitizer_preload() -> str | None:
    """libasan and libubsan (which brings libstdc++ early, so that ASan's __cxa_throw interceptor finds
    the real one), as LD_PRELOAD for an uninstrumented interpreter."""
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        return None
    libs = []
    for name in ("libasan.so", "libubsan.so"):
        path = subprocess.run([cc, f"-print-file-name={name}"], capture_output=True, text=True).stdout.strip()
        if not os.path.isabs(path) or not os.path.exists(path):
            return None
        libs.append(path)
    return " ".join(libs)


# Control: in the same setup a use-after-free is reported, so a clean run means something.
CONTROL = "import ctypes; libc = ctypes.CDLL(None); libc.malloc.restype = ctypes.c_void_p; p = libc.malloc(16); "
CONTROL += "libc.free.argtypes = [ctypes.c_void_p]; libc.free(p); ctypes.string_at(p, 8)"


@pytest.mark.build
@pytest.mark.sanitize
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="preloads the ASan runtime (Linux only)")
def test_bad_input_under_address_sanitizer():
    """The library built with OCTOPT_SANITIZE=address,undefined under build/c-abi-asan (reused), every
    case run in a fresh interpreter with the ASan runtime preloaded: the same statuses and messages, and
    no sanitizer report."""
    preload = _sanitizer_preload()
    if preload is None:
        pytest.skip("gcc does not report the paths of libasan.so/libubsan.so to preload")
    cmake = shutil.which("cmake")
    build_dir = ROOT / "build" / "c-abi-asan"
    if not (build_dir / "CMakeCache.txt").exists():
        cmd = [cmake, "-S", ROOT, "-B", build_dir, "-DOCTOPT_ENABLE_CUDA=OFF", "-DOCTOPT_BUILD_PYTHON=OFF"]
        cmd += ["-DOCTOPT_SANITIZE=address,undefined", "-DCMAKE_BUILD_TYPE=RelWithDebInfo"]
        cmd += ["-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1"] + (["-G", "Ninja"] if shutil.which("ninja") else [])
        proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=900)
        assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-5000:]
    proc = subprocess.run(
        [cmake, "--build", str(build_dir), "-j", "2", "--target", "octopt_c"], capture_output=True, text=True,
        timeout=1800,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-5000:]
    lib = next(build_dir.glob("cpp/liboctopt_c.*"))
    # leak detection off: CPython does not free everything at exit (the core's leaks: tests/cpp/test_cpp.py)
    env = dict(os.environ, LD_PRELOAD=preload, ASAN_OPTIONS="detect_leaks=0:halt_on_error=1")
    env.update(UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1", PYTHONMALLOC="malloc")
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)  # NumPy for the cases' arrays
    control = subprocess.run([sys.executable, "-c", CONTROL], capture_output=True, text=True, timeout=120, env=env)
    assert control.returncode != 0 and "heap-use-after-free" in control.stderr, control.stderr[-5000:]
    proc = subprocess.run(
        [sys.executable, str(HERE / "capi.py"), str(lib)], capture_output=True, text=True, timeout=600, env=env
    )
    assert proc.returncode == 0, proc.stderr[-20000:]
    assert "Sanitizer" not in proc.stderr and "runtime error:" not in proc.stderr, proc.stderr[-20000:]
    results = {k: tuple(v) for k, v in json.loads(proc.stdout.strip().splitlines()[-1]).items()}
    assert check(results, expected()) == []
