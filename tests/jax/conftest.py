"""Shared helpers of the octopt.optax tests: a small problem stepped through optax and through the
framework-neutral NumPy path (octopt.Optimizer), whose results the optax path must reproduce."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

jax = pytest.importorskip("jax", reason="jax is not installed")
pytest.importorskip("optax", reason="optax is not installed")
import jax.numpy as jnp  # noqa: E402
import octopt  # noqa: E402
import octopt.optax as oo  # noqa: E402

if not octopt._octopt.xla_ffi_built():
    pytest.skip("octopt was built without the XLA FFI handler (jaxlib's headers were missing at build time)",
                allow_module_level=True)

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
}


def problem(seed: int = 0, steps: int = 3, shapes: tuple = SHAPES) -> tuple[list, list]:
    """(initial params, gradients per step) as float32 NumPy arrays."""
    rng = np.random.default_rng(seed)
    params = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    grads = [[rng.standard_normal(s).astype(np.float32) for s in shapes] for _ in range(steps)]
    return params, grads


def reference(kind: str, params: list, grads: list, lr: Any = 1e-2, **options: Any) -> octopt.Optimizer:
    """The NumPy path: octopt's optimizer stepped over copies of ``params``."""
    cls, _, core_opts = KINDS[kind]
    opt = cls([p.copy() for p in params], lr=lr, **dict(core_opts, **options))
    for g in grads:
        opt.step(g)
    return opt


def transformation(kind: str, lr: Any = 1e-2, **options: Any) -> Any:
    return getattr(oo, kind)(lr, **dict(KINDS[kind][1], **options))


def as_jax(arrays: list) -> list:
    # "* 1" (exact): a buffer XLA allocated, so that donation can reuse it (a jax array wrapping
    # NumPy memory is copied instead)
    return [jnp.asarray(a) * 1 for a in arrays]


def ulp_distance(a: Any, b: Any, scale: Any = None) -> np.ndarray:
    """|a - b| in units in the last place (float32) of max(|a|, |b|, |scale|)."""
    a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
    m = np.maximum(np.abs(a), np.abs(b))
    if scale is not None:
        m = np.maximum(m, np.abs(np.asarray(scale, np.float32)))
    return np.abs(a.astype(np.float64) - b.astype(np.float64)) / np.spacing(m).astype(np.float64)


def assert_state_equal(state: Any, ref: octopt.Optimizer) -> None:
    """The optax state holds exactly the NumPy path's state arrays."""
    for i, t in enumerate(ref._tensors):
        for spec in t.specs:
            data, absmax = t.buffers[spec.index]
            slot = state.slots[spec.name][i]
            np.testing.assert_array_equal(np.asarray(slot.data).reshape(-1), data.reshape(-1))
            if absmax is not None:
                np.testing.assert_array_equal(np.asarray(slot.absmax), absmax)
