"""Nearest-rounding codes, absmax, 4-bit packing and dequantized values against the NumPy reference."""

from __future__ import annotations

import numpy as np
import octopt
import pytest

SUBSAMPLE = 16384  # elements checked against the brute-force reference in a large tensor


def sample(n: int, seed: int = 0) -> np.ndarray:
    """Normal values whose magnitude changes every 64 elements (1e-2 .. 1e2), about 2% exact zeros
    (some negative zeros), and one all-zero stretch covering whole blocks of up to 256 elements."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(n)
    x *= np.repeat(10.0 ** rng.uniform(-2, 2, size=-(-n // 64)), 64)[:n]
    zeros = rng.random(n) < 0.02
    x[zeros] = np.where(rng.random(zeros.sum()) < 0.5, 0.0, -0.0)
    if n >= 1024:
        x[256:512] = 0.0
    return x.astype(np.float32)


def checked_indices(n: int, block_size: int, seed: int = 1) -> np.ndarray:
    """Every index of a small tensor; of a large one: the first two blocks, the last block and a
    random subsample."""
    if n <= 4 * SUBSAMPLE:
        return np.arange(n)
    rng = np.random.default_rng(seed)
    parts = [
        np.arange(min(2 * block_size, n)),
        np.arange(max(0, n - block_size), n),
        rng.integers(0, n, SUBSAMPLE),
    ]
    return np.unique(np.concatenate(parts))


def host_input(case, x):
    """The values octopt actually received, as float32 (exact for every input dtype)."""
    return case.to_numpy(x).astype(np.float32)


def test_codes_and_absmax_match_reference(array_case, ragged_size, block_size, ref):
    n = ragged_size
    x = array_case.make(sample(n))
    codes, absmax = octopt.quantize_blockwise(x, block_size=block_size)
    x32 = host_input(array_case, x)
    qmap = octopt.dynamic_map(True)
    idx = checked_indices(n, block_size)
    want_codes, want_absmax = ref.quantize(x32, qmap, block_size, idx)
    got_absmax = array_case.to_numpy(absmax)
    np.testing.assert_array_equal(got_absmax, want_absmax.astype(np.float64))
    got_codes = array_case.to_numpy(codes).reshape(-1)[idx]
    bad = np.flatnonzero(got_codes != want_codes)
    assert bad.size == 0, (
        f"{bad.size} codes differ; first at element {idx[bad[0]]}: "
        f"x={x32[idx[bad[0]]]!r} got {got_codes[bad[0]]} want {want_codes[bad[0]]}"
    )


def test_all_zero_block(array_case, ref):
    block_size = 64
    values = sample(4 * block_size)
    values[block_size : 2 * block_size] = 0.0
    values[block_size + 1] = -0.0
    x = array_case.make(values)
    codes, absmax = octopt.quantize_blockwise(x, block_size=block_size)
    qmap = octopt.dynamic_map(True)
    zero_code = int(ref.nearest_codes(np.zeros(1, np.float32), qmap)[0])
    assert array_case.to_numpy(absmax)[1] == 0.0
    np.testing.assert_array_equal(array_case.to_numpy(codes)[block_size : 2 * block_size], zero_code)
    y = array_case.to_numpy(octopt.dequantize_blockwise(codes, absmax, block_size=block_size))
    np.testing.assert_array_equal(y[block_size : 2 * block_size], 0.0)


def _tie_inputs(qmap: np.ndarray, case) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Exact midpoints between neighbouring map values and the floats on either side of them, each
    exactly representable in the case's dtype. Returns (values, lower index, kind) with kind
    0 = just below, 1 = exact midpoint, 2 = just above."""
    q = qmap.astype(np.float64)
    vals, lows, kinds = [], [], []
    for k in range(q.size - 1):
        if q[k] == q[k + 1]:
            continue
        mid = (q[k] + q[k + 1]) / 2  # exact in float64
        m32 = np.float32(mid)
        if float(m32) != mid:
            continue
        for kind, v in enumerate((np.nextafter(m32, np.float32(-2)), m32, np.nextafter(m32, np.float32(2)))):
            if case.round_to_dtype(np.array([v]))[0] == float(v):
                vals.append(v)
                lows.append(k)
                kinds.append(kind)
    return np.array(vals, np.float32), np.array(lows), np.array(kinds)


TIE_MAPS = {
    "dynamic": lambda: octopt.dynamic_map(True),
    "linear": lambda: octopt.linear_map(True),
    "fp8": octopt.fp8_map,
    "dynamic4": lambda: octopt.dynamic_map(True, bits=4),
    # dyadic maps: their midpoints are exact in float16 and bfloat16 too
    "dyadic": lambda: (np.arange(256) / 128 - 1).astype(np.float32),
    "dyadic4": lambda: (np.arange(16) / 8 - 1).astype(np.float32),
}


@pytest.mark.parametrize("map_name", sorted(TIE_MAPS))
def test_ties_go_to_the_lower_index(array_case, map_name, ref):
    qmap = TIE_MAPS[map_name]()
    bits = 4 if qmap.size == 16 else 8
    vals, lows, kinds = _tie_inputs(qmap, array_case)
    if np.sum(kinds == 1) < 8:  # dynamic and linear maps' midpoints need more bits than 16-bit inputs hold
        pytest.skip(f"too few midpoints of the {map_name} map are exact in {array_case.dtype}")
    values = np.concatenate([[1.0], vals]).astype(np.float32)  # absmax 1: r == x exactly
    codes, absmax = octopt.quantize_blockwise(array_case.make(values), qmap=qmap, block_size=4096, bits=bits)
    got = array_case.to_numpy(codes)
    got = (ref.unpack4(got, values.size) if bits == 4 else got)[1:].astype(np.int64)
    assert array_case.to_numpy(absmax)[0] == 1.0
    np.testing.assert_array_equal(got, ref.nearest_codes(vals, qmap))
    # the same without the reference: below and at the midpoint -> lower value, above -> upper value,
    # each by its first index (fp8 holds +0 and -0, which are equal)
    lower = np.searchsorted(qmap, qmap[lows], side="left")
    upper = np.searchsorted(qmap, qmap[lows + 1], side="left")
    np.testing.assert_array_equal(got[kinds <= 1], lower[kinds <= 1])
    np.testing.assert_array_equal(got[kinds == 2], upper[kinds == 2])


def _zero_free_map() -> np.ndarray:
    """A signed map without zero whose entries nearest to 0 are -0.001 and 0.05: the nearest value of a
    small positive r is negative, which the sign rule must overrule."""
    return np.concatenate([np.linspace(-1, -0.001, 128), np.linspace(0.05, 1, 128)]).astype(np.float32)


def test_sign_rule_with_zero_free_map(array_case, ref):
    qmap = _zero_free_map()
    rng = np.random.default_rng(3)
    values = rng.uniform(-0.06, 0.06, 4096).astype(np.float32)
    values[::256] = 1.0  # absmax 1 in every block
    x = array_case.make(values)
    codes, absmax = octopt.quantize_blockwise(x, qmap=qmap, block_size=256)
    x32 = host_input(array_case, x)
    r = ref.ratios(x32, ref.absmax(x32, 256), 256, np.arange(x32.size))
    want = ref.nearest_codes(r, qmap)
    assert np.any(want != ref.nearest_raw(r, qmap)), "the data must exercise the sign rule"
    np.testing.assert_array_equal(array_case.to_numpy(codes), want)
    y = array_case.to_numpy(octopt.dequantize_blockwise(codes, absmax, qmap=qmap, block_size=256))
    assert not np.any(np.sign(y) * np.sign(x32) < 0)


@pytest.mark.parametrize("block_size", [32, 256])
def test_4bit_codes_are_packed_low_nibble_first(array_case, ragged_size, block_size, ref):
    n = ragged_size
    x = array_case.make(sample(n, seed=5))
    codes, absmax = octopt.quantize_blockwise(x, block_size=block_size, bits=4)
    packed = array_case.to_numpy(codes)
    assert packed.dtype == np.uint8 and packed.shape == ((n + 1) // 2,)
    if n % 2:
        assert packed[-1] >> 4 == 0, "the unused high nibble of an odd count must be 0"
    qmap = octopt.dynamic_map(True, bits=4)
    x32 = host_input(array_case, x)
    idx = checked_indices(n, block_size)
    want_codes, want_absmax = ref.quantize(x32, qmap, block_size, idx)
    np.testing.assert_array_equal(array_case.to_numpy(absmax), want_absmax.astype(np.float64))
    got = ref.unpack4(packed, n)[idx]
    np.testing.assert_array_equal(got, want_codes)
    # the nibble order itself, on the first pair of elements
    if n >= 2:
        assert packed[0] == want_codes[0] | (want_codes[1] << 4)


def test_4bit_with_zero_free_unsigned_map(array_case, ref):
    qmap = octopt.linear_map(False, bits=4, zero=False)
    values = np.abs(sample(4097, seed=11))
    x = array_case.make(values)
    codes, absmax = octopt.quantize_blockwise(x, qmap=qmap, block_size=128, bits=4)
    want, _ = ref.quantize(host_input(array_case, x), qmap, 128)
    np.testing.assert_array_equal(ref.unpack4(array_case.to_numpy(codes), values.size), want)


@pytest.mark.parametrize("bits", [8, 4])
@pytest.mark.parametrize("n", [1, 255, 4097, 65537])  # the ragged sizes, with a smaller large one
def test_dequantize_is_map_value_times_absmax(array_case, n, bits, ref):
    block_size = 128
    x = array_case.make(sample(n, seed=n))
    codes, absmax = octopt.quantize_blockwise(x, block_size=block_size, bits=bits)
    host_codes = array_case.to_numpy(codes)
    flat_codes = ref.unpack4(host_codes, n) if bits == 4 else host_codes.reshape(-1)
    qmap = octopt.dynamic_map(True, bits=bits)
    want32 = ref.dequantize_f32(flat_codes, array_case.to_numpy(absmax).astype(np.float32), qmap, block_size)
    for dtype in ("float32", array_case.dtype):
        y = octopt.dequantize_blockwise(
            codes, absmax, block_size=block_size, bits=bits, dtype=dtype, shape=(n,) if bits == 4 else None
        )
        got = array_case.to_numpy(y).reshape(-1)
        assert got.size == n
        want = array_case.round_to_dtype(want32, dtype)
        bad = np.flatnonzero(got != want)
        assert bad.size == 0, f"{dtype}: {bad.size} values differ, first {got[bad[0]]!r} vs {want[bad[0]]!r}"


def test_dequantize_rounds_to_nearest_even(array_case, ref):
    """Products that fall exactly halfway between two float16 / bfloat16 values round to the even one."""
    if array_case.dtype == "float32":
        pytest.skip("float32 output is the product itself")
    qmap = (np.arange(256) / 256).astype(np.float32)  # k / 256: every product below is exact in float32
    # 1 + u/2 lies halfway between 1 and 1 + u (u: the output's ulp at 1) and rounds down to 1;
    # 1 + 3u/2 lies halfway between 1 + u and 1 + 2u and rounds up to 1 + 2u. The same holds for
    # k / 256 times them whenever k is a power of two.
    half_ulp = 2.0**-11 if array_case.dtype == "float16" else 2.0**-8
    absmax = np.array([1 + half_ulp, 1 + 3 * half_ulp], dtype=np.float32)
    codes = np.tile(np.arange(256), 2).astype(np.uint8)
    y = octopt.dequantize_blockwise(
        array_case.make(codes, dtype="uint8"),
        array_case.make(absmax, dtype="float32"),
        qmap=qmap,
        block_size=256,
        dtype=array_case.dtype,
    )
    got = array_case.to_numpy(y)
    np.testing.assert_array_equal(got, array_case.round_to_dtype(ref.dequantize_f32(codes, absmax, qmap, 256)))
    for k in (1, 2, 4, 8, 16, 32, 64, 128):
        assert got[k] == k / 256
        assert got[256 + k] == k / 256 * (1 + 4 * half_ulp)


@pytest.mark.parametrize("block_size", [256, 4096])
def test_round_trip_error_within_bitsandbytes_bounds(block_size):
    x = np.random.default_rng(0).standard_normal((1024, 1024)).astype(np.float32)
    codes, absmax = octopt.quantize_blockwise(x, block_size=block_size)
    y = octopt.dequantize_blockwise(codes, absmax, block_size=block_size)
    assert y.shape == x.shape and y.dtype == np.float32
    diff = np.abs(x - y).astype(np.float64)
    reldiff = diff / np.abs(x.astype(np.float64) + 1e-8)
    assert diff.mean() < 0.011
    assert reldiff.mean() < 0.018


def test_zero_stays_zero_and_signs_never_flip(array_case):
    values = sample(2**16, seed=9)
    x = array_case.make(values)
    for bits in (8, 4):
        for rounding in ("nearest", "stochastic"):
            codes, absmax = octopt.quantize_blockwise(x, bits=bits, rounding=rounding, seed=4)
            y = array_case.to_numpy(octopt.dequantize_blockwise(codes, absmax, bits=bits, shape=(values.size,)))
            x64 = array_case.to_numpy(x)
            np.testing.assert_array_equal(y[x64 == 0], 0.0)
            flipped = np.flatnonzero(np.sign(y) * np.sign(x64) < 0)
            assert flipped.size == 0, f"bits={bits} {rounding}: sign flipped at {flipped[:5]}"


def test_shape_of_8bit_codes_follows_x(cpu_array_case):
    x = cpu_array_case.make(sample(8 * 33).reshape(8, 33))
    codes, absmax = octopt.quantize_blockwise(x, block_size=32)
    assert tuple(codes.shape) == (8, 33)
    assert tuple(absmax.shape) == (9,)
    y = octopt.dequantize_blockwise(codes, absmax, block_size=32)
    assert tuple(y.shape) == (8, 33)
    np.testing.assert_array_equal(
        cpu_array_case.to_numpy(codes).reshape(-1),
        cpu_array_case.to_numpy(octopt.quantize_blockwise(x.reshape(-1), block_size=32)[0]),
    )


@pytest.mark.parametrize("bits", [8, 4])
def test_empty_input(cpu_array_case, bits):
    x = cpu_array_case.make(np.zeros(0, np.float32))
    codes, absmax = octopt.quantize_blockwise(x, bits=bits)
    assert tuple(codes.shape) == (0,) and tuple(absmax.shape) == (0,)
    y = octopt.dequantize_blockwise(codes, absmax, bits=bits, shape=(0,))
    assert tuple(y.shape) == (0,)


def _coarse_map() -> np.ndarray:
    """A valid map made mostly of repeated values: 256 entries rounded to eighths."""
    return (np.round(np.linspace(-1, 1, 256) * 8) / 8).astype(np.float32)


OTHER_MAPS = {
    "fp8": octopt.fp8_map,
    "linear": lambda: octopt.linear_map(True),
    "linear4": lambda: octopt.linear_map(True, bits=4),
    "quantile": lambda: octopt.quantile_map(sample(10_000, seed=2)),
    "coarse-with-repeats": _coarse_map,
}


@pytest.mark.parametrize("map_name", sorted(OTHER_MAPS))
def test_codes_match_reference_for_other_maps(array_case, map_name, ref):
    qmap = OTHER_MAPS[map_name]()
    bits = 4 if qmap.size == 16 else 8
    x = array_case.make(sample(4097, seed=13))
    codes, absmax = octopt.quantize_blockwise(x, qmap=qmap, block_size=256, bits=bits)
    want, want_absmax = ref.quantize(host_input(array_case, x), qmap, 256)
    got = array_case.to_numpy(codes)
    got = ref.unpack4(got, 4097) if bits == 4 else got
    np.testing.assert_array_equal(array_case.to_numpy(absmax), want_absmax.astype(np.float64))
    np.testing.assert_array_equal(got, want)
