"""Fixtures of the CUDA tests: the optimizers and options they run, a GPU optimizer paired with a CPU
twin, and byte-exact comparisons. The CUDA cases themselves (``cuda_array_case``) come from
tests/conftest.py; every test here is skipped, with the reason, on a machine without a usable GPU."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import octopt
import pytest

# name -> options that make every state slot live and exercise the optional terms
OPTIMIZERS = {
    "Adam": dict(weight_decay=0.01),
    "AdamW": dict(),
    "SGD": dict(momentum=0.9, nesterov=True, weight_decay=0.01),
    "RMSprop": dict(momentum=0.5, centered=True),
    "Adagrad": dict(lr_decay=0.01),
    "Lion": dict(weight_decay=0.1),
    "AdEMAMix": dict(t_alpha=5, t_beta3=5),
    "LAMB": dict(weight_decay=0.01),
    "LARS": dict(weight_decay=0.01),
    "RAdam": dict(weight_decay=0.01, decoupled_weight_decay=True),
    "NAdam": dict(weight_decay=0.01, momentum_decay=0.01),  # mu_product advances on the device
}
# Ragged sizes: one small tensor (32-bit state below min_8bit_size), one past a block boundary
# and one of several tiles.
SIZES = (1000, 4097, 70001)


@pytest.fixture
def optimizer_options() -> dict[str, dict]:
    """Optimizer name -> the options the CUDA tests construct it with."""
    return {k: dict(v) for k, v in OPTIMIZERS.items()}


@pytest.fixture(params=sorted(OPTIMIZERS))
def optimizer_name(request: pytest.FixtureRequest) -> str:
    """Each optimizer of the family in turn."""
    return request.param


def _bytes_of(case, a) -> np.ndarray:
    if case.framework == "torch":
        import torch

        t = a.detach().cpu().contiguous()
        if t.dtype in (torch.bfloat16, torch.float16):
            t = t.view(torch.int16)
        return t.numpy().reshape(-1).view(np.uint8)
    if case.framework == "cupy":
        a = a.get()
    return np.ascontiguousarray(np.asarray(a)).reshape(-1).view(np.uint8)


def _assert_same_bytes(what, a, b):
    mismatch = np.flatnonzero(a != b)
    assert a.shape == b.shape, f"{what}: sizes differ"
    assert mismatch.size == 0, f"{what}: {mismatch.size} bytes differ, first at byte {mismatch[0]}"


def _make_pair(case, name, bits, n_list=SIZES, **extra):
    rng = np.random.default_rng(7)
    values = [rng.standard_normal(n).astype(np.float32) for n in n_list]
    twin = case.cpu_twin()
    gpu = [case.make(v) for v in values]
    cpu = [twin.make(case.to_numpy(x).astype(np.float32)) for x in gpu]
    cls = getattr(octopt, name)
    opts = dict(OPTIMIZERS[name], bits=bits, **extra)
    return twin, gpu, cpu, cls(gpu, **opts), cls(cpu, **opts)


@pytest.fixture
def bytes_of() -> Callable[[Any, Any], np.ndarray]:
    """``bytes_of(case, a)``: the bytes of an array of the case's framework, copied to the host."""
    return _bytes_of


@pytest.fixture
def assert_same_bytes() -> Callable[[str, np.ndarray, np.ndarray], None]:
    """``assert_same_bytes(what, a, b)``: two byte arrays are equal; else says where they first differ."""
    return _assert_same_bytes


@pytest.fixture
def make_pair() -> Callable[..., tuple]:
    """``make_pair(case, name, bits, n_list=SIZES, **extra)``: ``(twin, gpu params, cpu params, gpu
    optimizer, cpu optimizer)``, the same optimizer over the same values on the GPU and on the CPU twin."""
    return _make_pair
