"""Writes the fuzzer's seed corpus (tests/state_files/fuzz/corpus/): small files written by octopt itself.

PYTHONPATH=<octopt build> python tests/state_files/fuzz/make_corpus.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
from octopt import state_file

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from fuzz_state_file import OPT_SHAPES, make_optimizer  # noqa: E402


def main() -> None:
    out = HERE / "corpus"
    out.mkdir(exist_ok=True)
    rng = np.random.default_rng(0)
    state_file.save(out / "empty.octopt", {})
    state_file.save(out / "metadata_only.octopt", {}, {"run": "fuzz", "note": "é ünïcode", "empty": ""})
    all_dtypes = {}
    for dt in (
        "float64",
        "float32",
        "float16",
        "int64",
        "int32",
        "int16",
        "int8",
        "uint64",
        "uint32",
        "uint16",
        "uint8",
        "bool",
    ):
        all_dtypes[dt] = (rng.standard_normal(3) * 10).astype(dt)
    state_file.save(out / "all_dtypes.octopt", all_dtypes, {"k": "v"})
    state_file.save(
        out / "shapes.octopt",
        {
            "scalar": np.float32(1.5),
            "empty": np.zeros((0, 3), np.float32),
            "matrix": np.arange(12, dtype=np.int16).reshape(3, 4),
            "odd": np.arange(5, dtype=np.uint8),
        },
    )
    opt = make_optimizer()
    for _ in range(2):
        opt.step([rng.standard_normal(s).astype(np.float32) for s in OPT_SHAPES])
    opt.save(out / "adam8_state.octopt")
    for p in sorted(out.iterdir()):
        print(p.name, p.stat().st_size)


if __name__ == "__main__":
    main()
