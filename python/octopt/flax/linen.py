"""``StableEmbed`` for ``flax.linen``: see ``octopt.flax``."""

from __future__ import annotations

from typing import Any, Callable

import flax.linen as nn
import jax.numpy as jnp

from ..jax._labels import TABLE_NAME


class StableEmbed(nn.Module):
    """An embedding lookup followed by layer norm, with a Xavier-uniform table (the paper's stable
    embedding, as ``bitsandbytes.nn.StableEmbedding``). The table is the parameter ``stable_embedding``
    (labelled by ``octopt.optax.stable_embedding_labels``); the norm's scale and bias are under ``norm``.

    Attributes: ``num_embeddings``, ``features``, ``dtype`` (of the output; None: the table's),
    ``param_dtype``, ``embedding_init``, ``epsilon`` (the layer norm's)."""

    num_embeddings: int
    features: int
    dtype: Any = None
    param_dtype: Any = jnp.float32
    embedding_init: Callable = nn.initializers.xavier_uniform()
    epsilon: float = 1e-5

    @nn.compact
    def __call__(self, inputs: Any) -> Any:
        if not jnp.issubdtype(jnp.asarray(inputs).dtype, jnp.integer):
            raise TypeError(f"octopt.flax.linen.StableEmbed: argument 'inputs' must be integer ids, got {inputs.dtype}")
        table = self.param(TABLE_NAME, self.embedding_init, (self.num_embeddings, self.features), self.param_dtype)
        x = jnp.take(table, inputs, axis=0)
        if self.dtype is not None:
            x = x.astype(self.dtype)
        return nn.LayerNorm(epsilon=self.epsilon, dtype=self.dtype, param_dtype=self.param_dtype, name="norm")(x)
