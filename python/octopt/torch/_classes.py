"""The optimizers, with torch.optim's constructor signatures. ``bits`` (32, 8 or 4) sets the state width;
the ``*8bit`` classes default to 8. Further keyword options: ``block_size`` (None: 256 for 8-bit, 128 for
4-bit), ``min_8bit_size`` (smaller tensors keep 32-bit state), ``first_moment_bits``, ``seed``,
``stochastic_rounding``, ``stochastic_bf16``, ``percentile``, ``strict`` (see octopt.Optimizer), and
torch's ``foreach``/``fused`` (ignored: every step is one fused native call)."""

from __future__ import annotations

from typing import Any

from .. import family as _core
from ._base import TorchOptimizer


class Adam(TorchOptimizer):
    """torch.optim.Adam: L2 weight decay added to the gradient."""

    _core_base = _core.Adam

    def __init__(
        self,
        params: Any,
        lr: float = 1e-3,
        betas: tuple = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        *,
        maximize: bool = False,
        **options: Any,
    ):
        super().__init__(
            params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, maximize=maximize), **options
        )


class AdamW(TorchOptimizer):
    """torch.optim.AdamW: decoupled weight decay applied before the update."""

    _core_base = _core.AdamW

    def __init__(
        self,
        params: Any,
        lr: float = 1e-3,
        betas: tuple = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 1e-2,
        *,
        maximize: bool = False,
        **options: Any,
    ):
        super().__init__(
            params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, maximize=maximize), **options
        )


class SGD(TorchOptimizer):
    """torch.optim.SGD: momentum, dampening, Nesterov (the 8-bit state is the momentum buffer)."""

    _core_base = _core.SGD

    def __init__(
        self,
        params: Any,
        lr: float = 1e-3,
        momentum: float = 0.0,
        dampening: float = 0.0,
        weight_decay: float = 0.0,
        nesterov: bool = False,
        *,
        maximize: bool = False,
        **options: Any,
    ):
        super().__init__(
            params,
            dict(
                lr=lr,
                momentum=momentum,
                dampening=dampening,
                weight_decay=weight_decay,
                nesterov=nesterov,
                maximize=maximize,
            ),
            **options,
        )


class RMSprop(TorchOptimizer):
    """torch.optim.RMSprop, with optional momentum and centering."""

    _core_base = _core.RMSprop

    def __init__(
        self,
        params: Any,
        lr: float = 1e-2,
        alpha: float = 0.99,
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        momentum: float = 0.0,
        centered: bool = False,
        *,
        maximize: bool = False,
        **options: Any,
    ):
        super().__init__(
            params,
            dict(
                lr=lr,
                alpha=alpha,
                eps=eps,
                weight_decay=weight_decay,
                momentum=momentum,
                centered=centered,
                maximize=maximize,
            ),
            **options,
        )


class Adagrad(TorchOptimizer):
    """torch.optim.Adagrad (lr_decay, initial_accumulator_value)."""

    _core_base = _core.Adagrad

    def __init__(
        self,
        params: Any,
        lr: float = 1e-2,
        lr_decay: float = 0.0,
        weight_decay: float = 0.0,
        initial_accumulator_value: float = 0.0,
        eps: float = 1e-10,
        *,
        maximize: bool = False,
        **options: Any,
    ):
        super().__init__(
            params,
            dict(
                lr=lr,
                lr_decay=lr_decay,
                weight_decay=weight_decay,
                initial_accumulator_value=initial_accumulator_value,
                eps=eps,
                maximize=maximize,
            ),
            **options,
        )


class Lion(TorchOptimizer):
    """Lion (Chen et al. 2023): sign of an interpolated momentum, decoupled weight decay."""

    _core_base = _core.Lion

    def __init__(
        self,
        params: Any,
        lr: float = 1e-4,
        betas: tuple = (0.9, 0.99),
        weight_decay: float = 0.0,
        *,
        maximize: bool = False,
        **options: Any,
    ):
        super().__init__(
            params, dict(lr=lr, betas=betas, weight_decay=weight_decay, maximize=maximize), **options
        )


class AdEMAMix(TorchOptimizer):
    """AdEMAMix (Pagliardini et al. 2024): Adam plus a slow EMA (beta3) mixed in with weight alpha;
    optional warm-ups t_alpha and t_beta3 (in steps)."""

    _core_base = _core.AdEMAMix

    def __init__(
        self,
        params: Any,
        lr: float = 1e-3,
        betas: tuple = (0.9, 0.999, 0.9999),
        alpha: float = 5.0,
        t_alpha: float | None = None,
        t_beta3: float | None = None,
        eps: float = 1e-8,
        weight_decay: float = 1e-2,
        *,
        maximize: bool = False,
        **options: Any,
    ):
        super().__init__(
            params,
            dict(
                lr=lr,
                betas=betas,
                alpha=alpha,
                t_alpha=t_alpha,
                t_beta3=t_beta3,
                eps=eps,
                weight_decay=weight_decay,
                maximize=maximize,
            ),
            **options,
        )


class LAMB(TorchOptimizer):
    """LAMB (You et al. 2020): Adam direction plus decoupled decay, scaled per tensor by ||w||/||update||."""

    _core_base = _core.LAMB

    def __init__(
        self,
        params: Any,
        lr: float = 1e-3,
        betas: tuple = (0.9, 0.999),
        eps: float = 1e-6,
        weight_decay: float = 0.0,
        bias_correction: bool = True,
        *,
        maximize: bool = False,
        **options: Any,
    ):
        super().__init__(
            params,
            dict(
                lr=lr,
                betas=betas,
                eps=eps,
                weight_decay=weight_decay,
                bias_correction=bias_correction,
                maximize=maximize,
            ),
            **options,
        )


class LARS(TorchOptimizer):
    """LARS (You et al. 2017): momentum SGD with the per-tensor rate eta * ||w|| / (||g|| + wd ||w||)."""

    _core_base = _core.LARS

    def __init__(
        self,
        params: Any,
        lr: float = 1e-3,
        momentum: float = 0.9,
        weight_decay: float = 0.0,
        eta: float = 1e-3,
        *,
        maximize: bool = False,
        **options: Any,
    ):
        super().__init__(
            params,
            dict(lr=lr, momentum=momentum, weight_decay=weight_decay, eta=eta, maximize=maximize),
            **options,
        )


def _eight_bit(base: type) -> type:
    doc = f"{base.__name__} with 8-bit block-wise state by default (``bits=8``).\n\n{base.__doc__}"
    return type(
        base.__name__ + "8bit", (base,), {"_default_bits": 8, "__doc__": doc, "__module__": base.__module__}
    )


Adam8bit = _eight_bit(Adam)
AdamW8bit = _eight_bit(AdamW)
SGD8bit = _eight_bit(SGD)
RMSprop8bit = _eight_bit(RMSprop)
Adagrad8bit = _eight_bit(Adagrad)
Lion8bit = _eight_bit(Lion)
AdEMAMix8bit = _eight_bit(AdEMAMix)
LAMB8bit = _eight_bit(LAMB)
LARS8bit = _eight_bit(LARS)
