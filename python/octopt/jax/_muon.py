"""octopt.optax.contrib.muon: optax.contrib.muon's signature, defaults and semantics with octopt's quantized
momentum. Like optax, 2-D parameters take Muon and the others AdamW (here octopt.optax.adamw, Nesterov as
optax's), combined by optax.partition. Muon's chain is optax's: the core's momentum step (an XLA FFI call:
optax's bias-corrected momentum and Nesterov term, numerics/rules/muon.hpp), Newton-Schulz in jnp (optax's
Frobenius-preconditioned quintic iteration), the shape scaling, then optax's own add_decayed_weights and
scale_by_learning_rate (XLA fuses those element-wise steps)."""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import optax

from ._call import PARAMS
from ._engine import Engine
from ._optax_style import _EMPTY, _factory, _state_dtypes, adamw

_NS_PRESETS = {"standard": (3.4445, -4.7750, 2.0315)}


def _orthogonalize(x: Any, coeffs: Any, steps: int, eps: float) -> Any:
    """optax's default orthogonalization of one matrix: Frobenius scaling, then the quintic iteration
    f(X) = c0 X + (c1 A + c2 A A) X, A = X X^T, on the wide orientation."""
    tall = x.shape[0] > x.shape[1]
    if tall:
        x = x.T
    x /= jnp.linalg.norm(x, ord="fro") + eps
    c = coeffs.astype(x.dtype)
    for _ in range(steps):
        a = x @ x.T.conj()
        b = c[1] * a + c[2] * a @ a
        x = c[0] * x + b @ x
    return x.T if tall else x


def _shape_scale(u: Any, consistent_rms: Any) -> Any:
    fan_in, fan_out = u.shape
    if consistent_rms is not None:
        return jnp.sqrt(jnp.maximum(fan_in, fan_out)) * consistent_rms * u
    return jnp.sqrt(jnp.maximum(1, fan_out / fan_in)) * u


def _scale_by_muon(fn: str, a: dict, layout: dict, maximize: bool, coeffs: tuple) -> optax.GradientTransformation:
    engine = Engine(
        "muon",
        fn,
        dict(momentum=a["beta"]),
        dict(maximize=maximize, nesterov=bool(a["nesterov"]), bias_correction=True),
        layout,
        names={"momentum_buffer": "mu"},
        state_dtypes=_state_dtypes(fn, "mu_dtype", a["mu_dtype"], layout, (0,)),
    )
    ns = jnp.asarray(coeffs, jnp.float32)
    steps, eps, adaptive, rms = int(a["ns_steps"]), float(a["eps"]), bool(a["adaptive"]), a["consistent_rms"]

    def update(updates: Any, state: Any, params: Any = None, **extra: Any) -> tuple[Any, Any]:
        del params, extra
        # the core writes the direction over its "parameter" operand (PARAMS mode): give it a scratch tree
        scratch = jax.tree_util.tree_map(jnp.zeros_like, updates)
        direction, state = engine._apply(scratch, updates, state, PARAMS, f"{fn}.update", "updates")
        out = jax.tree_util.tree_map(lambda d: _orthogonalize(d, ns, steps, eps), direction)
        if adaptive:  # scaled by the dual norm of the direction (Bernstein et al. 2024)
            out = jax.tree_util.tree_map(lambda d, o: jnp.sum(d.conj() * o) * o, direction, out)
        return jax.tree_util.tree_map(lambda o: _shape_scale(o, rms), out), state

    return optax.GradientTransformationExtraArgs(engine.init, update)


def _muon(fn: str, a: dict, layout: dict, maximize: bool) -> optax.GradientTransformation:
    if a["preconditioning"] != "frobenius":
        raise ValueError(
            f"{fn}: argument 'preconditioning'={a['preconditioning']!r} is not supported: octopt's Muon uses "
            "optax's default Frobenius scaling"
        )
    if a["muon_weight_dimension_numbers"] is not None:
        raise ValueError(
            f"{fn}: argument 'muon_weight_dimension_numbers' is not supported: octopt's Muon steps 2-D matrices "
            "(the others take AdamW, as optax's default)"
        )
    coeffs = a["ns_coeffs"]
    if isinstance(coeffs, str):
        if coeffs not in _NS_PRESETS:
            raise ValueError(f"{fn}: argument 'ns_coeffs' must be a preset in {sorted(_NS_PRESETS)}, got {coeffs!r}")
        coeffs = _NS_PRESETS[coeffs]
    try:
        coeffs = tuple(float(c) for c in coeffs)
    except (TypeError, ValueError):
        raise ValueError(f"{fn}: argument 'ns_coeffs' must be three numbers, got {a['ns_coeffs']!r}") from None
    if len(coeffs) != 3:
        raise ValueError(f"{fn}: argument 'ns_coeffs' must be three numbers, got {a['ns_coeffs']!r}")
    steps = a["ns_steps"]
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
        raise ValueError(f"{fn}: argument 'ns_steps' must be an int >= 0, got {steps!r}")
    eps = a["eps"]
    if not isinstance(eps, (int, float)) or not math.isfinite(eps) or eps < 0:
        raise ValueError(f"{fn}: argument 'eps' must be a finite number >= 0, got {eps!r}")
    muon_chain = optax.chain(
        _scale_by_muon(fn, a, layout, maximize, coeffs),
        optax.add_decayed_weights(a["weight_decay"], a["weight_decay_mask"]),
        optax.scale_by_learning_rate(a["learning_rate"]),
    )
    adam_lr = a["adam_learning_rate"] if a["adam_learning_rate"] is not None else a["learning_rate"]
    adam = adamw(
        adam_lr,
        b1=a["adam_b1"],
        b2=a["adam_b2"],
        eps=eps,
        eps_root=a["adam_eps_root"],
        weight_decay=a["adam_weight_decay"],
        mu_dtype=a["mu_dtype"],
        nesterov=a["nesterov"],
        maximize=maximize,
        **layout,
    )
    labels = lambda params: jax.tree_util.tree_map(lambda x: "muon" if x.ndim == 2 else "adam", params)  # noqa: E731
    return optax.partition({"muon": muon_chain, "adam": adam}, labels)


muon = _factory(
    "muon",
    [
        ("learning_rate", _EMPTY, False),
        ("ns_coeffs", (3.4445, -4.7750, 2.0315), False),
        ("ns_steps", 5, False),
        ("beta", 0.95, False),
        ("eps", 1e-8, False),
        ("weight_decay", 0.0, False),
        ("weight_decay_mask", None, False),
        ("mu_dtype", None, False),
        ("nesterov", True, True),
        ("adaptive", False, True),
        ("preconditioning", "frobenius", True),
        ("adam_b1", 0.9, True),
        ("adam_b2", 0.999, True),
        ("adam_eps_root", 0.0, True),
        ("adam_weight_decay", 0.0, True),
        ("adam_learning_rate", None, True),
        ("muon_weight_dimension_numbers", None, True),
        ("consistent_rms", None, True),
    ],
    _muon,
    "Muon (Jordan et al. 2024) on 2-D parameters with quantized momentum; AdamW on the others.",
    module="octopt.optax.contrib",
)
