"""octopt.optax's transformations in optax's conventions: the signature and defaults of the optax function
of the same name, optax's trajectories with 32-bit state, mask and mu_dtype, optax.tree.get/map_params,
state shapes under inject_hyperparams, and a clear error for each optax argument the core cannot honour."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

jax = pytest.importorskip("jax", reason="jax is not installed")
optax = pytest.importorskip("optax", reason="optax is not installed")
pytest.importorskip("optax.contrib", reason="optax.contrib is not installed")
import jax.numpy as jnp  # noqa: E402
import octopt.optax as oo  # noqa: E402

NAMES = ["adam", "adamw", "nadam", "nadamw", "lion", "sgd", "rmsprop", "adagrad", "lamb", "lars", "radam"]
OCTOPT_EXTRAS = ["maximize", "bits", "block_size", "min_8bit_size", "first_moment_bits", "state_map", "seed"]
OCTOPT_EXTRAS += ["stochastic_rounding", "stochastic_bf16"]


def _pairs():
    out = [(getattr(oo, n), getattr(optax, n)) for n in NAMES]
    return out + [(oo.contrib.ademamix, optax.contrib.ademamix), (oo.ademamix, optax.contrib.ademamix)]


@pytest.mark.parametrize("ours, theirs", _pairs(), ids=[*NAMES, "contrib.ademamix", "ademamix"])
def test_signature_is_optaxs_then_octopts_keyword_only_options(ours, theirs):
    mine = list(inspect.signature(ours).parameters.values())
    ref = list(inspect.signature(theirs).parameters.values())
    assert [(p.name, p.kind, p.default) for p in mine[: len(ref)]] == [(p.name, p.kind, p.default) for p in ref]
    extras = mine[len(ref) :]
    assert [p.name for p in extras] == OCTOPT_EXTRAS
    assert all(p.kind == inspect.Parameter.KEYWORD_ONLY for p in extras)


# name -> (octopt factory, optax factory, arguments for both): every state slot live, every supported option
CASES = {
    "adam": (oo.adam, optax.adam, {}),
    "adam_nesterov": (oo.adam, optax.adam, dict(nesterov=True)),
    "adamw": (oo.adamw, optax.adamw, dict(weight_decay=0.1)),
    "adamw_mask": (oo.adamw, optax.adamw, dict(weight_decay=0.1, mask={"w": True, "b": False, "e": True})),
    "adamw_mask_fn": (
        oo.adamw,
        optax.adamw,
        dict(weight_decay=0.1, mask=lambda t: jax.tree.map(lambda x: x.ndim > 1, t)),
    ),
    "nadam": (oo.nadam, optax.nadam, {}),
    "nadamw": (oo.nadamw, optax.nadamw, dict(weight_decay=0.05)),
    "lion": (oo.lion, optax.lion, dict(weight_decay=0.1)),
    "sgd": (oo.sgd, optax.sgd, {}),
    "sgd_momentum": (oo.sgd, optax.sgd, dict(momentum=0.9)),
    "sgd_nesterov": (oo.sgd, optax.sgd, dict(momentum=0.9, nesterov=True)),
    "rmsprop": (oo.rmsprop, optax.rmsprop, dict(initial_scale=0.5)),  # optax's default: eps inside the sqrt
    "rmsprop_eps_outside": (oo.rmsprop, optax.rmsprop, dict(eps_in_sqrt=False, initial_scale=0.5, eps=1e-3)),
    "rmsprop_eps_inside": (oo.rmsprop, optax.rmsprop, dict(eps=1e-3)),
    "rmsprop_centered_momentum": (
        oo.rmsprop,
        optax.rmsprop,
        dict(eps_in_sqrt=False, centered=True, momentum=0.8, decay=0.95),
    ),
    "rmsprop_centered_momentum_eps_inside": (
        oo.rmsprop,
        optax.rmsprop,
        dict(centered=True, momentum=0.8, decay=0.95, eps=1e-3),
    ),
    "adagrad": (oo.adagrad, optax.adagrad, {}),
    "lamb": (oo.lamb, optax.lamb, dict(weight_decay=0.01, mask={"w": True, "b": False, "e": True})),
    "lars": (oo.lars, optax.lars, dict(weight_decay=0.01, trust_coefficient=0.01)),
    "lars_wd_mask": (
        oo.lars,
        optax.lars,
        dict(weight_decay=0.01, weight_decay_mask={"w": True, "b": False, "e": False}),
    ),
    "radam": (oo.radam, optax.radam, {}),
    "ademamix": (oo.contrib.ademamix, optax.contrib.ademamix, dict(weight_decay=0.01)),
    "ademamix_schedules": (
        oo.contrib.ademamix,
        optax.contrib.ademamix,
        dict(b3=lambda c: 0.9 + 0.0009 * jnp.minimum(c, 10), alpha=lambda c: 0.5 * jnp.minimum(c, 10)),
    ),
}


def _problem(seed=0, steps=12):
    rng = np.random.default_rng(seed)
    params = {
        "w": jnp.asarray(rng.standard_normal((33, 70)), jnp.float32),
        "b": jnp.asarray(rng.standard_normal((70,)), jnp.float32),
        "e": jnp.asarray(rng.standard_normal((5000,)), jnp.float32),
    }
    grads = [
        jax.tree.map(lambda p: jnp.asarray(rng.standard_normal(p.shape), jnp.float32), params) for _ in range(steps)
    ]
    return params, grads


def _trajectory(tx, params, grads):
    state = tx.init(params)
    update = jax.jit(tx.update)
    for g in grads:
        updates, state = update(g, state, params)
        params = optax.apply_updates(params, updates)
    return params, state


@pytest.mark.parametrize("case", sorted(CASES))
def test_32bit_trajectory_follows_optax(case):
    ours, theirs, kwargs = CASES[case]
    lr = optax.linear_schedule(3e-2, 1e-2, 12)  # a schedule, evaluated at the same counts
    params, grads = _problem()
    a, state = _trajectory(ours(lr, **kwargs), params, grads)
    b, ref_state = _trajectory(theirs(lr, **kwargs), params, grads)
    for k in params:
        np.testing.assert_allclose(np.asarray(a[k]), np.asarray(b[k]), rtol=1e-4, atol=3e-5, err_msg=k)
    # the state holds optax's moments under optax's names (Adagrad's sum starts at eps more, see docs)
    for name in state.slots:
        if case == "adagrad" or (name == "trace" and case.startswith("rmsprop")):
            continue  # rmsprop's trace: optax's over the learning rate (docs/migrating.md)
        mine, ref = optax.tree.get(state, name), optax.tree.get(ref_state, name)
        sign = -1 if case.startswith("lars") else 1  # optax's LARS trace holds the negated step
        for k in params:
            np.testing.assert_allclose(sign * np.asarray(mine[k]), np.asarray(ref[k]), rtol=1e-4, atol=1e-6)


def test_8bit_state_follows_optax_within_quantization_error():
    params, grads = _problem(steps=30)
    a, state = _trajectory(oo.adamw(1e-2, bits=8), params, grads)
    b, _ = _trajectory(optax.adamw(1e-2), params, grads)
    assert state.slots["mu"]["e"].dtype == jnp.uint8
    for k in params:
        np.testing.assert_allclose(np.asarray(a[k]), np.asarray(b[k]), atol=0.05)


def test_8bit_names_keep_torch_conventions():
    params, grads = _problem(steps=2)
    eight, _ = _trajectory(oo.adamw8bit(1e-2), params, grads)
    torch_style, _ = _trajectory(oo.torch_style.adamw(1e-2, bits=8), params, grads)
    optax_style, _ = _trajectory(oo.adamw(1e-2, weight_decay=1e-2, bits=8), params, grads)
    assert inspect.signature(oo.adamw8bit).parameters["weight_decay"].default == 1e-2
    assert inspect.signature(oo.adamw).parameters["weight_decay"].default == 1e-4
    for k in params:
        np.testing.assert_array_equal(np.asarray(eight[k]), np.asarray(torch_style[k]))
        np.testing.assert_allclose(np.asarray(eight[k]), np.asarray(optax_style[k]), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_mu_dtype_stores_the_first_moment_like_optax(dtype):
    params, grads = _problem(steps=5)
    a, state = _trajectory(oo.adam(1e-2, mu_dtype=dtype), params, grads)
    b, ref = _trajectory(optax.adam(1e-2, mu_dtype=dtype), params, grads)
    assert state.slots["mu"]["w"].dtype == jnp.dtype(dtype) and state.slots["nu"]["w"].dtype == jnp.float32
    # the moments are rounded to the half-precision dtype after every step, as optax's; where the two
    # float32 values round to neighbouring half-precision ones the trajectories part by a little
    for k in params:
        np.testing.assert_allclose(np.asarray(a[k]), np.asarray(b[k]), atol=1e-3)
        mine, theirs = np.asarray(state.slots["mu"][k], np.float32), np.asarray(ref[0].mu[k], np.float32)
        assert np.isclose(mine, theirs, rtol=1e-2, atol=1e-3).mean() > 0.97
    s, _ = _trajectory(oo.sgd(1e-2, momentum=0.9, accumulator_dtype=dtype), params, grads)
    assert s["w"].dtype == jnp.float32


def test_mu_dtype_with_quantized_state_is_refused():
    with pytest.raises(
        ValueError, match=r"^octopt.optax.adamw: argument 'mu_dtype' sets the dtype of 32-bit state, but bits=8"
    ):
        oo.adamw(1e-3, mu_dtype=jnp.bfloat16, bits=8)
    with pytest.raises(ValueError, match=r"^octopt.optax.lion: argument 'mu_dtype' .* first_moment_bits=4"):
        oo.lion(1e-3, mu_dtype="bfloat16", first_moment_bits=4)
    with pytest.raises(TypeError, match=r"^octopt.optax.sgd: argument 'accumulator_dtype' must be one of float32"):
        oo.sgd(1e-3, momentum=0.9, accumulator_dtype=jnp.int8)
    oo.adam(1e-3, mu_dtype=jnp.float32, bits=32)  # a no-op dtype is fine


@pytest.mark.parametrize(
    "call, pattern",
    [
        (lambda: oo.adam(1e-3, eps_root=1e-8), r"^octopt.optax.adam: argument 'eps_root'=1e-08 is not supported"),
        (lambda: oo.rmsprop(1e-3, eps_in_sqrt=False, bias_correction=True), r"'bias_correction'=True is not supported"),
        (lambda: oo.rmsprop(1e-3, eps_in_sqrt=False, momentum=0.9, nesterov=True), r"'nesterov'=True is not supported"),
        (lambda: oo.radam(1e-3, threshold=4.0), r"^octopt.optax.radam: argument 'threshold'=4.0 is not supported"),
        (lambda: oo.radam(1e-3, nesterov=True), r"'nesterov'=True is not supported"),
        (lambda: oo.lars(1e-3, eps=1e-9), r"^octopt.optax.lars: argument 'eps'=1e-09 is not supported"),
        (lambda: oo.lars(1e-3, nesterov=True), r"^octopt.optax.lars: argument 'nesterov'=True is not supported"),
        (lambda: oo.lars(1e-3, trust_ratio_mask=lambda p: p), r"^octopt.optax.lars: argument 'trust_ratio_mask'"),
        (lambda: oo.lamb(1e-3, eps_root=1.0), r"^octopt.optax.lamb: argument 'eps_root'"),
        (lambda: oo.contrib.ademamix(1e-3, eps_root=1.0), r"^octopt.optax.contrib.ademamix: argument 'eps_root'"),
        (lambda: oo.adagrad(1e-3, initial_accumulator_value=0.0, eps=0.0), r"^octopt.optax.adagrad: arguments"),
        (lambda: oo.rmsprop(1e-3, decay=1.0, eps_in_sqrt=False), r"^octopt.optax.rmsprop: argument 'decay' must be in"),
        (lambda: oo.lars(1e-3, trust_coefficient=-1.0), r"^octopt.optax.lars: argument 'trust_coefficient' must be"),
        (lambda: oo.adam(1e-3, 0.9, 0.999, 1e-8, 0.0, None, True), r"^octopt.optax.adam: too many positional"),
    ],
)
def test_arguments_the_core_cannot_honour_raise_naming_them(call, pattern):
    with pytest.raises((ValueError, TypeError), match=pattern):
        call()


def test_a_bad_mask_is_named():
    params, grads = _problem(steps=1)
    tx = oo.adamw(1e-3, mask={"w": True})
    with pytest.raises(ValueError, match=r"^octopt.optax.adamw.update: argument 'mask' must be a tree of bools"):
        tx.update(grads[0], tx.init(params), params)


def test_tree_get_and_map_params_see_the_slots():
    params, grads = _problem(steps=1)
    for tx, names in (
        (oo.adam(1e-3), ("mu", "nu")),
        (oo.adam(1e-3, bits=8), ("mu", "nu")),
        (oo.sgd(1e-3, 0.9), ("trace",)),
    ):
        state = tx.init(params)
        assert int(optax.tree.get(state, "count")) == 0
        for name in names:
            got = optax.tree.get(state, name)
            assert jax.tree.structure(got) == jax.tree.structure(params)
        # the parameters' sharding specs onto the state: the slots get them, the rest None
        specs = jax.tree.map(lambda p: f"spec{p.ndim}", params)
        mapped = optax.tree.map_params(tx, lambda _, s: s, state, specs, transform_non_params=lambda _: None)
        assert mapped.slots == {name: specs for name in names}
        assert mapped.count is None and mapped.absmax is None
        same = optax.tree.map_params(tx, lambda v: v, state)
        _, state2 = tx.update(grads[0], same, params)  # still a working state
        assert int(state2.count) == 1
    # inside a chain and inject_hyperparams too
    chain = optax.chain(optax.clip_by_global_norm(1.0), optax.inject_hyperparams(oo.adamw)(learning_rate=1e-3))
    state = chain.init(params)
    assert jax.tree.structure(optax.tree.get(state, "mu")) == jax.tree.structure(params)
    cast = optax.tree.map_params(chain, lambda v: v.astype(jnp.bfloat16), state)
    assert optax.tree.get(cast, "mu")["w"].dtype == jnp.bfloat16


# factory -> the injected hyper-parameters (all of its numeric ones: inject_hyperparams' default)
INJECTED = {
    "adam": (oo.adam, {}),
    "adamw": (oo.adamw, {}),
    "nadamw": (oo.nadamw, {}),
    "lion": (oo.lion, {}),
    "sgd": (oo.sgd, dict(momentum=0.0)),
    "sgd_none": (oo.sgd, {}),
    "rmsprop": (oo.rmsprop, dict(momentum=0.0, eps_in_sqrt=False)),
    "rmsprop_none": (oo.rmsprop, dict(eps_in_sqrt=False)),
    "adagrad": (oo.adagrad, {}),
    "lamb": (oo.lamb, {}),
    "lars": (oo.lars, dict(momentum=0.0)),
    "radam": (oo.radam, {}),
    "ademamix": (oo.contrib.ademamix, {}),
    "rmsprop8bit": (oo.rmsprop8bit, dict(momentum=0.0)),
    "sgd8bit": (oo.sgd8bit, dict(momentum=0.0)),
    "lars8bit": (oo.lars8bit, dict(momentum=0.0)),
}


@pytest.mark.parametrize("case", sorted(INJECTED))
def test_state_shape_is_stable_under_inject_hyperparams(case):
    """init sees the injected values as concrete arrays, update as traced ones: the state's slots are the
    same at both (a momentum injected as 0 keeps its buffer, so that it can be raised later)."""
    factory, kwargs = INJECTED[case]
    params, grads = _problem(steps=2)
    tx = optax.inject_hyperparams(factory)(learning_rate=1e-2, **kwargs)
    state = tx.init(params)
    step = jax.jit(lambda g, s, p: tx.update(g, s, p))
    shapes = jax.tree.map(lambda x: (x.shape, x.dtype), state.inner_state)
    for g in grads:
        updates, state = step(g, state, params)
        params = optax.apply_updates(params, updates)
        assert jax.tree.map(lambda x: (x.shape, x.dtype), state.inner_state) == shapes
    if "momentum" in kwargs:  # raise the injected momentum: the buffer is used from now on
        state.hyperparams["momentum"] = jnp.asarray(0.9, jnp.float32)
        _, state = step(grads[0], state, params)
    assert all(np.all(np.isfinite(np.asarray(x))) for x in jax.tree.leaves(params))


def test_injected_momentum_matches_optax():
    params, grads = _problem(steps=6)
    tx = optax.inject_hyperparams(oo.sgd)(learning_rate=1e-2, momentum=0.5)
    ref = optax.inject_hyperparams(optax.sgd)(learning_rate=1e-2, momentum=0.5)
    a, _ = _trajectory(tx, params, grads)
    b, _ = _trajectory(ref, params, grads)
    for k in params:
        np.testing.assert_allclose(np.asarray(a[k]), np.asarray(b[k]), rtol=1e-5, atol=1e-6)
