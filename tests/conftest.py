"""The fixtures every folder of the suite shares, and its one parametrization point: framework x device
x dtype.

A test that takes the ``array_case`` fixture runs once per supported combination; combinations
this machine cannot run are collected and skipped with the reason. ``cpu_array_case`` and
``cuda_array_case`` are the CPU and CUDA subsets. An ``ArrayCase`` builds arrays from NumPy values
(``make``) and reads them back (``to_numpy``), so a test states its numbers once in NumPy and checks
every framework with them. ``ragged_size`` and ``block_size`` are the sizes the block-wise tests run
over. The fixtures of one area live in the conftest.py of its folder (tests/README.md).
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.util
import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import octopt
import pytest

FRAMEWORKS = ("numpy", "torch", "cupy")
DEVICES = ("cpu", "cuda")
DTYPES = ("float32", "float16", "bfloat16")

# Ragged sizes as in bitsandbytes' tests: a single element, less than one block, one past a block
# boundary, and a large tensor.
RAGGED_SIZES = (1, 255, 4097, 2**20)
BLOCK_SIZES = (32, 64, 256, 4096)


@functools.cache
def import_optional(name: str) -> Any:
    """The module, or None when it is not installed or fails to import."""
    try:
        return importlib.import_module(name)
    except Exception:  # noqa: BLE001 - a broken install counts as missing
        return None


@functools.cache
def import_file(path: Path) -> ModuleType:
    """The Python file at ``path``, imported once under a name of its own (not put on sys.path)."""
    path = Path(path).resolve()
    name = "octopt_tests_" + "_".join(path.with_suffix("").parts[-3:]).replace("-", "_")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and pickle look a module up by name
    spec.loader.exec_module(module)
    return module


@functools.cache
def torch_cuda_usable() -> bool:
    torch = import_optional("torch")
    return torch is not None and torch.cuda.is_available()


@dataclass(frozen=True)
class ArrayCase:
    framework: str  # "numpy", "torch" or "cupy"
    device: str  # "cpu" or "cuda"
    dtype: str  # "float32", "float16" or "bfloat16"

    @property
    def id(self) -> str:
        return f"{self.framework}-{self.device}-{self.dtype}"

    @property
    def module(self) -> Any:
        return import_optional(self.framework)

    def _np_dtype(self, dtype: str) -> Any:
        if dtype == "bfloat16":
            return import_optional("ml_dtypes").bfloat16
        return np.dtype(dtype)

    def make(self, values: Any, dtype: str | None = None, requires_grad: bool = False) -> Any:
        """``values`` (any NumPy numbers, any shape) as a C-contiguous array of this framework,
        device and dtype (or ``dtype``), rounded to nearest even from float32."""
        dtype = dtype or self.dtype
        v = np.ascontiguousarray(values)
        if v.dtype.kind == "f":
            v = v.astype(np.float32)
        if self.framework == "numpy":
            return v.astype(self._np_dtype(dtype))
        if self.framework == "torch":
            torch = self.module
            t = torch.from_numpy(v.copy()).to(device=self.device, dtype=getattr(torch, dtype))
            return t.requires_grad_(True) if requires_grad else t
        cupy = self.module
        return cupy.asarray(v).astype(dtype)

    def empty(self, shape: tuple, dtype: str) -> Any:
        if self.framework == "numpy":
            return np.empty(shape, dtype=self._np_dtype(dtype))
        if self.framework == "torch":
            torch = self.module
            return torch.empty(shape, dtype=getattr(torch, dtype), device=self.device)
        return self.module.empty(shape, dtype=dtype)

    def to_numpy(self, a: Any) -> np.ndarray:
        """Host copy: floating point as float64 (exact for every supported dtype), other dtypes raw."""
        if self.framework == "torch":
            a = a.detach().cpu()
            if a.is_floating_point():
                return a.double().numpy()
            return a.numpy()
        if self.framework == "cupy":
            a = a.get()
        a = np.asarray(a)
        if a.dtype.kind == "f" or a.dtype.name == "bfloat16":
            return a.astype(np.float64)
        return a

    def round_to_dtype(self, values_f32: np.ndarray, dtype: str | None = None) -> np.ndarray:
        """float32 values rounded to ``dtype`` (round to nearest even), as float64, by a converter
        other than octopt's: NumPy for float16, torch (else ml_dtypes) for bfloat16."""
        dtype = dtype or self.dtype
        v = np.asarray(values_f32, dtype=np.float32)
        if dtype == "float32":
            return v.astype(np.float64)
        if dtype == "float16":
            return v.astype(np.float16).astype(np.float64)
        torch = import_optional("torch")
        if torch is not None:
            return torch.from_numpy(v.copy()).to(torch.bfloat16).double().numpy()
        ml_dtypes = import_optional("ml_dtypes")
        if ml_dtypes is None:
            pytest.skip("rounding to bfloat16 needs torch or ml_dtypes")
        return v.astype(ml_dtypes.bfloat16).astype(np.float64)

    def data_ptr(self, a: Any) -> int:
        if self.framework == "numpy":
            return a.ctypes.data
        if self.framework == "torch":
            return a.data_ptr()
        return a.data.ptr

    def is_native(self, a: Any) -> bool:
        """True when ``a`` is an array of this case's framework on this case's device."""
        if self.framework == "numpy":
            return type(a) is np.ndarray
        if self.framework == "torch":
            return isinstance(a, self.module.Tensor) and a.device.type == self.device
        return isinstance(a, self.module.ndarray)

    def cpu_twin(self) -> ArrayCase:
        """The same dtype on the CPU: torch stays torch, CuPy maps to NumPy."""
        return ArrayCase("torch" if self.framework == "torch" else "numpy", "cpu", self.dtype)


def pytest_configure(config: pytest.Config) -> None:
    """OCTOPT_REQUIRE_GPU=1 (bench/gpu_check.sh sets it): a run on a GPU machine must not pass by skipping
    every GPU test because octopt cannot use the GPU (a driver older than the CUDA runtime octopt was built
    with makes cuda_available() False); stop at once, with the reason."""
    if os.environ.get("OCTOPT_REQUIRE_GPU") == "1" and not octopt.cuda_available():
        raise pytest.UsageError(
            "OCTOPT_REQUIRE_GPU=1 but octopt cannot use a GPU: " + (octopt.info()["cuda_unavailable_reason"] or "?")
        )


def _skip_reason(case: ArrayCase) -> str | None:
    if case.module is None:
        return f"{case.framework} is not installed"
    if case.device == "cuda":
        if not octopt.cuda_built():
            return "octopt was built without CUDA"
        if not octopt.cuda_available():
            return "no CUDA device (octopt.cuda_available() is False)"
        if case.framework == "torch" and not torch_cuda_usable():
            return "this torch build cannot use CUDA"
    if case.dtype == "bfloat16":
        if case.framework == "numpy" and import_optional("ml_dtypes") is None:
            return "NumPy bfloat16 arrays need ml_dtypes, which is not installed"
        if case.framework == "cupy":
            return "CuPy has no bfloat16 dtype"
    return None


def _all_cases() -> list[ArrayCase]:
    cases = []
    for fw in FRAMEWORKS:
        for dev in DEVICES:
            if (fw == "numpy" and dev == "cuda") or (fw == "cupy" and dev == "cpu"):
                continue  # NumPy is CPU-only, CuPy CUDA-only
            cases.extend(ArrayCase(fw, dev, dt) for dt in DTYPES)
    return cases


def _param(case: ArrayCase) -> Any:
    reason = _skip_reason(case)
    marks = [] if reason is None else [pytest.mark.skip(reason=reason)]
    return pytest.param(case, id=case.id, marks=marks)


ARRAY_CASES = [_param(c) for c in _all_cases()]
CPU_ARRAY_CASES = [_param(c) for c in _all_cases() if c.device == "cpu"]
CUDA_ARRAY_CASES = [_param(c) for c in _all_cases() if c.device == "cuda"]


@pytest.fixture(params=ARRAY_CASES)
def array_case(request: pytest.FixtureRequest) -> ArrayCase:
    return request.param


@pytest.fixture(params=CPU_ARRAY_CASES)
def cpu_array_case(request: pytest.FixtureRequest) -> ArrayCase:
    return request.param


@pytest.fixture(params=CUDA_ARRAY_CASES)
def cuda_array_case(request: pytest.FixtureRequest) -> ArrayCase:
    return request.param


@pytest.fixture(params=RAGGED_SIZES)
def ragged_size(request: pytest.FixtureRequest) -> int:
    """An element count: one element, less than a block, one past a block boundary, a large tensor."""
    return request.param


@pytest.fixture(params=BLOCK_SIZES)
def block_size(request: pytest.FixtureRequest) -> int:
    return request.param


@pytest.fixture(name="import_optional")
def import_optional_fixture() -> Any:
    """``import_optional(name)``: the module, or None when it is missing or broken."""
    return import_optional


@pytest.fixture(scope="session", name="import_file")
def import_file_fixture() -> Callable[[Path], ModuleType]:
    """``import_file(path)``: a module kept beside the tests that is no test itself (a reference
    implementation, the generator of a data file), imported from its path. A folder's conftest.py
    exposes each such module as a fixture of its own name."""
    return import_file


@pytest.fixture
def torch_cuda() -> Any:
    """torch, on a machine where octopt and torch can both use a GPU; else the test is skipped."""
    if not (octopt.cuda_available() and torch_cuda_usable()):
        pytest.skip("needs torch with CUDA and a GPU")
    return import_optional("torch")


@pytest.fixture
def cupy_cuda() -> Any:
    """CuPy, on a machine where octopt can use a GPU; else the test is skipped."""
    cupy = import_optional("cupy")
    if cupy is None or not octopt.cuda_available():
        pytest.skip("needs CuPy and a GPU")
    return cupy


@contextlib.contextmanager
def _torch_single_thread() -> Iterator[None]:
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
def _blas_single_thread() -> Iterator[None]:
    """NumPy's BLAS on one thread. OpenBLAS workers spin between calls and starve octopt's own pool on a
    small machine (a 0.1 s training loop took 9 s); limiting BLAS keeps the timings of these tests stable."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        yield
        return
    with threadpool_limits(1):
        yield


@pytest.fixture(scope="module")
def single_threaded_libraries() -> Iterator[None]:
    """BLAS and torch on one thread for a module, so their spinning worker threads do not starve octopt's
    pool on a small machine (octopt keeps its own pool). optim/ and torch/ use it for all their tests."""
    with _torch_single_thread(), _blas_single_thread():
        yield


@pytest.fixture
def restore_threads() -> Iterator[int]:
    """Gives the test a free hand with octopt.set_num_threads and restores the count afterwards."""
    before = octopt.get_num_threads()
    yield before
    octopt.set_num_threads(before)


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(20240611)


def _isa_available(isa: str) -> bool:
    try:
        octopt._octopt.set_simd_level(isa)
        return True
    except ValueError:
        return False
    finally:
        octopt._octopt.set_simd_level("")


@pytest.fixture
def isa_available() -> Callable[[str], bool]:
    """Whether this CPU can run the named kernel variant ("avx2", "avx512")."""
    return _isa_available
