"""octopt.torch: torch.optim.Optimizer subclasses whose state is octopt's block-wise quantized state.

Importing this module imports torch (``import octopt`` alone does not). See docs/torch.md.
"""

from ._base import TorchOptimizer
from . import _classes
from ._classes import *  # noqa: F403 - one class (and its 8-bit default) per optimizer of the core's table
from ._dcp import dequantized_state_dict
from ._muon import Muon, Muon8bit
from ._override import get_override, override

__all__ = [
    "TorchOptimizer",
    *_classes.__all__,
    "Muon",
    "Muon8bit",
    "dequantized_state_dict",
    "get_override",
    "override",
]
