"""The optimizer family. Semantics: PyTorch's reference optimizers where they exist; Lion,
AdEMAMix, LAMB and LARS as their papers define them. ``bits`` (32, 8 or 4) sets the state width."""

from __future__ import annotations

from .optimizer import Optimizer


class Adam(Optimizer):
    """torch.optim.Adam semantics: L2 weight decay added to the gradient."""

    kind = "adam"
    defaults = dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)


class AdamW(Optimizer):
    """torch.optim.AdamW semantics: decoupled weight decay applied before the update."""

    kind = "adamw"
    defaults = dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2)


class SGD(Optimizer):
    """torch.optim.SGD semantics: momentum, dampening, Nesterov; the buffer starts at the first gradient."""

    kind = "sgd"
    defaults = dict(lr=1e-3, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False)


class RMSprop(Optimizer):
    """torch.optim.RMSprop semantics, with optional momentum and centering."""

    kind = "rmsprop"
    defaults = dict(lr=1e-2, alpha=0.99, eps=1e-8, weight_decay=0.0, momentum=0.0, centered=False)


class Adagrad(Optimizer):
    """torch.optim.Adagrad semantics (lr_decay, initial_accumulator_value)."""

    kind = "adagrad"
    defaults = dict(lr=1e-2, lr_decay=0.0, weight_decay=0.0, initial_accumulator_value=0.0, eps=1e-10)


class Lion(Optimizer):
    """Lion (Chen et al. 2023): sign of an interpolated momentum, decoupled weight decay."""

    kind = "lion"
    defaults = dict(lr=1e-4, betas=(0.9, 0.99), weight_decay=0.0)


class AdEMAMix(Optimizer):
    """AdEMAMix (Pagliardini et al. 2024): Adam plus a slow EMA mixed in with weight alpha;
    optional warm-ups t_alpha and t_beta3 (in steps)."""

    kind = "ademamix"
    defaults = dict(lr=1e-3, betas=(0.9, 0.999, 0.9999), alpha=5.0, eps=1e-8, weight_decay=1e-2)


class LAMB(Optimizer):
    """LAMB (You et al. 2020): Adam direction plus decoupled decay, scaled per tensor by ||w|| / ||update||."""

    kind = "lamb"
    defaults = dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.0, bias_correction=True)


class LARS(Optimizer):
    """LARS (You et al. 2017): momentum SGD with the per-tensor rate eta * ||w|| / (||g|| + wd ||w||)."""

    kind = "lars"
    defaults = dict(lr=1e-3, momentum=0.9, weight_decay=0.0, eta=1e-3)


ALL = (Adam, AdamW, SGD, RMSprop, Adagrad, Lion, AdEMAMix, LAMB, LARS)
