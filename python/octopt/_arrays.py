"""Array arguments from any framework: inspection, validation, allocation and streams.

Arrays are never converted: an in-place argument that is not already of the right dtype,
layout and device is refused with an error naming the function, the argument and the problem.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np

FLOAT_DTYPES = ("float32", "float16", "bfloat16")


class ArrayInfo(NamedTuple):
    framework: str  # "numpy", "torch" or "cupy"
    device: str  # "cpu" or "cuda"
    device_id: int
    dtype: str  # canonical name: "float32", "bfloat16", "uint8", ...
    shape: tuple
    size: int
    contiguous: bool
    writeable: bool

    @property
    def where(self) -> str:
        return "cpu" if self.device == "cpu" else f"cuda:{self.device_id}"


def framework_of(a: Any) -> str | None:
    if isinstance(a, np.ndarray):
        return "numpy"
    mod = type(a).__module__ or ""
    for name in ("torch", "cupy", "jax", "jaxlib"):
        if mod == name or mod.startswith(name + "."):
            return "jax" if name == "jaxlib" else name
    return None


def inspect(a: Any, fn: str, arg: str) -> ArrayInfo:
    fw = framework_of(a)
    if fw == "numpy":
        return ArrayInfo(
            "numpy",
            "cpu",
            0,
            a.dtype.name,
            tuple(a.shape),
            int(a.size),
            bool(a.flags.c_contiguous),
            bool(a.flags.writeable),
        )
    if fw == "torch":
        import torch

        if a.layout != torch.strided:
            raise TypeError(f"{fn}: argument '{arg}' must be a dense tensor, got layout {a.layout}")
        if a.is_complex():
            raise TypeError(f"{fn}: argument '{arg}' must be real, got {str(a.dtype).removeprefix('torch.')}")
        dev = a.device
        return ArrayInfo(
            "torch",
            dev.type,
            dev.index or 0,
            str(a.dtype).removeprefix("torch."),
            tuple(a.shape),
            int(a.numel()),
            bool(a.is_contiguous()),
            True,
        )
    if fw == "cupy":
        return ArrayInfo(
            "cupy",
            "cuda",
            int(a.device.id),
            a.dtype.name,
            tuple(a.shape),
            int(a.size),
            bool(a.flags.c_contiguous),
            True,
        )
    if fw == "jax":
        raise TypeError(
            f"{fn}: argument '{arg}' is a JAX array; JAX arrays are immutable and are not "
            "stepped in place: use octopt.optax"
        )
    raise TypeError(f"{fn}: argument '{arg}' must be a NumPy, PyTorch or CuPy array, got {type(a).__name__}")


def check(
    a: Any,
    fn: str,
    arg: str,
    dtypes: tuple[str, ...] | None = None,
    writeable: bool = False,
    like: ArrayInfo | None = None,
    like_arg: str = "x",
    size: int | None = None,
) -> ArrayInfo:
    """Validates one array argument; returns its description."""
    info = inspect(a, fn, arg)
    if dtypes is not None and info.dtype not in dtypes:
        raise TypeError(f"{fn}: argument '{arg}' must have dtype {' or '.join(dtypes)}, got {info.dtype}")
    if info.device not in ("cpu", "cuda"):
        raise ValueError(f"{fn}: argument '{arg}' is on an unsupported device ({info.device})")
    if not info.contiguous:
        raise ValueError(
            f"{fn}: argument '{arg}' must be C-contiguous (pass a contiguous array; a copy "
            "would not receive the result)"
        )
    if writeable and not info.writeable:
        raise ValueError(f"{fn}: argument '{arg}' is read-only")
    if like is not None and (info.device, info.device_id) != (like.device, like.device_id):
        raise ValueError(f"{fn}: argument '{arg}' is on {info.where} but '{like_arg}' is on {like.where}")
    if size is not None and info.size != size:
        raise ValueError(f"{fn}: argument '{arg}' must have {size} elements, got {info.size}")
    return info


def memory_span(a: Any, info: ArrayInfo) -> tuple | None:
    """(device, device id, first byte, end byte) of a C-contiguous array's memory; None when empty."""
    if info.size == 0:
        return None
    if info.framework == "torch":
        start, nbytes = int(a.data_ptr()), int(a.numel()) * int(a.element_size())
    elif info.framework == "cupy":
        start, nbytes = int(a.data.ptr), int(a.nbytes)
    else:
        start, nbytes = int(a.__array_interface__["data"][0]), int(a.nbytes)
    return (info.device, info.device_id, start, start + nbytes)


def kernel_arg(a: Any) -> Any:
    """The object handed to the native layer (a view, never a copy)."""
    if framework_of(a) == "torch":
        return a.detach()
    return a


def float_kernel_arg(a: Any) -> tuple[Any, bool]:
    """``(object for the native layer, bf16_bits)`` of a floating-point array: a NumPy bfloat16
    (ml_dtypes) array goes as a uint16 view of its bits with ``bf16_bits=True``, since NumPy exports
    that dtype neither through DLPack nor through the buffer protocol; other arrays as ``kernel_arg``."""
    if isinstance(a, np.ndarray) and a.dtype.name == "bfloat16":
        return a.view(np.uint16), True
    return kernel_arg(a), False


def empty(like: Any, info: ArrayInfo, shape: tuple, dtype: str) -> Any:
    """An uninitialized array in the framework and on the device of `like`."""
    if info.framework == "numpy":
        return np.empty(shape, dtype=np.dtype(dtype) if dtype != "bfloat16" else _numpy_bfloat16())
    if info.framework == "torch":
        import torch

        return torch.empty(shape, dtype=getattr(torch, dtype), device=like.device)
    if info.framework == "cupy":
        import cupy

        with cupy.cuda.Device(info.device_id):
            return cupy.empty(shape, dtype=dtype)
    raise TypeError(f"cannot allocate an array like {type(like).__name__}")


def _numpy_bfloat16() -> Any:
    try:
        import ml_dtypes
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise TypeError("bfloat16 NumPy arrays need the ml_dtypes package") from e
    return ml_dtypes.bfloat16


def dtype_name(dtype: Any) -> str:
    """Canonical name of a dtype given as a string, NumPy dtype or torch dtype."""
    if dtype is None:
        return "float32"
    if isinstance(dtype, str):
        name = dtype
    elif type(dtype).__module__.startswith("torch"):
        name = str(dtype).removeprefix("torch.")
    else:
        name = np.dtype(dtype).name
    return {"float": "float32", "half": "float16", "bf16": "bfloat16", "fp32": "float32", "fp16": "float16"}.get(
        name, name
    )


def stream_handle(info: ArrayInfo, stream: Any, fn: str) -> int:
    """The CUDA stream as an integer handle; 0 (unused) on the CPU."""
    if info.device != "cuda":
        return 0
    if stream is None:
        if info.framework == "torch":
            import torch

            return int(torch.cuda.current_stream(info.device_id).cuda_stream)
        if info.framework == "cupy":
            import cupy

            return int(cupy.cuda.get_current_stream().ptr)
        return 0
    if isinstance(stream, bool):
        raise TypeError(f"{fn}: argument 'stream' must be None, an int or an object with __cuda_stream__")
    if isinstance(stream, int):
        return stream
    if hasattr(stream, "__cuda_stream__"):
        proto = stream.__cuda_stream__()
        return int(proto[1] if isinstance(proto, tuple) else proto)
    for attr in ("cuda_stream", "ptr"):  # torch.cuda.Stream, cupy.cuda.Stream
        if hasattr(stream, attr):
            return int(getattr(stream, attr))
    raise TypeError(
        f"{fn}: argument 'stream' must be None, an int or an object with __cuda_stream__, got {type(stream).__name__}"
    )


def to_numpy(a: Any) -> np.ndarray:
    """A host NumPy view (CPU arrays) or copy (device arrays) of any supported array."""
    fw = framework_of(a)
    if fw == "torch":
        return a.detach().cpu().numpy()
    if fw == "cupy":
        return a.get()
    return np.asarray(a)


def all_finite(a: Any, info: ArrayInfo) -> bool:
    if info.framework == "torch":
        import torch

        return bool(torch.isfinite(a).all())
    if info.framework == "cupy":
        import cupy

        return bool(cupy.isfinite(a).all())
    return bool(np.isfinite(a).all())


def check_int(value: Any, fn: str, arg: str, lo: int | None = None, hi: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{fn}: argument '{arg}' must be an int, got {type(value).__name__}")
    v = int(value)
    if (lo is not None and v < lo) or (hi is not None and v > hi):
        raise ValueError(f"{fn}: argument '{arg}' must be in [{lo}, {hi}], got {v}")
    return v


def check_block_size(block_size: Any, fn: str) -> int:
    from . import _octopt

    bs = check_int(block_size, fn, "block_size")
    # the core's rule (blockwise.hpp), stated once; a value past int64 cannot reach it
    _octopt.validate_block_size(bs if -(2**63) <= bs < 2**63 else 0, fn)
    return bs


def check_bits(bits: Any, fn: str, allowed: tuple[int, ...] = (4, 8)) -> int:
    b = check_int(bits, fn, "bits")
    if b not in allowed:
        raise ValueError(f"{fn}: argument 'bits' must be {' or '.join(map(str, allowed))}, got {b}")
    return b


def num_blocks(n: int, block_size: int) -> int:
    return (n + block_size - 1) // block_size


def prod(shape: tuple) -> int:
    return int(math.prod(shape))
