"""octopt.flax's StableEmbed (linen and nnx): the paper's init and layer norm, and its table's state kept
32-bit by octopt.optax.stable_embedding_labels under optax.multi_transform while the rest is 8-bit."""

from __future__ import annotations

import math

import numpy as np
import pytest

jax = pytest.importorskip("jax", reason="jax is not installed")
optax = pytest.importorskip("optax", reason="optax is not installed")
pytest.importorskip("flax", reason="flax is not installed")
import jax.numpy as jnp  # noqa: E402
import octopt.optax as oo  # noqa: E402

VOCAB, DIM = 512, 32


def _tx():
    # the Dense kernel (32 x 512 = 16384 elements) is quantized; the table (512 x 32) would be too
    return optax.multi_transform({"8bit": oo.adamw(3e-2, bits=8), "32bit": oo.adamw(3e-2)}, oo.stable_embedding_labels)


def _data():
    rng = np.random.default_rng(0)
    ids = jnp.asarray(rng.integers(0, VOCAB, (64, 8)), jnp.int32)
    return ids, jnp.roll(ids, 1, axis=1)  # predict the previous token


def _check_state(state):
    # every octopt state in the multi_transform: the table's slots float32, the kernel's uint8
    dtypes = {}
    for inner in jax.tree.leaves(state, is_leaf=lambda x: isinstance(x, oo.OctoptState)):
        if isinstance(inner, oo.OctoptState):
            for path, leaf in jax.tree_util.tree_flatten_with_path(inner.slots["mu"])[0]:
                dtypes[jax.tree_util.keystr(path)] = leaf.dtype
    table = [k for k in dtypes if "stable_embedding" in k]
    kernel = [k for k in dtypes if "kernel" in k]
    assert table and kernel, dtypes
    assert all(dtypes[k] == jnp.float32 for k in table)
    assert all(dtypes[k] == jnp.uint8 for k in kernel)


def test_linen_stable_embed_init_norm_and_32bit_table_state():
    import flax.linen as nn
    from octopt.flax.linen import StableEmbed

    class Model(nn.Module):
        @nn.compact
        def __call__(self, ids):
            return nn.Dense(VOCAB)(StableEmbed(VOCAB, DIM)(ids))

    ids, targets = _data()
    params = Model().init(jax.random.key(0), ids)["params"]
    table = params["StableEmbed_0"]["stable_embedding"]
    bound = math.sqrt(6.0 / (VOCAB + DIM))  # Xavier uniform
    assert table.shape == (VOCAB, DIM) and float(jnp.max(jnp.abs(table))) <= bound
    assert float(jnp.max(jnp.abs(table))) > 0.9 * bound
    out = StableEmbed(VOCAB, DIM).apply({"params": params["StableEmbed_0"]}, ids)
    np.testing.assert_allclose(np.asarray(out.mean(-1)), 0.0, atol=1e-5)  # layer norm after the lookup
    np.testing.assert_allclose(np.asarray(out.var(-1)), 1.0, rtol=1e-2)
    labels = oo.stable_embedding_labels(params)
    assert labels["StableEmbed_0"]["stable_embedding"] == "32bit" and labels["Dense_0"]["kernel"] == "8bit"

    tx = _tx()
    state = tx.init(params)

    @jax.jit
    def step(params, state):
        def loss_fn(p):
            logits = Model().apply({"params": p}, ids)
            return optax.softmax_cross_entropy_with_integer_labels(logits, targets).mean()

        loss, grads = jax.value_and_grad(loss_fn)(params)
        updates, state = tx.update(grads, state, params)
        return optax.apply_updates(params, updates), state, loss

    losses = []
    for _ in range(30):
        params, state, loss = step(params, state)
        losses.append(float(loss))
    assert losses[-1] < 0.5 * losses[0], losses
    _check_state(state)


def test_nnx_stable_embed_trains_with_nnx_optimizer():
    from flax import nnx
    from octopt.flax.nnx import StableEmbed

    class Model(nnx.Module):
        def __init__(self, rngs):
            self.embed = StableEmbed(VOCAB, DIM, rngs=rngs)
            self.out = nnx.Linear(DIM, VOCAB, rngs=rngs)

        def __call__(self, ids):
            return self.out(self.embed(ids))

    ids, targets = _data()
    model = Model(nnx.Rngs(0))
    bound = math.sqrt(6.0 / (VOCAB + DIM))
    assert float(jnp.max(jnp.abs(model.embed.stable_embedding[...]))) <= bound
    out = model.embed(ids)
    np.testing.assert_allclose(np.asarray(out.mean(-1)), 0.0, atol=1e-5)
    optimizer = nnx.Optimizer(model, _tx(), wrt=nnx.Param)

    @nnx.jit
    def step(model, optimizer):
        def loss_fn(m):
            return optax.softmax_cross_entropy_with_integer_labels(m(ids), targets).mean()

        loss, grads = nnx.value_and_grad(loss_fn)(model)
        optimizer.update(model, grads)
        return loss

    losses = [float(step(model, optimizer)) for _ in range(30)]
    assert losses[-1] < 0.5 * losses[0], losses
    _check_state(optimizer.opt_state)


def test_stable_embed_refuses_float_ids():
    from flax import nnx
    from octopt.flax.nnx import StableEmbed

    with pytest.raises(TypeError, match=r"^octopt.flax.nnx.StableEmbed: argument 'inputs' must be integer ids"):
        StableEmbed(8, 4, rngs=nnx.Rngs(0))(jnp.zeros((2,), jnp.float32))
