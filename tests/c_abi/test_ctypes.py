"""Python's ctypes against the shipped C ABI library (octopt.c_library()): every optimizer of the table
at 32/8/4 bits gives the same bits as octopt.<Class> on the same data (parameters, every state slot,
the state file), and the library describes itself and its table as the Python package does."""

from __future__ import annotations

import ctypes as C
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import octopt
import pytest

SHAPES = [(4097,), (33, 65), (100,)]  # ragged against every block size; (100,) stays 32-bit by min_8bit_size
STEPS = 4
# options that exercise the optional state slots and warm-ups
EXTRA = {
    "sgd": {"momentum": 0.9, "nesterov": 1.0},
    "rmsprop": {"momentum": 0.5, "centered": 1.0},
    "ademamix": {"t_alpha": 3.0, "t_beta3": 3.0},
    "adagrad": {"initial_accumulator_value": 0.1},
    "lars": {"weight_decay": 1e-3},
    "adamw": {"weight_decay": 0.05},
}
# the element-wise optimizers; a direction step (Muon) is refused by the C API (test below)
TABLE = [(e["name"], e["class_name"]) for e in octopt._octopt.optimizer_table() if not e["direction_step"]]


def python_options(name: str) -> dict:
    return {k: bool(v) if k in ("nesterov", "centered") else v for k, v in EXTRA.get(name, {}).items()}


def test_library_describes_itself(clib, capi):
    assert clib.octopt_abi_version() == 1
    assert clib.octopt_version().decode() == octopt.__version__
    assert bool(clib.octopt_cuda_built()) == octopt.cuda_built()
    names = [clib.octopt_optimizer_name(i).decode() for i in range(clib.octopt_optimizer_count())]
    classes = [clib.octopt_optimizer_class_name(i).decode() for i in range(clib.octopt_optimizer_count())]
    assert list(zip(names, classes)) == [(e["name"], e["class_name"]) for e in octopt._octopt.optimizer_table()]
    assert clib.octopt_optimizer_name(len(names)) is None
    keys = [clib.octopt_hparam_key(i).decode() for i in range(clib.octopt_hparam_count())]
    assert keys == [h["key"] for h in octopt._octopt.hparam_table()]
    v = C.c_double()
    for name, cls in TABLE:
        defaults = getattr(octopt, cls).defaults
        assert clib.octopt_default(name.encode(), b"lr", C.byref(v)) == capi.OK
        assert v.value == defaults["lr"]
        assert clib.octopt_default(name.encode(), b"betas[1]", C.byref(v)) == capi.OK
        assert v.value == defaults["betas"][1]


def test_c_library_is_in_the_package():
    path = Path(octopt.c_library())
    package = {Path(octopt.__file__).parent, Path(octopt._octopt.__file__).parent}  # editable: two folders
    assert path.is_file() and path.parent.parent in package and path.parent.name in ("lib", "bin")
    assert octopt.info()["c_library"] == str(path)
    out = subprocess.run([sys.executable, "-m", "octopt", "info"], capture_output=True, text=True, check=True).stdout
    assert re.search(rf"^C library\s+{re.escape(str(path))}$", out, re.MULTILINE), out


@pytest.mark.parametrize("bits", [32, 8, 4])
@pytest.mark.parametrize("name,cls", TABLE, ids=[n for n, _ in TABLE])
def test_every_optimizer_is_bit_identical_to_python(clib, capi, name, cls, bits, tmp_path):
    rng = np.random.default_rng(7)
    init = [rng.standard_normal(s).astype(np.float32) for s in SHAPES]
    grads = [[rng.standard_normal(s).astype(np.float32) for s in SHAPES] for _ in range(STEPS)]
    grads[1][1] = None  # a parameter without a gradient this step
    grads[2][0][5] = np.nan  # a skipped block

    py_params = [p.copy() for p in init]
    py = getattr(octopt, cls)(py_params, bits=bits, min_8bit_size=1000, seed=3, lr=1e-2, **python_options(name))
    c_params = [p.copy() for p in init]
    c = capi.Opt(clib, name, bits=bits, min_8bit_size=1000, seed=3, lr=1e-2, **EXTRA.get(name, {}))
    for p in c_params:
        c.add(p)
    try:
        for t, g in enumerate(grads):
            if t == 2:  # a schedule: change the learning rate of the group on both sides
                py.param_groups[0]["lr"] = 5e-3
                assert clib.octopt_group_set(c.h, 0, b"lr", 5e-3) == capi.OK
            py_skipped = py.step(g)
            assert c.step(g) == py_skipped
        for i, (a, b) in enumerate(zip(py_params, c_params)):
            assert a.tobytes() == b.tobytes(), f"parameter {i} differs"
        for i, t in enumerate(py.tensors):
            slots = c.slots(i)
            assert set(slots) == {s.name for s in t.specs}
            for s in t.specs:
                c_bits, data, absmax = slots[s.name]
                py_data, py_absmax = t.buffers[s.index]
                assert c_bits == s.bits
                assert data == np.ascontiguousarray(py_data).tobytes(), f"parameter {i} slot {s.name}"
                assert absmax == (None if py_absmax is None else np.ascontiguousarray(py_absmax).tobytes())
        size = C.c_size_t()
        assert clib.octopt_state_bytes(c.h, C.byref(size)) == capi.OK and size.value == py.state_bytes()
        # the same state file, byte for byte, and each side reads the other's
        py.save(tmp_path / "py.safetensors")
        assert clib.octopt_save(c.h, str(tmp_path / "c.safetensors").encode()) == capi.OK, capi.last_error(clib)
        assert (tmp_path / "py.safetensors").read_bytes() == (tmp_path / "c.safetensors").read_bytes()
        assert clib.octopt_load(c.h, str(tmp_path / "py.safetensors").encode()) == capi.OK
        py.load(tmp_path / "c.safetensors")
    finally:
        c.close()


@pytest.mark.parametrize("bits", [8, 4])
def test_quantize_dequantize_and_maps_match_python(clib, capi, bits):
    rng = np.random.default_rng(1)
    x = rng.standard_normal(4097).astype(np.float32)
    for rounding in ("nearest", "stochastic"):
        codes, absmax = octopt.quantize_blockwise(x, block_size=64, bits=bits, rounding=rounding, seed=9)
        c_codes = np.empty(codes.size, np.uint8)
        c_absmax = np.empty(absmax.size, np.float32)
        status = clib.octopt_quantize_blockwise(
            x.ctypes.data, capi.FLOAT32, x.size, None, 0, 64, bits, rounding == "stochastic", 9,
            c_codes.ctypes.data, c_absmax.ctypes.data, capi.CPU, None,
        )  # fmt: skip
        assert status == capi.OK, capi.last_error(clib)
        assert c_codes.tobytes() == codes.tobytes() and c_absmax.tobytes() == absmax.tobytes()
        y = octopt.dequantize_blockwise(codes, absmax, block_size=64, bits=bits, shape=x.shape)
        c_y = np.empty_like(y)
        status = clib.octopt_dequantize_blockwise(
            c_codes.ctypes.data, c_absmax.ctypes.data, x.size, None, 0, 64, bits, capi.FLOAT32, c_y.ctypes.data,
            capi.CPU, None,
        )  # fmt: skip
        assert status == capi.OK, capi.last_error(clib)
        assert c_y.tobytes() == y.tobytes()
    out = np.empty(2**bits, np.float32)
    for signed in (0, 1):
        assert clib.octopt_dynamic_map(signed, bits, out.ctypes.data, out.size) == capi.OK
        assert out.tobytes() == octopt.dynamic_map(bool(signed), bits).tobytes()
        assert clib.octopt_linear_map(signed, bits, out.ctypes.data, out.size) == capi.OK
        assert out.tobytes() == octopt.linear_map(bool(signed), bits).tobytes()
    assert clib.octopt_quantile_map(x.ctypes.data, x.size, bits, out.ctypes.data, out.size) == capi.OK
    assert out.tobytes() == octopt.quantile_map(x, bits).tobytes()
    if bits == 4:
        assert clib.octopt_log2_map(4, 0.8, out.ctypes.data, out.size) == capi.OK
        assert out.tobytes() == octopt.log2_map(4, 0.8).tobytes()
    else:
        assert clib.octopt_fp8_map(out.ctypes.data, out.size) == capi.OK
        assert out.tobytes() == octopt.fp8_map().tobytes()
