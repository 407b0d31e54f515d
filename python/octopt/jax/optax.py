"""octopt.optax: optax GradientTransformations whose state may be block-wise quantized (uint8 codes +
float32 absmax per block), stepped by octopt's native core through an XLA FFI handler.

Three families (docs/jax.md):

- ``adam``, ``adamw``, ``nadam``, ``nadamw``, ``lion``, ``sgd``, ``rmsprop``, ``adagrad``, ``lamb``,
  ``lars``, ``radam`` and ``contrib.ademamix``: optax's signatures, defaults and semantics, plus octopt's
  keyword-only layout options (32-bit state unless ``bits=8`` or ``4``);
- ``adam8bit``, ``adamw8bit``, ...: torch's conventions with 8-bit state, ``adamw8bit(1e-3)`` steps
  exactly like ``octopt.AdamW(params, lr=1e-3, bits=8)``;
- ``torch_style.<name>``: torch's conventions with every octopt option (``bits`` included)."""

from __future__ import annotations

from ._optax_style import OPTAX_STYLE, ademamix
from ._state import OctoptState, SlotState
from ._torch_style import EIGHT_BIT
from ._transformation import Transformation, step

globals().update(OPTAX_STYLE)
globals().update(EIGHT_BIT)
__all__ = [
    "OctoptState",
    "SlotState",
    "Transformation",
    "step",
    "ademamix",
    *sorted(OPTAX_STYLE),
    *sorted(EIGHT_BIT),
]
