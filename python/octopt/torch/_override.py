"""Per-parameter overrides of state layout and hyper-parameters (like bitsandbytes' GlobalOptimManager)."""

from __future__ import annotations

import weakref
from typing import Any

import torch
from torch.utils.weak import WeakIdKeyDictionary

from .. import _hparams, _octopt

_OVERRIDES: WeakIdKeyDictionary = WeakIdKeyDictionary()  # param -> {option: value}
_HELD: WeakIdKeyDictionary = WeakIdKeyDictionary()  # param -> weak reference to the optimizer holding it

# Keys a parameter may override: everything a param group may set.
OVERRIDE_KEYS = _hparams.GROUP_KEYS


def override(target: Any, **options: Any) -> None:
    """Gives one parameter (or every parameter of a module) its own options, e.g. ``bits=32`` to keep an
    embedding's state in 32 bits, or ``block_size=64``. Call it before the optimizer is created (or before
    the parameter's group is added); ``override(p)`` with no options removes the override.

    The options take precedence over the parameter's param group. A hyper-parameter overridden here (``lr``,
    say) is fixed: an lr scheduler that changes the group's ``lr`` does not change it."""
    fn = "override"
    if isinstance(target, torch.nn.Module):
        params = list(target.parameters())
        if not params:
            raise ValueError(f"{fn}: argument 'target' ({type(target).__name__}) has no parameters")
    elif isinstance(target, torch.Tensor):
        params = [target]
    else:
        raise TypeError(
            f"{fn}: argument 'target' must be a torch.Tensor or torch.nn.Module, got {type(target).__name__}"
        )
    for key in options:
        if key not in OVERRIDE_KEYS:
            raise ValueError(f"{fn}: unknown option '{key}' (known: {', '.join(OVERRIDE_KEYS)})")
    for p in params:
        holder = _HELD.get(p)
        if holder is not None and holder() is not None:
            raise ValueError(
                f"{fn}: argument 'target' is already held by an octopt.torch optimizer, whose state "
                "layout is fixed; call override() before creating the optimizer"
            )
    _check_values(options, fn)
    for p in params:
        if options:
            _OVERRIDES[p] = dict(options)
        else:
            _OVERRIDES.pop(p, None)


def get_override(param: torch.Tensor) -> dict:
    """The options set by override() for this parameter ({} when none)."""
    return dict(_OVERRIDES.get(param, {}))


def mark_held(param: torch.Tensor, optimizer: Any) -> None:
    _HELD[param] = weakref.ref(optimizer)


def _check_values(options: dict, fn: str) -> None:
    # the layout options as the core checks them (optim_table.hpp's validate_layout)
    layout = dict(
        bits=8,
        block_size=None,
        min_8bit_size=0,
        first_moment_bits=None,
        initial_accumulator_value=0.0,
        state_map="dynamic",
    )
    layout.update({k: v for k, v in options.items() if k in layout})
    _octopt.validate_layout(_hparams.to_layout(layout, fn), fn)
