"""Fixtures of the optimizer-family tests (octopt.Optimizer on the CPU): arrays in NumPy or torch,
gradient sequences, state snapshots and their comparisons.

Each helper is a fixture that returns the function, so a test names what it uses in its signature.
Every test in this folder runs with torch and NumPy's BLAS on one thread (``single_threaded_libraries``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest


@pytest.fixture(autouse=True, scope="module")
def _single_threaded(single_threaded_libraries) -> None:
    """torch and NumPy's BLAS on one thread for every module of this folder (tests/conftest.py)."""


def _make(values: np.ndarray, framework: str, dtype: str = "float32") -> Any:
    v = np.ascontiguousarray(values, dtype=np.float32)
    if framework == "numpy":
        return v.astype(dtype)
    import torch

    return torch.from_numpy(v.copy()).to(getattr(torch, dtype))


def _to_numpy(a: Any) -> np.ndarray:
    if isinstance(a, np.ndarray):
        return a.astype(np.float64) if a.dtype.kind == "f" else a.copy()
    t = a.detach().cpu()
    if t.is_floating_point():
        return t.double().numpy()
    return t.numpy().copy()


def _raw(a: Any) -> np.ndarray:
    if isinstance(a, np.ndarray):
        return a.copy()
    import torch

    t = a.detach().cpu()
    if t.dtype in (torch.bfloat16, torch.float16):
        return t.view(torch.int16).numpy().copy()
    return t.numpy().copy()


def _randn(rng: np.random.Generator, shape: tuple, scale: float = 1.0) -> np.ndarray:
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def _grad_sequence(rng: np.random.Generator, shapes: tuple, steps: int) -> list[list[np.ndarray]]:
    return [[_randn(rng, s, 0.2 + 2.0 * rng.random()) for s in shapes] for _ in range(steps)]


def _state_arrays(opt: Any) -> dict[str, np.ndarray]:
    out = {}
    for i, s in enumerate(opt.state_dict()["state"]):
        for name, e in s["slots"].items():
            for part in ("data", "absmax"):
                if part in e:
                    out[f"{i}.{name}.{part}"] = _raw(e[part])
    return out


def _snapshot(opt: Any) -> dict[str, Any]:
    sd = opt.state_dict()
    return {
        "params": [_raw(p) for p in opt.params],
        "state": _state_arrays(opt),
        "steps": [s["step"] for s in sd["state"]],
        "global_step": sd["global_step"],
        "groups": sd["param_groups"],
    }


def _assert_snapshots_equal(a: dict, b: dict) -> None:
    assert len(a["params"]) == len(b["params"])
    for i, (x, y) in enumerate(zip(a["params"], b["params"])):
        np.testing.assert_array_equal(x, y, err_msg=f"param {i}")
    assert a["state"].keys() == b["state"].keys()
    for k in a["state"]:
        np.testing.assert_array_equal(a["state"][k], b["state"][k], err_msg=f"state {k}")
    assert a["steps"] == b["steps"]
    assert a["global_step"] == b["global_step"]
    assert a["groups"] == b["groups"]


def _assert_params_bit_equal(xs: list, ys: list) -> None:
    assert len(xs) == len(ys)
    for i, (x, y) in enumerate(zip(xs, ys)):
        np.testing.assert_array_equal(_raw(x), _raw(y), err_msg=f"param {i}")


@pytest.fixture
def make() -> Callable[..., Any]:
    """``make(values, framework, dtype="float32")``: a fresh C-contiguous copy of ``values`` as a NumPy
    array or a torch CPU tensor of ``dtype`` (rounded to nearest even from float32)."""
    return _make


@pytest.fixture
def to_numpy() -> Callable[[Any], np.ndarray]:
    """``to_numpy(a)``: a copy of a NumPy array or torch tensor, floating point as float64."""
    return _to_numpy


@pytest.fixture
def raw() -> Callable[[Any], np.ndarray]:
    """``raw(a)``: the exact stored values of an array (bf16/fp16 torch tensors as their int16 bits)."""
    return _raw


@pytest.fixture
def grad_sequence() -> Callable[..., list]:
    """``grad_sequence(rng, shapes, steps)``: float32 gradients that vary per step in direction and scale."""
    return _grad_sequence


@pytest.fixture
def state_arrays() -> Callable[[Any], dict]:
    """``state_arrays(opt)``: every array of ``opt.state_dict()`` as exact NumPy copies, keyed
    'tensor.slot.part'."""
    return _state_arrays


@pytest.fixture
def snapshot() -> Callable[[Any], dict]:
    """``snapshot(opt)``: everything observable about an optimizer (params, state arrays, step counts,
    hyper-parameters), to compare with ``assert_snapshots_equal``."""
    return _snapshot


@pytest.fixture
def assert_snapshots_equal() -> Callable[[dict, dict], None]:
    return _assert_snapshots_equal


@pytest.fixture
def assert_params_bit_equal() -> Callable[[list, list], None]:
    """``assert_params_bit_equal(xs, ys)``: the two lists of parameters hold the same bits."""
    return _assert_params_bit_equal


@pytest.fixture(scope="session")
def ref_blockwise(import_file) -> Any:
    """tests/core/reference_blockwise.py: the independent NumPy reference of block-wise quantization."""
    from pathlib import Path

    return import_file(Path(__file__).parent.parent / "core" / "reference_blockwise.py")
