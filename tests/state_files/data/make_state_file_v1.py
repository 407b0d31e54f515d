"""Generator of ``state_file_v1.safetensors``, a state file of format version 1 kept as a test fixture.

Later versions of octopt must keep reading this file (docs/format.md, "Versioning"). Never regenerate
the fixture with a newer writer: it exists to prove that files written by version 1 stay readable.
It was written by octopt 0.1.0:

    PYTHONPATH=<octopt install> python tests/state_files/data/make_state_file_v1.py

The expected contents below are what tests/state_files/test_roundtrip.py compares the fixture with.
"""

from __future__ import annotations

import os

import numpy as np

FIXTURE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "state_file_v1.safetensors")

METADATA = {
    "octopt.step": "3",
    "note": 'fixture v1 \u2014 "quoted", tab\tand newline\n',
}


def expected() -> list[tuple[str, np.ndarray, str]]:
    """(name, array, safetensors dtype) in file order; BF16 as its uint16 bits."""
    m = (np.arange(6, dtype=np.float32).reshape(2, 3) - 2.5) / 4
    codes = np.arange(7, dtype=np.uint8) * 37
    absmax = np.array([0.5, 1.25], dtype=np.float32)
    bf16 = np.array([0x3F80, 0xC000, 0x0000, 0x7F80], dtype=np.uint16)  # 1.0, -2.0, 0.0, +inf
    step = np.array(3, dtype=np.int64)
    empty = np.zeros((0, 4), dtype=np.float16)
    flags = np.array([True, False, True])
    return [
        ("m", m, "F32"),
        ("codes", codes, "U8"),
        ("absmax", absmax, "F32"),
        ("p_bf16", bf16, "BF16"),
        ("step", step, "I64"),
        ("empty", empty, "F16"),
        ("flags", flags, "BOOL"),
    ]


def write(path: str) -> None:
    from octopt import _octopt

    items = [(name, a, dtype) if dtype == "BF16" else (name, a) for name, a, dtype in expected()]
    _octopt.save_state_file(path, items, METADATA)


if __name__ == "__main__":
    write(FIXTURE)
    print("wrote", FIXTURE)
