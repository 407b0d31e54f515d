"""``octopt.optax``: the public name of the optax transformations in ``octopt.jax.optax``.

The JAX adapter lives in the ``octopt.jax`` subpackage (like ``octopt.torch``); this module keeps the
import line users write, ``import octopt.optax``."""

from .jax.optax import *  # noqa: F403 - the public surface is jax.optax's __all__
from .jax.optax import __all__  # noqa: F401
