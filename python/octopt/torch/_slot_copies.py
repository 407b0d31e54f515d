"""Copies that fill one state slot of an octopt.torch parameter: from a slot given in any layout (converted
and checked by the core, python/octopt/_slot_convert.py) or from the slot's initial value. Each import key map
(octopt's, bitsandbytes', DCP's) gathers them; load_state_dict makes them once everything is checked."""

from __future__ import annotations

from typing import Any

import torch

from .. import _slot_convert
from ..optimizer import _TensorState


def initial(core: Any, t: _TensorState, names: list[str]) -> list:
    """Copies that reset the named slots of t to their initial value."""
    fresh = core.initial_buffers(t)
    out = []
    for spec in t.specs:
        if spec.name in names:
            for dst, src in zip(t.buffers[spec.index], fresh[spec.index]):
                if dst is not None:
                    out.append((dst, src))
    return out


def tensor(v: Any, where: str, what: str) -> torch.Tensor:
    if not isinstance(v, torch.Tensor):
        raise TypeError(f"{where}: '{what}' must be a tensor, got {type(v).__name__}")
    if v.layout != torch.strided or v.is_complex():
        raise ValueError(f"{where}: '{what}' must be a dense real tensor")
    return v.detach()


def into(t: _TensorState, spec: Any, src: Any, values: Any, absmax: Any, where: str, keys: list) -> list:
    """Copies that put a slot given in layout ``src`` (values, and absmax when quantized) into slot ``spec``
    of t: the core checks it and converts it to this optimizer's layout."""
    data, am = t.buffers[spec.index]
    mine = t._owner._plan.slot_form(t._index, spec.index)
    v, a = _slot_convert.convert(t.info.size, src, values, absmax, mine, where, keys)
    out = [(data, torch.from_numpy(v))]
    if am is not None:
        out.append((am, torch.from_numpy(a)))
    return out
