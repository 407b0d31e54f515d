"""The optimizer family, one class per entry of the core's optimizer table (optim_table.hpp): its name,
summary and defaults come from there. Semantics: PyTorch's reference optimizers where they exist; the
others as their papers define them. ``bits`` (32, 8 or 4) sets the state width."""

from __future__ import annotations

from . import _hparams
from .muon import Muon
from .optimizer import Optimizer


def _make(entry: dict) -> type:
    options = ", ".join(entry["options"])
    doc = f"{entry['summary']}\n\nOptions: {options}; defaults {_hparams.defaults(entry['name'])!r}."
    return type(
        entry["class_name"],
        (Optimizer,),
        {"kind": entry["name"], "defaults": _hparams.defaults(entry["name"]), "__doc__": doc, "__module__": __name__},
    )


# An optimizer whose step leaves a matrix operation to the caller (the table's direction_step: Muon) has a
# class of its own that wraps the core step (muon.py).
ALL = tuple(_make(e) for e in _hparams.TABLE.values() if not e["direction_step"]) + (Muon,)
globals().update({cls.__name__: cls for cls in ALL})
__all__ = [cls.__name__ for cls in ALL]
