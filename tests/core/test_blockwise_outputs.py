"""Where results go: outputs in the input's framework and device, and in place through ``out=``."""

from __future__ import annotations

import numpy as np
import octopt
import pytest


def sample(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(n).astype(np.float32)


@pytest.mark.parametrize("bits", [8, 4])
def test_outputs_in_input_framework_and_device(array_case, bits):
    x = array_case.make(sample(1000).reshape(10, 100))
    codes, absmax = octopt.quantize_blockwise(x, bits=bits)
    assert array_case.is_native(codes) and array_case.is_native(absmax)
    assert array_case.to_numpy(codes).dtype == np.uint8
    assert str(absmax.dtype).endswith("float32")
    assert tuple(codes.shape) == ((10, 100) if bits == 8 else (500,))
    assert tuple(absmax.shape) == (4,)
    for dtype in ("float32", "float16", "bfloat16"):
        if dtype == "bfloat16" and array_case.framework in ("cupy", "numpy"):
            continue  # CuPy has no bfloat16; NumPy's is test_numpy_bfloat16_output
        y = octopt.dequantize_blockwise(codes, absmax, bits=bits, dtype=dtype)
        assert array_case.is_native(y)
        assert str(y.dtype).endswith(dtype)
    y = octopt.dequantize_blockwise(codes, absmax, bits=bits)
    assert str(y.dtype).endswith("float32"), "dequantize defaults to float32"


def test_numpy_bfloat16_output(import_optional):
    x = sample(1000)
    codes, absmax = octopt.quantize_blockwise(x)
    if import_optional("ml_dtypes") is None:
        with pytest.raises(TypeError, match="ml_dtypes"):
            octopt.dequantize_blockwise(codes, absmax, dtype="bfloat16")
        return
    y = octopt.dequantize_blockwise(codes, absmax, dtype="bfloat16")
    assert y.dtype.name == "bfloat16" and y.shape == x.shape
    want = octopt.dequantize_blockwise(codes, absmax).astype(import_optional("ml_dtypes").bfloat16)
    np.testing.assert_array_equal(y.astype(np.float32), want.astype(np.float32))


def test_torch_tensor_requiring_grad():
    torch = pytest.importorskip("torch")
    for dtype in (torch.float32, torch.bfloat16):
        x = torch.randn(3000, dtype=dtype, requires_grad=True)
        codes, absmax = octopt.quantize_blockwise(x)
        assert isinstance(codes, torch.Tensor) and codes.dtype == torch.uint8
        assert not codes.requires_grad and not absmax.requires_grad
        expect, _ = octopt.quantize_blockwise(x.detach().clone())
        assert torch.equal(codes, expect)
        y = octopt.dequantize_blockwise(codes, absmax, dtype=dtype)
        assert y.dtype == dtype and y.shape == x.shape
        assert x.grad is None


def test_torch_dtype_objects_accepted_for_dtype():
    torch = pytest.importorskip("torch")
    codes, absmax = octopt.quantize_blockwise(torch.randn(512))
    for dtype in (torch.float16, torch.bfloat16, torch.float32):
        assert octopt.dequantize_blockwise(codes, absmax, dtype=dtype).dtype == dtype
    assert octopt.dequantize_blockwise(codes, absmax, dtype=np.float16).dtype == torch.float16


@pytest.mark.parametrize("bits", [8, 4])
def test_quantize_in_place(array_case, bits):
    n, block_size = 4097, 256
    x = array_case.make(sample(n, seed=1))
    want_codes, want_absmax = octopt.quantize_blockwise(x, block_size=block_size, bits=bits)
    codes = array_case.empty((n if bits == 8 else (n + 1) // 2,), "uint8")
    absmax = array_case.empty((-(-n // block_size),), "float32")
    ptrs = (array_case.data_ptr(codes), array_case.data_ptr(absmax))
    got = octopt.quantize_blockwise(x, block_size=block_size, bits=bits, out=(codes, absmax))
    assert got[0] is codes and got[1] is absmax
    assert (array_case.data_ptr(codes), array_case.data_ptr(absmax)) == ptrs
    np.testing.assert_array_equal(array_case.to_numpy(codes), array_case.to_numpy(want_codes))
    np.testing.assert_array_equal(array_case.to_numpy(absmax), array_case.to_numpy(want_absmax))
    # again into the same buffers, stochastically: written over, still in place
    octopt.quantize_blockwise(x, block_size=block_size, bits=bits, rounding="stochastic", seed=3, out=[codes, absmax])
    sr_codes, _ = octopt.quantize_blockwise(x, block_size=block_size, bits=bits, rounding="stochastic", seed=3)
    np.testing.assert_array_equal(array_case.to_numpy(codes), array_case.to_numpy(sr_codes))
    assert (array_case.data_ptr(codes), array_case.data_ptr(absmax)) == ptrs


@pytest.mark.parametrize("bits", [8, 4])
def test_dequantize_in_place(array_case, bits):
    n = 4097
    x = array_case.make(sample(n, seed=2))
    codes, absmax = octopt.quantize_blockwise(x, bits=bits)
    want = octopt.dequantize_blockwise(codes, absmax, bits=bits, dtype=array_case.dtype, shape=(n,))
    out = array_case.empty((n,), array_case.dtype)
    ptr = array_case.data_ptr(out)
    got = octopt.dequantize_blockwise(codes, absmax, bits=bits, out=out)
    assert got is out
    assert array_case.data_ptr(out) == ptr
    np.testing.assert_array_equal(array_case.to_numpy(out), array_case.to_numpy(want))
    # dtype may be restated when it agrees with out
    assert octopt.dequantize_blockwise(codes, absmax, bits=bits, out=out, dtype=array_case.dtype) is out


def test_in_place_out_of_other_shape_with_right_size():
    """out= is checked by element count: a flat buffer may receive the codes of a 2-D x."""
    x = sample(4096).reshape(64, 64)
    codes = np.empty(4096, np.uint8)
    absmax = np.empty(16, np.float32)
    octopt.quantize_blockwise(x, out=(codes, absmax))
    np.testing.assert_array_equal(codes, octopt.quantize_blockwise(x)[0].reshape(-1))
    y = np.empty((64, 64), np.float32)
    octopt.dequantize_blockwise(codes, absmax, out=y)
    np.testing.assert_array_equal(y, octopt.dequantize_blockwise(codes, absmax).reshape(64, 64))
