"""Host state arrays that start where the core asks within a 4 KiB page.

The core's plan gives each large host state buffer a page offset away from the parameter's and from the
tensor's other buffers' (cpp/src/state_placement.hpp: fresh large arrays all start at the same offset
within a page, and a step's loads then wait on other streams' stores whose low 12 address bits match;
docs/decisions.md). NumPy and torch allocate at their own offsets, so the array handed back is a view
of a buffer one page longer, starting at the requested offset.
"""

from __future__ import annotations

from typing import Any

from . import _arrays

PAGE = 4096


def state_empty(param: Any, info: _arrays.ArrayInfo, count: int, dtype: str, page_offset: int) -> Any:
    """An uninitialized 1-d array of `count` elements of `dtype` for `param`'s state, starting at
    `page_offset` within a page on the host (-1, a GPU or another framework: a plain allocation)."""
    if page_offset < 0 or info.device != "cpu" or info.framework not in ("numpy", "torch"):
        return _arrays.empty(param, info, (count,), dtype)
    nbytes = count * (1 if dtype == "uint8" else 4)
    raw = _arrays.empty(param, info, (nbytes + PAGE,), "uint8")
    off = (page_offset - _arrays.memory_span(raw, info)[2]) % PAGE
    block = raw[off : off + nbytes]
    if info.framework == "torch":
        import torch

        return block.view(getattr(torch, dtype))
    return block.view(dtype)
