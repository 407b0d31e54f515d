"""octopt.bnb.optim: bitsandbytes' optimizer classes (``bnb.optim.X`` -> ``octopt.bnb.optim.X``) and its
GlobalOptimManager, stepped by octopt's core. Imports no bitsandbytes. See docs/migrating.md."""

from . import _classes
from ._classes import *  # noqa: F403 - every optimizer class bitsandbytes 0.50 exports in bnb.optim
from ._manager import GlobalOptimManager
from ._optimizer import BnbOptimizer
from ._pytorch_lars import PytorchLARS

__all__ = [*_classes.__all__, "GlobalOptimManager", "PytorchLARS", "BnbOptimizer"]
