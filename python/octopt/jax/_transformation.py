"""The optax GradientTransformation octopt.optax's factories return, and the fused step."""

from __future__ import annotations

from typing import Any

import optax as _optax

from ._engine import Engine
from ._state import OctoptState


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


def make(kind: str, fn: str, hp: dict, flags: dict, options: dict, **engine: Any) -> Transformation:
    """The transformation of one Engine (see Engine for ``engine``'s keyword arguments)."""
    e = Engine(kind, fn, hp, flags, options, **engine)
    return Transformation(e.init, e.update)


# Layout options (static, keyword-only) of every factory, with their defaults.
LAYOUT_DEFAULTS = dict(
    bits=None,
    block_size=None,
    min_8bit_size=None,
    first_moment_bits=None,
    state_map=None,
    seed=None,
    stochastic_rounding=None,
    stochastic_bf16=False,
)

OPTIONS_DOC = """
    Layout options (static, keyword-only): ``bits`` (32 when None, 8 or 4), ``block_size`` (None: 256 for
    8-bit, 128 for 4-bit), ``min_8bit_size`` (None: 4096; smaller tensors keep 32-bit state),
    ``first_moment_bits``, ``state_map`` (None or "dynamic": bitsandbytes' dynamic maps; "fp8": 8-bit state in
    fp8 e4m3 codes), ``seed``, ``stochastic_rounding`` (None: on for 4-bit state only),
    ``stochastic_bf16``; ``maximize``. ``learning_rate`` may be a schedule (a function of the step count);
    any float hyper-parameter may be a traced array (``optax.inject_hyperparams``)."""
