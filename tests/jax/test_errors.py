"""Bad inputs to octopt.optax raise clear errors naming the function and the argument."""

from __future__ import annotations

import re

import numpy as np
import pytest

jax = pytest.importorskip("jax", reason="jax is not installed")
optax = pytest.importorskip("optax", reason="optax is not installed")
import jax.numpy as jnp  # noqa: E402
import octopt.optax as oo  # noqa: E402


@pytest.fixture
def setup(problem, as_jax):
    p0, grads = problem(steps=1)
    tx = oo.adamw8bit(1e-2)
    params = as_jax(p0)
    return tx, params, as_jax(grads[0]), tx.init(params)


@pytest.mark.parametrize("lr", (float("nan"), float("inf"), -1.0))
def test_non_finite_or_negative_learning_rate(lr):
    pattern = "must be finite" if not np.isfinite(lr) else r"must be >= 0.0, got -1.0"
    with pytest.raises(ValueError, match=rf"^octopt.optax.adamw8bit: argument 'learning_rate' {pattern}"):
        oo.adamw8bit(lr)
    with pytest.raises(ValueError, match="^octopt.optax.adam: argument 'learning_rate' "):
        oo.adam(jnp.asarray(lr))  # a concrete array is checked up front too


def test_traced_non_finite_learning_rate_fails_in_the_handler(problem, as_jax):
    p0, grads = problem(steps=1)
    tx = optax.inject_hyperparams(oo.adam8bit)(learning_rate=1e-2)
    params = as_jax(p0)
    state = tx.init(params)
    state.hyperparams["learning_rate"] = jnp.asarray(np.nan, jnp.float32)
    with pytest.raises(Exception, match="octopt.optax: hyper-parameter 'learning_rate' must be finite, got nan"):
        jax.block_until_ready(jax.jit(tx.update)(as_jax(grads[0]), state, params))


@pytest.mark.parametrize(
    "name,value,pattern",
    [
        ("b1", 1.0, r"argument 'b1' must be in \[0.0, 1.0\)"),
        ("eps", -1e-8, r"argument 'eps' must be >= 0.0, got -1e-08"),
        ("weight_decay", "0.1", r"argument 'weight_decay' must be a number, got str"),
    ],
)
def test_bad_hyper_parameters(name, value, pattern):
    with pytest.raises((TypeError, ValueError), match="^octopt.optax.adamw8bit: " + pattern):
        oo.adamw8bit(1e-3, **{name: value})


def test_rmsprop_alpha_below_one():
    with pytest.raises(
        ValueError, match=r"^octopt.optax.rmsprop8bit: argument 'alpha' must be in \[0.0, 1.0\), got 1.0"
    ):
        oo.rmsprop8bit(1e-3, alpha=1.0)
    oo.ademamix8bit(1e-3, alpha=5.0)  # AdEMAMix's alpha is a mixing weight


def test_bad_layout_options():
    with pytest.raises(ValueError, match="^octopt.optax.adam: 'bits' must be 32, 8 or 4, got 7"):
        oo.adam(1e-3, bits=7)
    with pytest.raises(ValueError, match="^octopt.optax.adam: 'block_size' must be a power of two"):
        oo.adam(1e-3, block_size=100)
    with pytest.raises(TypeError, match="^octopt.optax.adam8bit: unexpected argument 'bits'"):
        oo.adam8bit(1e-3, bits=4)


def test_traced_layout_option_names_static_args(as_jax, problem):
    tx = optax.inject_hyperparams(oo.adam)(learning_rate=1e-2, bits=8)
    params = as_jax(problem(steps=0)[0])
    state = tx.init(params)  # eager: bits is a concrete array, accepted
    with pytest.raises(TypeError, match=r"argument 'bits' is traced.*static_args=\('bits',\)"):
        jax.jit(tx.update)(params, state, params)


def test_wrong_tree_structure(setup):
    tx, params, grads, state = setup
    with pytest.raises(ValueError, match=r"^octopt.optax.adamw8bit.update: argument 'updates' has tree structure"):
        tx.update(grads[:2], state, params)
    with pytest.raises(
        ValueError,
        match=r"^octopt.optax.adamw8bit.update: argument 'state' holds 3 parameters but "
        r"'params' has 2",
    ):
        tx.update(grads[:2], state, params[:2])
    with pytest.raises(ValueError, match=r"^octopt.optax.adamw8bit.step: argument 'grads' has tree structure"):
        tx.step(params, {"a": grads[0]}, state)
    with pytest.raises(TypeError, match=r"^octopt.optax.adamw8bit.update: argument 'state' must be the OctoptState"):
        tx.update(grads, optax.adamw(1e-3).init(params), params)


def test_params_are_required(setup):
    tx, params, grads, state = setup
    with pytest.raises(ValueError, match=r"^octopt.optax.adamw8bit.update: argument 'params' is required"):
        tx.update(grads, state)


def test_dtype_and_shape_mismatch(setup):
    tx, params, grads, state = setup
    bad = list(grads)
    bad[1] = grads[1].astype(jnp.float16)
    with pytest.raises(
        TypeError,
        match=re.escape(
            "octopt.optax.adamw8bit.update: argument 'updates[1]' must be float32 "
            "or the parameter's dtype (float32), got float16"
        ),
    ):
        tx.update(bad, state, params)
    bad[1] = grads[1].reshape(1, -1)
    with pytest.raises(
        ValueError, match=re.escape("argument 'updates[1]' has shape (1, 4097) but 'params[1]' has (4097,)")
    ):
        tx.update(bad, state, params)
    with pytest.raises(
        TypeError,
        match=re.escape(
            "octopt.optax.adamw8bit.init: argument 'params[0]' must have dtype float32, float16 or bfloat16, got int32"
        ),
    ):
        tx.init([jnp.zeros((3,), jnp.int32)])


def test_state_from_another_configuration(setup, as_jax, problem):
    tx, params, grads, state = setup
    with pytest.raises(
        ValueError,
        match=r"^octopt.optax.adamw.update: argument 'state' was made by another "
        r"configuration",
    ):
        oo.adamw(1e-2, bits=4).update(grads, state, params)
    with pytest.raises(ValueError, match=r"^octopt.optax.adam8bit.update: argument 'state' was made by another "):
        oo.adam8bit(1e-2).update(grads, state, params)
    other = oo.adamw8bit(1e-2).init(as_jax(problem(seed=1, steps=0, shapes=((33, 130), (4096,), (7,)))[0]))
    with pytest.raises(
        ValueError,
        match=r"argument 'params\[1\]' has shape \(4097,\) but the state was made for "
        r"\(4096,\)",
    ):
        tx.update(grads, other, params)


def test_step_needs_an_octopt_transformation(setup):
    tx, params, grads, state = setup
    with pytest.raises(TypeError, match="^octopt.optax.step: argument 'tx' must be an octopt.optax transformation"):
        oo.step(optax.adam(1e-3), params, grads, state)


def test_missing_handler_says_how_to_build_it(monkeypatch):
    from octopt.jax import _call as _jax_call

    monkeypatch.setattr(_jax_call, "_registered", False)
    monkeypatch.setattr(_jax_call._octopt, "xla_ffi_built", lambda: False)
    with pytest.raises(ImportError, match="built without the XLA FFI handler.*jaxlib in the build environment"):
        oo.adam8bit(1e-3).init([jnp.zeros(3)])


def test_traced_initial_accumulator_value_names_static_args():
    """Adagrad's initial_accumulator_value decides the state's starting value at init: traced (by
    optax.inject_hyperparams under jax.jit), it gets octopt's error naming static_args, not a tracer error."""
    import jax.numpy as jnp
    import octopt.optax as oo

    params = {"w": jnp.ones((300,))}
    tx = optax.inject_hyperparams(oo.adagrad)(learning_rate=1e-2, initial_accumulator_value=0.1)
    with pytest.raises(TypeError, match=r"'initial_accumulator_value' is traced.*static_args"):
        jax.jit(tx.init)(params)
    static = optax.inject_hyperparams(oo.adagrad, static_args=("initial_accumulator_value", "eps"))
    state = jax.jit(static(learning_rate=1e-2, initial_accumulator_value=0.1).init)(params)
    assert float(state.inner_state.slot("sum_of_squares")["w"].data[0]) == pytest.approx(0.1)


def test_float64_params_are_refused_clearly():
    """With jax_enable_x64, float64 parameters are refused with a clear error (docs/jax.md says why): the
    state and update math are float32, and a float64 result would hide that."""
    import subprocess
    import sys

    script = (
        "import jax; jax.config.update('jax_enable_x64', True)\n"
        "import jax.numpy as jnp, octopt.optax as oo\n"
        "try:\n"
        "    oo.adamw(1e-3).init({'w': jnp.ones((300,), jnp.float64)})\n"
        "except TypeError as e:\n"
        "    print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert "argument 'params['w']' must have dtype float32, float16 or bfloat16, got float64" in out.stdout, (
        out.stdout + out.stderr
    )


COMPLEX_REFUSED = (
    ": complex parameters are not supported (optax's update of a complex parameter keeps |g|^2 in its second "
    "moment, which octopt's real-valued kernels do not compute); step the complex leaves with optax's own "
    "transformation through optax.partition"
)


@pytest.mark.parametrize("dtype", ["complex64", "complex128"])
@pytest.mark.parametrize("name", ["adam", "adamw", "sgd", "adamw8bit"])
def test_complex_params_are_refused_clearly(name, dtype):
    """optax's alias tests step complex64/complex128 parameters; octopt refuses them, at init and at update,
    saying why and what to use instead (docs/jax.md)."""
    tx = getattr(oo, name)(1e-2)
    with jax.enable_x64(True):  # complex128 needs it
        z = {"w": jnp.full((300,), 1 + 2j, dtype), "b": jnp.zeros((3,), jnp.float32)}
        assert z["w"].dtype == jnp.dtype(dtype)
        for call, run in (("init", lambda: tx.init(z)), ("update", lambda: tx.update(z, state, z))):
            if call == "update":
                state = tx.init({"w": jnp.zeros((300,), jnp.float32), "b": jnp.zeros((3,), jnp.float32)})
            message = (
                f"octopt.optax.{name}.{call}: argument 'params['w']' must have dtype float32, float16 or "
                f"bfloat16, got {dtype}{COMPLEX_REFUSED}"
            )
            with pytest.raises(TypeError, match=f"^{re.escape(message)}$"):
                run()
