"""The optimizers, one per entry of the core's optimizer table, with torch.optim's constructor signatures:
the table's options in its order (``params, lr, betas, ...``), then keyword-only ``maximize`` (and RMSprop's
``eps_in_sqrt``, optax's form, which torch.optim does not have) and octopt's options. ``bits`` (32, 8 or 4)
sets the state width; the ``*8bit`` classes default to 8. Further keyword options: ``block_size`` (None: 256
for 8-bit, 128 for 4-bit), ``min_8bit_size`` (smaller tensors keep 32-bit state), ``first_moment_bits``, ``state_map`` ("dynamic", or "fp8": 8-bit state in fp8 e4m3 codes), ``seed``,
``stochastic_rounding``, ``stochastic_bf16``, ``percentile``, ``strict`` (see octopt.Optimizer), and torch's
``foreach``/``fused`` (ignored: every step is one fused native call)."""

from __future__ import annotations

import inspect
from typing import Any

from .. import _hparams
from .. import family as _core
from ._base import TorchOptimizer
from ._signature import bind_arguments

_P = inspect.Parameter
# table options that torch.optim does not take positionally
_KEYWORD_ONLY = ("maximize", "eps_in_sqrt", "no_prox")


def _make(entry: dict) -> type:
    core = getattr(_core, entry["class_name"])
    defaults = _hparams.defaults(entry["name"])
    positional = [k for k in entry["options"] if k not in _KEYWORD_ONLY]
    keyword = [k for k in entry["options"] if k in _KEYWORD_ONLY]
    sig = inspect.Signature(
        [_P("self", _P.POSITIONAL_OR_KEYWORD), _P("params", _P.POSITIONAL_OR_KEYWORD)]
        + [_P(k, _P.POSITIONAL_OR_KEYWORD, default=defaults[k]) for k in positional]
        + [_P(k, _P.KEYWORD_ONLY, default=defaults[k]) for k in keyword]
        + [_P("options", _P.VAR_KEYWORD, annotation=Any)]
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        arguments = bind_arguments(sig, type(self).__name__, self, args, kwargs)
        params, options = arguments.pop("params"), arguments.pop("options")
        TorchOptimizer.__init__(self, params, arguments, **options)

    __init__.__signature__ = sig  # type: ignore[attr-defined]
    doc = f"{entry['summary']}\n\nArguments: params, {', '.join(positional)}; keyword-only: {', '.join(keyword)}."
    return type(
        entry["class_name"],
        (TorchOptimizer,),
        {"_core_base": core, "__init__": __init__, "__doc__": doc, "__module__": "octopt.torch"},
    )


def _eight_bit(base: type) -> type:
    doc = f"{base.__name__} with 8-bit block-wise state by default (``bits=8``).\n\n{base.__doc__}"
    return type(base.__name__ + "8bit", (base,), {"_default_bits": 8, "__doc__": doc, "__module__": base.__module__})


_BASE = [_make(e) for e in _hparams.TABLE.values() if not e["direction_step"]]  # Muon: _muon.py
ALL = tuple(_BASE) + tuple(_eight_bit(c) for c in _BASE)
globals().update({c.__name__: c for c in ALL})
__all__ = [c.__name__ for c in ALL]
