"""Build and machine information, and the CPU thread count."""

from __future__ import annotations

import os

from . import _octopt


def set_num_threads(n: int) -> None:
    """Threads used by octopt's CPU kernels (default: OCTOPT_NUM_THREADS, else OMP_NUM_THREADS,
    else the CPUs this process may use)."""
    if isinstance(n, bool) or not isinstance(n, int):
        raise TypeError(f"set_num_threads: argument 'n' must be an int, got {type(n).__name__}")
    _octopt.set_num_threads(n)


def get_num_threads() -> int:
    return _octopt.get_num_threads()


def cuda_built() -> bool:
    """True when this build contains CUDA kernels (whether or not a GPU is present)."""
    return _octopt.cuda_built()


def cuda_available() -> bool:
    """True when CUDA kernels were built and a CUDA device is usable now."""
    return _octopt.cuda_available()


def cmake_dir() -> str:
    """Folder holding octoptConfig.cmake, for ``find_package(octopt CONFIG)`` against this install."""
    return os.path.join(os.path.dirname(__file__), "share", "cmake", "octopt")


def c_library() -> str:
    """Path of octopt's C ABI shared library (octopt_c, header octopt/c.h; docs/c.md) shipped in this
    package, for ctypes, P/Invoke (C#), Rust, Julia or Go. Raises FileNotFoundError when the package was
    built without it."""
    import sys

    name = {"win32": "octopt_c.dll", "darwin": "liboctopt_c.dylib"}.get(sys.platform, "liboctopt_c.so")
    here = os.path.dirname(__file__)
    # an editable install keeps the built files (the extension, lib/) apart from the sources
    for root in dict.fromkeys((here, os.path.dirname(_octopt.__file__))):
        for folder in ("lib", "bin"):
            path = os.path.join(root, folder, name)
            if os.path.exists(path):
                return path
    raise FileNotFoundError(f"c_library: {name} is not in {os.path.join(here, 'lib')} (a build without the C ABI?)")


def info() -> dict:
    """What this build is and what it runs on."""
    return {
        "version": _octopt.version(),
        "compiler": _octopt.compiler(),
        "simd": _octopt.simd_level(),
        "cpu_features": _octopt.cpu_features(),
        # floating-point contraction of the core and of the extension (both "off": cmake/numerics.cmake)
        "fp_contract": dict(zip(("core", "extension"), _octopt.fp_contract())),
        "threads": _octopt.get_num_threads(),
        "cuda_built": _octopt.cuda_built(),
        "cuda_runtime": _octopt.cuda_runtime_version() or None,
        "cuda_available": _octopt.cuda_available(),
        "cuda_devices": _octopt.cuda_device_count(),
        "cuda_unavailable_reason": _octopt.cuda_unavailable_reason() or None,  # e.g. a driver older than the runtime
        "xla_ffi_built": _octopt.xla_ffi_built(),  # octopt.optax's CPU handler (docs/jax.md)
        "xla_ffi_cuda_built": _octopt.xla_ffi_cuda_built(),  # and its CUDA handler
        "c_library": _c_library_or_none(),  # the C ABI's shared library (docs/c.md)
    }


def _c_library_or_none() -> str | None:
    try:
        return c_library()
    except FileNotFoundError:
        return None
