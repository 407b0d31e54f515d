"""An independent NumPy reference of block-wise quantization, written from the contract in DESIGN.md.

It shares nothing with octopt's algorithm: octopt binary-searches precomputed float32 decision
thresholds; this reference takes the brute-force argmin of float64 distances to every map value
(np.argmin returns the first minimum, i.e. ties go to the lower index).
"""

from __future__ import annotations

import numpy as np

_CHUNK = 4096  # elements per brute-force step: 4096 x 256 float64 distances = 8 MiB


def absmax(x32: np.ndarray, block_size: int) -> np.ndarray:
    """max |x| over each block of ``block_size`` elements of the flattened x (last block partial), float32."""
    flat = np.abs(np.asarray(x32, dtype=np.float32).reshape(-1))
    n_blocks = -(-flat.size // block_size)
    padded = np.zeros(n_blocks * block_size, dtype=np.float32)
    padded[: flat.size] = flat
    return padded.reshape(n_blocks, block_size).max(axis=1)


def ratios(x32: np.ndarray, amax: np.ndarray, block_size: int, idx: np.ndarray) -> np.ndarray:
    """r = x / absmax as a float32 division (correctly rounded); 0 in an all-zero block."""
    a = amax[idx // block_size]
    safe = np.where(a == 0, np.float32(1), a).astype(np.float32)
    r = np.asarray(x32, dtype=np.float32).reshape(-1)[idx] / safe
    assert r.dtype == np.float32
    return r


def keep_sign(r: np.ndarray, codes: np.ndarray, qmap: np.ndarray) -> np.ndarray:
    """A signed code never flips the sign of a nonzero value: r > 0 with a negative value takes the
    first value >= 0; r < 0 with a positive value takes the last value <= 0 (when such values exist)."""
    codes = codes.copy()
    chosen = qmap[codes]
    nonneg = np.flatnonzero(qmap >= 0)
    nonpos = np.flatnonzero(qmap <= 0)
    if nonneg.size:
        codes[(r > 0) & (chosen < 0)] = nonneg[0]
    if nonpos.size:
        codes[(r < 0) & (chosen > 0)] = nonpos[-1]
    return codes


def nearest_raw(r: np.ndarray, qmap: np.ndarray) -> np.ndarray:
    """Index of the map value nearest to r in float64, ties to the lower index; no sign rule."""
    r64 = r.astype(np.float64)
    q64 = np.asarray(qmap, dtype=np.float32).astype(np.float64)
    out = np.empty(r64.size, dtype=np.int64)
    for s in range(0, r64.size, _CHUNK):
        out[s : s + _CHUNK] = np.abs(r64[s : s + _CHUNK, None] - q64[None, :]).argmin(axis=1)
    return out


def nearest_codes(r: np.ndarray, qmap: np.ndarray) -> np.ndarray:
    return keep_sign(r, nearest_raw(r, qmap), np.asarray(qmap, dtype=np.float32))


def quantize(x32: np.ndarray, qmap: np.ndarray, block_size: int, idx: np.ndarray | None = None):
    """(codes at idx, absmax of every block) for nearest rounding; idx defaults to every element."""
    x32 = np.asarray(x32, dtype=np.float32).reshape(-1)
    amax = absmax(x32, block_size)
    if idx is None:
        idx = np.arange(x32.size)
    return nearest_codes(ratios(x32, amax, block_size, idx), qmap), amax


def dequantize_f32(codes: np.ndarray, amax: np.ndarray, qmap: np.ndarray, block_size: int) -> np.ndarray:
    """qmap[code] * absmax[block] as one correctly rounded float32 multiplication."""
    codes = np.asarray(codes).reshape(-1).astype(np.int64)
    q = np.asarray(qmap, dtype=np.float32)[codes]
    a = np.asarray(amax, dtype=np.float32)[np.arange(codes.size) // block_size]
    out = q * a
    assert out.dtype == np.float32
    return out


def bracketing_values(r: np.ndarray, qmap: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The two map values around r: the largest <= r and the smallest >= r (clamped at the ends)."""
    q = np.asarray(qmap, dtype=np.float32)
    lo = np.clip(np.searchsorted(q, r, side="right") - 1, 0, q.size - 1)
    hi = np.clip(np.searchsorted(q, r, side="left"), 0, q.size - 1)
    return q[lo], q[hi]


def unpack4(packed: np.ndarray, n: int) -> np.ndarray:
    """4-bit codes, two per byte, low nibble = even element."""
    packed = np.asarray(packed, dtype=np.uint8).reshape(-1)
    codes = np.empty(2 * packed.size, dtype=np.uint8)
    codes[0::2] = packed & 0x0F
    codes[1::2] = packed >> 4
    return codes[:n]
