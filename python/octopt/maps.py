"""Quantization maps: 2^bits float32 values, ascending, in [-1, 1] (NumPy arrays)."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import numpy as np

from . import _arrays, _octopt


def _readonly(a: np.ndarray) -> np.ndarray:
    a.flags.writeable = False
    return a


@lru_cache(maxsize=None)
def _dynamic(signed: bool, bits: int) -> np.ndarray:
    # 8-bit: bitsandbytes' create_dynamic_map(signed, 7, 8); 4-bit: create_dynamic_map(signed, 3, 4)
    return _readonly(_octopt.dynamic_map(signed, 7 if bits == 8 else 3, bits))


def dynamic_map(signed: bool = True, bits: int = 8) -> np.ndarray:
    """The dynamic (exponent + fraction) map of Dettmers et al., bit-identical to bitsandbytes'
    ``create_dynamic_map(signed, 7, 8)`` for 8 bits and ``create_dynamic_map(signed, 3, 4)`` for 4."""
    bits = _arrays.check_bits(bits, "dynamic_map")
    return _dynamic(bool(signed), bits).copy()


def linear_map(signed: bool = True, bits: int = 8, zero: bool = True) -> np.ndarray:
    """Evenly spaced values. Signed: [-1, 1] in 2^bits - 1 steps plus an extra centre zero (as
    bitsandbytes' create_linear_map). Unsigned: [0, 1]; with ``zero=False`` the zero-free map
    (i + 1) / 2^bits (the 4-bit second moment uses ``log2_map`` by default, not this one)."""
    bits = _arrays.check_bits(bits, "linear_map")
    if not zero:
        if signed:
            raise ValueError("linear_map: zero=False is only defined for signed=False")
        return _octopt.linear_map_nozero(bits)
    return _octopt.linear_map(bool(signed), bits)


def log2_map(bits: int = 4, step: float = 0.8) -> np.ndarray:
    """The zero-free geometric map 2^(step * (i - 2^bits + 1)) (4 bits, step 0.8: 2^-12 .. 1), octopt's
    default for 4-bit second moments: constant relative spacing keeps small v accurate, and it has no
    zero (docs/decisions.md)."""
    bits = _arrays.check_bits(bits, "log2_map")
    if isinstance(step, bool) or not isinstance(step, (int, float)) or not 0.0 < float(step) <= 8.0:
        raise ValueError(f"log2_map: argument 'step' must be in (0, 8], got {step!r}")
    return _octopt.log2_map_nozero(bits, float(step))


def fp8_map() -> np.ndarray:
    """All 256 codes of an 8-bit float with 4 exponent and 3 mantissa bits (e4m3, no NaN/Inf codes),
    normalized to [-1, 1]; bitsandbytes' create_fp8_map(True, 4, 3, 8)."""
    return _octopt.fp8_map()


def quantile_map(x: Any, bits: int = 8) -> np.ndarray:
    """A map estimated from data: the 2^bits - 1 equal-probability quantiles of x plus zero,
    normalized by the largest magnitude."""
    bits = _arrays.check_bits(bits, "quantile_map")
    host = _to_host_f32(x, "quantile_map", "x").reshape(-1)
    return _octopt.quantile_map(np.ascontiguousarray(host), bits)


def _to_host_f32(a: Any, fn: str, arg: str) -> np.ndarray:
    fw = _arrays.framework_of(a)
    if fw == "torch":
        a = a.detach().float().cpu().numpy()
    elif fw == "cupy":
        a = a.get()
    elif fw == "jax":
        a = np.asarray(a)
    try:
        out = np.asarray(a, dtype=np.float32)
    except (TypeError, ValueError) as e:
        raise TypeError(f"{fn}: argument '{arg}' must be an array of numbers") from e
    return out


def resolve(qmap: Any, bits: int, fn: str, signed: bool = True, arg: str = "qmap") -> np.ndarray:
    """The map to use: None means the dynamic map (signed unless stated) for `bits`."""
    if qmap is None:
        return _dynamic(signed, bits)
    q = np.ascontiguousarray(_to_host_f32(qmap, fn, arg))
    if q.ndim != 1:
        raise ValueError(f"{fn}: argument '{arg}' must be 1-D, got shape {q.shape}")
    _octopt.validate_qmap(q, bits, fn, arg)
    return q
