"""``octopt.flax``: the paper's stable embedding (Dettmers et al. 2022, §2.3) for Flax, as ``StableEmbed`` in
``octopt.flax.linen`` and ``octopt.flax.nnx``: Xavier-uniform initialization, layer norm after the lookup,
and its table under the name ``stable_embedding``, which ``stable_embedding_labels`` (also
``octopt.optax.stable_embedding_labels``) labels for ``optax.multi_transform`` so that the table's optimizer
state stays 32-bit. Importing this package imports no Flax; its ``linen`` and ``nnx`` modules do."""

from ..jax._labels import TABLE_NAME, stable_embedding_labels

__all__ = ["TABLE_NAME", "stable_embedding_labels"]
