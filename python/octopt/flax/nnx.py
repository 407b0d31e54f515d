"""``StableEmbed`` for ``flax.nnx``: see ``octopt.flax``."""

from __future__ import annotations

from typing import Any, Callable

import jax.numpy as jnp
from flax import nnx

from ..jax._labels import TABLE_NAME


class StableEmbed(nnx.Module):
    """An embedding lookup followed by layer norm, with a Xavier-uniform table (the paper's stable
    embedding, as ``bitsandbytes.nn.StableEmbedding``). The table is the attribute ``stable_embedding`` (an
    ``nnx.Param``, labelled by ``octopt.optax.stable_embedding_labels``); the norm is ``norm``."""

    def __init__(
        self,
        num_embeddings: int,
        features: int,
        *,
        dtype: Any = None,
        param_dtype: Any = jnp.float32,
        embedding_init: Callable = nnx.initializers.xavier_uniform(),
        epsilon: float = 1e-5,
        rngs: nnx.Rngs,
    ):
        self.num_embeddings, self.features, self.dtype = num_embeddings, features, dtype
        table = embedding_init(rngs.params(), (num_embeddings, features), param_dtype)
        setattr(self, TABLE_NAME, nnx.Param(table))
        self.norm = nnx.LayerNorm(features, epsilon=epsilon, dtype=dtype, param_dtype=param_dtype, rngs=rngs)

    def __call__(self, inputs: Any) -> Any:
        if not jnp.issubdtype(jnp.asarray(inputs).dtype, jnp.integer):
            raise TypeError(f"octopt.flax.nnx.StableEmbed: argument 'inputs' must be integer ids, got {inputs.dtype}")
        x = jnp.take(getattr(self, TABLE_NAME)[...], inputs, axis=0)
        if self.dtype is not None:
            x = x.astype(self.dtype)
        return self.norm(x)
