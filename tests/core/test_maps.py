"""Quantization maps: bit-identical to bitsandbytes, and the map contract (float32, ascending, in [-1, 1])."""

from __future__ import annotations

import json
from pathlib import Path
from statistics import NormalDist

import numpy as np
import octopt
import pytest

GOLDEN = json.loads((Path(__file__).parent / "golden" / "maps.json").read_text())["maps"]

# golden name -> (octopt's map, the bitsandbytes call that made the golden values)
MAPS_VS_BNB = {
    "dynamic_signed_8": (lambda: octopt.dynamic_map(True), ("create_dynamic_map", (True, 7, 8))),
    "dynamic_unsigned_8": (lambda: octopt.dynamic_map(False), ("create_dynamic_map", (False, 7, 8))),
    "dynamic_signed_4": (lambda: octopt.dynamic_map(True, bits=4), ("create_dynamic_map", (True, 3, 4))),
    "linear_signed_8": (lambda: octopt.linear_map(True), ("create_linear_map", (True, 8))),
    "linear_unsigned_8": (lambda: octopt.linear_map(False), ("create_linear_map", (False, 8))),
    "fp8_e4m3": (lambda: octopt.fp8_map(), ("create_fp8_map", (True, 4, 3, 8))),
}


def bits_of(values: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)


def golden_bits(name: str) -> np.ndarray:
    return np.array([int(h, 16) for h in GOLDEN[name]["float32_hex"]], dtype=np.uint32)


def assert_same_bits(ours: np.ndarray, theirs_bits: np.ndarray) -> None:
    ours_bits = bits_of(ours)
    assert ours_bits.shape == theirs_bits.shape
    diff = np.flatnonzero(ours_bits != theirs_bits)
    assert diff.size == 0, (
        f"{diff.size} entries differ, first at {diff[0]}: {ours_bits[diff[0]]:08x} vs {theirs_bits[diff[0]]:08x}"
    )


@pytest.mark.parametrize("name", sorted(MAPS_VS_BNB))
def test_map_matches_bitsandbytes_golden(name):
    ours, _ = MAPS_VS_BNB[name]
    assert_same_bits(ours(), golden_bits(name))


@pytest.mark.parametrize("name", sorted(MAPS_VS_BNB))
def test_map_matches_bitsandbytes_live(name):
    bnbf = pytest.importorskip("bitsandbytes.functional", reason="bitsandbytes is not installed")
    import torch

    ours, (fn, args) = MAPS_VS_BNB[name]
    theirs = getattr(bnbf, fn)(*args)
    if name.endswith("_4"):  # bitsandbytes pads a 4-bit map to 256 entries with zeros
        theirs = torch.unique(theirs, sorted=True)
    assert_same_bits(ours(), bits_of(theirs.to(torch.float32).numpy()))


def test_golden_file_is_complete():
    assert set(GOLDEN) == set(MAPS_VS_BNB)
    assert {len(m["float32_hex"]) for n, m in GOLDEN.items() if not n.endswith("_4")} == {256}
    assert len(GOLDEN["dynamic_signed_4"]["float32_hex"]) == 16


def _normal_sample(n: int = 200_000) -> np.ndarray:
    return np.random.default_rng(7).standard_normal(n).astype(np.float32)


ALL_MAPS = {
    "dynamic_signed_8": lambda: octopt.dynamic_map(True),
    "dynamic_unsigned_8": lambda: octopt.dynamic_map(False),
    "dynamic_signed_4": lambda: octopt.dynamic_map(True, bits=4),
    "dynamic_unsigned_4": lambda: octopt.dynamic_map(False, bits=4),
    "linear_signed_8": lambda: octopt.linear_map(True),
    "linear_unsigned_8": lambda: octopt.linear_map(False),
    "linear_signed_4": lambda: octopt.linear_map(True, bits=4),
    "linear_unsigned_4": lambda: octopt.linear_map(False, bits=4),
    "linear_nozero_4": lambda: octopt.linear_map(False, bits=4, zero=False),
    "linear_nozero_8": lambda: octopt.linear_map(False, bits=8, zero=False),
    "log2_4": lambda: octopt.log2_map(4),
    "log2_8": lambda: octopt.log2_map(8, step=0.25),
    "fp8_e4m3": lambda: octopt.fp8_map(),
    "quantile_8": lambda: octopt.quantile_map(_normal_sample(20_000)),
    "quantile_4": lambda: octopt.quantile_map(_normal_sample(20_000), bits=4),
}


@pytest.mark.parametrize("name", sorted(ALL_MAPS))
def test_map_contract(name):
    q = ALL_MAPS[name]()
    bits = 4 if name.endswith("_4") else 8
    assert isinstance(q, np.ndarray)
    assert q.dtype == np.float32
    assert q.shape == (2**bits,)
    assert np.all(np.isfinite(q))
    assert q.min() >= -1.0 and q.max() <= 1.0
    # ascending; fp8 holds both +0 and -0, which compare equal
    assert np.all(q[1:] >= q[:-1]), f"not ascending at {np.flatnonzero(q[1:] < q[:-1])}"
    # and usable as a user map, which is validated
    x = np.linspace(-1, 1, 300, dtype=np.float32)
    octopt.quantize_blockwise(x, qmap=q, bits=bits)


def test_linear_map_without_zero_is_i_plus_one_over_16():
    q = octopt.linear_map(False, bits=4, zero=False)
    np.testing.assert_array_equal(q, (np.arange(16, dtype=np.float32) + 1) / np.float32(16))
    assert 0.0 not in q


def test_linear_map_without_zero_refuses_signed():
    with pytest.raises(ValueError, match="linear_map.*zero=False"):
        octopt.linear_map(True, bits=4, zero=False)


def test_signed_linear_4bit_is_symmetric_with_zero():
    q = octopt.linear_map(True, bits=4)
    assert q[0] == -1.0 and q[-1] == 1.0
    assert 0.0 in q
    assert np.sum(np.abs(q) < 1e-6) == 2  # linspace's (nearly) zero centre plus the added exact zero


def test_maps_are_fresh_copies():
    q = octopt.dynamic_map(True)
    q[0] = 0.5
    assert octopt.dynamic_map(True)[0] != 0.5


def test_quantile_map_of_normal_sample():
    x = _normal_sample()
    q = octopt.quantile_map(x)
    assert q.shape == (256,) and q.dtype == np.float32
    assert np.all(np.diff(q) > 0)
    assert q.min() >= -1 and q.max() <= 1 and np.max(np.abs(q)) == 1.0
    assert 0.0 in q
    probs = (np.arange(255) + 0.5) / 255
    nonzero = np.delete(q, np.flatnonzero(q == 0.0)[0]).astype(np.float64)
    # the sample's own quantiles, normalized the same way
    sample_q = np.quantile(x.astype(np.float64), probs)
    np.testing.assert_allclose(nonzero, sample_q / np.max(np.abs(sample_q)), rtol=0, atol=2e-6)
    # and the normal distribution's
    normal_q = np.array([NormalDist().inv_cdf(p) for p in probs])
    np.testing.assert_allclose(nonzero, normal_q / np.max(np.abs(normal_q)), rtol=0, atol=0.02)


def test_quantile_map_4bit_and_framework_inputs():
    torch = pytest.importorskip("torch")
    x = _normal_sample(10_000)
    q4 = octopt.quantile_map(x, bits=4)
    assert q4.shape == (16,) and 0.0 in q4
    np.testing.assert_array_equal(octopt.quantile_map(torch.from_numpy(x)), octopt.quantile_map(x))


def test_quantile_map_rejects_degenerate_data():
    with pytest.raises(ValueError, match="quantile_map.*'x'"):
        octopt.quantile_map(np.zeros(100, np.float32))
    with pytest.raises(ValueError, match="quantile_map.*'x'"):
        octopt.quantile_map(np.full(10, np.nan, np.float32))


@pytest.mark.parametrize("fn", [octopt.dynamic_map, octopt.linear_map])
@pytest.mark.parametrize("bits", [2, 16, True])
def test_map_bits_checked(fn, bits):
    with pytest.raises((TypeError, ValueError), match=f"{fn.__name__}: argument 'bits'"):
        fn(True, bits=bits)


def _bad_maps():
    cases = []
    for bits in (8, 4):
        good = octopt.dynamic_map(True, bits=bits)
        n = 2**bits

        def edit(index, value, good=good):
            q = good.copy()
            q[index] = value
            return q

        swapped = good.copy()
        swapped[[3, 4]] = swapped[[4, 3]]
        wrong_map = octopt.dynamic_map(True, bits=12 - bits)  # the other bit width's map
        cases += [
            pytest.param(bits, swapped, "sorted ascending", id=f"{bits}bit-unsorted"),
            pytest.param(bits, good[:-1], f"{n} entries", id=f"{bits}bit-too-short"),
            pytest.param(bits, np.append(good, np.float32(1)), f"{n} entries", id=f"{bits}bit-too-long"),
            pytest.param(bits, wrong_map, f"{n} entries", id=f"{bits}bit-other-width"),
            pytest.param(bits, edit(-1, 1.5), r"\[-1, 1\]", id=f"{bits}bit-above-one"),
            pytest.param(bits, edit(0, -1.0000001), r"\[-1, 1\]", id=f"{bits}bit-below-minus-one"),
            pytest.param(bits, edit(5, np.nan), "finite", id=f"{bits}bit-nan"),
            pytest.param(bits, edit(-1, np.inf), "finite", id=f"{bits}bit-inf"),
            pytest.param(bits, good.reshape(2, -1), "1-D", id=f"{bits}bit-2d"),
        ]
    return cases


@pytest.mark.parametrize(("bits", "qmap", "problem"), _bad_maps())
def test_bad_user_map_quantize(bits, qmap, problem):
    x = np.linspace(-1, 1, 100, dtype=np.float32)
    with pytest.raises(ValueError, match=f"quantize_blockwise: argument 'qmap' .*{problem}"):
        octopt.quantize_blockwise(x, qmap=qmap, bits=bits)


@pytest.mark.parametrize(("bits", "qmap", "problem"), _bad_maps())
def test_bad_user_map_dequantize(bits, qmap, problem):
    codes, absmax = octopt.quantize_blockwise(np.ones(100, np.float32), bits=bits)
    with pytest.raises(ValueError, match=f"dequantize_blockwise: argument 'qmap' .*{problem}"):
        octopt.dequantize_blockwise(codes, absmax, qmap=qmap, bits=bits, shape=(100,))


def test_user_map_as_list_and_torch_tensor():
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(0).standard_normal(1000).astype(np.float32)
    q = octopt.linear_map(True)
    expect = octopt.quantize_blockwise(x, qmap=q)[0]
    np.testing.assert_array_equal(octopt.quantize_blockwise(x, qmap=q.tolist())[0], expect)
    np.testing.assert_array_equal(octopt.quantize_blockwise(x, qmap=torch.from_numpy(q))[0], expect)


def test_log2_map_is_geometric_and_zero_free():
    q = octopt.log2_map(4).astype(np.float64)
    assert q[-1] == 1.0 and q.min() > 0
    np.testing.assert_allclose(q[1:] / q[:-1], 2.0**0.8, rtol=1e-6)
    assert q[0] == pytest.approx(2.0**-12, rel=1e-6)
    with pytest.raises(ValueError, match="step"):
        octopt.log2_map(4, step=0.0)
