"""Non-finite gradients never corrupt state: a block whose gradient holds NaN/Inf keeps its parameter
and state bit for bit, every other block is stepped, and the step reports how many blocks it skipped."""

from __future__ import annotations

import numpy as np
import octopt
import pytest


KW = {
    "Adam": {"lr": 1e-2, "weight_decay": 0.01},
    "AdamW": {"lr": 1e-2},
    "SGD": {"lr": 0.1, "momentum": 0.9},
    "RMSprop": {"lr": 1e-3, "momentum": 0.5, "centered": True},
    "Adagrad": {"lr": 0.1},
    "Lion": {"lr": 1e-3},
    "AdEMAMix": {"lr": 1e-2},
    "LAMB": {"lr": 1e-2},
    "LARS": {"lr": 1.0},
}

SHAPES = ((4097,), (33, 65))
# (tensor, block, value): NaN and both infinities, in a full block, the partial last block and a 2-D tensor
BAD = ((0, 2, np.nan), (0, 5, np.inf), (0, -1, -np.inf), (1, 0, np.nan))


def _element_range(n, block, b):
    nb = -(-n // block)
    b = b % nb
    return b, block * b, min(n, block * (b + 1))


def _state_block(arr_key, arr, bits, n, block, b):
    """The part of a flattened state array that belongs to block b."""
    b, i0, i1 = _element_range(n, block, b)
    if arr_key.endswith("absmax"):
        return arr[b : b + 1]
    if bits == 4:
        return arr[i0 // 2 : (i1 + 1) // 2]
    return arr.reshape(-1)[i0:i1]


def _grads(make, rng, bad, dtype="float32", framework="numpy", block=256):
    gs = []
    for t, shape in enumerate(SHAPES):
        g = rng.standard_normal(shape).astype(np.float32).reshape(-1)
        for tt, b, v in bad:
            if tt == t:
                _, i0, i1 = _element_range(g.size, block, b)
                g[(i0 + i1) // 2] = v
        gs.append(make(g.reshape(shape), framework, dtype))
    return gs


@pytest.mark.parametrize("bits", [32, 8, 4])
@pytest.mark.parametrize("name", list(KW))
def test_bad_blocks_keep_param_and_state(name, bits, make, raw, state_arrays):
    _check_bad_blocks(make, raw, state_arrays, name, bits, "numpy", "float32")


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("name", ["Adam", "SGD", "LAMB"])
def test_bad_blocks_keep_param_and_state_torch(name, dtype, make, raw, state_arrays):
    pytest.importorskip("torch")
    _check_bad_blocks(make, raw, state_arrays, name, 8, "torch", dtype)


def _check_bad_blocks(make, raw, state_arrays, name, bits, framework, dtype, block_size=None):
    block = block_size or (128 if bits == 4 else 256)
    rng = np.random.default_rng(4)
    params = [make(rng.standard_normal(s), framework, dtype) for s in SHAPES]
    extra = {} if block_size is None else {"block_size": block_size}
    opt = getattr(octopt, name)(params, bits=bits, min_8bit_size=0, **KW[name], **extra)
    for _ in range(3):  # a state that is not all zeros
        assert opt.step(_grads(make, rng, (), dtype, framework, block)) == 0
    before_p = [raw(p).reshape(-1) for p in params]
    before_s = state_arrays(opt)
    skipped = opt.step(_grads(make, rng, BAD, dtype, framework, block))
    assert skipped == len(BAD) == opt.last_skipped_blocks == opt.skipped_blocks
    after_p = [raw(p).reshape(-1) for p in params]
    after_s = state_arrays(opt)
    layout = opt.state_layout()
    for t, shape in enumerate(SHAPES):
        n = int(np.prod(shape))
        bad = {_element_range(n, block, b)[0] for tt, b, _ in BAD if tt == t}
        for b in range(-(-n // block)):
            _, i0, i1 = _element_range(n, block, b)
            same_p = np.array_equal(before_p[t][i0:i1], after_p[t][i0:i1])
            assert same_p == (b in bad), f"tensor {t} block {b}: param {'changed' if b in bad else 'not stepped'}"
            if b not in bad:
                continue
            for key in before_s:
                ti, slot, _ = key.split(".")
                if int(ti) != t:
                    continue
                sbits = layout[t]["slots"][slot]["bits"]
                np.testing.assert_array_equal(
                    _state_block(key, after_s[key], sbits, n, block, b),
                    _state_block(key, before_s[key], sbits, n, block, b),
                    err_msg=f"tensor {t} block {b} state {key}",
                )
    # the next finite step steps everything again
    assert opt.step(_grads(make, rng, (), dtype, framework, block)) == 0
    assert opt.last_skipped_blocks == 0 and opt.skipped_blocks == len(BAD)


@pytest.mark.parametrize("block_size", [64, 1024])
def test_the_skipped_unit_is_the_groups_block_size(block_size, make, raw, state_arrays):
    _check_bad_blocks(make, raw, state_arrays, "Adam", 8, "numpy", "float32", block_size=block_size)
    _check_bad_blocks(make, raw, state_arrays, "Adam", 32, "numpy", "float32", block_size=block_size)


def test_a_tensor_with_only_bad_blocks_and_a_none_grad():
    rng = np.random.default_rng(0)
    params = [rng.standard_normal(s).astype(np.float32) for s in SHAPES] + [np.ones(500, np.float32)]
    opt = octopt.Adam(params, lr=1e-2, bits=8)
    before = [p.copy() for p in params]
    g0 = np.full(4097, np.nan, np.float32)
    g1 = rng.standard_normal(SHAPES[1]).astype(np.float32)
    assert opt.step([g0, g1, None]) == 17  # every block of the first tensor, 4097 = 16 * 256 + 1
    np.testing.assert_array_equal(params[0], before[0])
    assert not np.array_equal(params[1], before[1])
    np.testing.assert_array_equal(params[2], before[2])


@pytest.mark.parametrize("bits", [32, 8])
@pytest.mark.parametrize("name", ["Adam", "SGD", "LARS"])
def test_strict_raises_and_changes_nothing(name, bits, snapshot, assert_snapshots_equal, assert_params_bit_equal):
    rng = np.random.default_rng(8)
    p0 = [rng.standard_normal(s).astype(np.float32) for s in SHAPES]
    good = [[rng.standard_normal(s).astype(np.float32) for s in SHAPES] for _ in range(4)]
    bad = [g.copy() for g in good[2]]
    bad[1][3, 7] = np.inf

    def make_opt():
        ps = [p.copy() for p in p0]
        return ps, getattr(octopt, name)(ps, bits=bits, strict=True, stochastic_rounding=True, **KW[name])

    ps, opt = make_opt()
    ref_ps, ref = make_opt()
    for g in good[:2]:
        opt.step(g)
        ref.step(g)
    before = snapshot(opt)
    with pytest.raises(ValueError, match=r"NaN or Inf.*strict"):
        opt.step(bad)
    assert_snapshots_equal(snapshot(opt), before)
    assert opt.last_skipped_blocks == 0 and opt.skipped_blocks == 0
    # the failed step left no trace: the run continues exactly like one that never saw it
    for g in good[2:]:
        opt.step(g)
        ref.step(g)
    assert_params_bit_equal(ps, ref_ps)
    assert_snapshots_equal(snapshot(opt), snapshot(ref))
