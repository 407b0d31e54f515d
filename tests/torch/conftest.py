"""Fixtures of the octopt.torch tests."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest


@pytest.fixture(scope="session")
def make_bnb_state(import_file) -> ModuleType:
    """data/make_bnb_state.py, the generator of data/bnb_adam8bit_state.pt: bitsandbytes' cases, the
    gradients of its run and the path of the stored fixture (importing it needs torch, not bitsandbytes)."""
    return import_file(Path(__file__).parent / "data" / "make_bnb_state.py")


@pytest.fixture(autouse=True, scope="module")
def _single_threaded(single_threaded_libraries) -> None:
    """torch and NumPy's BLAS on one thread for every module of this folder (tests/conftest.py): torch's
    own thread pool spins and slows a small shared machine down (a 5 s training test took 40 s)."""
