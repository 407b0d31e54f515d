"""Binding a call of a generated ``__init__`` (a class whose signature copies torch's, bitsandbytes' or
torchao's) to its arguments by name, with a TypeError that names the class."""

from __future__ import annotations

import inspect
from typing import Any


def bind_arguments(sig: inspect.Signature, owner: str, self: Any, args: tuple, kwargs: dict) -> dict:
    """The call's arguments by name, defaults filled in, without ``self``."""
    try:
        bound = sig.bind(self, *args, **kwargs)
    except TypeError as e:
        raise TypeError(f"{owner}: {e}") from None
    bound.apply_defaults()
    arguments = dict(bound.arguments)
    arguments.pop("self")
    return arguments
