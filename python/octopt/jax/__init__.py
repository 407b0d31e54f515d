"""octopt's JAX adapter: optax transformations (``octopt.jax.optax``, also importable as ``octopt.optax``)
stepped by an XLA FFI handler. Importing this package imports nothing of JAX; its modules do."""
