"""The portable one-pass Adam/AdamW loop (baseline kernels; the NEON build shares it) stores a NaN it makes as the
canonical quiet NaN 0x7FC00000, whatever the hardware made (x86: 0xFFC00000): an infinite parameter under Adam's
coupled weight decay turns into inf/inf. (On this branch's AVX-512 loop, without the canonical store, the same test
sees 0xffc00000.)"""

import numpy as np
import pytest

import octopt
from octopt import _octopt

CANONICAL = 0x7FC00000


@pytest.fixture
def baseline_isa():
    _octopt.set_simd_level("baseline")
    yield
    _octopt.set_simd_level("")


@pytest.mark.parametrize("bits", [8, 4])
def test_portable_fused_nan_is_canonical(bits, baseline_isa):
    p = np.random.default_rng(0).standard_normal(4097).astype(np.float32)
    p[[3, 300, 4096]] = [np.inf, -np.inf, np.inf]  # the last one in the partial last block
    g = (np.random.default_rng(1).standard_normal(4097) * 1e-2).astype(np.float32)
    opt = octopt.Adam([p], lr=1e-3, weight_decay=0.1, bits=bits)
    for _ in range(3):
        opt.step([g])
    nan = np.isnan(p)
    assert nan.sum() >= 3, "the infinite parameters did not turn into NaN"
    assert set(hex(b) for b in p.view(np.uint32)[nan]) == {hex(CANONICAL)}
    assert np.isfinite(p[~nan]).all()
