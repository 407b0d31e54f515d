"""bitsandbytes 0.50's optimizer classes, generated from one table: each class's constructor signature
(names, order, defaults and annotations as bitsandbytes declares them), the bitsandbytes update rule it
runs, how its state width is chosen and the checks bitsandbytes makes before anything else.

Every constructor also takes two keyword-only arguments that bitsandbytes had before 0.48 and code written
for it still passes: ``percentile_clipping`` (honoured: see _clip.py) and ``block_wise`` (accepted; octopt's
8-bit state is always block-wise, see docs/migrating.md).
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable
from typing import Any, Literal, Optional

import torch

from ...torch.binding import bind_arguments
from ._optimizer import CORE_KIND, BnbOptimizer

_P = inspect.Parameter
_ANY = _P.empty

# Argument lists: (name, default, annotation); "params" first, as bitsandbytes declares them.
_ADAM = [("lr", 1e-3), ("betas", (0.9, 0.999)), ("eps", 1e-8), ("weight_decay", 0), ("amsgrad", False)]
_ADAMW = [("lr", 1e-3), ("betas", (0.9, 0.999)), ("eps", 1e-8), ("weight_decay", 1e-2), ("amsgrad", False)]
_TAIL = [("args", None), ("min_8bit_size", 4096)]
_EMIX = [
    ("lr", 1e-3, float),
    ("betas", (0.9, 0.999, 0.9999), tuple[float, float, float]),
    ("alpha", 5.0, float),
    ("t_alpha", None, Optional[int]),
    ("t_beta3", None, Optional[int]),
    ("eps", 1e-8, float),
    ("weight_decay", 1e-2, float),
]
_LAMB = [
    ("lr", 1e-3),
    ("bias_correction", True),
    ("betas", (0.9, 0.999)),
    ("eps", 1e-8),
    ("weight_decay", 0),
    ("amsgrad", False),
    ("adam_w_mode", True),
]
_SGD = [("lr", _ANY), ("momentum", 0), ("dampening", 0), ("weight_decay", 0), ("nesterov", False)]
_LION = [("lr", 1e-4), ("betas", (0.9, 0.99)), ("weight_decay", 0)]
_RMS = [
    ("lr", 1e-2),
    ("alpha", 0.99),
    ("eps", 1e-8),
    ("weight_decay", 0),
    ("momentum", 0),
    ("centered", False),
]
_ADAGRAD = [("lr", 1e-2), ("lr_decay", 0), ("weight_decay", 0), ("initial_accumulator_value", 0), ("eps", 1e-10)]
_OB = [("optim_bits", 32)]
_PAGED = [("is_paged", False)]
_EMIX_OB = [("optim_bits", 32, Literal[8, 32])]
_EMIX_TAIL = [("min_8bit_size", 4096, int)]
_EMIX_PAGED = [("is_paged", False, bool)]
_EMIX_PARAMS = ("params", Iterable[torch.nn.Parameter])

# (class name, bitsandbytes' rule, arguments after params, bits: "optim_bits" | 8 | 32, paged: True |
#  "is_paged", checks)
# checks: "amsgrad" (the 8-bit Adams refuse amsgrad=True), "optim_bits32" (... and optim_bits != 32),
# "momentum" (SGD/LARS refuse momentum=0), "rms" (alpha=0, centered), "adagrad" (its own range checks),
# "adagrad8" (optim_bits must be 8), "lamb8" (max_unorm must be 1.0)
TABLE: list[tuple] = []


def _adam(base: str, args: list) -> None:
    TABLE.extend(
        [
            (base, "adam", args + _OB + _TAIL + _PAGED, "optim_bits", "is_paged", ()),
            (base + "8bit", "adam", args + _OB + _TAIL + _PAGED, 8, "is_paged", ("amsgrad", "optim_bits32")),
            (base + "32bit", "adam", args + _OB + _TAIL + _PAGED, 32, "is_paged", ()),
        ]
    )


_adam("Adam", _ADAM)
_adam("AdamW", _ADAMW)
TABLE.extend(
    [
        # bitsandbytes' PagedAdam* keep an is_paged argument (and ignore it); its PagedAdamW* have none
        ("PagedAdam", "adam", _ADAM + _OB + _TAIL + _PAGED, "optim_bits", True, ()),
        ("PagedAdam8bit", "adam", _ADAM + _OB + _TAIL + _PAGED, 8, True, ("amsgrad", "optim_bits32")),
        ("PagedAdam32bit", "adam", _ADAM + _OB + _TAIL + _PAGED, 32, True, ()),
        ("PagedAdamW", "adam", _ADAMW + _OB + _TAIL, "optim_bits", True, ()),
        ("PagedAdamW8bit", "adam", _ADAMW + _OB + _TAIL, 8, True, ("amsgrad", "optim_bits32")),
        ("PagedAdamW32bit", "adam", _ADAMW + _OB + _TAIL, 32, True, ()),
        ("AdEMAMix", "ademamix", _EMIX + _EMIX_OB + _EMIX_TAIL + _EMIX_PAGED, "optim_bits", "is_paged", ()),
        ("AdEMAMix8bit", "ademamix", _EMIX + _EMIX_TAIL + _EMIX_PAGED, 8, "is_paged", ()),
        ("AdEMAMix32bit", "ademamix", _EMIX + _EMIX_TAIL + _EMIX_PAGED, 32, "is_paged", ()),
        ("PagedAdEMAMix", "ademamix", _EMIX + _EMIX_OB + _EMIX_TAIL, "optim_bits", True, ()),
        ("PagedAdEMAMix8bit", "ademamix", _EMIX + _EMIX_TAIL, 8, True, ()),
        ("PagedAdEMAMix32bit", "ademamix", _EMIX + _EMIX_TAIL, 32, True, ()),
        ("LAMB", "lamb", _LAMB + _OB + _TAIL + [("max_unorm", 1.0)], "optim_bits", False, ()),
        ("LAMB8bit", "lamb", _LAMB + _TAIL + [("max_unorm", 1.0)], 8, False, ("amsgrad", "lamb8")),
        ("LAMB32bit", "lamb", _LAMB + _TAIL + [("max_unorm", 1.0)], 32, False, ()),
        ("LARS", "lars", _SGD + _OB + _TAIL + [("max_unorm", 0.02)], "optim_bits", False, ("momentum",)),
        ("LARS8bit", "lars", _SGD + _TAIL + [("max_unorm", 0.02)], 8, False, ("momentum",)),
        ("LARS32bit", "lars", _SGD + _TAIL + [("max_unorm", 0.02)], 32, False, ("momentum",)),
        ("Lion", "lion", _LION + _OB + _TAIL + _PAGED, "optim_bits", "is_paged", ()),
        ("Lion8bit", "lion", _LION + _TAIL + _PAGED, 8, "is_paged", ()),
        ("Lion32bit", "lion", _LION + _TAIL + _PAGED, 32, "is_paged", ()),
        ("PagedLion", "lion", _LION + _OB + _TAIL, "optim_bits", True, ()),
        ("PagedLion8bit", "lion", _LION + _TAIL, 8, True, ()),
        ("PagedLion32bit", "lion", _LION + _TAIL, 32, True, ()),
        ("RMSprop", "rmsprop", _RMS + _OB + _TAIL, "optim_bits", False, ("rms",)),
        ("RMSprop8bit", "rmsprop", _RMS + _TAIL, 8, False, ("rms",)),
        ("RMSprop32bit", "rmsprop", _RMS + _TAIL, 32, False, ("rms",)),
        ("SGD", "momentum", _SGD + _OB + _TAIL, "optim_bits", False, ("momentum",)),
        ("SGD8bit", "momentum", _SGD + _TAIL, 8, False, ("momentum",)),
        ("SGD32bit", "momentum", _SGD + _TAIL, 32, False, ("momentum",)),
        ("Adagrad", "adagrad", _ADAGRAD + _OB + _TAIL, "optim_bits", False, ("adagrad",)),
        ("Adagrad8bit", "adagrad", _ADAGRAD + [("optim_bits", 8)] + _TAIL, 8, False, ("adagrad", "adagrad8")),
        ("Adagrad32bit", "adagrad", _ADAGRAD + _OB + _TAIL, 32, False, ("adagrad",)),
    ]
)
EXTRA = [("percentile_clipping", 100), ("block_wise", True)]  # keyword-only: bitsandbytes < 0.48's arguments


def _signature(name: str, args: list) -> inspect.Signature:
    annotated = len(args[0]) == 3
    params = [_P("self", _P.POSITIONAL_OR_KEYWORD)]
    params.append(_P("params", _P.POSITIONAL_OR_KEYWORD, annotation=_EMIX_PARAMS[1] if annotated else _ANY))
    for a in args:
        params.append(_P(a[0], _P.POSITIONAL_OR_KEYWORD, default=a[1], annotation=a[2] if len(a) == 3 else _ANY))
    params += [_P(k, _P.KEYWORD_ONLY, default=v) for k, v in EXTRA]
    return inspect.Signature(params)


def _check(name: str, checks: tuple, a: dict) -> None:
    if "amsgrad" in checks and a.get("amsgrad"):
        raise ValueError(f"{name} does not support amsgrad=True")
    if "optim_bits32" in checks and a.get("optim_bits", 32) != 32:
        raise ValueError(f"{name} only supports optim_bits=32 (default value for compatibility)")
    if "lamb8" in checks and a["max_unorm"] != 1.0:
        raise ValueError(f"{name} only supports max_unorm=1.0 (default value for compatibility)")
    if "momentum" in checks and a["momentum"] == 0:
        what = "LARS" if name.startswith("LARS") else "SGD"
        raise NotImplementedError(f"{what} without momentum is not supported!")
    if "rms" in checks:
        if a["alpha"] == 0:
            raise NotImplementedError("RMSprop with alpha==0.0 is not supported!")
        if a["centered"]:
            raise NotImplementedError("Centered RMSprop is not supported!")
    if "adagrad" in checks:
        if not 0.0 <= a["lr"]:
            raise ValueError(f"Invalid learning rate: {a['lr']}")
        if not 0.0 <= a["weight_decay"]:
            raise ValueError(f"Invalid weight_decay value: {a['weight_decay']}")
        if not 0.0 <= a["eps"]:
            raise ValueError(f"Invalid epsilon value: {a['eps']}")
        if a["initial_accumulator_value"] != 0.0:
            raise ValueError("Initial accumulator value != 0.0 not supported!")
        if a["lr_decay"] != 0.0:
            raise ValueError("Lr Decay != 0.0 not supported!")
    if "adagrad8" in checks and a["optim_bits"] != 8:
        raise ValueError(f"{name} only supports optim_bits=8 (default value for compatibility)")


def _base_arguments(rule: str, a: dict, bits: Any, paged: Any) -> dict:
    """BnbOptimizer's arguments from a class's bound arguments, as bitsandbytes' classes pass them on."""
    if rule in ("momentum", "lars"):
        betas, eps = (a["momentum"], a["dampening"]), 0.0
    elif rule == "rmsprop":
        betas, eps = (a["alpha"], a["momentum"]), a["eps"]
    elif rule == "adagrad":
        betas, eps = (0.0, 0.0), a["eps"]
    else:
        betas, eps = a["betas"], a.get("eps", 0.0)
    out = dict(
        lr=a["lr"],
        betas=betas,
        eps=eps,
        weight_decay=a["weight_decay"],
        optim_bits=a["optim_bits"] if bits == "optim_bits" else bits,
        args=a.get("args"),
        min_8bit_size=a["min_8bit_size"],
        max_unorm=a.get("max_unorm", 0.0),
        is_paged=a["is_paged"] if paged == "is_paged" else bool(paged),
        percentile_clipping=a["percentile_clipping"],
        block_wise=a["block_wise"],
    )
    if rule == "ademamix":
        out.update(alpha=a["alpha"], t_alpha=a["t_alpha"], t_beta3=a["t_beta3"], args=None)
    return out


def _make(name: str, rule: str, args: list, bits: Any, paged: Any, checks: tuple) -> type:
    sig = _signature(name, args)

    def __init__(self: Any, *pos: Any, **kw: Any) -> None:
        a = bind_arguments(sig, type(self).__name__, self, pos, kw)
        _check(name, checks, a)
        BnbOptimizer.__init__(self, a["params"], **_base_arguments(rule, a, bits, paged))

    __init__.__signature__ = sig  # type: ignore[attr-defined]
    width = {8: "8-bit", 32: "32-bit"}.get(bits, "optim_bits-wide")
    doc = (
        f"bitsandbytes' {name} ({width} state{', paged on CUDA' if paged is True else ''}), stepped by octopt's "
        f"core {CORE_KIND[rule]!r} with bitsandbytes' '{rule}' semantics. Arguments as bitsandbytes 0.50 "
        "declares them; see docs/migrating.md for every difference."
    )
    return type(
        name,
        (BnbOptimizer,),
        {
            "__init__": __init__,
            "__doc__": doc,
            "__module__": "octopt.bnb.optim",
            "_bnb_name": rule,
            "_two_state": rule in ("adam", "lamb", "ademamix"),
        },
    )


ALL = tuple(_make(*row) for row in TABLE)
globals().update({c.__name__: c for c in ALL})
__all__ = [c.__name__ for c in ALL]
