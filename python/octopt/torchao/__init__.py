"""octopt.torchao: torchao's low-bit optimizer names over octopt (``torchao.optim.X`` ->
``octopt.torchao.optim.X``). Imports torch, never torchao. See docs/migrating.md."""

from . import optim

__all__ = ["optim"]
