"""ctypes declarations of octopt's C ABI (cpp/include/octopt/c.h) and its bad-input cases.

Loaded by the tests through the ``capi`` fixture (conftest.py); also run as a script,
``python capi.py LIBRARY``, which calls every bad-input case against that library and prints the
(status, message) pairs as JSON: how the ASan build of the library is exercised in a process of its
own (test_bad_input.py), without importing octopt.
"""

from __future__ import annotations

import contextlib
import ctypes as C
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Callable

OK, ERR_VALUE, ERR_TYPE, ERR_FORMAT, ERR_FILE, ERR_STATE, ERR_MEMORY, ERR_NULL = range(8)
FLOAT32, FLOAT16, BFLOAT16 = 0, 1, 2
CPU = -1

_P = C.c_void_p
_SIGNATURES = {
    "octopt_abi_version": (C.c_int, []),
    "octopt_version": (C.c_char_p, []),
    "octopt_last_error": (C.c_char_p, []),
    "octopt_cuda_built": (C.c_int, []),
    "octopt_optimizer_count": (C.c_int, []),
    "octopt_optimizer_name": (C.c_char_p, [C.c_int]),
    "octopt_optimizer_class_name": (C.c_char_p, [C.c_int]),
    "octopt_hparam_count": (C.c_int, []),
    "octopt_hparam_key": (C.c_char_p, [C.c_int]),
    "octopt_default": (C.c_int, [C.c_char_p, C.c_char_p, C.POINTER(C.c_double)]),
    "octopt_optimizer_create": (C.c_int, [C.c_char_p, C.POINTER(_P)]),
    "octopt_optimizer_destroy": (None, [_P]),
    "octopt_set": (C.c_int, [_P, C.c_char_p, C.c_double]),
    "octopt_set_string": (C.c_int, [_P, C.c_char_p, C.c_char_p]),
    "octopt_add_group": (C.c_int, [_P, C.POINTER(C.c_int)]),
    "octopt_add_param": (
        C.c_int,
        [_P, C.c_int, _P, C.c_int, C.POINTER(C.c_int64), C.c_int, C.c_int, C.POINTER(C.c_size_t)],
    ),
    "octopt_group_set": (C.c_int, [_P, C.c_int, C.c_char_p, C.c_double]),
    "octopt_group_get": (C.c_int, [_P, C.c_int, C.c_char_p, C.POINTER(C.c_double)]),
    "octopt_step": (C.c_int, [_P, C.POINTER(_P), C.POINTER(C.c_int), C.c_size_t, _P, C.POINTER(C.c_int64)]),
    "octopt_save": (C.c_int, [_P, C.c_char_p]),
    "octopt_load": (C.c_int, [_P, C.c_char_p]),
    "octopt_state_bytes": (C.c_int, [_P, C.POINTER(C.c_size_t)]),
    "octopt_num_params": (C.c_int, [_P, C.POINTER(C.c_size_t)]),
    "octopt_num_groups": (C.c_int, [_P, C.POINTER(C.c_int)]),
    "octopt_global_step": (C.c_int, [_P, C.POINTER(C.c_int64)]),
    "octopt_param_step": (C.c_int, [_P, C.c_size_t, C.POINTER(C.c_int64)]),
    "octopt_param_slot_count": (C.c_int, [_P, C.c_size_t, C.POINTER(C.c_int)]),
    "octopt_param_slot": (
        C.c_int,
        [
            _P,
            C.c_size_t,
            C.c_int,
            C.POINTER(C.c_char_p),
            C.POINTER(C.c_int),
            C.POINTER(C.c_int),
            C.POINTER(_P),
            C.POINTER(C.c_size_t),
            C.POINTER(_P),
            C.POINTER(C.c_size_t),
        ],
    ),
    "octopt_dynamic_map": (C.c_int, [C.c_int, C.c_int, _P, C.c_size_t]),
    "octopt_linear_map": (C.c_int, [C.c_int, C.c_int, _P, C.c_size_t]),
    "octopt_log2_map": (C.c_int, [C.c_int, C.c_double, _P, C.c_size_t]),
    "octopt_fp8_map": (C.c_int, [_P, C.c_size_t]),
    "octopt_quantile_map": (C.c_int, [_P, C.c_int64, C.c_int, _P, C.c_size_t]),
    "octopt_quantize_blockwise": (
        C.c_int,
        [_P, C.c_int, C.c_int64, _P, C.c_int64, C.c_int, C.c_int, C.c_int, C.c_uint64, _P, _P, C.c_int, _P],
    ),
    "octopt_dequantize_blockwise": (
        C.c_int,
        [_P, _P, C.c_int64, _P, C.c_int64, C.c_int, C.c_int, C.c_int, _P, C.c_int, _P],
    ),
}


def load(path: str) -> C.CDLL:
    """The library at path with every function of c.h declared."""
    lib = C.CDLL(path)
    for name, (res, args) in _SIGNATURES.items():
        f = getattr(lib, name)
        f.restype, f.argtypes = res, args
    return lib


def last_error(lib: C.CDLL) -> str:
    return lib.octopt_last_error().decode()


def addr(a) -> int:
    """The address of a NumPy array's data (None for None)."""
    return None if a is None else a.ctypes.data


class Opt:
    """A C-ABI optimizer: create by name, set options, add NumPy parameters, step; raises on an error
    status with the library's message (RuntimeError(status, message))."""

    def __init__(self, lib: C.CDLL, name: str, **options: float):
        self.lib = lib
        self.h = _P()
        self._call(lib.octopt_optimizer_create(name.encode(), C.byref(self.h)))
        for k, v in options.items():
            if isinstance(v, str):
                self._call(lib.octopt_set_string(self.h, k.encode(), v.encode()))
            else:
                self._call(lib.octopt_set(self.h, k.encode(), float(v)))
        self.params: list = []

    def _call(self, status: int) -> None:
        if status != OK:
            raise RuntimeError(status, last_error(self.lib))

    def add(self, p, group: int = 0) -> None:
        shape = (C.c_int64 * max(p.ndim, 1))(*p.shape)
        code = {"float32": FLOAT32, "float16": FLOAT16}[p.dtype.name]
        self._call(self.lib.octopt_add_param(self.h, group, addr(p), code, shape, p.ndim, CPU, None))
        self.params.append(p)

    def step(self, grads: list) -> int:
        arr = (_P * len(grads))(*[addr(g) for g in grads])
        codes = (C.c_int * len(grads))(*[FLOAT32 if g is None or g.dtype.name == "float32" else FLOAT16 for g in grads])
        skipped = C.c_int64()
        self._call(self.lib.octopt_step(self.h, arr, codes, len(grads), None, C.byref(skipped)))
        return skipped.value

    def slots(self, i: int) -> dict:
        """{name: (bits, data bytes, absmax bytes or None)} of parameter i, copied."""
        n = C.c_int()
        self._call(self.lib.octopt_param_slot_count(self.h, i, C.byref(n)))
        out = {}
        for k in range(n.value):
            name, bits, bs, data, count, absmax, blocks = (
                C.c_char_p(),
                C.c_int(),
                C.c_int(),
                _P(),
                C.c_size_t(),
                _P(),
                C.c_size_t(),
            )
            self._call(
                self.lib.octopt_param_slot(
                    self.h, i, k, *(C.byref(x) for x in (name, bits, bs, data, count, absmax, blocks))
                )
            )
            nbytes = count.value * (4 if bits.value == 32 else 1)
            am = C.string_at(absmax.value, blocks.value * 4) if absmax.value else None
            out[name.value.decode()] = (bits.value, C.string_at(data.value, nbytes) if nbytes else b"", am)
        return out

    def close(self) -> None:
        self.lib.octopt_optimizer_destroy(self.h)
        self.h = _P()


# ---- bad input ----------------------------------------------------------------------------------
# Each case makes one mistake through the C ABI and returns (status, message). PY_SAME names the cases
# whose message must equal str() of the exception octopt's Python layer raises for the same mistake
# (test_bad_input.py makes that mistake in Python); the others have no Python counterpart and state
# their message here.


def _opt(lib, name="adam", **options):
    h = _P()
    assert lib.octopt_optimizer_create(name.encode(), C.byref(h)) == OK, last_error(lib)
    for k, v in options.items():
        assert lib.octopt_set(h, k.encode(), float(v)) == OK, last_error(lib)
    return h


def _with_param(lib, n=1000, **options):
    import_np = __import__("numpy")
    h = _opt(lib, **options)
    p = import_np.zeros(n, import_np.float32)
    shape = (C.c_int64 * 1)(n)
    assert lib.octopt_add_param(h, 0, addr(p), FLOAT32, shape, 1, CPU, None) == OK, last_error(lib)
    return h, p


def _result(lib, status, *handles):
    msg = last_error(lib)
    for h in handles:
        lib.octopt_optimizer_destroy(h)
    return status, msg


def case_create_null_name(lib):
    h = _P()
    return _result(lib, lib.octopt_optimizer_create(None, C.byref(h)))


def case_create_null_out(lib):
    return _result(lib, lib.octopt_optimizer_create(b"adam", None))


def case_create_unknown_name(lib):
    h = _P()
    return _result(lib, lib.octopt_optimizer_create(b"adamx", C.byref(h)))


def case_create_direction_step(lib):
    h = _P()
    return _result(lib, lib.octopt_optimizer_create(b"muon", C.byref(h)))


def case_null_handle(lib):
    return _result(lib, lib.octopt_set(None, b"lr", 0.1))


def case_step_null_handle(lib):
    return _result(lib, lib.octopt_step(None, None, None, 0, None, None))


def case_unknown_option(lib):
    h = _opt(lib)
    return _result(lib, lib.octopt_set(h, b"foo", 1.0), h)


def case_lr_negative(lib):
    h = _opt(lib, lr=-1.0)
    return _result(lib, lib.octopt_add_group(h, None), h)


def case_lr_nan(lib):
    h = _opt(lib, lr=float("nan"))
    return _result(lib, lib.octopt_add_group(h, None), h)


def case_beta1_one(lib):
    h = _opt(lib, **{"betas[0]": 1.0})
    return _result(lib, lib.octopt_add_group(h, None), h)


def case_bits(lib):
    h = _opt(lib, bits=6)
    return _result(lib, lib.octopt_add_group(h, None), h)


def case_bits_fraction(lib):
    h = _opt(lib)
    return _result(lib, lib.octopt_set(h, b"bits", 8.5), h)


def case_block_size(lib):
    h = _opt(lib, block_size=100)
    return _result(lib, lib.octopt_add_group(h, None), h)


def case_percentile(lib):
    h = _opt(lib)
    return _result(lib, lib.octopt_set(h, b"percentile", 101.0), h)


def case_state_map(lib):
    h = _opt(lib)
    return _result(lib, lib.octopt_set_string(h, b"state_map", b"fp4"), h)


def case_sgd_momentum_negative(lib):
    h = _opt(lib, "sgd", momentum=-0.5)
    return _result(lib, lib.octopt_add_group(h, None), h)


def case_param_dtype_code(lib):
    h = _opt(lib)
    buf = (C.c_int32 * 10)()
    shape = (C.c_int64 * 1)(10)
    return _result(lib, lib.octopt_add_param(h, 0, C.addressof(buf), 7, shape, 1, CPU, None), h)


def case_param_null_shape(lib):
    h = _opt(lib)
    buf = (C.c_float * 10)()
    return _result(lib, lib.octopt_add_param(h, 0, C.addressof(buf), FLOAT32, None, 1, CPU, None), h)


def case_param_twice(lib):
    h, p = _with_param(lib)
    shape = (C.c_int64 * 1)(p.size)
    return _result(lib, lib.octopt_add_param(h, 0, addr(p), FLOAT32, shape, 1, CPU, None), h)


def case_param_overlap(lib):
    h, p = _with_param(lib)
    shape = (C.c_int64 * 1)(10)
    return _result(lib, lib.octopt_add_param(h, 0, addr(p) + 40, FLOAT32, shape, 1, CPU, None), h)


def case_param_bad_group(lib):
    h = _opt(lib)
    buf = (C.c_float * 10)()
    shape = (C.c_int64 * 1)(10)
    return _result(lib, lib.octopt_add_param(h, 3, C.addressof(buf), FLOAT32, shape, 1, CPU, None), h)


def case_step_grad_count(lib):
    h, p = _with_param(lib)
    return _result(lib, lib.octopt_step(h, None, None, 0, None, None), h)


def case_step_grads_null(lib):
    h, p = _with_param(lib)
    return _result(lib, lib.octopt_step(h, None, None, 1, None, None), h)


def case_step_grad_dtype_code(lib):
    np = __import__("numpy")
    h, p = _with_param(lib)
    g = np.zeros(p.size, np.float32)
    grads, codes = (_P * 1)(addr(g)), (C.c_int * 1)(9)
    return _result(lib, lib.octopt_step(h, grads, codes, 1, None, None), h)


def case_step_grad_is_param(lib):
    h, p = _with_param(lib)
    grads = (_P * 1)(addr(p))
    return _result(lib, lib.octopt_step(h, grads, None, 1, None, None), h)


def case_step_lr_nan_in_group(lib):
    np = __import__("numpy")
    h, p = _with_param(lib)
    g = np.zeros(p.size, np.float32)
    assert lib.octopt_group_set(h, 0, b"lr", float("nan")) == OK
    return _result(lib, lib.octopt_step(h, (_P * 1)(addr(g)), None, 1, None, None), h)


def case_step_strict_nan(lib):
    np = __import__("numpy")
    h, p = _with_param(lib, strict=1)
    g = np.zeros(p.size, np.float32)
    g[::256] = np.nan
    return _result(lib, lib.octopt_step(h, (_P * 1)(addr(g)), None, 1, None, None), h)


def case_group_set_layout(lib):
    h, p = _with_param(lib)
    return _result(lib, lib.octopt_group_set(h, 0, b"bits", 4.0), h)


def case_group_set_bad_group(lib):
    h, p = _with_param(lib)
    return _result(lib, lib.octopt_group_set(h, 5, b"lr", 0.1), h)


@contextlib.contextmanager
def case_dir():
    """A fresh folder of a fixed name (removed afterwards): the file cases' messages name their paths,
    and the Python side of a case (test_bad_input.py) uses the same folder."""
    path = os.path.join(tempfile.gettempdir(), "octopt-c-abi-bad-input")
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _file_case(lib, content: bytes | None, make_dir: bool = False):
    h, p = _with_param(lib)
    with case_dir() as tmp:
        path = os.path.join(tmp, "state.safetensors")
        if make_dir:
            os.mkdir(path)
        elif content is not None:
            with open(path, "wb") as f:
                f.write(content)
        return _result(lib, lib.octopt_load(h, path.encode()), h)


def case_load_missing(lib):
    return _file_case(lib, None)


def case_load_directory(lib):
    return _file_case(lib, None, make_dir=True)


def case_load_empty(lib):
    return _file_case(lib, b"")


def case_load_garbage(lib):
    return _file_case(lib, b"\xff" * 64)


def case_load_corrupt(lib):
    """A file this optimizer saved, with one byte of its data flipped."""
    h, p = _with_param(lib)
    with case_dir() as tmp:
        path = os.path.join(tmp, "state.safetensors")
        assert lib.octopt_save(h, path.encode()) == OK, last_error(lib)
        data = bytearray(open(path, "rb").read())
        data[-5] ^= 0x10
        open(path, "wb").write(bytes(data))
        return _result(lib, lib.octopt_load(h, path.encode()), h)


def case_slot_of_no_param(lib):
    h = _opt(lib)
    n = C.c_int()
    return _result(lib, lib.octopt_param_slot_count(h, 0, C.byref(n)), h)


def case_step_of_no_param(lib):
    h = _opt(lib)
    s = C.c_int64()
    return _result(lib, lib.octopt_param_step(h, 2, C.byref(s)), h)


def case_save_no_group(lib):
    h = _opt(lib)
    return _result(lib, lib.octopt_save(h, b"x.safetensors"), h)


def case_save_null_path(lib):
    h, p = _with_param(lib)
    return _result(lib, lib.octopt_save(h, None), h)


def case_quantize_dtype_code(lib):
    x, codes, absmax = (C.c_float * 300)(), (C.c_uint8 * 300)(), (C.c_float * 2)()
    args = (None, 0, 256, 8, 0, 0, C.addressof(codes), C.addressof(absmax), CPU, None)
    return _result(lib, lib.octopt_quantize_blockwise(C.addressof(x), 5, 300, *args))


def case_quantize_block_size(lib):
    x, codes, absmax = (C.c_float * 300)(), (C.c_uint8 * 300)(), (C.c_float * 3)()
    args = (None, 0, 100, 8, 0, 0, C.addressof(codes), C.addressof(absmax), CPU, None)
    return _result(lib, lib.octopt_quantize_blockwise(C.addressof(x), FLOAT32, 300, *args))


def case_quantize_bits(lib):
    x, codes, absmax = (C.c_float * 300)(), (C.c_uint8 * 300)(), (C.c_float * 3)()
    args = (None, 0, 256, 3, 0, 0, C.addressof(codes), C.addressof(absmax), CPU, None)
    return _result(lib, lib.octopt_quantize_blockwise(C.addressof(x), FLOAT32, 300, *args))


def case_quantize_nan(lib):
    x, codes, absmax = (C.c_float * 2)(1.0, float("nan")), (C.c_uint8 * 2)(), (C.c_float * 1)()
    args = (None, 0, 256, 8, 0, 0, C.addressof(codes), C.addressof(absmax), CPU, None)
    return _result(lib, lib.octopt_quantize_blockwise(C.addressof(x), FLOAT32, 2, *args))


def case_quantize_qmap_size(lib):
    x, codes, absmax, q = (C.c_float * 300)(), (C.c_uint8 * 300)(), (C.c_float * 2)(), (C.c_float * 17)()
    args = (C.addressof(q), 17, 256, 8, 0, 0, C.addressof(codes), C.addressof(absmax), CPU, None)
    return _result(lib, lib.octopt_quantize_blockwise(C.addressof(x), FLOAT32, 300, *args))


def case_quantize_null_x(lib):
    codes, absmax = (C.c_uint8 * 300)(), (C.c_float * 2)()
    args = (None, 0, 256, 8, 0, 0, C.addressof(codes), C.addressof(absmax), CPU, None)
    return _result(lib, lib.octopt_quantize_blockwise(None, FLOAT32, 300, *args))


def case_dequantize_block_size(lib):
    codes, absmax, out = (C.c_uint8 * 300)(), (C.c_float * 3)(), (C.c_float * 300)()
    args = (None, 0, 100, 8, FLOAT32, C.addressof(out), CPU, None)
    return _result(lib, lib.octopt_dequantize_blockwise(C.addressof(codes), C.addressof(absmax), 300, *args))


def case_map_bits(lib):
    out = (C.c_float * 512)()
    return _result(lib, lib.octopt_dynamic_map(1, 9, C.addressof(out), 512))


def case_log2_step_nan(lib):
    out = (C.c_float * 16)()
    return _result(lib, lib.octopt_log2_map(4, float("nan"), C.addressof(out), 16))


def case_map_out_short(lib):
    out = (C.c_float * 16)()
    return _result(lib, lib.octopt_dynamic_map(1, 8, C.addressof(out), 16))


CASES: dict[str, Callable] = {
    k[len("case_") :]: v for k, v in dict(globals()).items() if k.startswith("case_") and k != "case_dir"
}


if __name__ == "__main__":
    lib = load(sys.argv[1])
    results = {name: case(lib) for name, case in CASES.items()}
    print(json.dumps(results))
