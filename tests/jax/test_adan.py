"""octopt.optax.adan: optax.adan's signature; the paper's gradient-change weight b2 where optax 0.2.8 uses 1 - b2
(so the two agree to float32 rounding at b2 = 0.5, where both weights are equal); the same core step as
octopt.Adan(no_prox=True) at 32, 8 and 4 bits; eps_root refused (docs/jax.md)."""

from __future__ import annotations

import inspect

import numpy as np
import octopt
import pytest

jax = pytest.importorskip("jax")
optax = pytest.importorskip("optax")
jnp = jax.numpy
oo = pytest.importorskip("octopt.optax")

N = 4097  # one element past a block boundary
STEPS = 30


def _problem(seed=0):
    rng = np.random.default_rng(seed)
    p0 = (rng.standard_normal(N) * 0.1).astype(np.float32)
    return p0, [(rng.standard_normal(N) * (0.2 + rng.random())).astype(np.float32) for _ in range(STEPS)]


def _run(tx, p0, grads):
    p = jnp.asarray(p0)
    state = tx.init(p)
    for g in grads:
        u, state = tx.update(jnp.asarray(g), state, p)
        p = optax.apply_updates(p, u)
    return np.asarray(p), state


def test_signature_is_optax_but_eps_root():
    ours = inspect.signature(oo.adan).parameters
    theirs = inspect.signature(optax.adan).parameters
    assert list(ours)[: len(theirs)] == list(theirs)
    for name, p in theirs.items():
        if name != "eps_root":
            assert ours[name].default == p.default, name
    assert ours["eps_root"].default == 0.0


@pytest.mark.parametrize("wd", [0.0, 0.1])
def test_matches_optax_where_its_weight_agrees(wd):
    p0, grads = _problem()
    kw = dict(b1=0.9, b2=0.5, b3=0.99, weight_decay=wd)
    want, _ = _run(optax.adan(1e-2, eps_root=0.0, **kw), p0, grads)
    got, _ = _run(oo.adan(1e-2, bits=32, **kw), p0, grads)
    displacement = np.abs(want - p0).max()
    assert displacement > 0.1
    assert np.abs(got - want).max() <= 1e-5 * displacement


def test_gradient_change_weighs_b2():
    # at the default b2 = 0.92 optax 0.2.8 weighs the gradient change 0.08: the trajectories part
    p0, grads = _problem()
    theirs, _ = _run(optax.adan(1e-2, eps_root=0.0), p0, grads)
    ours, _ = _run(oo.adan(1e-2, bits=32), p0, grads)
    assert np.abs(ours - theirs).max() > 1e-3 * np.abs(theirs - p0).max()


@pytest.mark.parametrize("bits", [32, 8, 4])
def test_same_core_step_as_numpy(bits):
    p0, grads = _problem(1)
    got, state = _run(oo.adan(1e-2, weight_decay=0.05, bits=bits, min_8bit_size=0, seed=4), p0, grads)
    q = p0.copy()
    opt = octopt.Adan([q], lr=1e-2, weight_decay=0.05, no_prox=True, bits=bits, min_8bit_size=0, seed=4)
    for g in grads:
        opt.step([g])
    # optax applies p + (new p - p): a float32 rounding of the step
    np.testing.assert_allclose(got, q, rtol=0, atol=1e-6 * np.abs(q - p0).max())
    assert set(state.slots) == {"exp_avg", "exp_avg_sq", "exp_avg_diff", "pre_grad"}


def test_eps_root_is_refused():
    with pytest.raises(ValueError, match="eps_root"):
        oo.adan(1e-2, eps_root=1e-8)
