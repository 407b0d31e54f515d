"""A NaN that the fused Adam/AdamW block loop makes is stored as the canonical quiet NaN 0x7FC00000, as on every
backend (x86 arithmetic makes 0xFFC00000, the GPU 0x7FFFFFFF): an infinite parameter under Adam with coupled weight
decay turns into inf/inf. The fused one-pass loop (float32 parameters, both moments quantized) runs on the AVX2 and
AVX-512 paths; the generic loop (update_element) canonicalizes the same way."""

import numpy as np
import pytest

import octopt
from octopt import _octopt

FUSED_ISAS = ("avx2", "avx512", "avx512vbmi")
CANONICAL = 0x7FC00000
LR, BETAS, EPS, WD = 1e-3, (0.9, 0.999), 1e-8, 0.1


@pytest.fixture
def isa_restore():
    yield
    _octopt.set_simd_level("")


def _data():
    p = np.random.default_rng(0).standard_normal(4097).astype(np.float32)
    p[3] = np.inf
    p[300] = -np.inf
    p[4096] = np.inf  # in the partial last block
    g = (np.random.default_rng(1).standard_normal(4097) * 1e-2).astype(np.float32)
    return p, g


def _adam_expected(p, g):
    """One step of Adam with coupled weight decay from zero moments, in float64."""
    p64, g64 = p.astype(np.float64), g.astype(np.float64)
    with np.errstate(invalid="ignore"):
        gd = g64 + WD * p64
        m = (1 - BETAS[0]) * gd
        v = (1 - BETAS[1]) * gd * gd
        denom = np.sqrt(v) / np.sqrt(1 - BETAS[1]) + EPS
        return p64 - LR / (1 - BETAS[0]) * (m / denom)


@pytest.mark.parametrize("isa", FUSED_ISAS)
@pytest.mark.parametrize("bits", [8, 4])
def test_adam_nan_is_canonical(isa, bits, isa_restore, isa_available):
    if not isa_available(isa):
        pytest.skip(f"this CPU cannot run the {isa} kernels")
    _octopt.set_simd_level(isa)
    p, g = _data()
    expected = _adam_expected(p, g)
    nan = np.isnan(expected)
    assert nan[[3, 300, 4096]].all() and nan.sum() == 3  # inf + inf * 0 -> inf / inf
    opt = octopt.Adam([p], lr=LR, betas=BETAS, eps=EPS, weight_decay=WD, bits=bits)
    opt.step([g])
    bits_out = p.view(np.uint32)
    assert [hex(b) for b in bits_out[nan]] == [hex(CANONICAL)] * 3
    np.testing.assert_allclose(p[~nan], expected[~nan], rtol=1e-5, atol=1e-7)
    # the next step decodes the NaN blocks' moments (absmax NaN): every parameter of those blocks is NaN, canonical
    opt.step([g])
    assert np.isnan(p).sum() > 3
    assert set(bits_out[np.isnan(p)].tolist()) == {CANONICAL}
    for name, slot in opt.state_dict()["state"][0]["slots"].items():
        absmax = np.asarray(slot["absmax"], dtype=np.float32).view(np.uint32)
        assert set(absmax[np.isnan(slot["absmax"])].tolist()) <= {CANONICAL}, name


@pytest.mark.parametrize("isa", FUSED_ISAS)
def test_adamw_nan_parameter_is_canonical(isa, isa_restore, isa_available):
    """A NaN parameter of the other sign (x86's default NaN) goes through AdamW's decay and update as NaN and is
    stored as the canonical one; an infinite one stays infinite (decoupled decay makes no inf * 0)."""
    if not isa_available(isa):
        pytest.skip(f"this CPU cannot run the {isa} kernels")
    _octopt.set_simd_level(isa)
    p, g = _data()
    p.view(np.uint32)[7] = 0xFFC00000
    opt = octopt.AdamW([p], lr=LR, weight_decay=WD, bits=8)
    opt.step([g])
    assert hex(p.view(np.uint32)[7]) == hex(CANONICAL)
    assert np.isposinf(p[3]) and np.isneginf(p[300]) and np.isposinf(p[4096])
    assert np.isnan(p).sum() == 1
