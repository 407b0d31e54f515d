"""Muon (Jordan et al. 2024) with torch.optim.Muon's semantics over octopt's quantized momentum, for NumPy,
CuPy and torch arrays (octopt.torch.Muon composes it). A step is three parts (docs/muon.md):

1. the core's momentum step (numerics/rules/muon.hpp, one fused call for every matrix): the momentum buffer,
   quantized like any other state slot, and the direction D (Nesterov: lerp(g, buf, momentum), else buf)
   written into a per-matrix work buffer;
2. Newton-Schulz orthogonalization of D in the arrays' own framework (torch: bfloat16 matmuls exactly as
   torch.optim.Muon; NumPy/CuPy: float32 ``@``), so octopt ships no BLAS;
3. the core's final update ``p <- p (1 - lr wd) - adjusted_lr O`` (octopt/muon.hpp: muon_apply), one pass.
"""

from __future__ import annotations

import math
from typing import Any, Iterable

import numpy as np

from . import _arrays, _hparams, _octopt
from .optimizer import Optimizer, _fill, group_params

# Keller Jordan's quintic coefficients, torch.optim.Muon's defaults
NS_COEFFICIENTS = (3.4445, -4.7750, 2.0315)
ADJUST_LR_FNS = (None, "original", "match_rms_adamw")


def adjusted_lr(lr: float, adjust_lr_fn: str | None, shape: tuple) -> float:
    """torch.optim.Muon's learning rate of a (rows, cols) matrix: lr sqrt(max(1, rows/cols)) ("original", the
    default) or lr 0.2 sqrt(max(rows, cols)) ("match_rms_adamw", Liu et al. 2025)."""
    rows, cols = shape[0], shape[1]
    if adjust_lr_fn == "match_rms_adamw":
        return lr * (0.2 * math.sqrt(max(rows, cols)))
    return lr * math.sqrt(max(1, rows / cols))


def newton_schulz_torch(d: Any, coefficients: tuple, steps: int, eps: float) -> Any:
    """The quintic Newton-Schulz iteration in bfloat16, in torch.optim.Muon's order of operations (so that
    32-bit octopt and torch agree to float32 rounding of the momentum)."""
    import torch

    a, b, c = coefficients
    x = d.bfloat16()
    tall = d.size(0) > d.size(1)
    if tall:  # iterate on the wide orientation: the Gram matrix is the smaller one
        x = x.T
    x = x / x.norm().clamp(min=eps)
    for _ in range(steps):
        gram = x @ x.T
        poly = torch.addmm(gram, gram, gram, beta=b, alpha=c)  # b A + c A^2
        x = torch.addmm(x, poly, x, beta=a)  # a X + (b A + c A^2) X
    return x.T if tall else x


def newton_schulz_array(d: Any, coefficients: tuple, steps: int, eps: float) -> Any:
    """The same iteration in float32 with the array's own ``@`` (NumPy, CuPy): NumPy has no bfloat16 matmul."""
    a, b, c = (np.float32(v) for v in coefficients)
    x = d.astype(np.float32)
    tall = x.shape[0] > x.shape[1]
    if tall:
        x = x.T
    norm = float((x * x).sum()) ** 0.5
    x = x / np.float32(max(norm, eps))
    for _ in range(steps):
        gram = x @ x.T
        x = a * x + (b * gram + c * (gram @ gram)) @ x
    x = x.T if tall else x
    return x if x.flags.c_contiguous else x.copy()


def check_ns_options(fn: str, ns_coefficients: Any, ns_steps: Any, eps: Any, adjust_lr_fn: Any) -> tuple:
    """Validated (ns_coefficients, ns_steps, adjust_lr_fn); errors name the argument."""
    try:
        coeffs = tuple(float(v) for v in ns_coefficients)
    except (TypeError, ValueError):
        raise TypeError(
            f"{fn}: argument 'ns_coefficients' must be a tuple of three numbers, got {ns_coefficients!r}"
        ) from None
    if len(coeffs) != 3 or not all(math.isfinite(v) for v in coeffs):
        raise ValueError(f"{fn}: argument 'ns_coefficients' must be three finite numbers, got {ns_coefficients!r}")
    if isinstance(ns_steps, bool) or not isinstance(ns_steps, (int, np.integer)) or not 0 <= ns_steps < 100:
        raise ValueError(f"{fn}: argument 'ns_steps' must be an int in [0, 100), got {ns_steps!r}")
    if adjust_lr_fn not in ADJUST_LR_FNS:
        raise ValueError(
            f"{fn}: argument 'adjust_lr_fn' must be None, 'original' or 'match_rms_adamw', got {adjust_lr_fn!r}"
        )
    return coeffs, int(ns_steps), adjust_lr_fn


def _zeros_like(p: Any, info: _arrays.ArrayInfo) -> Any:
    d = _arrays.empty(p, info, tuple(info.shape), info.dtype)
    _fill(d, 0.0)
    return d


class Muon(Optimizer):
    """Muon with torch.optim.Muon's arguments and semantics for 2-D NumPy, CuPy or torch arrays: the momentum
    (``momentum_buffer``) is kept at ``bits`` 32, 8 or 4 like any octopt state; ``lr``, ``weight_decay``,
    ``momentum``, ``nesterov`` and ``eps`` are per group, ``ns_coefficients``, ``ns_steps`` and ``adjust_lr_fn``
    per optimizer. ``step(grads)`` takes one gradient per matrix (None: skipped). NumPy/CuPy orthogonalize in
    float32, torch arrays in bfloat16 as torch.optim.Muon."""

    kind = "muon"
    defaults = _hparams.defaults("muon")

    def __init__(
        self,
        params: Iterable,
        lr: float = 1e-3,
        weight_decay: float = 0.1,
        momentum: float = 0.95,
        nesterov: bool = True,
        ns_coefficients: tuple = NS_COEFFICIENTS,
        eps: float = 1e-7,
        ns_steps: int = 5,
        adjust_lr_fn: str | None = None,
        **options: Any,
    ):
        fn = type(self).__name__
        self.ns_coefficients, self.ns_steps, self.adjust_lr_fn = check_ns_options(
            fn, ns_coefficients, ns_steps, eps, adjust_lr_fn
        )
        self._dirs: list = []  # per matrix: the direction D the core writes and Newton-Schulz reads
        options.update(lr=lr, weight_decay=weight_decay, momentum=momentum, nesterov=nesterov, eps=eps)
        super().__init__(params, **options)

    def add_param_group(self, group: dict) -> None:
        fn = type(self).__name__
        params = group_params(fn, group)
        dirs = []
        for i, p in enumerate(params):
            arg = f"params[{len(self._tensors) + i}]"
            info = _arrays.check(p, fn, arg, _arrays.FLOAT_DTYPES, writeable=True)
            if len(info.shape) != 2:
                raise ValueError(
                    f"{fn}: argument '{arg}' must be a 2-D matrix (Muon orthogonalizes matrices; step other "
                    f"parameters with another optimizer such as AdamW), got shape {tuple(info.shape)}"
                )
            dirs.append(_zeros_like(p, info))
        first = len(self._tensors)
        super().add_param_group({**group, "params": dirs})
        # the core steps the direction buffers; the user's matrices are what muon_apply updates in place
        self.param_groups[-1]["params"] = params
        for t, p in zip(self._tensors[first:], params):
            t.param = p
        self._dirs += dirs

    # -- stepping -----------------------------------------------------------------------------
    def step(self, grads: Iterable, stream: Any = None) -> int | None:
        """One Muon step of every matrix with a gradient: the core's momentum step, Newton-Schulz, the core's
        final update. Returns what octopt.Optimizer.step returns (CPU: blocks skipped for NaN/Inf gradients,
        whose direction is zero this step)."""
        grads = self._grads(grads, "step")
        stepped = [g is not None for g in grads]
        self._clear(stepped)
        out = super().step(grads, stream)
        self._finish(stepped, stream, "step")
        return out

    def _step_addresses(self, addresses: list, dtypes: list, stream: int = 0) -> int:
        stepped = [a != 0 for a in addresses]
        self._clear(stepped)
        out = super()._step_addresses(addresses, dtypes, stream)
        self._finish(stepped, stream, "step")
        return out

    def _clear(self, stepped: list) -> None:
        # a block the core skips (non-finite gradient) leaves its direction at zero, never last step's
        for d, s in zip(self._dirs, stepped):
            if s:
                _fill(d, 0.0)

    def orthogonalize(self, d: Any, eps: float) -> Any:
        """Newton-Schulz of one direction matrix in its own framework (C-contiguous)."""
        if _arrays.framework_of(d) == "torch":
            return newton_schulz_torch(d, self.ns_coefficients, self.ns_steps, eps).contiguous()
        return newton_schulz_array(d, self.ns_coefficients, self.ns_steps, eps)

    def _finish(self, stepped: list, stream: Any, fn: str) -> None:
        for t, d, s in zip(self._tensors, self._dirs, stepped):
            if not s:
                continue
            g = self.param_groups[t.group]
            eps = float(g["eps"])
            o = self.orthogonalize(d, eps)
            lr, wd = float(g["lr"]), float(g["weight_decay"])
            p_arg, bf16 = _arrays.float_kernel_arg(t.param)
            o_arg = _arrays.kernel_arg(o)
            handle = _arrays.stream_handle(t.info, stream, fn)
            _octopt.muon_apply(
                p_arg,
                o_arg,
                1.0 - lr * wd,
                -adjusted_lr(lr, self.adjust_lr_fn, tuple(t.info.shape)),
                handle,
                bf16,
                f"{type(self).__name__}.{fn}",
            )
