"""One rank of a distributed scenario in a fresh interpreter (the CUDA launches of conftest.py's ``launch``):

    python launch.py SPEC RANK WORLD_SIZE BACKEND DEVICE

SPEC is a pickle of (path of the test module, name of the scenario function, its arguments). This file is
no test; conftest.py starts it as a program.
"""

from __future__ import annotations

import importlib.util
import pickle
import sys
from pathlib import Path


def main() -> None:
    spec_path, rank, world_size, backend, device = sys.argv[1:6]
    with open(spec_path, "rb") as f:
        module_path, name, args = pickle.load(f)
    here = Path(__file__).parent
    conftest = _load(here / "conftest.py", "octopt_tests_distributed_conftest")
    module = _load(Path(module_path), "octopt_tests_distributed_scenario")
    conftest._run_rank(
        int(rank), int(world_size), backend, device, str(Path(spec_path).parent), getattr(module, name), args
    )


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


if __name__ == "__main__":
    main()
