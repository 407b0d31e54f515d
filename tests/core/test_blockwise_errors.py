"""Bad arguments: each raises TypeError or ValueError naming the function and the argument."""

from __future__ import annotations

import numpy as np
import octopt
import pytest


def x_f32(n: int = 1000) -> np.ndarray:
    return np.random.default_rng(0).standard_normal(n).astype(np.float32)


def quantized(n: int = 1000, bits: int = 8):
    return octopt.quantize_blockwise(x_f32(n), bits=bits)


def read_only(a: np.ndarray) -> np.ndarray:
    a.flags.writeable = False
    return a


# (id, exception, message pattern, call)
QUANTIZE_CASES = [
    (
        "x-int32",
        TypeError,
        r"quantize_blockwise: argument 'x' must have dtype .*got int32",
        lambda: octopt.quantize_blockwise(np.arange(100, dtype=np.int32)),
    ),
    (
        "x-float64",
        TypeError,
        r"quantize_blockwise: argument 'x' must have dtype .*got float64",
        lambda: octopt.quantize_blockwise(x_f32().astype(np.float64)),
    ),
    (
        "x-uint8",
        TypeError,
        r"quantize_blockwise: argument 'x' must have dtype .*got uint8",
        lambda: octopt.quantize_blockwise(np.zeros(100, np.uint8)),
    ),
    (
        "x-strided",
        ValueError,
        r"quantize_blockwise: argument 'x' must be C-contiguous",
        lambda: octopt.quantize_blockwise(x_f32()[::2]),
    ),
    (
        "x-transposed",
        ValueError,
        r"quantize_blockwise: argument 'x' must be C-contiguous",
        lambda: octopt.quantize_blockwise(x_f32(4096).reshape(64, 64).T),
    ),
    (
        "x-list",
        TypeError,
        r"quantize_blockwise: argument 'x' must be a NumPy, PyTorch or CuPy array, got list",
        lambda: octopt.quantize_blockwise([1.0, 2.0, 3.0]),
    ),
    (
        "x-scalar",
        TypeError,
        r"quantize_blockwise: argument 'x' must be a NumPy, PyTorch or CuPy array, got float",
        lambda: octopt.quantize_blockwise(1.0),
    ),
    (
        "x-nan",
        ValueError,
        r"quantize_blockwise: argument 'x' contains NaN or Inf",
        lambda: octopt.quantize_blockwise(np.array([1.0, np.nan, 2.0], np.float32)),
    ),
    (
        "x-inf",
        ValueError,
        r"quantize_blockwise: argument 'x' contains NaN or Inf",
        lambda: octopt.quantize_blockwise(np.array([1.0, -np.inf, 2.0], np.float32)),
    ),
    (
        "x-f16-inf",
        ValueError,
        r"quantize_blockwise: argument 'x' contains NaN or Inf \(2 block",
        lambda: octopt.quantize_blockwise(
            np.concatenate([np.full(64, np.inf), np.ones(64), np.full(64, np.nan)]).astype(np.float16),
            block_size=64,
        ),
    ),
    (
        "block-size-not-power-of-two",
        ValueError,
        r"quantize_blockwise: argument 'block_size' must be a power of two",
        lambda: octopt.quantize_blockwise(x_f32(), block_size=96),
    ),
    (
        "block-size-too-small",
        ValueError,
        r"quantize_blockwise: argument 'block_size' .*\[32, 4096\], got 16",
        lambda: octopt.quantize_blockwise(x_f32(), block_size=16),
    ),
    (
        "block-size-too-large",
        ValueError,
        r"quantize_blockwise: argument 'block_size' .*\[32, 4096\], got 8192",
        lambda: octopt.quantize_blockwise(x_f32(), block_size=8192),
    ),
    (
        "block-size-zero",
        ValueError,
        r"quantize_blockwise: argument 'block_size'",
        lambda: octopt.quantize_blockwise(x_f32(), block_size=0),
    ),
    (
        "block-size-bool",
        TypeError,
        r"quantize_blockwise: argument 'block_size' must be an int, got bool",
        lambda: octopt.quantize_blockwise(x_f32(), block_size=True),
    ),
    (
        "block-size-float",
        TypeError,
        r"quantize_blockwise: argument 'block_size' must be an int, got float",
        lambda: octopt.quantize_blockwise(x_f32(), block_size=256.0),
    ),
    (
        "bits-2",
        ValueError,
        r"quantize_blockwise: argument 'bits' must be 4 or 8, got 2",
        lambda: octopt.quantize_blockwise(x_f32(), bits=2),
    ),
    (
        "bits-16",
        ValueError,
        r"quantize_blockwise: argument 'bits' must be 4 or 8, got 16",
        lambda: octopt.quantize_blockwise(x_f32(), bits=16),
    ),
    (
        "bits-bool",
        TypeError,
        r"quantize_blockwise: argument 'bits' must be an int, got bool",
        lambda: octopt.quantize_blockwise(x_f32(), bits=True),
    ),
    (
        "rounding",
        ValueError,
        r"quantize_blockwise: argument 'rounding' must be 'nearest' or 'stochastic', got 'up'",
        lambda: octopt.quantize_blockwise(x_f32(), rounding="up"),
    ),
    (
        "rounding-none",
        ValueError,
        r"quantize_blockwise: argument 'rounding'",
        lambda: octopt.quantize_blockwise(x_f32(), rounding=None),
    ),
    (
        "seed-negative",
        ValueError,
        r"quantize_blockwise: argument 'seed' must be in \[0, .*got -1",
        lambda: octopt.quantize_blockwise(x_f32(), rounding="stochastic", seed=-1),
    ),
    (
        "seed-too-large",
        ValueError,
        r"quantize_blockwise: argument 'seed' must be in \[0, ",
        lambda: octopt.quantize_blockwise(x_f32(), rounding="stochastic", seed=2**64),
    ),
    (
        "seed-float",
        TypeError,
        r"quantize_blockwise: argument 'seed' must be an int, got float",
        lambda: octopt.quantize_blockwise(x_f32(), rounding="stochastic", seed=1.0),
    ),
    (
        "out-not-pair",
        TypeError,
        r"quantize_blockwise: argument 'out' must be a \(codes, absmax\) pair",
        lambda: octopt.quantize_blockwise(x_f32(), out=np.empty(1000, np.uint8)),
    ),
    (
        "out-codes-dtype",
        TypeError,
        r"quantize_blockwise: argument 'out\[0\] \(codes\)' must have dtype uint8, got int8",
        lambda: octopt.quantize_blockwise(x_f32(), out=(np.empty(1000, np.int8), np.empty(4, np.float32))),
    ),
    (
        "out-absmax-dtype",
        TypeError,
        r"quantize_blockwise: argument 'out\[1\] \(absmax\)' must have dtype float32, got float64",
        lambda: octopt.quantize_blockwise(x_f32(), out=(np.empty(1000, np.uint8), np.empty(4, np.float64))),
    ),
    (
        "out-codes-size",
        ValueError,
        r"quantize_blockwise: argument 'out\[0\] \(codes\)' must have 1000 elements, got 999",
        lambda: octopt.quantize_blockwise(x_f32(), out=(np.empty(999, np.uint8), np.empty(4, np.float32))),
    ),
    (
        "out-codes-size-4bit",
        ValueError,
        r"quantize_blockwise: argument 'out\[0\] \(codes\)' must have 500 elements",
        lambda: octopt.quantize_blockwise(x_f32(), bits=4, out=(np.empty(1000, np.uint8), np.empty(4, np.float32))),
    ),
    (
        "out-absmax-size",
        ValueError,
        r"quantize_blockwise: argument 'out\[1\] \(absmax\)' must have 4 elements, got 5",
        lambda: octopt.quantize_blockwise(x_f32(), out=(np.empty(1000, np.uint8), np.empty(5, np.float32))),
    ),
    (
        "out-codes-read-only",
        ValueError,
        r"quantize_blockwise: argument 'out\[0\] \(codes\)' is read-only",
        lambda: octopt.quantize_blockwise(x_f32(), out=(read_only(np.empty(1000, np.uint8)), np.empty(4, np.float32))),
    ),
    (
        "out-absmax-read-only",
        ValueError,
        r"quantize_blockwise: argument 'out\[1\] \(absmax\)' is read-only",
        lambda: octopt.quantize_blockwise(x_f32(), out=(np.empty(1000, np.uint8), read_only(np.empty(4, np.float32)))),
    ),
    (
        "out-codes-strided",
        ValueError,
        r"quantize_blockwise: argument 'out\[0\] \(codes\)' must be C-contiguous",
        lambda: octopt.quantize_blockwise(x_f32(), out=(np.empty(2000, np.uint8)[::2], np.empty(4, np.float32))),
    ),
]

DEQUANTIZE_CASES = [
    (
        "codes-uint16",
        TypeError,
        r"dequantize_blockwise: argument 'codes' must have dtype uint8, got uint16",
        lambda: octopt.dequantize_blockwise(quantized()[0].astype(np.uint16), quantized()[1]),
    ),
    (
        "codes-list",
        TypeError,
        r"dequantize_blockwise: argument 'codes' must be a NumPy, PyTorch or CuPy array",
        lambda: octopt.dequantize_blockwise([1, 2, 3], quantized()[1]),
    ),
    (
        "absmax-float64",
        TypeError,
        r"dequantize_blockwise: argument 'absmax' must have dtype float32, got float64",
        lambda: octopt.dequantize_blockwise(quantized()[0], quantized()[1].astype(np.float64)),
    ),
    (
        "absmax-size",
        ValueError,
        r"dequantize_blockwise: argument 'absmax' holds 3 values but 1000 elements",
        lambda: octopt.dequantize_blockwise(quantized()[0], quantized()[1][:3].copy()),
    ),
    (
        "codes-strided",
        ValueError,
        r"dequantize_blockwise: argument 'codes' must be C-contiguous",
        lambda: octopt.dequantize_blockwise(np.repeat(quantized()[0], 2)[::2], quantized()[1]),
    ),
    (
        "out-float64",
        TypeError,
        r"dequantize_blockwise: argument 'out' must have dtype .*got float64",
        lambda: octopt.dequantize_blockwise(*quantized(), out=np.empty(1000, np.float64)),
    ),
    (
        "out-read-only",
        ValueError,
        r"dequantize_blockwise: argument 'out' is read-only",
        lambda: octopt.dequantize_blockwise(*quantized(), out=read_only(np.empty(1000, np.float32))),
    ),
    (
        "out-strided",
        ValueError,
        r"dequantize_blockwise: argument 'out' must be C-contiguous",
        lambda: octopt.dequantize_blockwise(*quantized(), out=np.empty(2000, np.float32)[::2]),
    ),
    # a size mismatch between out and the codes is reported on 'out'
    (
        "out-size",
        ValueError,
        r"dequantize_blockwise: argument 'out' has 999 elements, which does not match 1000 8-bit code bytes",
        lambda: octopt.dequantize_blockwise(*quantized(), out=np.empty(999, np.float32)),
    ),
    (
        "shape-size",
        ValueError,
        r"dequantize_blockwise: argument 'codes' holds 500 bytes but 1001 elements need 501",
        lambda: octopt.dequantize_blockwise(*quantized(bits=4), bits=4, shape=(1001,)),
    ),
    (
        "dtype-float64",
        TypeError,
        r"dequantize_blockwise: argument 'dtype' must be float32, float16 or bfloat16",
        lambda: octopt.dequantize_blockwise(*quantized(), dtype=np.float64),
    ),
    (
        "dtype-vs-out",
        TypeError,
        r"dequantize_blockwise: argument 'dtype' \(float16\) differs from out's dtype",
        lambda: octopt.dequantize_blockwise(*quantized(), dtype="float16", out=np.empty(1000, np.float32)),
    ),
    (
        "block-size",
        ValueError,
        r"dequantize_blockwise: argument 'block_size' must be a power of two",
        lambda: octopt.dequantize_blockwise(*quantized(), block_size=100),
    ),
    (
        "block-size-bool",
        TypeError,
        r"dequantize_blockwise: argument 'block_size' must be an int, got bool",
        lambda: octopt.dequantize_blockwise(*quantized(), block_size=False),
    ),
    (
        "bits",
        ValueError,
        r"dequantize_blockwise: argument 'bits' must be 4 or 8, got 3",
        lambda: octopt.dequantize_blockwise(*quantized(), bits=3),
    ),
]


def _params(cases):
    return [pytest.param(exc, pattern, call, id=name) for name, exc, pattern, call in cases]


@pytest.mark.parametrize(("exc", "pattern", "call"), _params(QUANTIZE_CASES))
def test_quantize_rejects(exc, pattern, call):
    with pytest.raises(exc, match=pattern):
        call()


@pytest.mark.parametrize(("exc", "pattern", "call"), _params(DEQUANTIZE_CASES))
def test_dequantize_rejects(exc, pattern, call):
    with pytest.raises(exc, match=pattern):
        call()


def test_rejected_in_place_call_leaves_out_untouched():
    codes = np.full(1000, 7, np.uint8)
    absmax = np.full(4, 3.0, np.float32)
    with pytest.raises(ValueError, match="quantize_blockwise: argument 'rounding'"):
        octopt.quantize_blockwise(x_f32(), block_size=256, out=(codes, absmax), rounding="bogus")
    with pytest.raises(ValueError, match="quantize_blockwise: argument 'qmap'"):
        octopt.quantize_blockwise(
            x_f32(), block_size=256, out=(codes, absmax), qmap=np.zeros(256, np.float32)[::-1] - 2
        )
    np.testing.assert_array_equal(codes, 7)
    np.testing.assert_array_equal(absmax, 3.0)


def test_non_finite_input_every_framework(array_case):
    for bad in (np.nan, np.inf, -np.inf):
        values = x_f32(4097)
        values[4096] = bad
        with pytest.raises(ValueError, match=r"quantize_blockwise: argument 'x' contains NaN or Inf \(1 block"):
            octopt.quantize_blockwise(array_case.make(values))


def test_torch_bad_inputs():
    torch = pytest.importorskip("torch")
    x = torch.randn(64, 64)
    with pytest.raises(TypeError, match=r"quantize_blockwise: argument 'x' must have dtype .*got float64"):
        octopt.quantize_blockwise(x.double())
    with pytest.raises(TypeError, match=r"quantize_blockwise: argument 'x' must have dtype .*got int32"):
        octopt.quantize_blockwise(x.int())
    with pytest.raises(ValueError, match=r"quantize_blockwise: argument 'x' must be C-contiguous"):
        octopt.quantize_blockwise(x.t())
    with pytest.raises(ValueError, match=r"quantize_blockwise: argument 'x' must be C-contiguous"):
        octopt.quantize_blockwise(x[:, ::2])
    with pytest.raises(TypeError, match=r"quantize_blockwise: argument 'x' must be a dense tensor"):
        octopt.quantize_blockwise(x.to_sparse())
    with pytest.raises(TypeError, match=r"quantize_blockwise: argument 'x' must be real"):
        octopt.quantize_blockwise(torch.randn(64, dtype=torch.complex64))
    codes, absmax = octopt.quantize_blockwise(x)
    with pytest.raises(TypeError, match=r"dequantize_blockwise: argument 'codes' must have dtype uint8, got int8"):
        octopt.dequantize_blockwise(codes.to(torch.int8), absmax)
    with pytest.raises(TypeError, match=r"dequantize_blockwise: argument 'absmax' must have dtype float32"):
        octopt.dequantize_blockwise(codes, absmax.half())
    with pytest.raises(TypeError, match=r"quantize_blockwise: argument 'out\[0\] \(codes\)' must have dtype uint8"):
        octopt.quantize_blockwise(x, out=(codes.to(torch.int16), absmax))


def test_mixed_frameworks_rejected_or_consistent():
    torch = pytest.importorskip("torch")
    codes, absmax = octopt.quantize_blockwise(x_f32())
    # NumPy codes with a torch absmax: both on the CPU, so accepted; the result follows codes
    y = octopt.dequantize_blockwise(codes, torch.from_numpy(absmax))
    assert isinstance(y, np.ndarray)
    np.testing.assert_array_equal(y, octopt.dequantize_blockwise(codes, absmax))


def test_jax_array_rejected():
    jnp = pytest.importorskip("jax.numpy", reason="jax is not installed")
    with pytest.raises(TypeError, match=r"quantize_blockwise: argument 'x' is a JAX array"):
        octopt.quantize_blockwise(jnp.ones(64, dtype=jnp.float32))


@pytest.mark.skipif(not octopt.cuda_available(), reason="no CUDA device (octopt.cuda_available() is False)")
def test_cpu_cuda_mismatch_torch(torch_cuda):
    torch = torch_cuda

    x = torch.randn(1000, device="cuda")
    codes = torch.empty(1000, dtype=torch.uint8)
    absmax = torch.empty(4, dtype=torch.float32)
    with pytest.raises(
        ValueError, match=r"quantize_blockwise: argument 'out\[0\] \(codes\)' is on cpu but 'x' is on cuda:0"
    ):
        octopt.quantize_blockwise(x, out=(codes, absmax))
    gpu_codes, gpu_absmax = octopt.quantize_blockwise(x)
    with pytest.raises(ValueError, match=r"dequantize_blockwise: argument 'absmax' is on cpu but 'codes' is on cuda:0"):
        octopt.dequantize_blockwise(gpu_codes, gpu_absmax.cpu())
    with pytest.raises(ValueError, match=r"dequantize_blockwise: argument 'out' is on cpu but 'codes' is on cuda:0"):
        octopt.dequantize_blockwise(gpu_codes, gpu_absmax, out=torch.empty(1000))


@pytest.mark.skipif(not octopt.cuda_available(), reason="no CUDA device (octopt.cuda_available() is False)")
def test_cpu_cuda_mismatch_cupy(cupy_cuda):
    cupy = cupy_cuda
    x = cupy.asarray(x_f32())
    with pytest.raises(
        ValueError, match=r"quantize_blockwise: argument 'out\[1\] \(absmax\)' is on cpu but 'x' is on cuda"
    ):
        octopt.quantize_blockwise(x, out=(cupy.empty(1000, cupy.uint8), np.empty(4, np.float32)))
    codes, absmax = octopt.quantize_blockwise(x)
    with pytest.raises(ValueError, match=r"dequantize_blockwise: argument 'absmax' is on cpu but 'codes' is on cuda"):
        octopt.dequantize_blockwise(codes, absmax.get())
