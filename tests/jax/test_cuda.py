"""octopt.optax on CUDA arrays: the CUDA XLA FFI handler against the CPU handler on the same data.
The CUDA kernels are built with --fmad=false and use the CPU backend's operation order, so with
nearest rounding every parameter, code and absmax must be bit-identical (docs/cuda.md). Needs a
GPU, a CUDA jax (jax-cuda*-plugin) and an octopt built with CUDA and jaxlib's headers."""

from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax", reason="jax is not installed")
optax = pytest.importorskip("optax", reason="optax is not installed")
import jax.numpy as jnp  # noqa: E402
import octopt  # noqa: E402
import octopt.optax as oo  # noqa: E402


def _gpu():
    try:
        return jax.devices("gpu")[0]
    except RuntimeError:
        return None


GPU = _gpu()
pytestmark = [
    pytest.mark.skipif(
        not octopt._octopt.xla_ffi_cuda_built(),
        reason="octopt was built without the CUDA XLA FFI handler (no CUDA or no jaxlib headers)",
    ),
    pytest.mark.skipif(GPU is None, reason="no GPU visible to jax (no CUDA jax plugin or no device)"),
]
CPU = jax.devices("cpu")[0]


def _on(device, arrays):
    # "* 1": a buffer XLA allocated on `device`, so that donation can reuse it
    return [jax.device_put(np.asarray(a), device) * 1 for a in arrays]


def _run_fused(transformation, device, kind, p0, grads, **options):
    tx = transformation(kind, **options)
    params = _on(device, p0)
    state = tx.init(params)
    for g in grads:
        params, state = tx.step(params, _on(device, g), state)
    return params, state


def _assert_same(a_params, a_state, b_params, b_state):
    for x, y in zip(a_params, b_params):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    assert set(a_state.slots) == set(b_state.slots)
    for name in a_state.slots:
        for s, t in zip(a_state.slot(name), b_state.slot(name)):
            np.testing.assert_array_equal(np.asarray(s.data), np.asarray(t.data))
            np.testing.assert_array_equal(np.asarray(s.absmax), np.asarray(t.absmax))
    assert int(a_state.count) == int(b_state.count)


CASES = [
    ("adam", 32),
    ("adam", 8),
    ("adam", 4),
    ("adamw", 32),
    ("adamw", 8),
    ("adamw", 4),
    ("lion", 8),
    ("sgd", 8),
    ("lamb", 8),
]


@pytest.mark.parametrize("kind,bits", CASES)
def test_fused_step_on_cuda_is_bit_identical_to_the_cpu_handler(kind, bits, problem, transformation):
    p0, grads = problem(steps=3)
    gp, gs = _run_fused(transformation, GPU, kind, p0, grads, bits=bits)
    assert all(GPU in p.devices() for p in gp)  # it ran where the arrays live
    cp, cs = _run_fused(transformation, CPU, kind, p0, grads, bits=bits)
    _assert_same(gp, gs, cp, cs)


@pytest.mark.parametrize("bits", (32, 8, 4))
def test_nadam_on_cuda_is_bit_identical_to_the_cpu_handler(bits, problem, transformation):
    # NAdam's running mu_product is per-tensor scalar state in the call's operands (after the scales in
    # absmax): the CUDA kernels read and advance it there as the CPU's octopt::step does
    p0, grads = problem(steps=3)
    gp, gs = _run_fused(transformation, GPU, "nadam", p0, grads, bits=bits)
    cp, cs = _run_fused(transformation, CPU, "nadam", p0, grads, bits=bits)
    _assert_same(gp, gs, cp, cs)
    mine = jax.tree.leaves(gs.tensor_scalar("mu_product"))
    assert all(GPU in v.devices() for v in mine)
    np.testing.assert_array_equal(np.asarray(mine), np.asarray(jax.tree.leaves(cs.tensor_scalar("mu_product"))))


def test_bf16_params_with_f32_grads_match_the_cpu_handler(problem, transformation):
    p0, grads = problem(steps=2)
    p0 = [jnp.asarray(p, jnp.bfloat16) for p in p0]
    tx = transformation("adamw", bits=8)
    out = []
    for device in (GPU, CPU):
        params = [jax.device_put(p, device) * 1 for p in p0]
        state = tx.init(params)
        for g in grads:
            params, state = tx.step(params, _on(device, g), state)
        out.append((params, state))
    _assert_same(*out[0], *out[1])


def test_update_mode_on_cuda_matches_the_cpu_handler(problem, transformation):
    p0, grads = problem(steps=2)
    tx = transformation("adamw", bits=8)
    update = jax.jit(tx.update)
    results = []
    for device in (GPU, CPU):
        params = _on(device, p0)
        state = tx.init(params)
        for g in grads:
            updates, state = update(_on(device, g), state, params)
            params = optax.apply_updates(params, updates)
        results.append((updates, params, state))
    for x, y in zip(results[0][0], results[1][0]):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    _assert_same(*results[0][1:], *results[1][1:])


def test_fused_step_on_cuda_writes_over_the_donated_buffers(problem, transformation):
    p0, grads = problem(steps=2)
    tx = transformation("adamw", bits=8)
    params = _on(GPU, p0)
    state = tx.init(params)
    for g in grads:
        ptrs = [p.unsafe_buffer_pointer() for p in params]
        codes = [s.data.unsafe_buffer_pointer() for s in state.slot("exp_avg")]
        params, state = tx.step(params, _on(GPU, g), state)
        assert [p.unsafe_buffer_pointer() for p in params] == ptrs
        assert [s.data.unsafe_buffer_pointer() for s in state.slot("exp_avg")] == codes


def test_non_finite_traced_learning_rate_leaves_everything_unchanged(problem):
    # the device cannot raise: the step is not taken (docs/jax.md); the count still advances
    p0, grads = problem(steps=2)
    tx = optax.inject_hyperparams(oo.adam8bit)(learning_rate=1e-2)
    params = _on(GPU, p0)
    state = tx.init(params)
    update = jax.jit(lambda p, g, s: tx.update(g, s, p))
    updates, state = update(params, _on(GPU, grads[0]), state)
    params = optax.apply_updates(params, updates)
    slots = {
        k: [(np.asarray(s.data), np.asarray(s.absmax)) for s in v]
        for k, v in ((k, state.inner_state.slot(k)) for k in state.inner_state.slots)
    }
    state.hyperparams["learning_rate"] = jax.device_put(jnp.asarray(np.nan, jnp.float32), GPU)
    updates, state = update(params, _on(GPU, grads[1]), state)
    for u in updates:
        assert not np.asarray(u).any()
    for k in state.inner_state.slots:
        v = state.inner_state.slot(k)
        for (d, a), s in zip(slots[k], v):
            np.testing.assert_array_equal(np.asarray(s.data), d)
            np.testing.assert_array_equal(np.asarray(s.absmax), a)
