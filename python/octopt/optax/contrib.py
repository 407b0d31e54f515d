"""``octopt.optax.contrib``: octopt's counterparts of ``optax.contrib`` (``ademamix``, ``muon``), with optax's
signatures, defaults and semantics; ``muon`` with quantized momentum (docs/muon.md)."""

from ..jax._muon import muon  # noqa: F401 - in __all__
from ..jax._optax_style import CONTRIB

globals().update(CONTRIB)
__all__ = sorted([*CONTRIB, "muon"])
