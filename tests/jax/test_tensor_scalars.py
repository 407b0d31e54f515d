"""Per-tensor scalar state in octopt.optax (NAdam's running product mu_product): it lives in the state the
handlers receive and return, after the slots' scales in ``absmax``, so a step depends on nothing a
handler keeps between calls. Optimizers without one keep the state's structure of before."""

from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax", reason="jax is not installed")
optax = pytest.importorskip("optax", reason="optax is not installed")
import jax.numpy as jnp  # noqa: E402
import octopt  # noqa: E402
import octopt.optax as oo  # noqa: E402


def test_core_declares_the_per_tensor_scalars():
    assert octopt._octopt.xla_ffi_tensor_scalars("nadam") == [("mu_product", 1.0)]
    for kind in ("adam", "adamw", "sgd", "lion", "radam", "lamb"):
        assert octopt._octopt.xla_ffi_tensor_scalars(kind) == []


@pytest.mark.parametrize("bits", (32, 8, 4))
def test_nadam_mu_product_is_state_and_equals_the_step_plan(bits, problem, reference, transformation, as_jax):
    p0, grads = problem(steps=4)
    tx = transformation("nadam", bits=bits)
    params, state = as_jax(p0), tx.init(as_jax(p0))
    assert state.layout.scalar_names == ("mu_product",)
    assert len(state.absmax) == len(state.layout.slot_names) + 1
    assert [float(v) for v in jax.tree.leaves(state.tensor_scalar("mu_product"))] == [1.0] * len(p0)
    for g in grads:
        params, state = tx.step(params, as_jax(g), state)
    ref = reference("nadam", p0, grads, bits=bits)
    mine = np.asarray([np.float32(v) for v in jax.tree.leaves(state.tensor_scalar("mu_product"))])
    np.testing.assert_array_equal(mine, np.asarray(ref._plan.tensor_mu_products(), np.float32))
    for a, r in zip(params, ref.params):
        np.testing.assert_array_equal(np.asarray(a), r)


def test_nadam_steps_from_the_mu_product_it_is_given(problem, transformation, as_jax):
    # the handler keeps nothing between calls: the same call with the same state gives the same result, and
    # a state whose mu_product was changed steps from that value
    p0, grads = problem(steps=2)
    tx = transformation("nadam", bits=8)
    params, state = tx.step(as_jax(p0), as_jax(grads[0]), tx.init(as_jax(p0)))
    saved = jax.tree.map(np.asarray, (params, state))
    a, sa = tx.update(as_jax(grads[1]), state, params)
    b, sb = tx.update(as_jax(grads[1]), jax.tree.map(jnp.asarray, saved[1]), jax.tree.map(jnp.asarray, saved[0]))
    for x, y in zip(jax.tree.leaves((a, sa)), jax.tree.leaves((b, sb))):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    k = len(state.layout.slot_names)
    other = state._replace(absmax=state.absmax[:k] + (tuple(v * 0.5 for v in state.absmax[k]),))
    c, sc = tx.update(as_jax(grads[1]), other, params)
    assert not np.array_equal(np.asarray(c[0]), np.asarray(a[0]))
    np.testing.assert_array_equal(
        np.asarray(jax.tree.leaves(sc.tensor_scalar("mu_product"))),
        np.asarray(jax.tree.leaves(sa.tensor_scalar("mu_product"))) * np.float32(0.5),
    )


def test_nadam_mu_product_outside_0_1_is_refused_when_the_step_runs(problem, transformation, as_jax):
    p0, grads = problem(steps=1)
    tx = transformation("nadam")
    state = tx.init(as_jax(p0))
    k = len(state.layout.slot_names)
    bad = state._replace(absmax=state.absmax[:k] + (tuple(jnp.float32(2.0) for _ in p0),))
    with pytest.raises(Exception, match=r"octopt.optax: tensor 0: mu_product must be in \[0, 1\], got 2"):
        jax.block_until_ready(tx.update(as_jax(grads[0]), bad, as_jax(p0)))


def test_nadam_mu_product_of_another_shape_is_refused(problem, transformation, as_jax):
    p0, grads = problem(steps=1)
    tx = transformation("nadam")
    state = tx.init(as_jax(p0))
    k = len(state.layout.slot_names)
    bad = state._replace(absmax=state.absmax[:k] + (tuple(jnp.ones((1,), jnp.float32) for _ in p0),))
    with pytest.raises(ValueError, match=r"entry 'mu_product' of 'params\[0\]' must be a float32 scalar"):
        tx.update(as_jax(grads[0]), bad, as_jax(p0))


def test_optax_nadam_mu_product_under_jit_and_inject_hyperparams(problem, as_jax):
    # optax's nadam is the core's NAdam with a constant momentum coefficient: mu_product = b1^t in float32
    p0, grads = problem(steps=3)
    tx = optax.inject_hyperparams(oo.nadam)(learning_rate=1e-2)
    params, state = as_jax(p0), tx.init(as_jax(p0))
    step = jax.jit(lambda p, s, g: tx.update(g, s, p))
    for g in grads:
        updates, state = step(params, state, as_jax(g))
        params = optax.apply_updates(params, updates)
    expect = np.float32(1.0)
    for _ in grads:
        expect = np.float32(expect * np.float32(0.9))
    for v in jax.tree.leaves(state.inner_state.tensor_scalar("mu_product")):
        assert np.float32(v) == expect


def test_state_without_per_tensor_scalars_keeps_its_structure(problem, as_jax):
    p0, _ = problem(steps=1)
    state = oo.adamw8bit(1e-3).init(as_jax(p0))
    assert state.layout.scalar_names == ()
    assert len(state.absmax) == len(state.layout.slot_names) == 2
    with pytest.raises(KeyError, match="no per-tensor scalar 'mu_product'"):
        state.tensor_scalar("mu_product")
