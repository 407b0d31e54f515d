"""octopt.optax.torch_style: the transformations in torch's conventions, generated from the core's optimizer
table: ``torch_style.adamw(1e-3, bits=8)`` steps exactly like ``octopt.AdamW(params, lr=1e-3, bits=8)``
(torch.optim's semantics and defaults, every octopt option), with optax's argument names. The ``*8bit``
names of octopt.optax are these with ``bits=8``. See docs/jax.md."""

from __future__ import annotations

import inspect
from typing import Any, Callable

from .. import _hparams
from ._transformation import LAYOUT_DEFAULTS as _LAYOUT_DEFAULTS
from ._transformation import OPTIONS_DOC as _OPTIONS_DOC
from ._transformation import Transformation, make

Number = Any
Schedule = Callable[[Any], Any]
_P = inspect.Parameter
_OPTAX_NAME = {h["key"]: h["optax_key"] for h in _hparams.HPARAMS}
_FLAGS = {h["key"] for h in _hparams.HPARAMS if h["type"] == "flag"}


def _transform(entry: dict, fn_name: Callable[[str], str]) -> Callable:
    """The optax factory of one optimizer of the core's table: ``learning_rate`` (required), the table's
    options in its order under their optax names (``betas`` as b1, b2[, b3]), then keyword-only
    ``maximize`` and the layout options."""
    kind, defaults = entry["name"], _hparams.defaults(entry["name"])
    names: list[tuple[str, Any]] = []  # (optax name, default)
    for key in entry["options"]:
        if key == "maximize":
            continue
        if key == "betas":
            names += [(f"b{i + 1}", b) for i, b in enumerate(defaults["betas"])]
        else:
            names.append(("learning_rate", _P.empty) if key == "lr" else (_OPTAX_NAME.get(key, key), defaults[key]))
    flag_names = {_OPTAX_NAME.get(k, k) for k in _FLAGS}
    sig = inspect.Signature(
        [_P(n, _P.POSITIONAL_OR_KEYWORD, default=d) for n, d in names]
        + [_P("maximize", _P.KEYWORD_ONLY, default=False)]
        + [_P(k, _P.KEYWORD_ONLY, default=v) for k, v in _LAYOUT_DEFAULTS.items()],
        return_annotation=Transformation,
    )

    def factory(*args: Any, **kwargs: Any) -> Transformation:
        try:
            bound = sig.bind(*args, **kwargs)
        except TypeError as e:
            raise TypeError(f"{fn_name(kind)}: {e}") from None
        bound.apply_defaults()
        a = dict(bound.arguments)
        layout = {k: a.pop(k) for k in _LAYOUT_DEFAULTS}
        flags = {k: a.pop(k) for k in list(a) if k in flag_names or k == "maximize"}
        initial = {}
        if "initial_accumulator_value" in a:  # the slots the definition starts there (Adagrad's sum)
            iav = a.pop("initial_accumulator_value")
            for k, slot in enumerate(entry["slots"]):
                if slot[3]:
                    initial[k] = [(iav, "initial_accumulator_value")]
        return make(kind, fn_name(kind), a, flags, layout, initial=initial)

    factory.__name__ = factory.__qualname__ = kind
    factory.__module__ = "octopt.optax.torch_style"
    factory.__signature__ = sig  # type: ignore[attr-defined]
    factory.__doc__ = f"{entry['summary']} As octopt.{entry['class_name']}.{_OPTIONS_DOC}"
    return factory


def eight_bit(kind: str) -> Callable:
    """``kind`` in torch's conventions with 8-bit state: its signature without ``bits`` (so
    optax.inject_hyperparams sees only real hyper-parameters)."""
    name = f"{kind}8bit"
    generic = _transform(_hparams.TABLE[kind], lambda _: f"octopt.optax.{name}")
    sig = inspect.signature(generic)

    def factory(*args: Any, **kwargs: Any) -> Transformation:
        if "bits" in kwargs:
            raise TypeError(
                f"octopt.optax.{name}: unexpected argument 'bits' (use octopt.optax.torch_style.{kind}(bits=...))"
            )
        return generic(*args, bits=8, **kwargs)

    factory.__name__ = factory.__qualname__ = name
    factory.__module__ = "octopt.optax"
    factory.__doc__ = f"{kind} in torch's conventions with 8-bit state (blocks of 256). {generic.__doc__}"
    factory.__signature__ = sig.replace(parameters=[p for p in sig.parameters.values() if p.name != "bits"])
    return factory


GENERIC = {e["name"]: _transform(e, lambda kind: f"octopt.optax.torch_style.{kind}") for e in _hparams.TABLE.values()}
EIGHT_BIT = {f"{name}8bit": eight_bit(name) for name in GENERIC}
