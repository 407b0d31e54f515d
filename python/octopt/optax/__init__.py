"""``octopt.optax``: the public name of the optax transformations in ``octopt.jax.optax``.

The JAX adapter lives in the ``octopt.jax`` subpackage (like ``octopt.torch``); this package keeps the
import line users write, ``import octopt.optax``, with optax's ``contrib`` namespace
(``octopt.optax.contrib.ademamix``) and ``octopt.optax.torch_style`` (torch's conventions)."""

from ..jax.optax import *  # noqa: F403 - the public surface is jax.optax's __all__
from ..jax.optax import __all__ as _names
from . import contrib, torch_style
from ..jax._labels import stable_embedding_labels

__all__ = [*_names, "contrib", "torch_style", "stable_embedding_labels"]
