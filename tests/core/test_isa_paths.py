"""Every CPU kernel variant (baseline, AVX2, AVX-512) computes the same bits."""

import numpy as np
import pytest

import octopt
from octopt import _octopt

ISAS = ("avx2", "avx512", "avx512vbmi")


@pytest.fixture
def isa_restore():
    yield
    _octopt.set_simd_level("")


def _data(n=100_003, seed=0):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(n) * rng.exponential(1.0, n)).astype(np.float32)
    x[::97] = 0.0
    x[5:9] = [1e-30, -1e-30, 3e-39, -3e-39]  # tiny and subnormal values
    return x


def _quantize_all():
    x = _data()
    out = []
    maps = [
        (8, None),
        (4, None),
        (8, octopt.dynamic_map(False)),
        (4, octopt.log2_map(4)),
        (8, octopt.fp8_map()),
        (8, octopt.linear_map(True)),
        (4, octopt.linear_map(False, bits=4, zero=False)),
    ]
    for bits, q in maps:
        src = np.abs(x) if q is not None and q.min() >= 0 else x
        for bs in (32, 256, 4096):
            for rounding in ("nearest", "stochastic"):
                c, a = octopt.quantize_blockwise(src, qmap=q, bits=bits, block_size=bs, rounding=rounding, seed=3)
                y = octopt.dequantize_blockwise(c, a, qmap=q, bits=bits, block_size=bs, shape=src.shape)
                out += [c, a, y]
    return out


def _steps_all():
    out = []
    for cls, kw in [
        (octopt.Adam, dict(weight_decay=0.01)),
        (octopt.AdamW, {}),
        (octopt.SGD, dict(momentum=0.9)),
        (octopt.RMSprop, dict(momentum=0.9, centered=True)),
        (octopt.RMSprop, dict(momentum=0.9, centered=True, eps_in_sqrt=True)),  # optax's form
        (octopt.Adagrad, {}),
        (octopt.Lion, {}),
        (octopt.AdEMAMix, {}),
        (octopt.LAMB, {}),
        (octopt.LARS, {}),
        (octopt.AdamW, dict(state_map="fp8")),  # 8-bit state in the fp8 map (bits 4 refuse it)
        (octopt.SGD, dict(momentum=0.9, state_map="fp8")),
        (octopt.Adagrad, dict(state_map="fp8")),
    ]:
        for bits in (32, 8) if "state_map" in kw else (32, 8, 4):
            params = [np.random.default_rng(1).standard_normal(n).astype(np.float32) for n in (5000, 4097, 300)]
            opt = cls(params, bits=bits, **kw)
            for s in range(3):
                g = [np.random.default_rng(10 + s).standard_normal(p.shape).astype(np.float32) for p in params]
                g[0][7] = np.nan if s == 1 else g[0][7]  # one skipped block
                opt.step(g)
            out += params
            for st in opt.state_dict()["state"]:
                for slot in st["slots"].values():
                    out.append(slot["data"])
                    if "absmax" in slot:
                        out.append(slot["absmax"])
    return out


@pytest.mark.parametrize("isa", ISAS)
def test_kernels_match_the_baseline(isa, isa_restore, isa_available):
    if not isa_available(isa):
        pytest.skip(f"this CPU cannot run the {isa} kernels")
    _octopt.set_simd_level("baseline")
    ref_q, ref_s = _quantize_all(), _steps_all()
    _octopt.set_simd_level(isa)
    assert octopt.info()["simd"] == isa
    got_q, got_s = _quantize_all(), _steps_all()
    for i, (a, b) in enumerate(zip(ref_q, got_q)):
        assert np.array_equal(a.view(np.uint8), b.view(np.uint8)), f"quantize output {i} differs on {isa}"
    for i, (a, b) in enumerate(zip(ref_s, got_s)):
        assert np.array_equal(np.asarray(a).view(np.uint8), np.asarray(b).view(np.uint8)), f"step output {i} on {isa}"


def test_unknown_isa_is_refused(isa_restore):
    with pytest.raises(ValueError, match="OCTOPT_ISA"):
        _octopt.set_simd_level("sse9")
