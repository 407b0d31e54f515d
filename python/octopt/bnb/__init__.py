"""octopt.bnb: bitsandbytes' optimizer surface over octopt (switching is one import line:
``import octopt.bnb as bnb``). ``octopt.bnb.optim`` holds the optimizers and GlobalOptimManager,
``octopt.bnb.nn`` the Embedding and StableEmbedding modules. Imports torch, never bitsandbytes."""

from . import nn, optim

__all__ = ["nn", "optim"]
