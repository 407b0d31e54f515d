"""Hyper-parameters of the optimizer family: defaults, validation and conversion for the core."""

from __future__ import annotations

import math
from typing import Any

from . import _octopt

# Keys a param group may override, beyond "params".
GROUP_KEYS = (
    "lr", "betas", "eps", "weight_decay", "momentum", "dampening", "nesterov", "alpha", "centered", "lr_decay",
    "initial_accumulator_value", "eta", "t_alpha", "t_beta3", "bias_correction", "maximize", "bits", "block_size",
    "min_8bit_size", "first_moment_bits",
)


def _real(group: dict, key: str, fn: str, lo: float = 0.0, hi: float | None = None, hi_open: bool = False) -> float:
    v = group[key]
    if isinstance(v, bool) or not isinstance(v, (int, float)) and not hasattr(v, "__float__"):
        raise TypeError(f"{fn}: '{key}' must be a number, got {type(v).__name__}")
    x = float(v)
    if not math.isfinite(x):
        raise ValueError(f"{fn}: '{key}' must be finite, got {x}")
    if x < lo or (hi is not None and (x >= hi if hi_open else x > hi)):
        bound = f"[{lo}, {hi})" if hi_open else (f"[{lo}, {hi}]" if hi is not None else f">= {lo}")
        raise ValueError(f"{fn}: '{key}' must be in {bound}, got {x}")
    return x


def validate_group(kind: str, group: dict, fn: str) -> None:
    """Raises TypeError/ValueError naming the bad hyper-parameter."""
    for key in group:
        if key != "params" and key not in GROUP_KEYS:
            raise ValueError(f"{fn}: unknown option '{key}' for {kind}")
    _real(group, "lr", fn)
    _real(group, "eps", fn)
    _real(group, "weight_decay", fn)
    betas = group["betas"]
    if not isinstance(betas, (tuple, list)) or len(betas) not in (2, 3):
        raise ValueError(f"{fn}: 'betas' must be a tuple of 2 (or 3 for AdEMAMix) values, got {betas!r}")
    if kind == "ademamix" and len(betas) != 3:
        raise ValueError(f"{fn}: 'betas' must be (beta1, beta2, beta3) for AdEMAMix, got {betas!r}")
    if kind != "ademamix" and len(betas) != 2:  # a third beta would be silently ignored
        raise ValueError(f"{fn}: 'betas' must be (beta1, beta2) for {kind}, got {betas!r}")
    for i, b in enumerate(betas):
        _real({f"betas[{i}]": b}, f"betas[{i}]", fn, 0.0, 1.0, hi_open=True)
    _real(group, "momentum", fn)
    _real(group, "dampening", fn, 0.0, 1.0)
    _real(group, "alpha", fn)
    if kind == "rmsprop" and group["alpha"] >= 1.0:
        raise ValueError(f"{fn}: 'alpha' must be in [0, 1) for RMSprop, got {group['alpha']}")
    _real(group, "lr_decay", fn)
    _real(group, "initial_accumulator_value", fn)
    _real(group, "eta", fn)
    if group["nesterov"] and (group["momentum"] <= 0 or group["dampening"] != 0):
        raise ValueError(f"{fn}: Nesterov momentum requires momentum > 0 and zero dampening")
    for key in ("t_alpha", "t_beta3"):
        if group[key] is not None:
            _real(group, key, fn)
    bits = group["bits"]
    if isinstance(bits, bool) or bits not in (32, 8, 4):
        raise ValueError(f"{fn}: 'bits' must be 32, 8 or 4, got {bits!r}")
    fmb = group["first_moment_bits"]
    if fmb is not None and (isinstance(fmb, bool) or fmb not in (32, 8, 4)):
        raise ValueError(f"{fn}: 'first_moment_bits' must be None, 32, 8 or 4, got {fmb!r}")
    bs = group["block_size"]
    if bs is not None and (isinstance(bs, bool) or not isinstance(bs, int) or bs < 32 or bs > 4096 or bs & (bs - 1)):
        raise ValueError(f"{fn}: 'block_size' must be a power of two in [32, 4096], got {bs!r}")
    m8 = group["min_8bit_size"]
    if isinstance(m8, bool) or not isinstance(m8, int) or m8 < 0:
        raise ValueError(f"{fn}: 'min_8bit_size' must be an int >= 0, got {m8!r}")


def to_core(kind: str, group: dict) -> Any:
    """The group as the core's HyperParams."""
    hp = _octopt.HyperParams()
    hp.lr = float(group["lr"])
    betas = group["betas"]
    hp.beta1 = float(betas[0])
    hp.beta2 = float(betas[1])
    if len(betas) > 2:
        hp.beta3 = float(betas[2])
    hp.eps = float(group["eps"])
    hp.weight_decay = float(group["weight_decay"])
    hp.momentum = float(group["momentum"])
    hp.dampening = float(group["dampening"])
    hp.nesterov = bool(group["nesterov"])
    hp.alpha = float(group["alpha"])
    hp.centered = bool(group["centered"])
    hp.lr_decay = float(group["lr_decay"])
    hp.eta = float(group["eta"])
    hp.t_alpha = float(group["t_alpha"] or 0.0)
    hp.t_beta3 = float(group["t_beta3"] or 0.0)
    hp.bias_correction = bool(group["bias_correction"])
    hp.maximize = bool(group["maximize"])
    return hp


# Options shared by every optimizer, with their defaults.
COMMON_DEFAULTS = dict(
    lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, momentum=0.0, dampening=0.0, nesterov=False,
    alpha=0.99, centered=False, lr_decay=0.0, initial_accumulator_value=0.0, eta=1e-3, t_alpha=None, t_beta3=None,
    bias_correction=True, maximize=False, bits=8, block_size=None, min_8bit_size=4096, first_moment_bits=None,
)
