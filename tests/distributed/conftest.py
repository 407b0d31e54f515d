"""Fixtures of the distributed tests: ``launch`` runs one scenario on N ranks, and ``dist_backend`` is this
folder's parametrization point (gloo on the CPU; nccl on CUDA devices, skipped without enough GPUs).

A scenario is a top-level function ``fn(ctx, *args)`` of a test module; ``ctx`` is a ``Rank`` (rank, world
size, device, shared folder). On the CPU the ranks are forked from the test process (no interpreter start,
so a scenario of 4 ranks costs about a second); CUDA ranks are started as fresh interpreters by
``launch.py`` (a forked child cannot use CUDA once the parent has). Each rank joins a process group through
a file store in the test's folder, so no port is needed. What ``fn`` returns on each rank comes back as a
list; an exception on any rank fails the test with that rank's traceback.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available():
    pytest.skip("this torch build has no torch.distributed", allow_module_level=True)

LAUNCHER = Path(__file__).with_name("launch.py")
LIB = Path(__file__).with_name("dist_lib.py")
TIMEOUT_S = 240


@dataclass(frozen=True)
class Backend:
    name: str  # "gloo" or "nccl"
    device: str  # "cpu" or "cuda"

    @property
    def id(self) -> str:
        return f"{self.name}-{self.device}"


BACKENDS = (Backend("gloo", "cpu"), Backend("nccl", "cuda"))


def _skip_reason(b: Backend) -> str | None:
    if b.device == "cuda":
        import octopt

        if not octopt.cuda_available() or not torch.cuda.is_available():
            return "needs torch and octopt with CUDA and a GPU"
        if not dist.is_nccl_available():
            return "this torch build has no NCCL"
    elif not dist.is_gloo_available():
        return "this torch build has no gloo"
    return None


@pytest.fixture(
    params=[
        pytest.param(b, id=b.id, marks=[pytest.mark.skip(reason=r)] if (r := _skip_reason(b)) else []) for b in BACKENDS
    ]
)
def dist_backend(request: pytest.FixtureRequest) -> Backend:
    return request.param


@pytest.fixture
def gloo() -> Backend:
    """The CPU backend, for scenarios that only the CPU runs (their CUDA twin is another test)."""
    return BACKENDS[0]


@dataclass(frozen=True)
class Rank:
    """What a scenario function gets on each rank."""

    rank: int
    world_size: int
    backend: str
    device: Any  # torch.device of this rank
    folder: Path  # this launch's folder (tests hand a checkpoint folder to the next launch as an argument)
    lib: Any  # dist_lib.py: the model, its data, the collective counter


def _run_rank(rank: int, world_size: int, backend: str, device_type: str, folder: str, fn: Callable, args: tuple):
    """The body of one rank: join the group (unless the scenario is a program that joins it itself, as
    under torchrun: ``backend`` is then "none"), run the scenario, hand back its result."""
    torch.set_num_threads(1)  # 4 ranks on a small machine: torch's own pool would only spin
    import torch.distributed as d

    device = torch.device("cpu") if device_type == "cpu" else torch.device("cuda", rank)
    if device_type == "cuda":
        torch.cuda.set_device(device)
    if backend != "none":
        d.init_process_group(backend, init_method=f"file://{folder}/store", rank=rank, world_size=world_size)
    try:
        lib = _load_lib()
        result = fn(Rank(rank, world_size, backend, device, Path(folder), lib), *args)
        with open(Path(folder) / f"result-{rank}.pkl", "wb") as f:
            pickle.dump(result, f)
        if backend != "none":
            d.barrier()
    finally:
        if backend != "none":
            d.destroy_process_group()


def _load_lib() -> Any:
    import importlib.util

    name = "octopt_tests_distributed_dist_lib"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, LIB)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


@pytest.fixture(scope="session")
def dist_lib(import_file) -> Any:
    """dist_lib.py, for the tests' single-process references."""
    return import_file(LIB)


def _fork(world_size: int, backend: Backend, folder: Path, fn: Callable, args: tuple) -> None:
    import torch.multiprocessing as mp

    ctx = mp.start_processes(
        _run_rank,
        args=(world_size, backend.name, backend.device, str(folder), fn, args),
        nprocs=world_size,
        join=False,
        start_method="fork",
    )
    deadline = time.monotonic() + TIMEOUT_S
    while not ctx.join(timeout=5):
        if time.monotonic() > deadline:
            for p in ctx.processes:
                p.kill()
            pytest.fail(f"{fn.__name__} on {world_size} ranks did not finish in {TIMEOUT_S} s")


def _subprocesses(world_size: int, backend: Backend, folder: Path, fn: Callable, args: tuple) -> None:
    spec = folder / f"launch-{fn.__name__}.pkl"
    with open(spec, "wb") as f:
        pickle.dump((sys.modules[fn.__module__].__file__, fn.__name__, args), f)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    procs = [
        subprocess.Popen(
            [sys.executable, str(LAUNCHER), str(spec), str(r), str(world_size), backend.name, backend.device],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for r in range(world_size)
    ]
    failed = []
    for r, p in enumerate(procs):
        try:
            out, _ = p.communicate(timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            pytest.fail(f"{fn.__name__} on {world_size} ranks did not finish in {TIMEOUT_S} s")
        if p.returncode != 0:
            failed.append(f"rank {r} exited with {p.returncode}:\n{out}")
    if failed:
        pytest.fail("\n".join(failed))


@pytest.fixture
def launch(tmp_path: Path) -> Callable[..., list]:
    """``launch(backend, world_size, fn, *args, join_group=True)``: runs the scenario ``fn(ctx, *args)`` on
    ``world_size`` ranks and returns what each rank returned (``join_group=False``: the scenario joins a
    process group itself, as a program started by torchrun does). Skips when the backend's devices are fewer than the ranks.
    Launches of one test share ``tmp_path`` (one saves a checkpoint, the next loads it)."""
    count = [0]

    def run(backend: Backend, world_size: int, fn: Callable, *args: Any, join_group: bool = True) -> list:
        if not join_group:
            backend = Backend("none", backend.device)
        if backend.device == "cuda" and torch.cuda.device_count() < world_size:
            pytest.skip(f"needs {world_size} GPUs, this machine has {torch.cuda.device_count()}")
        count[0] += 1
        folder = tmp_path / f"launch{count[0]}"
        folder.mkdir()
        if backend.device == "cpu":
            _fork(world_size, backend, folder, fn, args)
        else:
            _subprocesses(world_size, backend, folder, fn, args)
        out = []
        for r in range(world_size):
            with open(folder / f"result-{r}.pkl", "rb") as f:
                out.append(pickle.load(f))
        return out

    return run


@pytest.fixture(autouse=True, scope="module")
def _single_threaded(single_threaded_libraries) -> None:
    """torch on one thread in the test process too, as on every rank: the single-process references then
    run the same matrix kernels as the ranks (a thread count changes how a product's sums are split)."""
