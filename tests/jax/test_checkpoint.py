"""octopt.optax state survives flax.serialization: continuing after a restore equals the
uninterrupted run bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax", reason="jax is not installed")
optax = pytest.importorskip("optax", reason="optax is not installed")
import octopt.optax as oo  # noqa: E402

serialization = pytest.importorskip("flax.serialization", reason="flax is not installed")


@pytest.mark.parametrize("bits", (8, 4))
def test_restore_then_continue_equals_uninterrupted(bits, problem, as_jax):
    p0, grads = problem(steps=4)
    tx = oo.adamw(1e-2, bits=bits)

    def run(params, state, gs):
        for g in gs:
            params, state = tx.step(params, as_jax(g), state)
        return params, state

    full_params, full_state = run(as_jax(p0), tx.init(as_jax(p0)), grads)

    params, state = run(as_jax(p0), tx.init(as_jax(p0)), grads[:2])
    blob = serialization.to_bytes(state)
    saved_params = [np.asarray(p) for p in params]
    del state
    # a fresh process would rebuild the target from the parameters, as here
    target = tx.init(as_jax(p0))
    restored = serialization.from_bytes(target, blob)
    assert int(restored.count) == 2
    assert restored.layout == target.layout
    params, state = run(as_jax(saved_params), restored, grads[2:])

    for a, b in zip(jax.tree.leaves((params, state)), jax.tree.leaves((full_params, full_state))):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_state_restored_into_another_configuration_is_refused_at_update(problem, as_jax):
    # flax restores arrays of any shape into the target; the step checks them against the layout
    p0, grads = problem(steps=1)
    blob = serialization.to_bytes(oo.adamw8bit(1e-2).init(as_jax(p0)))
    tx4 = oo.torch_style.adamw(1e-2, bits=4)
    restored = serialization.from_bytes(tx4.init(as_jax(p0)), blob)
    with pytest.raises(
        ValueError,
        match=r"^octopt.optax.torch_style.adamw.update: argument 'state' slot 'exp_avg' of "
        r"'params\[0\]' has uint8\[33, 130\] but this configuration needs "
        r"uint8\[2145\]",
    ):
        tx4.update(as_jax(grads[0]), restored, as_jax(p0))
