"""Fixtures of the C ABI tests (every test of this folder is marked ``c_abi``): the shipped library
(octopt.c_library()) opened with ctypes with every function of c.h declared (capi.py)."""

from __future__ import annotations

from pathlib import Path

import octopt
import pytest

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(items):
    for item in items:
        if Path(str(item.fspath)).resolve().parent == HERE:
            item.add_marker(pytest.mark.c_abi)


@pytest.fixture(scope="session")
def capi(import_file):
    """tests/c_abi/capi.py: ctypes declarations of c.h, a small optimizer wrapper and the bad-input cases."""
    return import_file(HERE / "capi.py")


@pytest.fixture(scope="session")
def clib(capi):
    """The C ABI library shipped in the installed octopt package, every function declared."""
    return capi.load(octopt.c_library())
