"""octopt.optax.contrib.muon against optax.contrib.muon (32-bit: float32 rounding; non-2-D leaves on AdamW as
optax routes them), 8-bit close, and its refusals (docs/muon.md)."""

from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")
optax = pytest.importorskip("optax")
jnp = jax.numpy
oo = pytest.importorskip("octopt.optax")


def _params():
    rng = np.random.default_rng(0)
    return {
        "w": jnp.asarray(rng.standard_normal((67, 65)), jnp.float32),  # 4355: no multiple of a block
        "v": jnp.asarray(rng.standard_normal((24, 40)), jnp.float32),
        "b": jnp.asarray(rng.standard_normal(40), jnp.float32),
    }


def _run(tx, steps: int = 5):
    params = _params()
    state = tx.init(params)
    rng = np.random.default_rng(1)
    for _ in range(steps):
        g = jax.tree_util.tree_map(lambda p: jnp.asarray(rng.standard_normal(p.shape), jnp.float32), params)
        u, state = tx.update(g, state, params)
        params = optax.apply_updates(params, u)
    return params


@pytest.mark.parametrize("nesterov", [True, False])
@pytest.mark.parametrize("consistent_rms", [None, 0.2])
def test_32bit_matches_optax_contrib_muon(nesterov, consistent_rms):
    kw = dict(weight_decay=0.1, nesterov=nesterov, consistent_rms=consistent_rms)
    ref = _run(optax.contrib.muon(0.01, **kw))
    got = _run(oo.contrib.muon(0.01, **kw))
    for k in ref:
        np.testing.assert_allclose(np.asarray(got[k]), np.asarray(ref[k]), rtol=0, atol=2e-6, err_msg=k)


def test_8bit_close_to_32bit():
    full = _run(oo.contrib.muon(0.01))
    q = _run(oo.contrib.muon(0.01, bits=8, min_8bit_size=0))
    start = _params()
    moved = float(jnp.linalg.norm(full["w"] - start["w"]))
    assert float(jnp.linalg.norm(q["w"] - full["w"])) <= 0.02 * moved
    assert not np.array_equal(np.asarray(q["w"]), np.asarray(full["w"]))


@pytest.mark.parametrize(
    "kw,match",
    [
        (dict(preconditioning="aol"), "argument 'preconditioning'='aol' is not supported"),
        (dict(ns_coeffs="dion"), "argument 'ns_coeffs' must be a preset"),
        (dict(ns_steps=-1), "argument 'ns_steps' must be an int"),
    ],
)
def test_bad_arguments_are_named(kw, match):
    with pytest.raises(ValueError, match=match):
        oo.contrib.muon(0.01, **kw).init(_params())
