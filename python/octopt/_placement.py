"""Where host state buffers start within a 4 KiB page.

A step streams the parameter, the gradient and every state buffer of a tensor at the same element index.
Large host arrays of NumPy and torch all start at the same offset within a page (their allocators map
them fresh), so the loads of one stream and the stores of another share their low 12 address bits, and
x86 cores delay such loads behind the stores (4K aliasing). Measured on Zen 4 (2^24 parameters, 2 threads,
docs/decisions.md): Adam's 32-bit step took 1.29x (AVX2) and 1.41x (AVX-512) the time of torch's fused
step with the state at the parameter's offset, 0.96x and 0.86x with the moments a third of a page apart.
A large state buffer therefore starts where it is farthest, within a page, from the parameter and from
the tensor's buffers placed before it, at the cost of one page of padding per buffer.
"""

from __future__ import annotations

from typing import Any

from . import _arrays

PAGE = 4096
ALIGN = 64  # the core's allocator contract: host state is 64-byte aligned
MIN_BYTES = 1 << 20  # smaller buffers are not moved: the page of padding stays under 0.4% of what it pads


def address(a: Any, info: _arrays.ArrayInfo) -> int | None:
    """The first byte of a host array, or None where the framework does not say."""
    try:
        if info.framework == "numpy":
            return int(a.__array_interface__["data"][0])
        if info.framework == "torch":
            return int(a.data_ptr())
    except (AttributeError, RuntimeError, TypeError):  # a DTensor, a tensor subclass without storage
        return None
    return None


def farthest(taken: list[int]) -> int:
    """The ALIGN multiple within a page whose circular distance to the nearest of `taken` (offsets within a
    page) is largest; the lowest such offset on a tie."""

    def gap(x: int) -> int:
        return min(min((x - t) % PAGE, (t - x) % PAGE) for t in taken)

    return max(range(0, PAGE, ALIGN), key=lambda x: (gap(x), -x))


def state_empty(param: Any, info: _arrays.ArrayInfo, count: int, dtype: str, taken: list[int]) -> Any:
    """An uninitialized 1-d state array of `count` elements for `param`. On the host a buffer of at least
    MIN_BYTES starts at the offset within a page farthest from `param`'s and from `taken` (the offsets of
    the parameter's buffers placed before, to which this one's is appended); otherwise, and on a GPU, a
    plain allocation."""
    item = 1 if dtype == "uint8" else 4
    nbytes = count * item
    where = address(param, info) if info.device == "cpu" and nbytes >= MIN_BYTES else None
    if where is None:
        return _arrays.empty(param, info, (count,), dtype)
    want = farthest([where % PAGE, *taken])
    raw = _arrays.empty(param, info, (nbytes + PAGE,), "uint8")
    off = (want - address(raw, info)) % PAGE
    taken.append(want)
    block = raw[off : off + nbytes]
    if info.framework == "torch":
        import torch

        return block.view(getattr(torch, dtype))
    return block.view(dtype)
