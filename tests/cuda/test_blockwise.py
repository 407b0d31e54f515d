"""CUDA against CPU: codes, absmax and dequantized values are bit-identical (stochastic rounding
too: its random numbers depend only on (seed, element index)). Every test here takes a CUDA case
from tests/conftest.py and is skipped, with the reason, on a machine without a usable GPU."""

from __future__ import annotations

import numpy as np
import octopt
import pytest


def sample(n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(n) * np.repeat(10.0 ** rng.uniform(-2, 2, size=-(-n // 64)), 64)[:n]
    x[rng.random(n) < 0.02] = 0.0
    if n >= 1024:
        x[256:512] = 0.0  # whole all-zero blocks
    return x.astype(np.float32)


def on_both(case, values):
    """(GPU array, CPU array) holding the same values: the CPU one is built from the GPU one's contents."""
    x = case.make(values)
    twin = case.cpu_twin()
    return x, twin.make(case.to_numpy(x).astype(np.float32)), twin


def assert_same(case, twin, gpu, cpu):
    g, c = case.to_numpy(gpu), twin.to_numpy(cpu)
    assert g.shape == c.shape and g.dtype == c.dtype
    mismatch = np.flatnonzero(g.reshape(-1).view(np.uint8) != c.reshape(-1).view(np.uint8))
    assert mismatch.size == 0, f"{mismatch.size} bytes differ, first at byte {mismatch[0]}"


@pytest.mark.parametrize("rounding", ["nearest", "stochastic"])
@pytest.mark.parametrize("bits", [8, 4])
@pytest.mark.parametrize("block_size", [32, 256, 4096])
def test_quantize_matches_cpu(cuda_array_case, ragged_size, block_size, bits, rounding):
    case, n = cuda_array_case, ragged_size
    x, x_cpu, twin = on_both(case, sample(n, seed=n))
    kw = dict(block_size=block_size, bits=bits, rounding=rounding, seed=77)
    codes, absmax = octopt.quantize_blockwise(x, **kw)
    codes_cpu, absmax_cpu = octopt.quantize_blockwise(x_cpu, **kw)
    assert case.is_native(codes) and case.is_native(absmax)
    assert_same(case, twin, absmax, absmax_cpu)
    assert_same(case, twin, codes, codes_cpu)


@pytest.mark.parametrize("bits", [8, 4])
def test_dequantize_matches_cpu(cuda_array_case, ragged_size, bits):
    case, n = cuda_array_case, ragged_size
    x, x_cpu, twin = on_both(case, sample(n, seed=n + 1))
    codes, absmax = octopt.quantize_blockwise(x, block_size=128, bits=bits)
    codes_cpu, absmax_cpu = octopt.quantize_blockwise(x_cpu, block_size=128, bits=bits)
    for dtype in ("float32", case.dtype):
        y = octopt.dequantize_blockwise(codes, absmax, block_size=128, bits=bits, dtype=dtype, shape=(n,))
        y_cpu = octopt.dequantize_blockwise(codes_cpu, absmax_cpu, block_size=128, bits=bits, dtype=dtype, shape=(n,))
        assert case.is_native(y)
        assert_same(case, twin, y, y_cpu)


@pytest.mark.parametrize("map_name", ["fp8", "linear4", "quantile"])
def test_user_maps_match_cpu(cuda_array_case, map_name):
    case = cuda_array_case
    qmap = {
        "fp8": octopt.fp8_map,
        "linear4": lambda: octopt.linear_map(False, bits=4, zero=False),
        "quantile": lambda: octopt.quantile_map(sample(5000, seed=3)),
    }[map_name]()
    bits = 4 if qmap.size == 16 else 8
    x, x_cpu, twin = on_both(case, sample(10_000, seed=4))
    for rounding in ("nearest", "stochastic"):
        gpu = octopt.quantize_blockwise(x, qmap=qmap, bits=bits, rounding=rounding, seed=1)
        cpu = octopt.quantize_blockwise(x_cpu, qmap=qmap, bits=bits, rounding=rounding, seed=1)
        for g, c in zip(gpu, cpu):
            assert_same(case, twin, g, c)


def test_in_place_on_gpu(cuda_array_case):
    case = cuda_array_case
    n = 4097
    x = case.make(sample(n, seed=5))
    codes = case.empty((n,), "uint8")
    absmax = case.empty((-(-n // 256),), "float32")
    ptrs = (case.data_ptr(codes), case.data_ptr(absmax))
    got = octopt.quantize_blockwise(x, out=(codes, absmax))
    assert got[0] is codes and got[1] is absmax
    assert (case.data_ptr(codes), case.data_ptr(absmax)) == ptrs
    want = octopt.quantize_blockwise(x)
    np.testing.assert_array_equal(case.to_numpy(codes), case.to_numpy(want[0]))
    out = case.empty((n,), case.dtype)
    assert octopt.dequantize_blockwise(codes, absmax, out=out) is out
    np.testing.assert_array_equal(
        case.to_numpy(out), case.to_numpy(octopt.dequantize_blockwise(codes, absmax, dtype=case.dtype))
    )


def test_explicit_stream(cuda_array_case):
    case = cuda_array_case
    x = case.make(sample(2**16, seed=6))
    want_codes, want_absmax = octopt.quantize_blockwise(x)
    if case.framework == "torch":
        torch = case.module
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
    else:
        stream = case.module.cuda.Stream(non_blocking=True)
        case.module.cuda.get_current_stream().synchronize()
    codes, absmax = octopt.quantize_blockwise(x, stream=stream)
    y = octopt.dequantize_blockwise(codes, absmax, stream=stream)
    stream.synchronize()
    np.testing.assert_array_equal(case.to_numpy(codes), case.to_numpy(want_codes))
    np.testing.assert_array_equal(case.to_numpy(absmax), case.to_numpy(want_absmax))
    np.testing.assert_array_equal(case.to_numpy(y), case.to_numpy(octopt.dequantize_blockwise(want_codes, want_absmax)))


def test_non_finite_input_on_gpu(cuda_array_case):
    case = cuda_array_case
    for bad in (np.nan, np.inf):
        values = sample(4097, seed=7)
        values[1234] = bad
        with pytest.raises(ValueError, match=r"quantize_blockwise: argument 'x' contains NaN or Inf"):
            octopt.quantize_blockwise(case.make(values))


def test_empty_input_on_gpu(cuda_array_case):
    case = cuda_array_case
    codes, absmax = octopt.quantize_blockwise(case.make(np.zeros(0, np.float32)))
    assert tuple(codes.shape) == (0,) and tuple(absmax.shape) == (0,)
    assert tuple(octopt.dequantize_blockwise(codes, absmax).shape) == (0,)
