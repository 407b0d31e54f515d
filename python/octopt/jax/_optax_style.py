"""The transformations of octopt.optax in optax's conventions: each takes the arguments of the optax
function of the same name, with its defaults and semantics (``adamw(learning_rate, b1=0.9, b2=0.999,
eps=1e-8, eps_root=0.0, mu_dtype=None, weight_decay=1e-4, mask=None, *, nesterov=False)``), plus octopt's
keyword-only layout options (``bits``, ...; 32-bit state by default). An optax argument whose math the
core does not have raises ValueError naming it when given a value other than optax's default; which ones,
and why, is listed in docs/migrating.md."""

from __future__ import annotations

import inspect
from typing import Any, Callable

import jax
import jax.numpy as jnp

from ._transformation import LAYOUT_DEFAULTS, OPTIONS_DOC, Transformation, make

_P = inspect.Parameter
_EMPTY = _P.empty
# NAdam's momentum schedule mu_t = b1 (1 - 0.5 * 0.96^(t psi)) is b1 at every step once 0.96^psi
# underflows (psi >= ~1.9e4 in double): then torch's NAdam is Adam with optax's Nesterov momentum.
_NESTEROV_DECAY = 1e6
_ADAM_SLOTS = {"exp_avg": "mu", "exp_avg_sq": "nu"}
_STATE_DTYPES = ("float32", "bfloat16", "float16")


def _concrete(v: Any) -> bool:
    return not isinstance(v, jax.core.Tracer)


def _refuse(fn: str, name: str, value: Any, supported: Any, why: str) -> None:
    """ValueError when a concrete ``value`` of an optax argument differs from the one value octopt's core
    supports (a traced value, under inject_hyperparams, was checked concrete when init built it)."""
    if value is None or not _concrete(value):
        return
    if (bool(value) if isinstance(supported, bool) else float(value)) != supported:
        raise ValueError(f"{fn}: argument '{name}'={value!r} is not supported: {why}")


def _state_dtypes(fn: str, arg: str, dtype: Any, layout: dict, slots: tuple) -> dict:
    """optax's mu_dtype/accumulator_dtype: the storage dtype of 32-bit state slots ``slots``."""
    if dtype is None:
        return {}
    try:
        d = jnp.dtype(dtype)
    except TypeError:
        raise TypeError(f"{fn}: argument '{arg}' must be a dtype, got {dtype!r}") from None
    if d.name not in _STATE_DTYPES:
        raise TypeError(f"{fn}: argument '{arg}' must be one of {', '.join(_STATE_DTYPES)} (or None), got {d.name}")
    for key in ("bits", "first_moment_bits"):
        v = layout.get(key)
        if v is not None and _concrete(v) and int(v) != 32:
            raise ValueError(
                f"{fn}: argument '{arg}' sets the dtype of 32-bit state, but {key}={int(v)} stores that state as "
                f"{int(v)}-bit codes; leave '{arg}' None or use {key}=None (32-bit state)"
            )
    return {} if d == jnp.float32 else {k: d for k in slots}


def _factory(name: str, params: list, build: Callable, doc: str, module: str = "octopt.optax") -> Callable:
    """A factory with optax's signature ``params`` [(name, default, keyword_only)] followed by octopt's
    keyword-only ``maximize`` and layout options; ``build(fn, args, layout, maximize)`` makes the
    transformation."""
    fn = f"{module}.{name}"
    sig = inspect.Signature(
        [_P(n, _P.KEYWORD_ONLY if kw else _P.POSITIONAL_OR_KEYWORD, default=d) for n, d, kw in params]
        + [_P("maximize", _P.KEYWORD_ONLY, default=False)]
        + [_P(k, _P.KEYWORD_ONLY, default=v) for k, v in LAYOUT_DEFAULTS.items()],
        return_annotation=Transformation,
    )

    def factory(*args: Any, **kwargs: Any) -> Transformation:
        try:
            bound = sig.bind(*args, **kwargs)
        except TypeError as e:
            raise TypeError(f"{fn}: {e}") from None
        bound.apply_defaults()
        a = dict(bound.arguments)
        layout = {k: a.pop(k) for k in LAYOUT_DEFAULTS}
        maximize = a.pop("maximize")
        return build(fn, a, layout, maximize)

    factory.__name__ = factory.__qualname__ = name
    factory.__module__ = module
    factory.__signature__ = sig  # type: ignore[attr-defined]
    factory.__doc__ = f"{doc} As optax.{'contrib.' if 'contrib' in module else ''}{name}.{OPTIONS_DOC}"
    return factory


_EPS_ROOT_WHY = "octopt's core adds eps outside the square root only"


def _adam_build(decoupled: bool) -> Callable:
    def build(fn: str, a: dict, layout: dict, maximize: bool) -> Transformation:
        _refuse(fn, "eps_root", a["eps_root"], 0.0, _EPS_ROOT_WHY)
        hp = dict(learning_rate=a["learning_rate"], b1=a["b1"], b2=a["b2"], eps=a["eps"])
        hp["weight_decay"] = a["weight_decay"] if decoupled else 0.0
        flags = dict(maximize=maximize)
        if a["nesterov"]:  # optax's Nesterov Adam is torch's NAdam with a constant momentum coefficient b1
            kind = "nadam"
            hp["momentum_decay"] = _NESTEROV_DECAY
            flags["decoupled_weight_decay"] = decoupled
        else:
            kind = "adamw" if decoupled else "adam"
        return make(
            kind,
            fn,
            hp,
            flags,
            layout,
            names=_ADAM_SLOTS,
            state_dtypes=_state_dtypes(fn, "mu_dtype", a["mu_dtype"], layout, (0,)),
            decay_mask=a.get("mask"),
            schedules=("learning_rate", "weight_decay"),
        )

    return build


def _adam_params(nesterov: bool, decoupled: bool) -> list:
    p = [("learning_rate", _EMPTY, False), ("b1", 0.9, False), ("b2", 0.999, False), ("eps", 1e-8, False)]
    p += [("eps_root", 0.0, False), ("mu_dtype", None, False)]
    if decoupled:
        p += [("weight_decay", 1e-4, False), ("mask", None, False)]
    return p + [("nesterov", nesterov, True)]


adam = _factory("adam", _adam_params(False, False), _adam_build(False), "Adam (optax's scale_by_adam).")
adamw = _factory(
    "adamw", _adam_params(False, True), _adam_build(True), "AdamW: Adam with decoupled weight decay (``mask``)."
)
nadam = _factory("nadam", _adam_params(True, False), _adam_build(False), "NAdam: Adam with Nesterov momentum.")
nadamw = _factory(
    "nadamw", _adam_params(True, True), _adam_build(True), "NAdamW: NAdam with decoupled weight decay (``mask``)."
)


def _lion(fn: str, a: dict, layout: dict, maximize: bool) -> Transformation:
    hp = dict(learning_rate=a["learning_rate"], b1=a["b1"], b2=a["b2"], weight_decay=a["weight_decay"])
    return make(
        "lion",
        fn,
        hp,
        dict(maximize=maximize),
        layout,
        names={"exp_avg": "mu"},
        state_dtypes=_state_dtypes(fn, "mu_dtype", a["mu_dtype"], layout, (0,)),
        decay_mask=a["mask"],
        schedules=("learning_rate", "weight_decay"),
    )


lion = _factory(
    "lion",
    [
        ("learning_rate", _EMPTY, False),
        ("b1", 0.9, False),
        ("b2", 0.99, False),
        ("mu_dtype", None, False),
        ("weight_decay", 1e-3, False),
        ("mask", None, False),
    ],
    _lion,
    "Lion (Chen et al. 2023) with decoupled weight decay (``mask``).",
)


def _sgd(fn: str, a: dict, layout: dict, maximize: bool) -> Transformation:
    momentum = a["momentum"]
    hp = dict(learning_rate=a["learning_rate"], momentum=0.0 if momentum is None else momentum)
    flags = dict(maximize=maximize, nesterov=bool(a["nesterov"]) and momentum is not None)
    dtypes = (
        _state_dtypes(fn, "accumulator_dtype", a["accumulator_dtype"], layout, (0,)) if momentum is not None else {}
    )
    return make(
        "sgd",
        fn,
        hp,
        flags,
        layout,
        names={"momentum_buffer": "trace"},
        buffer=momentum is not None,  # optax keeps a trace exactly when momentum is not None
        state_dtypes=dtypes,
    )


sgd = _factory(
    "sgd",
    [
        ("learning_rate", _EMPTY, False),
        ("momentum", None, False),
        ("nesterov", False, False),
        ("accumulator_dtype", None, False),
    ],
    _sgd,
    "SGD with optional (Nesterov) momentum; a momentum buffer exactly when ``momentum`` is not None.",
)


def _rmsprop_momentum(schedule: Callable) -> Callable:
    """optax scales by the learning rate before its trace (t_k = m t_(k-1) + lr_k u_k), torch (the core)
    after (s_k = m s_(k-1) + u_k, step lr_k s_k). With a schedule the two agree when the core's momentum is
    m lr_(k-1) / lr_k: its buffer is then optax's trace over lr_k. A step whose rate is 0 resets it."""

    def derive(count: Any, values: dict) -> dict:
        lr, prev = values["learning_rate"], schedule(jnp.maximum(count - 1, 0))
        ratio = jnp.where(lr > 0, jnp.asarray(prev, jnp.float32) / jnp.where(lr > 0, lr, 1.0), 0.0)
        return dict(values, momentum=jnp.asarray(values["momentum"], jnp.float32) * ratio)

    return derive


def _rmsprop(fn: str, a: dict, layout: dict, maximize: bool) -> Transformation:
    _refuse(fn, "bias_correction", a["bias_correction"], False, "octopt's RMSprop has no bias correction")
    momentum = a["momentum"]
    if momentum is not None:
        _refuse(fn, "nesterov", a["nesterov"], False, "octopt's RMSprop has no Nesterov momentum")
    hp = dict(learning_rate=a["learning_rate"], alpha=a["decay"], eps=a["eps"])
    hp["momentum"] = 0.0 if momentum is None else momentum
    return make(
        "rmsprop",
        fn,
        hp,
        dict(maximize=maximize, centered=bool(a["centered"]), eps_in_sqrt=bool(a["eps_in_sqrt"])),
        layout,
        arg_names={"alpha": "decay"},
        names={"square_avg": "nu", "momentum_buffer": "trace", "grad_avg": "mu"},
        initial={0: [(a["initial_scale"], "initial_scale")]},
        buffer=momentum is not None,
        derive=_rmsprop_momentum(a["learning_rate"]) if momentum is not None and callable(a["learning_rate"]) else None,
    )


rmsprop = _factory(
    "rmsprop",
    [
        ("learning_rate", _EMPTY, False),
        ("decay", 0.9, False),
        ("eps", 1e-8, False),
        ("initial_scale", 0.0, False),
        ("eps_in_sqrt", True, False),
        ("centered", False, False),
        ("momentum", None, False),
        ("nesterov", False, False),
        ("bias_correction", False, False),
    ],
    _rmsprop,
    "RMSprop (optionally centered, with momentum); eps_in_sqrt (optax's default) divides by sqrt(nu + eps), "
    "eps_in_sqrt=False by sqrt(nu) + eps.",
)


def _adagrad(fn: str, a: dict, layout: dict, maximize: bool) -> Transformation:
    # optax divides by sqrt(sum + eps): the sum that starts at initial_accumulator_value + eps, with no
    # eps added after the root
    iav, eps = a["initial_accumulator_value"], a["eps"]
    if _concrete(iav) and _concrete(eps) and float(iav) + float(eps) == 0.0:
        raise ValueError(
            f"{fn}: arguments 'initial_accumulator_value' and 'eps' are both 0: octopt would divide 0 by 0 "
            "where a gradient has been 0 so far (optax returns 0 there); make either positive"
        )
    return make(
        "adagrad",
        fn,
        dict(learning_rate=a["learning_rate"], eps=0.0),
        dict(maximize=maximize),
        layout,
        names={"sum": "sum_of_squares"},
        initial={0: [(iav, "initial_accumulator_value"), (eps, "eps")]},
    )


adagrad = _factory(
    "adagrad",
    [("learning_rate", _EMPTY, False), ("initial_accumulator_value", 0.1, False), ("eps", 1e-7, False)],
    _adagrad,
    "Adagrad: the update divided by sqrt(initial_accumulator_value + eps + sum of squared gradients).",
)


def _lamb(fn: str, a: dict, layout: dict, maximize: bool) -> Transformation:
    _refuse(fn, "eps_root", a["eps_root"], 0.0, _EPS_ROOT_WHY)
    hp = dict(learning_rate=a["learning_rate"], b1=a["b1"], b2=a["b2"], eps=a["eps"], weight_decay=a["weight_decay"])
    return make(
        "lamb",
        fn,
        hp,
        dict(maximize=maximize, bias_correction=True),
        layout,
        names=_ADAM_SLOTS,
        decay_mask=a["mask"],
        schedules=("learning_rate", "weight_decay"),
    )


lamb = _factory(
    "lamb",
    [
        ("learning_rate", _EMPTY, False),
        ("b1", 0.9, False),
        ("b2", 0.999, False),
        ("eps", 1e-6, False),
        ("eps_root", 0.0, False),
        ("weight_decay", 0.0, False),
        ("mask", None, False),
    ],
    _lamb,
    "LAMB (You et al. 2020): the Adam direction plus weight decay (``mask``), scaled by the trust ratio.",
)


def _lars(fn: str, a: dict, layout: dict, maximize: bool) -> Transformation:
    _refuse(fn, "eps", a["eps"], 0.0, "octopt's LARS trust ratio has no eps")
    _refuse(fn, "nesterov", a["nesterov"], False, "octopt's LARS has no Nesterov momentum")
    if a["trust_ratio_mask"] is not True:
        raise ValueError(
            f"{fn}: argument 'trust_ratio_mask' is not supported: octopt's LARS scales every parameter by its "
            "trust ratio (optax's default True is); exclude parameters with optax.multi_transform instead"
        )
    hp = dict(
        learning_rate=a["learning_rate"],
        weight_decay=a["weight_decay"],
        eta=a["trust_coefficient"],
        momentum=a["momentum"],
    )
    return make(
        "lars",
        fn,
        hp,
        dict(maximize=maximize),
        layout,
        arg_names={"eta": "trust_coefficient"},
        names={"momentum_buffer": "trace"},
        buffer=True,  # optax's LARS always keeps its trace
        decay_mask=a["weight_decay_mask"],
        decay_grads=True,
        schedules=("learning_rate", "weight_decay"),
    )


lars = _factory(
    "lars",
    [
        ("learning_rate", _EMPTY, False),
        ("weight_decay", 0.0, False),
        ("weight_decay_mask", True, False),
        ("trust_coefficient", 0.001, False),
        ("eps", 0.0, False),
        ("trust_ratio_mask", True, False),
        ("momentum", 0.9, False),
        ("nesterov", False, False),
    ],
    _lars,
    "LARS (You et al. 2017): weight decay (``weight_decay_mask``), the trust ratio, then momentum.",
)


def _radam_eps(count: Any, values: dict) -> dict:
    # optax divides by sqrt(nu / bc2) + eps, torch (the core) by (sqrt(nu) + eps') / sqrt(bc2): the same
    # with eps' = eps * sqrt(bc2), bc2 = 1 - b2^t at this step t
    t = (count + 1).astype(jnp.float32)
    b2 = jnp.asarray(values["b2"], jnp.float32)
    return dict(values, eps=jnp.asarray(values["eps"], jnp.float32) * jnp.sqrt(1.0 - b2**t))


def _radam(fn: str, a: dict, layout: dict, maximize: bool) -> Transformation:
    _refuse(fn, "eps_root", a["eps_root"], 0.0, _EPS_ROOT_WHY)
    _refuse(fn, "threshold", a["threshold"], 5.0, "octopt's RAdam rectifies while rho_t > 5, as torch")
    _refuse(fn, "nesterov", a["nesterov"], False, "octopt's RAdam has no Nesterov momentum")
    hp = dict(learning_rate=a["learning_rate"], b1=a["b1"], b2=a["b2"], eps=a["eps"])
    return make("radam", fn, hp, dict(maximize=maximize), layout, names=_ADAM_SLOTS, derive=_radam_eps)


radam = _factory(
    "radam",
    [
        ("learning_rate", _EMPTY, False),
        ("b1", 0.9, False),
        ("b2", 0.999, False),
        ("eps", 1e-8, False),
        ("eps_root", 0.0, False),
        ("threshold", 5.0, False),
        ("nesterov", False, True),
    ],
    _radam,
    "RAdam (Liu et al. 2020): Adam with the variance rectification.",
)


def _ademamix(fn: str, a: dict, layout: dict, maximize: bool) -> Transformation:
    _refuse(fn, "eps_root", a["eps_root"], 0.0, _EPS_ROOT_WHY)
    hp = dict(learning_rate=a["learning_rate"], b1=a["b1"], b2=a["b2"], b3=a["b3"], alpha=a["alpha"])
    hp.update(eps=a["eps"], weight_decay=a["weight_decay"])
    return make(
        "ademamix",
        fn,
        hp,
        dict(maximize=maximize),
        layout,
        state_dtypes=_state_dtypes(fn, "mu_dtype", a["mu_dtype"], layout, (0, 1, 2)),
        decay_mask=a["mask"],
        schedules=("learning_rate", "b3", "alpha"),  # optax's b3 and alpha schedulers
    )


ademamix = _factory(
    "ademamix",
    [
        ("learning_rate", _EMPTY, False),
        ("b1", 0.9, False),
        ("b2", 0.999, False),
        ("b3", 0.9999, False),
        ("alpha", 5.0, False),
        ("eps", 1e-8, False),
        ("eps_root", 0.0, False),
        ("mu_dtype", None, False),
        ("weight_decay", 0.0, False),
        ("mask", None, False),
    ],
    _ademamix,
    "AdEMAMix (Pagliardini et al. 2024): ``b3`` and ``alpha`` may be schedules of the step count.",
    module="octopt.optax.contrib",
)


def _adan(fn: str, a: dict, layout: dict, maximize: bool) -> Transformation:
    _refuse(fn, "eps_root", a["eps_root"], 0.0, _EPS_ROOT_WHY)
    hp = dict(learning_rate=a["learning_rate"], b1=a["b1"], b2=a["b2"], b3=a["b3"], eps=a["eps"])
    hp["weight_decay"] = a["weight_decay"]
    # optax adds weight_decay * p to the update before the learning rate: the core's no_prox form
    return make("adan", fn, hp, dict(maximize=maximize, no_prox=True), layout, decay_mask=a["mask"])


adan = _factory(
    "adan",
    [
        ("learning_rate", _EMPTY, False),
        ("b1", 0.98, False),
        ("b2", 0.92, False),
        ("b3", 0.99, False),
        ("eps", 1e-8, False),
        ("eps_root", 0.0, False),
        ("weight_decay", 0.0, False),
        ("mask", None, False),
    ],
    _adan,
    "Adan (Xie et al. 2022, Alg. 1): the gradient-change terms weigh b2, as in the paper and the authors' code "
    "(optax 0.2.8's scale_by_adan weighs them 1 - b2, optax pull request 1715); ``eps_root`` must be 0 (optax's "
    "default is 1e-8), the core adds ``eps`` outside the square root of the bias-corrected n.",
)

OPTAX_STYLE = dict(
    adam=adam,
    adamw=adamw,
    nadam=nadam,
    nadamw=nadamw,
    lion=lion,
    sgd=sgd,
    rmsprop=rmsprop,
    adagrad=adagrad,
    lamb=lamb,
    lars=lars,
    radam=radam,
    adan=adan,
)
CONTRIB = dict(ademamix=ademamix)
