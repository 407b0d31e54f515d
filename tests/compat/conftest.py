"""Fixtures of the compatibility namespaces' tests (octopt.bnb, octopt.torchao)."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

DATA = Path(__file__).parent / "data"


@pytest.fixture(scope="session")
def make_bnb_states(import_file) -> ModuleType:
    """data/make_bnb_states.py, the generator of data/bnb_8bit_states.pt: bitsandbytes' cases, the
    gradients of its runs and the path of the stored fixture (importing it needs torch, not bitsandbytes)."""
    return import_file(DATA / "make_bnb_states.py")


@pytest.fixture(scope="session")
def make_torchao_runs(import_file) -> ModuleType:
    """data/make_torchao_runs.py, the generator of data/torchao_runs.pt."""
    return import_file(DATA / "make_torchao_runs.py")


@pytest.fixture
def bnb(import_optional) -> Any:
    """bitsandbytes, for the live comparisons; skipped where it does not import."""
    module = import_optional("bitsandbytes")
    if module is None:
        pytest.skip("bitsandbytes is not importable")
    return module


@pytest.fixture
def torchao_optim(import_optional) -> Any:
    """torchao.optim, for the live comparisons; skipped where it does not import."""
    module = import_optional("torchao.optim")
    if module is None:
        pytest.skip("torchao is not importable")
    return module


@pytest.fixture
def fresh_manager() -> Any:
    """GlobalOptimManager with no overrides, before and after the test (it is process-wide)."""
    from octopt.bnb.optim import GlobalOptimManager

    mng = GlobalOptimManager.get_instance()
    mng.initialize()
    yield mng
    mng.initialize()


@pytest.fixture
def train(make_bnb_states) -> Any:
    """``train(optim_module, name, steps, cases, params=None)``: the parameters after `steps` steps of the
    fixture's deterministic gradients (from the fixture's initial parameters unless given)."""
    import torch

    def run(optim: Any, name: str, steps: int, cases: dict, params: list | None = None) -> list:
        params = [torch.nn.Parameter(p) for p in (params or make_bnb_states.initial_params())]
        make_bnb_states.run(optim, name, params, range(steps), cases)
        return params

    return run


@pytest.fixture(autouse=True, scope="module")
def _single_threaded(single_threaded_libraries) -> None:
    """torch and NumPy's BLAS on one thread (tests/conftest.py): a small shared machine is faster so."""
