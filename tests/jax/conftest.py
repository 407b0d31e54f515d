"""Fixtures of the octopt.optax tests: a small problem stepped through optax and through the
framework-neutral NumPy path (octopt.Optimizer), whose results the optax path must reproduce.

Each test module imports jax and optax with ``pytest.importorskip``; every test here is skipped, with
the reason, when octopt was built without the XLA FFI handler. jax is imported only inside fixtures, so
this file loads where jax is missing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import octopt
import pytest

# 8-bit 2-D (ragged last block), 8-bit past a block boundary, tiny (keeps 32-bit state)
SHAPES = ((33, 130), (4097,), (7,))
# optax name -> (octopt class, options that make every state slot live, in both spellings)
KINDS = {
    "adam": (octopt.Adam, {}, {}),
    "adamw": (octopt.AdamW, {}, {}),
    "sgd": (octopt.SGD, dict(momentum=0.9), dict(momentum=0.9)),
    "rmsprop": (octopt.RMSprop, dict(momentum=0.5, centered=True), dict(momentum=0.5, centered=True)),
    "adagrad": (octopt.Adagrad, dict(initial_accumulator_value=0.1), dict(initial_accumulator_value=0.1)),
    "lion": (octopt.Lion, {}, {}),
    "ademamix": (octopt.AdEMAMix, dict(t_alpha=3.0), dict(t_alpha=3.0)),
    "lamb": (octopt.LAMB, {}, {}),
    "lars": (octopt.LARS, {}, {}),
    "radam": (
        octopt.RAdam,
        dict(decoupled_weight_decay=True, weight_decay=0.01),
        dict(decoupled_weight_decay=True, weight_decay=0.01),
    ),
    "nadam": (octopt.NAdam, dict(momentum_decay=0.01), dict(momentum_decay=0.01)),
}


@pytest.fixture(autouse=True)
def _needs_the_xla_handler() -> None:
    if not octopt._octopt.xla_ffi_built():
        pytest.skip("octopt was built without the XLA FFI handler (jaxlib's headers were missing at build time)")


def _problem(seed: int = 0, steps: int = 3, shapes: tuple = SHAPES) -> tuple[list, list]:
    rng = np.random.default_rng(seed)
    params = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    grads = [[rng.standard_normal(s).astype(np.float32) for s in shapes] for _ in range(steps)]
    return params, grads


def _reference(kind: str, params: list, grads: list, lr: Any = 1e-2, **options: Any) -> octopt.Optimizer:
    cls, _, core_opts = KINDS[kind]
    opt = cls([p.copy() for p in params], lr=lr, **dict(core_opts, **options))
    for g in grads:
        opt.step(g)
    return opt


def _transformation(kind: str, lr: Any = 1e-2, **options: Any) -> Any:
    import octopt.optax as oo

    return getattr(oo.torch_style, kind)(lr, **dict(KINDS[kind][1], **options))


def _as_jax(arrays: list) -> list:
    import jax.numpy as jnp

    # "* 1" (exact): a buffer XLA allocated, so that donation can reuse it (a jax array wrapping
    # NumPy memory is copied instead)
    return [jnp.asarray(a) * 1 for a in arrays]


def _ulp_distance(a: Any, b: Any, scale: Any = None) -> np.ndarray:
    a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
    m = np.maximum(np.abs(a), np.abs(b))
    if scale is not None:
        m = np.maximum(m, np.abs(np.asarray(scale, np.float32)))
    return np.abs(a.astype(np.float64) - b.astype(np.float64)) / np.spacing(m).astype(np.float64)


def _assert_state_equal(state: Any, ref: octopt.Optimizer) -> None:
    for i, t in enumerate(ref._tensors):
        for spec in t.specs:
            data, absmax = t.buffers[spec.index]
            slot = state.slot(spec.name)[i]
            np.testing.assert_array_equal(np.asarray(slot.data).reshape(-1), data.reshape(-1))
            if absmax is not None:
                np.testing.assert_array_equal(np.asarray(slot.absmax), absmax)


@pytest.fixture(params=sorted(KINDS))
def kind(request: pytest.FixtureRequest) -> str:
    """Each transformation of octopt.optax in turn, by its optax name."""
    return request.param


@pytest.fixture
def optax_kinds() -> dict:
    """optax name -> (octopt class, options that make every state slot live for optax, for octopt)."""
    return dict(KINDS)


@pytest.fixture
def problem() -> Callable[..., tuple]:
    """``problem(seed=0, steps=3, shapes=SHAPES)``: (initial params, gradients per step) as float32 NumPy
    arrays; SHAPES are a 2-D 8-bit tensor with a ragged last block, one past a block boundary, a tiny one."""
    return _problem


@pytest.fixture
def reference() -> Callable[..., octopt.Optimizer]:
    """``reference(kind, params, grads, lr=1e-2, **options)``: the NumPy path, octopt's optimizer stepped
    over copies of ``params``."""
    return _reference


@pytest.fixture
def transformation() -> Callable[..., Any]:
    """``transformation(kind, lr=1e-2, **options)``: the octopt.optax transformation of that name."""
    return _transformation


@pytest.fixture
def as_jax() -> Callable[[list], list]:
    """``as_jax(arrays)``: jax arrays in buffers XLA allocated (donation can reuse them)."""
    return _as_jax


@pytest.fixture
def ulp_distance() -> Callable[..., np.ndarray]:
    """``ulp_distance(a, b, scale=None)``: |a - b| in float32 ulps of max(|a|, |b|, |scale|)."""
    return _ulp_distance


@pytest.fixture
def assert_state_equal() -> Callable[[Any, octopt.Optimizer], None]:
    """``assert_state_equal(state, ref)``: the optax state holds exactly the NumPy path's state arrays."""
    return _assert_state_equal
