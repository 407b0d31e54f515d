"""Fixtures of the core tests (maps, block-wise quantization, stochastic rounding, runtime)."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest


@pytest.fixture(scope="session")
def ref(import_file) -> ModuleType:
    """reference_blockwise.py: the independent NumPy reference of block-wise quantization
    (brute-force nearest codes, absmax, 4-bit unpacking), written from the contract in DESIGN.md."""
    return import_file(Path(__file__).with_name("reference_blockwise.py"))
