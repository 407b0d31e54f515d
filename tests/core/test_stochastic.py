"""Stochastic rounding: reproducible, seed-dependent, thread-independent, between neighbours, unbiased."""

from __future__ import annotations

import numpy as np
import octopt
import pytest


def sample(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(n).astype(np.float32)


def quantize_sr(x, seed: int, bits: int = 8, block_size: int = 256):
    return octopt.quantize_blockwise(x, block_size=block_size, bits=bits, rounding="stochastic", seed=seed)


@pytest.mark.parametrize("bits", [8, 4])
def test_same_seed_same_codes_other_seed_other_codes(array_case, bits):
    x = array_case.make(sample(4097))
    c1, a1 = quantize_sr(x, seed=123, bits=bits)
    c2, a2 = quantize_sr(x, seed=123, bits=bits)
    c3, _ = quantize_sr(x, seed=124, bits=bits)
    np.testing.assert_array_equal(array_case.to_numpy(c1), array_case.to_numpy(c2))
    np.testing.assert_array_equal(array_case.to_numpy(a1), array_case.to_numpy(a2))
    differ = np.mean(array_case.to_numpy(c1) != array_case.to_numpy(c3))
    assert differ > 0.2, f"only {differ:.1%} of the codes changed with the seed"
    nearest, _ = octopt.quantize_blockwise(x, bits=bits)
    assert np.any(array_case.to_numpy(c1) != array_case.to_numpy(nearest))


def test_large_seeds_accepted_and_distinct():
    x = sample(4096)
    c_max, _ = quantize_sr(x, seed=2**64 - 1)
    c_zero, _ = quantize_sr(x, seed=0)
    assert np.any(c_max != c_zero)


@pytest.mark.parametrize("bits", [8, 4])
def test_independent_of_thread_count(restore_threads, bits):
    x = sample(2**18 + 3, seed=4)  # 1025 blocks of 256: split across threads
    results = []
    for threads in (1, 2, 1):
        octopt.set_num_threads(threads)
        results.append(quantize_sr(x, seed=99, bits=bits))
    for codes, absmax in results[1:]:
        np.testing.assert_array_equal(codes, results[0][0])
        np.testing.assert_array_equal(absmax, results[0][1])


def test_counter_based_prefix_consistency():
    """An element's random number depends on (seed, index) only: a block-aligned prefix gets the
    same codes."""
    x = sample(8192, seed=6)
    full, _ = quantize_sr(x, seed=5)
    prefix, _ = quantize_sr(x[:4096].copy(), seed=5)
    np.testing.assert_array_equal(prefix, full[:4096])


@pytest.mark.parametrize("bits", [8, 4])
def test_codes_are_bracketing_neighbours(array_case, bits, ref):
    n, block_size = 8191, 128
    values = sample(n, seed=8)
    values[::37] = 0.0
    x = array_case.make(values)
    qmap = octopt.dynamic_map(True, bits=bits)
    x32 = array_case.to_numpy(x).astype(np.float32)
    amax = ref.absmax(x32, block_size)
    r = ref.ratios(x32, amax, block_size, np.arange(n))
    lo, hi = ref.bracketing_values(r, qmap)
    for seed in range(5):
        codes, absmax = quantize_sr(x, seed=seed, bits=bits, block_size=block_size)
        np.testing.assert_array_equal(array_case.to_numpy(absmax), amax.astype(np.float64))
        c = array_case.to_numpy(codes)
        c = ref.unpack4(c, n) if bits == 4 else c
        chosen = qmap[c.astype(np.int64)]
        outside = np.flatnonzero((chosen != lo) & (chosen != hi))
        assert outside.size == 0, (
            f"seed {seed}: r={r[outside[0]]!r} got {chosen[outside[0]]!r}, "
            f"neighbours {lo[outside[0]]!r}, {hi[outside[0]]!r}"
        )
        on_map = lo == hi
        np.testing.assert_array_equal(chosen[on_map], lo[on_map])  # a value on the map is kept exactly


@pytest.mark.parametrize("bits", [8, 4])
def test_unbiased(bits, ref):
    n, block_size, draws = 4096, 256, 200
    x = sample(n, seed=10)
    qmap = octopt.dynamic_map(True, bits=bits)
    amax = ref.absmax(x, block_size)
    a = amax[np.arange(n) // block_size].astype(np.float64)
    r = ref.ratios(x, amax, block_size, np.arange(n))
    lo, hi = (v.astype(np.float64) for v in ref.bracketing_values(r, qmap))
    inside = (r >= qmap[0]) & (r <= qmap[-1])  # beyond the map's ends rounding must clamp, hence bias
    total = np.zeros(n)
    for seed in range(draws):
        codes, absmax = quantize_sr(x, seed=1000 + seed, bits=bits, block_size=block_size)
        total += octopt.dequantize_blockwise(codes, absmax, block_size=block_size, bits=bits, shape=(n,))
    mean = total / draws
    # one draw is lo or hi (times absmax) with P(hi) = p: variance (hi - lo)^2 p (1 - p) absmax^2
    p = np.where(hi > lo, (r - lo) / np.where(hi > lo, hi - lo, 1), 0.0)
    var_of_mean = (hi - lo) ** 2 * p * (1 - p) * a**2 / draws
    err = (mean - x)[inside]
    var = var_of_mean[inside]
    slack = 4 * np.finfo(np.float32).eps * np.abs(x[inside])  # float32 rounding of q * absmax
    # every element whose count of upward roundings is not too skewed for a normal bound (p in
    # [0.02, 0.98]) is within 6 standard deviations; a value on the map exactly (p = 0) is kept
    pin = p[inside]
    usable = ((pin >= 0.02) & (pin <= 0.98)) | (pin == 0)
    assert np.all((np.abs(err) <= 6 * np.sqrt(var) + slack)[usable])
    # the whole vector: the sum of the errors is within 5 standard deviations of 0 ...
    assert abs(err.sum()) <= 5 * np.sqrt(var.sum()) + slack.sum()
    # ... and the standardized errors have variance 1 (nearest rounding would give far more)
    mid = (p[inside] > 0.05) & (p[inside] < 0.95)
    z2 = err[mid] ** 2 / var[mid]
    assert mid.sum() > n // 2
    assert 0.8 < z2.mean() < 1.2, z2.mean()
