"""octopt.optax transformations where optax users put them: jit, optax.chain, inject_hyperparams,
learning-rate schedules, vmap; each checked against the NumPy path."""

from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax", reason="jax is not installed")
optax = pytest.importorskip("optax", reason="optax is not installed")
import jax.numpy as jnp  # noqa: E402
import octopt.optax as oo  # noqa: E402


def _run(as_jax, tx, p0, grads, jit=True):
    params = as_jax(p0)
    state = tx.init(params)
    update = jax.jit(tx.update) if jit else tx.update
    for g in grads:
        updates, state = update(as_jax(g), state, params)
        params = optax.apply_updates(params, updates)
    return params, state


def _fused(as_jax, tx, p0, grads):
    params = as_jax(p0)
    state = tx.init(params)
    for g in grads:
        params, state = tx.step(params, as_jax(g), state)
    return params, state


def _close(params, ref, ulps=8):
    for a, b in zip(params, ref.params):
        np.testing.assert_allclose(np.asarray(a), b, rtol=ulps * 2**-23, atol=1e-7)


def test_eager_and_jitted_updates_agree_bit_for_bit(problem, as_jax):
    p0, grads = problem()
    eager = _run(as_jax, oo.adamw8bit(1e-2), p0, grads, jit=False)
    jitted = _run(as_jax, oo.adamw8bit(1e-2), p0, grads, jit=True)
    for a, b in zip(jax.tree.leaves(eager), jax.tree.leaves(jitted)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_inside_optax_chain_after_clipping(problem, reference, as_jax):
    p0, grads = problem()
    clip = optax.clip_by_global_norm(1.0)
    params, state = _run(as_jax, optax.chain(clip, oo.adam8bit(1e-2)), p0, grads)
    # the same clipped gradients through the NumPy path (XLA may round the clipping differently
    # inside the chain's jit, so this compares values, not bits)
    clipped = [[np.asarray(x) for x in clip.update(as_jax(g), clip.init(None))[0]] for g in grads]
    ref = reference("adam", p0, clipped, bits=8)
    assert isinstance(state[1], oo.OctoptState)
    _close(params, ref, ulps=64)


def test_inject_hyperparams_traced_learning_rate_and_betas(problem, as_jax, assert_state_equal):
    import octopt

    p0, grads = problem()
    tx = optax.inject_hyperparams(oo.adam8bit)(learning_rate=1e-2, b2=0.99)
    params = as_jax(p0)
    state = tx.init(params)
    step = jax.jit(lambda p, g, s: tx.update(g, s, p))
    f32 = lambda x: float(np.float32(x))  # noqa: E731 - injected hyper-parameters are float32 arrays
    ref = octopt.Adam([p.copy() for p in p0], lr=f32(1e-2), betas=(f32(0.9), f32(0.99)), eps=f32(1e-8), bits=8)
    for g, lr in zip(grads, (1e-2, 3e-3, 1e-3)):
        state.hyperparams["learning_rate"] = jnp.asarray(lr, jnp.float32)
        updates, state = step(params, as_jax(g), state)
        params = optax.apply_updates(params, updates)
        ref.param_groups[0]["lr"] = f32(lr)
        ref.step(g)
    assert_state_equal(state.inner_state, ref)
    _close(params, ref)


def test_learning_rate_schedule_is_evaluated_at_the_step_count(problem, assert_state_equal, as_jax):
    import octopt

    p0, grads = problem()
    lrs = np.array([1e-2, 3e-3, 1e-3], np.float32)
    params, state = _fused(as_jax, oo.adamw8bit(lambda count: jnp.asarray(lrs)[count]), p0, grads)
    ref = octopt.AdamW([p.copy() for p in p0], lr=1e-2, bits=8)
    for lr, g in zip(lrs, grads):
        ref.param_groups[0]["lr"] = float(lr)
        ref.step(g)
    for a, b in zip(params, ref.params):
        np.testing.assert_array_equal(np.asarray(a), b)
    assert_state_equal(state, ref)


def test_vmap_steps_each_batch_element_like_its_own_optimizer(problem, as_jax):
    p0a, grads_a = problem(seed=1, steps=2)
    p0b, grads_b = problem(seed=2, steps=2)
    tx = oo.lion8bit(1e-2)
    params = [jnp.stack([a, b]) for a, b in zip(as_jax(p0a), as_jax(p0b))]
    state = jax.vmap(tx.init)(params)
    update = jax.jit(jax.vmap(tx.update))
    for ga, gb in zip(grads_a, grads_b):
        g = [jnp.stack([a, b]) for a, b in zip(as_jax(ga), as_jax(gb))]
        updates, state = update(g, state, params)
        params = optax.apply_updates(params, updates)
    for k, (p0, grads) in enumerate(((p0a, grads_a), (p0b, grads_b))):
        single, _ = _run(as_jax, oo.lion8bit(1e-2), p0, grads)
        for a, b in zip(params, single):
            np.testing.assert_array_equal(np.asarray(a[k]), np.asarray(b))


def _train(tx, steps=300):
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.standard_normal((256, 64)).astype(np.float32))
    y = x @ jnp.asarray(rng.standard_normal((64, 80)).astype(np.float32))
    params = {"w": jnp.zeros((64, 80), jnp.float32), "b": jnp.zeros((80,), jnp.float32)}
    state = tx.init(params)

    @jax.jit
    def train_step(params, state):
        loss, grads = jax.value_and_grad(lambda p: jnp.mean((x @ p["w"] + p["b"] - y) ** 2))(params)
        updates, state = tx.update(grads, state, params)
        return optax.apply_updates(params, updates), state, loss

    losses = []
    for _ in range(steps):
        params, state, loss = train_step(params, state)
        losses.append(float(loss))
    return losses, state


def test_training_with_8bit_state_converges_like_32bit_state():
    schedule = optax.cosine_decay_schedule(3e-2, 300)
    losses8, state = _train(oo.adamw8bit(schedule, weight_decay=0.0))
    losses32, _ = _train(oo.adamw(schedule, weight_decay=0.0))
    assert state.slot("exp_avg")["w"].data.dtype == jnp.uint8
    assert losses8[-1] < 1e-2 * losses8[0]
    assert losses8[-1] < 1.5 * losses32[-1] + 1e-3, (losses8[-1], losses32[-1])


def test_inside_optax_multisteps_gradient_accumulation(problem, as_jax):
    import octopt

    p0, grads = problem(steps=4, shapes=((4097,),))
    tx = optax.MultiSteps(oo.adam8bit(1e-2), every_k_schedule=2)
    params, state = _run(as_jax, tx, p0, grads)
    # the mean of each pair of gradients, one step per pair
    ref = octopt.Adam([p0[0].copy()], lr=1e-2, bits=8)
    for a, b in zip(grads[::2], grads[1::2]):
        ref.step([np.asarray((jnp.asarray(a[0]) + jnp.asarray(b[0])) / 2)])
    _close(params, ref, ulps=64)
    assert int(state.inner_opt_state.count) == 2


def test_one_ffi_call_steps_every_parameter(problem, as_jax):
    p0, grads = problem()
    tx = oo.adamw8bit(1e-2)
    params = as_jax(p0)
    hlo = jax.jit(tx.update).lower(as_jax(grads[0]), tx.init(params), params).as_text()
    assert hlo.count("custom_call @octopt_step") == 1, hlo


@pytest.mark.parametrize("committed", [False, True], ids=["uncommitted", "committed"])
@pytest.mark.parametrize("bits", [32, 8])
def test_jitted_step_compiles_once(committed, bits):
    """init's state has the parameters' commitment throughout (the count too), so a jitted training step
    hits its cache from the second call on, as it does with optax's own transformations."""
    import jax.numpy as jnp
    import octopt.optax as oo

    params = {"w": jnp.ones((5000,)), "b": jnp.ones((10,))}
    if committed:
        params = jax.device_put(params, jax.devices()[0])
    tx = oo.adamw(1e-3, bits=bits)
    state = tx.init(params)

    @jax.jit
    def step(p, s, g):
        updates, s = tx.update(g, s, p)
        return optax.apply_updates(p, updates), s

    grads = jax.tree_util.tree_map(jnp.ones_like, params)
    for _ in range(3):
        params, state = step(params, state, grads)
    assert step._cache_size() == 1
    assert int(state.count) == 3


def test_update_accepts_extra_args():
    """As optax.GradientTransformationExtraArgs: extra keyword arguments are ignored, also inside a chain
    that hands them to every member."""
    import jax.numpy as jnp
    import octopt.optax as oo

    params = [jnp.ones((300,))]
    grads = [jnp.full((300,), 0.5)]
    tx = oo.adamw(1e-2, bits=32)
    assert isinstance(tx, optax.GradientTransformationExtraArgs)
    plain, _ = tx.update(grads, tx.init(params), params)
    extra, _ = tx.update(grads, tx.init(params), params, value=jnp.float32(1.0), loss=3.0)
    np.testing.assert_array_equal(np.asarray(plain[0]), np.asarray(extra[0]))
    chain = optax.chain(optax.clip_by_global_norm(1.0), tx)
    updates, _ = chain.update(grads, chain.init(params), params, value=jnp.float32(1.0))
    assert np.all(np.isfinite(np.asarray(updates[0])))


@pytest.mark.parametrize("bits", [32, 8])
def test_complex_leaves_go_to_optax_through_partition(bits):
    """octopt.optax refuses complex parameters (tests/jax/test_errors.py); the route docs/jax.md gives works:
    optax.partition steps the complex leaf with optax.adam, the real ones with octopt, each as alone."""
    rng = np.random.default_rng(0)
    params = {
        "z": jnp.asarray(rng.standard_normal(64) + 1j * rng.standard_normal(64), jnp.complex64),
        "w": jnp.asarray(rng.standard_normal(4096), jnp.float32),
    }
    labels = {"z": "complex", "w": "real"}
    tx = optax.partition({"complex": optax.adam(1e-2), "real": oo.adam(1e-2, bits=bits)}, labels)
    alone = {"z": optax.adam(1e-2), "w": oo.adam(1e-2, bits=bits)}
    state = tx.init(params)
    ref = {k: (params[k], alone[k].init(params[k])) for k in params}
    p = params
    for step in range(3):
        grads = {k: x * (1.5 + step) + 0.1 for k, x in p.items()}
        updates, state = tx.update(grads, state, p)
        p = optax.apply_updates(p, updates)
        for k, (q, s) in ref.items():
            u, s = alone[k].update(q * (1.5 + step) + 0.1, s, q)
            ref[k] = (optax.apply_updates(q, u), s)
    assert p["z"].dtype == jnp.complex64 and not np.array_equal(p["z"], params["z"])
    assert all(np.array_equal(p[k], ref[k][0]) for k in params)
