"""Labels that keep the state of StableEmbed tables in 32 bits under optax.multi_transform."""

from __future__ import annotations

from typing import Any

# The name StableEmbed gives its table (linen: the param's name; nnx: the attribute's), which the labels
# look for as the last key of a leaf's path (an nnx Variable's trailing ``.value`` aside).
TABLE_NAME = "stable_embedding"


def _key_name(entry: Any) -> Any:
    for attr in ("key", "name", "idx"):
        if hasattr(entry, attr):
            return getattr(entry, attr)
    return None


def is_stable_embedding(path: tuple) -> bool:
    names = [_key_name(e) for e in path]
    if names and names[-1] == "value" and type(path[-1]).__name__ == "GetAttrKey":
        names = names[:-1]
    return bool(names) and names[-1] == TABLE_NAME


def stable_embedding_labels(params: Any, *, embedding: str = "32bit", other: str = "8bit") -> Any:
    """A tree like ``params`` labelling each StableEmbed table ``embedding`` and every other parameter
    ``other``: the ``param_labels`` of ``optax.multi_transform``, so that the tables' state stays 32-bit
    (the paper's §2.3) while the rest is quantized::

        optax.multi_transform(
            {"8bit": octopt.optax.adamw(1e-3, bits=8), "32bit": octopt.optax.adamw(1e-3)},
            octopt.optax.stable_embedding_labels,
        )
    """
    import jax

    return jax.tree_util.tree_map_with_path(lambda path, _: embedding if is_stable_embedding(path) else other, params)
