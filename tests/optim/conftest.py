"""Shared helpers of the optimizer-family tests: arrays in NumPy or torch, state snapshots, small problems."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

# Shapes used by most tests: one tensor past a block boundary (4097 = 16 blocks of 256 + 1) and a
# 2-D one whose size (2145) is no multiple of any block size.
SHAPES = ((4097,), (33, 65))


def torch_or_skip() -> Any:
    import pytest

    return pytest.importorskip("torch")


@contextlib.contextmanager
def torch_single_thread() -> Iterator[None]:
    """torch on one thread: on a small shared machine its thread pool costs more than it gains."""
    try:
        import torch
    except ImportError:
        yield
        return
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(old)


@contextlib.contextmanager
def blas_single_thread() -> Iterator[None]:
    """NumPy's BLAS on one thread. OpenBLAS workers spin between calls and starve octopt's own pool on a
    small machine (a 0.1 s training loop took 9 s); limiting BLAS keeps the timings of these tests stable."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        yield
        return
    with threadpool_limits(1):
        yield


@contextlib.contextmanager
def single_threaded_libraries() -> Iterator[None]:
    """torch and BLAS on one thread each, for a module's tests (octopt keeps its own pool)."""
    with torch_single_thread(), blas_single_thread():
        yield


@pytest.fixture(autouse=True, scope="module")
def _single_threaded_libraries() -> Iterator[None]:
    """Imported by the optimizer test modules: BLAS and torch on one thread, so their spinning
    worker threads do not starve octopt's pool on a 2-core machine."""
    with single_threaded_libraries():
        yield


def randn(rng: np.random.Generator, shape: tuple, scale: float = 1.0) -> np.ndarray:
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def make(values: np.ndarray, framework: str, dtype: str = "float32") -> Any:
    """A fresh C-contiguous copy of `values` as a NumPy array or a torch CPU tensor of `dtype`."""
    v = np.ascontiguousarray(values, dtype=np.float32)
    if framework == "numpy":
        return v.astype(dtype)
    import torch

    return torch.from_numpy(v.copy()).to(getattr(torch, dtype))


def to_numpy(a: Any) -> np.ndarray:
    """A float copy (float64 for floats) of any array, NumPy or torch, whatever its dtype."""
    if isinstance(a, np.ndarray):
        return a.astype(np.float64) if a.dtype.kind == "f" else a.copy()
    t = a.detach().cpu()
    if t.is_floating_point():
        return t.double().numpy()
    return t.numpy().copy()


def raw(a: Any) -> np.ndarray:
    """The exact stored values of an array (bf16/fp16 torch tensors as their uint16 bit patterns)."""
    if isinstance(a, np.ndarray):
        return a.copy()
    import torch

    t = a.detach().cpu()
    if t.dtype in (torch.bfloat16, torch.float16):
        return t.view(torch.int16).numpy().copy()
    return t.numpy().copy()


def grad_sequence(rng: np.random.Generator, shapes: tuple, steps: int) -> list[list[np.ndarray]]:
    """Random gradients that vary per step in direction and in scale."""
    return [[randn(rng, s, 0.2 + 2.0 * rng.random()) for s in shapes] for _ in range(steps)]


def state_arrays(opt: Any) -> dict[str, np.ndarray]:
    """Every array of opt.state_dict() as exact NumPy copies, keyed 'tensor.slot.part'."""
    out = {}
    for i, s in enumerate(opt.state_dict()["state"]):
        for name, e in s["slots"].items():
            for part in ("data", "absmax"):
                if part in e:
                    out[f"{i}.{name}.{part}"] = raw(e[part])
    return out


def snapshot(opt: Any) -> dict[str, Any]:
    """Everything observable about an optimizer: params, state arrays, step counts, hyper-parameters."""
    sd = opt.state_dict()
    return {
        "params": [raw(p) for p in opt.params],
        "state": state_arrays(opt),
        "steps": [s["step"] for s in sd["state"]],
        "global_step": sd["global_step"],
        "groups": sd["param_groups"],
    }


def assert_snapshots_equal(a: dict, b: dict) -> None:
    assert len(a["params"]) == len(b["params"])
    for i, (x, y) in enumerate(zip(a["params"], b["params"])):
        np.testing.assert_array_equal(x, y, err_msg=f"param {i}")
    assert a["state"].keys() == b["state"].keys()
    for k in a["state"]:
        np.testing.assert_array_equal(a["state"][k], b["state"][k], err_msg=f"state {k}")
    assert a["steps"] == b["steps"]
    assert a["global_step"] == b["global_step"]
    assert a["groups"] == b["groups"]


def assert_params_bit_equal(xs: list, ys: list) -> None:
    assert len(xs) == len(ys)
    for i, (x, y) in enumerate(zip(xs, ys)):
        np.testing.assert_array_equal(raw(x), raw(y), err_msg=f"param {i}")


class Quadratic:
    """f(X) = ||A X - B||^2 / rows, for a matrix parameter X; gradient 2 A^T (A X - B) / rows."""

    def __init__(self, seed: int = 0, rows: int = 96, inner: int = 64, cols: int = 80):
        rng = np.random.default_rng(seed)
        self.A = (rng.standard_normal((rows, inner)) / np.sqrt(inner)).astype(np.float32)
        self.B = rng.standard_normal((rows, cols)).astype(np.float32)
        self.x0 = rng.standard_normal((inner, cols)).astype(np.float32)
        self.rows = rows

    def loss(self, x: Any) -> float:
        r = self.A.astype(np.float64) @ to_numpy(x).reshape(self.x0.shape) - self.B
        return float((r * r).sum() / self.rows)

    def grad(self, x: Any) -> np.ndarray:
        xv = to_numpy(x).reshape(self.x0.shape).astype(np.float32)
        return (2.0 / self.rows) * (self.A.T @ (self.A @ xv - self.B)).astype(np.float32)


def run_quadratic(cls: type, problem: Quadratic, steps: int, **kw: Any) -> tuple[float, float]:
    """(initial loss, final loss) of `steps` steps of cls on the problem."""
    x = problem.x0.copy()
    opt = cls([x], **kw)
    with blas_single_thread():
        first = problem.loss(x)
        for _ in range(steps):
            opt.step([problem.grad(x)])
        return first, problem.loss(x)


class DigitsMLP:
    """A 64-h-10 ReLU network on scikit-learn's digits, forward and backward in NumPy float32."""

    def __init__(self, hidden: int = 128, seed: int = 0):
        from sklearn.datasets import load_digits

        x, y = load_digits(return_X_y=True)
        self.X = (x / 16.0).astype(np.float32)
        self.y = y
        self.Y = np.eye(10, dtype=np.float32)[y]
        rng = np.random.default_rng(seed)
        self.p0 = [
            (rng.standard_normal((64, hidden)) * np.sqrt(2 / 64)).astype(np.float32),
            np.zeros(hidden, np.float32),
            (rng.standard_normal((hidden, 10)) * np.sqrt(1 / hidden)).astype(np.float32),
            np.zeros(10, np.float32),
        ]

    def _forward(self, ps: list, x: np.ndarray) -> tuple:
        w1, b1, w2, b2 = ps
        pre = x @ w1 + b1
        h = np.maximum(pre, 0)
        z = h @ w2 + b2
        e = np.exp(z - z.max(1, keepdims=True))
        return pre, h, e / e.sum(1, keepdims=True)

    def loss(self, ps: list) -> float:
        prob = self._forward(ps, self.X)[2]
        return float(-np.log(prob[np.arange(len(self.y)), self.y] + 1e-12).mean())

    def grads(self, ps: list, idx: np.ndarray) -> list:
        x = self.X[idx]
        pre, h, prob = self._forward(ps, x)
        dz = (prob - self.Y[idx]) / len(idx)
        dh = dz @ ps[2].T
        dh[pre <= 0] = 0
        return [x.T @ dh, dh.sum(0), h.T @ dz, dz.sum(0)]

    def train(self, cls: type, epochs: int, batch: int = 64, **kw: Any) -> float:
        """Final full-data loss after `epochs` epochs of mini-batch training (same batches every run)."""
        ps = [p.copy() for p in self.p0]
        opt = cls(ps, **kw)
        rng = np.random.default_rng(1)
        with blas_single_thread():
            for _ in range(epochs):
                perm = rng.permutation(len(self.X))
                for i in range(0, len(perm), batch):
                    opt.step(self.grads(ps, perm[i : i + batch]))
            return self.loss(ps)
