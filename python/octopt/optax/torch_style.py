"""``octopt.optax.torch_style``: the transformations in torch's conventions (torch.optim's semantics and
defaults, every octopt option, ``bits`` included): ``torch_style.adamw(1e-3, bits=8)`` steps exactly like
``octopt.AdamW(params, lr=1e-3, bits=8)`` and like ``octopt.optax.adamw8bit(1e-3)``."""

from ..jax._torch_style import GENERIC

globals().update(GENERIC)
__all__ = sorted(GENERIC)
