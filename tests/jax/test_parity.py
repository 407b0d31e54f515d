"""octopt.optax against the NumPy path (octopt.Optimizer) on the same data: the fused, donating
step gives the same bits; update + optax.apply_updates is within the bound docs/jax.md states."""

from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax", reason="jax is not installed")
optax = pytest.importorskip("optax", reason="optax is not installed")


def _fused_steps_match_numpy_path(kind, bits, problem, reference, transformation, as_jax, assert_state_equal, **layout):
    p0, grads = problem()
    ref = reference(kind, p0, grads, bits=bits, **layout)
    tx = transformation(kind, bits=bits, **layout)
    params = as_jax(p0)
    state = tx.init(params)
    for g in grads:
        params, state = tx.step(params, as_jax(g), state)
    for a, b in zip(params, ref.params):
        np.testing.assert_array_equal(np.asarray(a), b)
    assert_state_equal(state, ref)
    assert int(state.count) == len(grads)
    return ref


@pytest.mark.parametrize("bits", (32, 8, 4))
def test_fused_step_is_bit_identical_to_numpy_path(
    kind, bits, problem, reference, transformation, as_jax, assert_state_equal
):
    _fused_steps_match_numpy_path(kind, bits, problem, reference, transformation, as_jax, assert_state_equal)


@pytest.mark.parametrize("kind", ("adamw", "sgd", "adagrad"))
def test_fp8_state_is_bit_identical_to_numpy_path(kind, problem, reference, transformation, as_jax, assert_state_equal):
    """state_map="fp8": the slots' codebook reaches the XLA handler (signed and unsigned slots)."""
    ref = _fused_steps_match_numpy_path(
        kind, 8, problem, reference, transformation, as_jax, assert_state_equal, state_map="fp8"
    )
    assert {s["map"] for t in ref.state_layout() for s in t["slots"].values()} >= {"fp8_e4m3"}
    with pytest.raises(ValueError, match="'state_map' 'fp8' is an 8-bit map, but 'bits' is 4"):
        transformation(kind, bits=4, state_map="fp8")
    with pytest.raises(ValueError, match="'state_map' must be 'dynamic' or 'fp8', got 'e5m2'"):
        transformation(kind, bits=8, state_map="e5m2")


@pytest.mark.parametrize("kind", ("adamw", "sgd", "lion"))
def test_update_then_apply_updates_is_within_the_documented_bound(
    kind, problem, reference, transformation, as_jax, assert_state_equal, ulp_distance
):
    p0, grads = problem(steps=4)
    ref = reference(kind, p0, grads, bits=8)
    tx = transformation(kind, bits=8)
    params = as_jax(p0)
    state = tx.init(params)
    update = jax.jit(tx.update)
    for g in grads:
        prev = [np.asarray(p) for p in params]
        updates, state = update(as_jax(g), state, params)
        params = optax.apply_updates(params, updates)
    # the state never sees the rounding of updates: it is the NumPy path's, bit for bit
    assert_state_equal(state, ref)
    for a, b, old in zip(params, ref.params, prev):
        a = np.asarray(a)
        # the last step's p + (p_new - p) is p_new where p_new and p are within a factor 2 (Sterbenz) ...
        # (earlier steps' 1-ulp differences propagate, so compare the last step from the same start)
        assert ulp_distance(a, b).max() <= 2 * len(grads)
    assert np.mean([np.mean(np.asarray(a) == b) for a, b in zip(params, ref.params)]) > 0.99


def test_one_update_exact_under_sterbenz_and_within_two_ulp_otherwise(
    problem, reference, transformation, as_jax, ulp_distance
):
    p0, grads = problem(steps=1)
    ref = reference("adamw", p0, grads, lr=0.5, bits=8)  # a large lr: many elements change sign
    tx = transformation("adamw", lr=0.5, bits=8)
    params = as_jax(p0)
    updates, _ = jax.jit(tx.update)(as_jax(grads[0]), tx.init(params), params)
    new = optax.apply_updates(params, updates)
    sterbenz_seen = other_seen = 0
    for a, b, p in zip(new, ref.params, p0):
        a = np.asarray(a)
        sterbenz = (b / 2 <= p) & (p <= 2 * b) | (p / 2 <= b) & (b <= 2 * p)
        np.testing.assert_array_equal(a[sterbenz], b[sterbenz])
        assert ulp_distance(a[~sterbenz], b[~sterbenz], p[~sterbenz]).max(initial=0) <= 2
        sterbenz_seen += sterbenz.sum()
        other_seen += (~sterbenz).sum()
    assert sterbenz_seen > 0 and other_seen > 0  # both regimes were exercised


def test_fused_step_writes_over_the_donated_buffers(problem, transformation, as_jax):
    p0, grads = problem(steps=2)
    tx = transformation("adamw", bits=8)
    params = as_jax(p0)
    state = tx.init(params)
    for g in grads:
        ptrs = [p.unsafe_buffer_pointer() for p in params]
        codes = [s.data.unsafe_buffer_pointer() for s in state.slot("exp_avg")]
        params, state = tx.step(params, as_jax(g), state)
        assert [p.unsafe_buffer_pointer() for p in params] == ptrs
        assert [s.data.unsafe_buffer_pointer() for s in state.slot("exp_avg")] == codes
    assert all(p.is_deleted() is False for p in params)


def test_module_level_step_is_the_fused_step(problem, as_jax):
    import octopt.optax as oo

    p0, grads = problem(steps=1)
    tx = oo.adam8bit(1e-2)
    a, _ = oo.step(tx, as_jax(p0), as_jax(grads[0]), tx.init(as_jax(p0)))
    b, _ = tx.step(as_jax(p0), as_jax(grads[0]), tx.init(as_jax(p0)))
    for x, y in zip(a, b):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_eight_bit_names_are_the_generic_with_bits_8(optax_kinds, as_jax, problem):
    import inspect

    import octopt.optax as oo

    for name in optax_kinds:
        eight = getattr(oo, name + "8bit")
        assert "bits" not in inspect.signature(eight).parameters
        state = eight(1e-3, **optax_kinds[name][1]).init(as_jax(problem(steps=0)[0]))
        assert state.layout.leaves[1].specs[0].bits == 8  # 4097 elements: quantized
        assert state.layout.leaves[2].specs[0].bits == 32  # 7 elements: below min_8bit_size


@pytest.mark.parametrize("dtype", ("bfloat16", "float16"))
def test_fused_step_on_half_precision_params_matches_the_core(dtype, problem, transformation, as_jax):
    torch = pytest.importorskip("torch", reason="the NumPy path takes half-precision params as torch tensors")
    import octopt

    p0, grads = problem()
    tdtype = getattr(torch, dtype)
    ref_params = [torch.from_numpy(p.copy()).to(tdtype) for p in p0]
    ref = octopt.AdamW(ref_params, lr=1e-2, bits=8)
    tx = transformation("adamw", bits=8)
    params = [jax.numpy.asarray(p, dtype) * 1 for p in p0]
    state = tx.init(params)
    for g in grads:
        ref.step([torch.from_numpy(x) for x in g])  # float32 gradients for half-precision params
        params, state = tx.step(params, as_jax(g), state)
    for a, b in zip(params, ref_params):
        np.testing.assert_array_equal(np.asarray(a.astype("float32")), b.float().numpy())
