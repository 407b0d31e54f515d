"""``octopt.optax.contrib``: octopt's counterparts of ``optax.contrib`` (``ademamix``), with optax's
signatures, defaults and semantics."""

from ..jax._optax_style import CONTRIB

globals().update(CONTRIB)
__all__ = sorted(CONTRIB)
