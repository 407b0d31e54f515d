"""octopt.optax: optax GradientTransformations whose state is block-wise quantized (uint8 codes +
float32 absmax per block), stepped by octopt's native core through an XLA FFI handler.

Semantics and defaults are those of octopt's optimizers (PyTorch's where torch has the optimizer),
with optax's argument names: ``adamw8bit(1e-3)`` steps exactly like ``octopt.AdamW(params, lr=1e-3)``.
See docs/jax.md."""

from __future__ import annotations

import inspect
from typing import Any, Callable

import optax as _optax

from ._engine import Engine
from ._state import OctoptState, SlotState

__all__ = [
    "OctoptState", "SlotState", "Transformation", "adagrad", "adagrad8bit", "adam", "adam8bit", "adamw",
    "adamw8bit", "ademamix", "ademamix8bit", "lamb", "lamb8bit", "lars", "lars8bit", "lion", "lion8bit",
    "rmsprop", "rmsprop8bit", "sgd", "sgd8bit", "step",
]

class Transformation(_optax.GradientTransformation):
    """An optax GradientTransformation (``init``, ``update``) plus ``step``: the fused update of
    parameters in place (see ``octopt.optax.step``)."""

    def step(self, params: Any, grads: Any, state: OctoptState) -> tuple[Any, OctoptState]:
        return self.update.__self__.fused_step(params, grads, state)


def step(tx: Transformation, params: Any, grads: Any, state: OctoptState) -> tuple[Any, OctoptState]:
    """(new params, new state) in one jitted call that donates ``params`` and ``state``: the new
    parameters are written over the old buffers (which must not be used afterwards), bit for bit as
    the NumPy path ``octopt.Optimizer.step`` writes them."""
    if not isinstance(tx, Transformation):
        raise TypeError(f"octopt.optax.step: argument 'tx' must be an octopt.optax transformation, got "
                        f"{type(tx).__name__}")
    return tx.step(params, grads, state)


def _make(kind: str, fn: str, hp: dict, flags: dict, options: dict) -> Transformation:
    engine = Engine(kind, f"octopt.optax.{fn}", hp, flags, options)
    return Transformation(engine.init, engine.update)


def _layout_options(bits, block_size, min_8bit_size, first_moment_bits, seed, stochastic_rounding,
                    stochastic_bf16) -> dict:
    return dict(bits=bits, block_size=block_size, min_8bit_size=min_8bit_size, first_moment_bits=first_moment_bits,
                seed=seed, stochastic_rounding=stochastic_rounding, stochastic_bf16=stochastic_bf16)


_OPTIONS_DOC = """
    Layout options (static): ``bits`` (32 when None, 8 or 4), ``block_size`` (None: 256 for 8-bit,
    128 for 4-bit), ``min_8bit_size`` (None: 4096; smaller tensors keep 32-bit state),
    ``first_moment_bits``, ``seed``, ``stochastic_rounding`` (None: on for 4-bit state only),
    ``stochastic_bf16``. ``learning_rate`` may be a schedule (a function of the step count); any
    float hyper-parameter may be a traced array (``optax.inject_hyperparams``)."""

Number = Any
Schedule = Callable[[Any], Any]


def adam(learning_rate: Number | Schedule, b1: Number = 0.9, b2: Number = 0.999, eps: Number = 1e-8,
         weight_decay: Number = 0.0, *, maximize: bool = False, bits=None, block_size=None, min_8bit_size=None,
         first_moment_bits=None, seed=None, stochastic_rounding=None, stochastic_bf16=False) -> Transformation:
    """torch.optim.Adam semantics (L2 weight decay added to the gradient), as octopt.Adam."""
    return _make("adam", "adam", dict(learning_rate=learning_rate, b1=b1, b2=b2, eps=eps, weight_decay=weight_decay),
                 dict(maximize=maximize), _layout_options(bits, block_size, min_8bit_size, first_moment_bits, seed,
                                                          stochastic_rounding, stochastic_bf16))


def adamw(learning_rate: Number | Schedule, b1: Number = 0.9, b2: Number = 0.999, eps: Number = 1e-8,
          weight_decay: Number = 1e-2, *, maximize: bool = False, bits=None, block_size=None, min_8bit_size=None,
          first_moment_bits=None, seed=None, stochastic_rounding=None, stochastic_bf16=False) -> Transformation:
    """torch.optim.AdamW semantics (decoupled decay applied before the update), as octopt.AdamW."""
    return _make("adamw", "adamw", dict(learning_rate=learning_rate, b1=b1, b2=b2, eps=eps,
                                        weight_decay=weight_decay),
                 dict(maximize=maximize), _layout_options(bits, block_size, min_8bit_size, first_moment_bits, seed,
                                                          stochastic_rounding, stochastic_bf16))


def sgd(learning_rate: Number | Schedule, momentum: Number = 0.0, dampening: Number = 0.0,
        weight_decay: Number = 0.0, nesterov: bool = False, *, maximize: bool = False, bits=None, block_size=None,
        min_8bit_size=None, first_moment_bits=None, seed=None, stochastic_rounding=None,
        stochastic_bf16=False) -> Transformation:
    """torch.optim.SGD semantics (the momentum buffer starts at the first gradient), as octopt.SGD."""
    return _make("sgd", "sgd", dict(learning_rate=learning_rate, momentum=momentum, dampening=dampening,
                                    weight_decay=weight_decay),
                 dict(nesterov=nesterov, maximize=maximize),
                 _layout_options(bits, block_size, min_8bit_size, first_moment_bits, seed, stochastic_rounding,
                                 stochastic_bf16))


def rmsprop(learning_rate: Number | Schedule, alpha: Number = 0.99, eps: Number = 1e-8, weight_decay: Number = 0.0,
            momentum: Number = 0.0, centered: bool = False, *, maximize: bool = False, bits=None, block_size=None,
            min_8bit_size=None, first_moment_bits=None, seed=None, stochastic_rounding=None,
            stochastic_bf16=False) -> Transformation:
    """torch.optim.RMSprop semantics (optional momentum and centering), as octopt.RMSprop."""
    return _make("rmsprop", "rmsprop", dict(learning_rate=learning_rate, alpha=alpha, eps=eps,
                                            weight_decay=weight_decay, momentum=momentum),
                 dict(centered=centered, maximize=maximize),
                 _layout_options(bits, block_size, min_8bit_size, first_moment_bits, seed, stochastic_rounding,
                                 stochastic_bf16))


def adagrad(learning_rate: Number | Schedule, lr_decay: Number = 0.0, weight_decay: Number = 0.0,
            initial_accumulator_value: Number = 0.0, eps: Number = 1e-10, *, maximize: bool = False, bits=None,
            block_size=None, min_8bit_size=None, first_moment_bits=None, seed=None, stochastic_rounding=None,
            stochastic_bf16=False) -> Transformation:
    """torch.optim.Adagrad semantics, as octopt.Adagrad (initial_accumulator_value is read at init)."""
    return _make("adagrad", "adagrad", dict(learning_rate=learning_rate, lr_decay=lr_decay, weight_decay=weight_decay,
                                            initial_accumulator_value=initial_accumulator_value, eps=eps),
                 dict(maximize=maximize), _layout_options(bits, block_size, min_8bit_size, first_moment_bits, seed,
                                                          stochastic_rounding, stochastic_bf16))


def lion(learning_rate: Number | Schedule, b1: Number = 0.9, b2: Number = 0.99, weight_decay: Number = 0.0, *,
         maximize: bool = False, bits=None, block_size=None, min_8bit_size=None, first_moment_bits=None, seed=None,
         stochastic_rounding=None, stochastic_bf16=False) -> Transformation:
    """Lion (Chen et al. 2023), as octopt.Lion."""
    return _make("lion", "lion", dict(learning_rate=learning_rate, b1=b1, b2=b2, weight_decay=weight_decay),
                 dict(maximize=maximize), _layout_options(bits, block_size, min_8bit_size, first_moment_bits, seed,
                                                          stochastic_rounding, stochastic_bf16))


def ademamix(learning_rate: Number | Schedule, b1: Number = 0.9, b2: Number = 0.999, b3: Number = 0.9999,
             alpha: Number = 5.0, eps: Number = 1e-8, weight_decay: Number = 1e-2, t_alpha: Number | None = None,
             t_beta3: Number | None = None, *, maximize: bool = False, bits=None, block_size=None,
             min_8bit_size=None, first_moment_bits=None, seed=None, stochastic_rounding=None,
             stochastic_bf16=False) -> Transformation:
    """AdEMAMix (Pagliardini et al. 2024), as octopt.AdEMAMix."""
    return _make("ademamix", "ademamix", dict(learning_rate=learning_rate, b1=b1, b2=b2, b3=b3, alpha=alpha, eps=eps,
                                              weight_decay=weight_decay, t_alpha=t_alpha, t_beta3=t_beta3),
                 dict(maximize=maximize), _layout_options(bits, block_size, min_8bit_size, first_moment_bits, seed,
                                                          stochastic_rounding, stochastic_bf16))


def lamb(learning_rate: Number | Schedule, b1: Number = 0.9, b2: Number = 0.999, eps: Number = 1e-6,
         weight_decay: Number = 0.0, bias_correction: bool = True, *, maximize: bool = False, bits=None,
         block_size=None, min_8bit_size=None, first_moment_bits=None, seed=None, stochastic_rounding=None,
         stochastic_bf16=False) -> Transformation:
    """LAMB (You et al. 2020), as octopt.LAMB. Parameters must not be sharded (the trust ratio needs
    the whole tensor's norm)."""
    return _make("lamb", "lamb", dict(learning_rate=learning_rate, b1=b1, b2=b2, eps=eps, weight_decay=weight_decay),
                 dict(bias_correction=bias_correction, maximize=maximize),
                 _layout_options(bits, block_size, min_8bit_size, first_moment_bits, seed, stochastic_rounding,
                                 stochastic_bf16))


def lars(learning_rate: Number | Schedule, momentum: Number = 0.9, weight_decay: Number = 0.0, eta: Number = 1e-3,
         *, maximize: bool = False, bits=None, block_size=None, min_8bit_size=None, first_moment_bits=None,
         seed=None, stochastic_rounding=None, stochastic_bf16=False) -> Transformation:
    """LARS (You et al. 2017), as octopt.LARS. Parameters must not be sharded."""
    return _make("lars", "lars", dict(learning_rate=learning_rate, momentum=momentum, weight_decay=weight_decay,
                                      eta=eta),
                 dict(maximize=maximize), _layout_options(bits, block_size, min_8bit_size, first_moment_bits, seed,
                                                          stochastic_rounding, stochastic_bf16))


def _eight_bit(generic: Callable) -> Callable:
    """``generic`` with 8-bit state: its signature without ``bits`` (so optax.inject_hyperparams
    sees only real hyper-parameters)."""
    sig = inspect.signature(generic)

    def factory(*args: Any, **kwargs: Any) -> Transformation:
        if "bits" in kwargs:
            raise TypeError(f"octopt.optax.{generic.__name__}8bit: unexpected argument 'bits' (use "
                            f"octopt.optax.{generic.__name__}(bits=...))")
        tx = generic(*args, bits=8, **kwargs)
        return tx

    factory.__name__ = factory.__qualname__ = f"{generic.__name__}8bit"
    factory.__doc__ = f"{generic.__name__} with 8-bit state (blocks of 256). {generic.__doc__}"
    factory.__signature__ = sig.replace(parameters=[p for p in sig.parameters.values() if p.name != "bits"])
    return factory


for _generic in (adam, adamw, sgd, rmsprop, adagrad, lion, ademamix, lamb, lars):
    _generic.__doc__ += _OPTIONS_DOC
adam8bit = _eight_bit(adam)
adamw8bit = _eight_bit(adamw)
sgd8bit = _eight_bit(sgd)
rmsprop8bit = _eight_bit(rmsprop)
adagrad8bit = _eight_bit(adagrad)
lion8bit = _eight_bit(lion)
ademamix8bit = _eight_bit(ademamix)
lamb8bit = _eight_bit(lamb)
lars8bit = _eight_bit(lars)
