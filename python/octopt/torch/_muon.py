"""octopt.torch.Muon: torch.optim.Muon's signature and semantics with octopt's quantized momentum. The torch
policy (param groups, state dicts, schedulers) is TorchOptimizer's; the core it composes is octopt.Muon (the
momentum step, Newton-Schulz in torch's bfloat16 matmuls, the final update: docs/muon.md).

DTensor parameters (FSDP2, tensor parallelism) are refused: Newton-Schulz needs the whole matrix, and the
octopt.torch policy steps shards without communicating (docs/muon.md says why and what to do instead)."""

from __future__ import annotations

from typing import Any

from .. import muon as _muon
from . import _dist
from ._base import TorchOptimizer

_NS_KEYS = ("ns_coefficients", "ns_steps", "adjust_lr_fn")


def _core_class(coefficients: tuple, steps: int, adjust_lr_fn: str | None) -> type:
    """The octopt.Muon the binding builds per device, with this optimizer's Newton-Schulz options."""

    class Core(_muon.Muon):
        def __init__(self, params: Any, **options: Any) -> None:
            super().__init__(params, ns_coefficients=coefficients, ns_steps=steps, adjust_lr_fn=adjust_lr_fn, **options)

    return Core


class Muon(TorchOptimizer):
    """torch.optim.Muon with octopt state: ``Muon(params, lr=1e-3, weight_decay=0.1, momentum=0.95, nesterov=True,
    ns_coefficients=(3.4445, -4.775, 2.0315), eps=1e-7, ns_steps=5, adjust_lr_fn=None)`` for 2-D parameters,
    plus octopt's keyword options (``bits`` 32, 8 or 4, ``block_size``, ...; see octopt.torch). The Newton-Schulz
    options are per optimizer: a param group may not change them."""

    def __init__(
        self,
        params: Any,
        lr: float = 1e-3,
        weight_decay: float = 0.1,
        momentum: float = 0.95,
        nesterov: bool = True,
        ns_coefficients: tuple = _muon.NS_COEFFICIENTS,
        eps: float = 1e-7,
        ns_steps: int = 5,
        adjust_lr_fn: str | None = None,
        **options: Any,
    ) -> None:
        fn = type(self).__name__
        coeffs, steps, adjust = _muon.check_ns_options(fn, ns_coefficients, ns_steps, eps, adjust_lr_fn)
        self._ns = dict(ns_coefficients=coeffs, ns_steps=steps, adjust_lr_fn=adjust)
        self._core_base = _core_class(coeffs, steps, adjust)
        defaults = dict(lr=lr, weight_decay=weight_decay, momentum=momentum, nesterov=nesterov, eps=eps)
        super().__init__(params, defaults, **options)
        for g in self.param_groups:  # torch.optim.Muon's group keys, for its state dicts and schedulers
            for k, v in self._ns.items():
                g.setdefault(k, v)

    def load_state_dict(self, state_dict: dict) -> None:
        # torch.optim.Muon keeps no step count (its update does not use one): such entries load as step 0, which
        # only numbers the random streams of stochastic rounding from there on
        state = state_dict.get("state") if isinstance(state_dict, dict) else None
        if isinstance(state, dict) and any(isinstance(e, dict) and "step" not in e for e in state.values()):
            filled = {k: {**e, "step": 0} if isinstance(e, dict) and "step" not in e else e for k, e in state.items()}
            state_dict = {**state_dict, "state": filled}
        super().load_state_dict(state_dict)

    def add_param_group(self, param_group: dict) -> None:
        fn = type(self).__name__
        if isinstance(param_group, dict) and "params" in param_group:
            params = param_group["params"]
            params = [params] if hasattr(params, "ndim") else list(params)
            start = sum(len(g["params"]) for g in self.param_groups)
            for i, p in enumerate(params):
                if _dist.is_dtensor(p):
                    raise ValueError(
                        f"{fn}: argument 'params[{start + i}]' is a DTensor; Muon's Newton-Schulz step needs the "
                        "whole matrix and octopt.torch steps shards without communicating, so DTensor (FSDP2) "
                        "parameters are not supported: step them with torch.optim.Muon on full matrices, or "
                        "keep Muon's matrices unsharded (docs/muon.md)"
                    )
                if getattr(p, "ndim", 2) != 2:
                    raise ValueError(
                        f"{fn}: argument 'params[{start + i}]' must be a 2-D matrix (Muon only supports 2D "
                        f"parameters), got size {tuple(p.shape)}"
                    )
            for k in _NS_KEYS:
                if k in param_group and self._ns and param_group[k] != self._ns[k]:
                    raise ValueError(
                        f"{fn}: param group argument '{k}'={param_group[k]!r} differs from the optimizer's "
                        f"{self._ns[k]!r}; octopt's Muon takes the Newton-Schulz options per optimizer"
                    )
            param_group = {**param_group, "params": params}
        super().add_param_group(param_group)
        if getattr(self, "_ns", None):
            for k, v in self._ns.items():
                self.param_groups[-1].setdefault(k, v)


class Muon8bit(Muon):
    """Muon with 8-bit block-wise momentum by default (``bits=8``)."""

    _default_bits = 8
