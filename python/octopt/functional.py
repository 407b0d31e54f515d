"""Block-wise quantize / dequantize over any DLPack array (NumPy, PyTorch, CuPy), in place."""

from __future__ import annotations

from typing import Any

from . import _arrays, _octopt, maps

_ROUNDINGS = ("nearest", "stochastic")


def quantize_blockwise(
    x: Any,
    qmap: Any = None,
    block_size: int = 256,
    bits: int = 8,
    rounding: str = "nearest",
    seed: int = 0,
    out: tuple | None = None,
    stream: Any = None,
) -> tuple:
    """Quantizes x block by block.

    Returns ``(codes, absmax)``: uint8 codes (x's shape for 8 bits; 4-bit codes packed two per byte,
    low nibble first, 1-D of ``ceil(n / 2)``) and float32 ``absmax``, one per block of ``block_size``
    elements. Outputs are allocated in x's framework and on its device, or written in place into
    ``out=(codes, absmax)``. ``qmap=None`` is the signed dynamic map for ``bits``.
    """
    fn = "quantize_blockwise"
    xi = _arrays.check(x, fn, "x", _arrays.FLOAT_DTYPES)
    bits = _arrays.check_bits(bits, fn)
    block_size = _arrays.check_block_size(block_size, fn)
    if rounding not in _ROUNDINGS:
        raise ValueError(f"{fn}: argument 'rounding' must be 'nearest' or 'stochastic', got {rounding!r}")
    seed = _arrays.check_int(seed, fn, "seed", 0, 2**64 - 1)
    q = maps.resolve(qmap, bits, fn)
    n = xi.size
    n_codes = (n + 1) // 2 if bits == 4 else n
    n_blocks = _arrays.num_blocks(n, block_size)
    if out is None:
        codes = _arrays.empty(x, xi, xi.shape if bits == 8 else (n_codes,), "uint8")
        absmax = _arrays.empty(x, xi, (n_blocks,), "float32")
    else:
        if not isinstance(out, (tuple, list)) or len(out) != 2:
            raise TypeError(f"{fn}: argument 'out' must be a (codes, absmax) pair")
        codes, absmax = out
        _arrays.check(codes, fn, "out[0] (codes)", ("uint8",), writeable=True, like=xi, size=n_codes)
        _arrays.check(absmax, fn, "out[1] (absmax)", ("float32",), writeable=True, like=xi, size=n_blocks)
    handle = _arrays.stream_handle(xi, stream, fn)
    x_arg, bf16_bits = _arrays.float_kernel_arg(x)
    bad = _octopt.quantize_blockwise_into(
        x_arg,
        q,
        block_size,
        bits,
        rounding == "stochastic",
        seed,
        _arrays.kernel_arg(codes),
        _arrays.kernel_arg(absmax),
        handle,
        bf16_bits,
    )
    if bad < 0 and n_blocks and not _arrays.all_finite(absmax, xi):  # CUDA: look at absmax
        bad = 1
    if bad > 0:
        raise ValueError(f"{fn}: argument 'x' contains NaN or Inf ({bad} block(s) affected)")
    return codes, absmax


def dequantize_blockwise(
    codes: Any,
    absmax: Any,
    qmap: Any = None,
    block_size: int = 256,
    bits: int = 8,
    dtype: Any = None,
    out: Any = None,
    shape: tuple | None = None,
    stream: Any = None,
) -> Any:
    """Inverse of :func:`quantize_blockwise`: ``qmap[code] * absmax[block]`` as ``dtype`` (float32 by default).

    The element count comes from ``out``, else ``shape``, else the codes (8-bit: codes' shape; 4-bit:
    two per byte, so pass ``shape`` for an odd count).
    """
    fn = "dequantize_blockwise"
    ci = _arrays.check(codes, fn, "codes", ("uint8",))
    _arrays.check(absmax, fn, "absmax", ("float32",), like=ci, like_arg="codes")
    bits = _arrays.check_bits(bits, fn)
    block_size = _arrays.check_block_size(block_size, fn)
    q = maps.resolve(qmap, bits, fn)
    if out is not None:
        oi = _arrays.check(out, fn, "out", _arrays.FLOAT_DTYPES, writeable=True, like=ci, like_arg="codes")
        if dtype is not None and _arrays.dtype_name(dtype) != oi.dtype:
            raise TypeError(
                f"{fn}: argument 'dtype' ({_arrays.dtype_name(dtype)}) differs from out's dtype ({oi.dtype})"
            )
        if (oi.size + 1) // 2 != ci.size if bits == 4 else oi.size != ci.size:
            raise ValueError(
                f"{fn}: argument 'out' has {oi.size} elements, which does not match {ci.size} {bits}-bit code bytes"
            )
        result = out
    else:
        name = _arrays.dtype_name(dtype)
        if name not in _arrays.FLOAT_DTYPES:
            raise TypeError(f"{fn}: argument 'dtype' must be float32, float16 or bfloat16, got {name}")
        if shape is not None:
            shape = tuple(int(s) for s in shape)
        elif bits == 8:
            shape = ci.shape
        else:
            shape = (2 * ci.size,)
        result = _arrays.empty(codes, ci, shape, name)
    handle = _arrays.stream_handle(ci, stream, fn)
    out_arg, bf16_bits = _arrays.float_kernel_arg(result)
    _octopt.dequantize_blockwise_into(
        _arrays.kernel_arg(codes), _arrays.kernel_arg(absmax), q, block_size, bits, out_arg, handle, bf16_bits
    )
    return result
