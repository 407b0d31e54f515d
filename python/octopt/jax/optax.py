"""octopt.optax: optax GradientTransformations whose state is block-wise quantized (uint8 codes +
float32 absmax per block), stepped by octopt's native core through an XLA FFI handler.

Semantics and defaults are those of octopt's optimizers (PyTorch's where torch has the optimizer),
with optax's argument names: ``adamw8bit(1e-3)`` steps exactly like ``octopt.AdamW(params, lr=1e-3)``.
See docs/jax.md."""

from __future__ import annotations

import inspect
from typing import Any, Callable

import optax as _optax

from .. import _hparams
from ._engine import Engine
from ._state import OctoptState, SlotState


class Transformation(_optax.GradientTransformationExtraArgs):
    """An optax GradientTransformationExtraArgs (``init``, ``update`` taking and ignoring extra keyword
    arguments) plus ``step``: the fused update of parameters in place (see ``octopt.optax.step``)."""

    def step(self, params: Any, grads: Any, state: OctoptState) -> tuple[Any, OctoptState]:
        return self.update.__self__.fused_step(params, grads, state)


def step(tx: Transformation, params: Any, grads: Any, state: OctoptState) -> tuple[Any, OctoptState]:
    """(new params, new state) in one jitted call that donates ``params`` and ``state``: the new
    parameters are written over the old buffers (which must not be used afterwards), bit for bit as
    the NumPy path ``octopt.Optimizer.step`` writes them."""
    if not isinstance(tx, Transformation):
        raise TypeError(
            f"octopt.optax.step: argument 'tx' must be an octopt.optax transformation, got {type(tx).__name__}"
        )
    return tx.step(params, grads, state)


def _make(kind: str, fn: str, hp: dict, flags: dict, options: dict) -> Transformation:
    engine = Engine(kind, f"octopt.optax.{fn}", hp, flags, options)
    return Transformation(engine.init, engine.update)


def _layout_options(
    bits, block_size, min_8bit_size, first_moment_bits, seed, stochastic_rounding, stochastic_bf16
) -> dict:
    return dict(
        bits=bits,
        block_size=block_size,
        min_8bit_size=min_8bit_size,
        first_moment_bits=first_moment_bits,
        seed=seed,
        stochastic_rounding=stochastic_rounding,
        stochastic_bf16=stochastic_bf16,
    )


_OPTIONS_DOC = """
    Layout options (static): ``bits`` (32 when None, 8 or 4), ``block_size`` (None: 256 for 8-bit,
    128 for 4-bit), ``min_8bit_size`` (None: 4096; smaller tensors keep 32-bit state),
    ``first_moment_bits``, ``seed``, ``stochastic_rounding`` (None: on for 4-bit state only),
    ``stochastic_bf16``. ``learning_rate`` may be a schedule (a function of the step count); any
    float hyper-parameter may be a traced array (``optax.inject_hyperparams``)."""

Number = Any
Schedule = Callable[[Any], Any]
_P = inspect.Parameter
_LAYOUT_DEFAULTS = dict(
    bits=None,
    block_size=None,
    min_8bit_size=None,
    first_moment_bits=None,
    seed=None,
    stochastic_rounding=None,
    stochastic_bf16=False,
)
_OPTAX_NAME = {h["key"]: h["optax_key"] for h in _hparams.HPARAMS}
_FLAGS = {h["key"] for h in _hparams.HPARAMS if h["type"] == "flag"}


def _transform(entry: dict) -> Callable:
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
            raise TypeError(f"octopt.optax.{kind}: {e}") from None
        bound.apply_defaults()
        a = dict(bound.arguments)
        layout = {k: a.pop(k) for k in _LAYOUT_DEFAULTS}
        flags = {k: a.pop(k) for k in list(a) if k in flag_names or k == "maximize"}
        return _make(kind, kind, a, flags, layout)

    factory.__name__ = factory.__qualname__ = kind
    factory.__module__ = "octopt.optax"
    factory.__signature__ = sig  # type: ignore[attr-defined]
    factory.__doc__ = f"{entry['summary']} As octopt.{entry['class_name']}.{_OPTIONS_DOC}"
    return factory


def _eight_bit(generic: Callable) -> Callable:
    """``generic`` with 8-bit state: its signature without ``bits`` (so optax.inject_hyperparams
    sees only real hyper-parameters)."""
    sig = inspect.signature(generic)

    def factory(*args: Any, **kwargs: Any) -> Transformation:
        if "bits" in kwargs:
            raise TypeError(
                f"octopt.optax.{generic.__name__}8bit: unexpected argument 'bits' (use "
                f"octopt.optax.{generic.__name__}(bits=...))"
            )
        tx = generic(*args, bits=8, **kwargs)
        return tx

    factory.__name__ = factory.__qualname__ = f"{generic.__name__}8bit"
    factory.__doc__ = f"{generic.__name__} with 8-bit state (blocks of 256). {generic.__doc__}"
    factory.__signature__ = sig.replace(parameters=[p for p in sig.parameters.values() if p.name != "bits"])
    return factory


_GENERIC = {e["name"]: _transform(e) for e in _hparams.TABLE.values()}
globals().update(_GENERIC)
globals().update({f"{name}8bit": _eight_bit(f) for name, f in _GENERIC.items()})
__all__ = [
    "OctoptState",
    "SlotState",
    "Transformation",
    "step",
    *sorted(_GENERIC),
    *sorted(f"{name}8bit" for name in _GENERIC),
]
