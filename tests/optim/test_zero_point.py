"""The zero-point problem: a tiny second moment must not quantize to zero beside a nonzero m."""

import numpy as np
import pytest

import octopt


@pytest.mark.parametrize("bits", [8, 4])
def test_tiny_v_never_becomes_zero(bits):
    n = 4096
    w = np.zeros(n, np.float32)
    opt = octopt.Adam([w], lr=1e-3, bits=bits, block_size=256 if bits == 8 else 128)
    g = np.zeros(n, np.float32)
    g[0] = 1.0  # sets the block's scale
    g[1] = 1e-5  # v ~ 1e-13: 1e-10 of the block's maximum, below the smallest nonzero map entry
    opt.step([g])
    before = w.copy()
    opt.step([np.zeros(n, np.float32)])  # m stays nonzero, the step is m_hat / (sqrt(v_hat) + eps)
    moved = np.abs(w - before)
    assert moved[1] < 10 * 1e-3, f"a tiny-v element moved {moved[1]:.3g}, far more than lr"
    # the state of element 1 really holds a positive v
    sd = opt.state_dict()["state"][0]["slots"]["exp_avg_sq"]
    code = int(sd["data"][1]) if bits == 8 else int(sd["data"][0]) >> 4  # element 1: high nibble of byte 0
    # the map the state really uses (named in the state dict): 8-bit v keeps the dynamic map with its
    # nonzero floor, 4-bit v the zero-free log2 map
    expected = {8: ("dynamic_unsigned_8", octopt.dynamic_map(False)), 4: ("log2_step0.8_nozero_4", octopt.log2_map(4))}
    name, vmap = expected[bits]
    assert sd["map"] == name
    # v ~ 1e-10 of the block's maximum lies below every positive entry: the code is the smallest positive one
    # (the floor), never the zero entry of the 8-bit map
    assert code == int(np.flatnonzero(vmap > 0)[0])
    assert vmap[code] > 0
    assert np.all(np.isfinite(w))


def test_functional_quantize_keeps_plain_nearest():
    x = np.zeros(256, np.float32)
    x[0] = 1.0
    x[1] = 1e-10
    codes, absmax = octopt.quantize_blockwise(x, qmap=octopt.dynamic_map(False))
    assert octopt.dynamic_map(False)[codes[1]] == 0.0
