"""octopt.torch: torch.optim.Optimizer subclasses whose state is octopt's block-wise quantized state.

Importing this module imports torch (``import octopt`` alone does not). See docs/torch.md.
"""

from ._base import TorchOptimizer
from ._classes import (
    LAMB,
    LARS,
    SGD,
    Adagrad,
    Adagrad8bit,
    Adam,
    Adam8bit,
    AdamW,
    AdamW8bit,
    AdEMAMix,
    AdEMAMix8bit,
    LAMB8bit,
    LARS8bit,
    Lion,
    Lion8bit,
    RMSprop,
    RMSprop8bit,
    SGD8bit,
)
from ._override import get_override, override

__all__ = [
    "LAMB",
    "LARS",
    "SGD",
    "AdEMAMix",
    "AdEMAMix8bit",
    "Adagrad",
    "Adagrad8bit",
    "Adam",
    "Adam8bit",
    "AdamW",
    "AdamW8bit",
    "LAMB8bit",
    "LARS8bit",
    "Lion",
    "Lion8bit",
    "RMSprop",
    "RMSprop8bit",
    "SGD8bit",
    "TorchOptimizer",
    "get_override",
    "override",
]
