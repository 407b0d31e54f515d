"""One state slot from one layout to another, by the core (cpp/include/octopt/state_convert.hpp,
docs/state_convert.md). The state-dict formats keep only their key maps (which key holds which slot, absmax,
map or step) and call these; every check of incoming state and all layout arithmetic is the core's."""

from __future__ import annotations

from typing import Any

import numpy as np

from . import _octopt

Form = _octopt.SlotForm
FLOAT = Form(32)  # float values, one per element


def form(bits: int, block_size: int = 0, qmap: Any = None, packed: bool = True, segments=(), offset: int = 0) -> Any:
    """A layout: ``bits`` 32 (float values) or 8/4 (codes of ``qmap`` with one absmax per ``block_size``
    elements; 0: one scale), 4-bit codes ``packed`` two per byte, blocks restarting at ``segments``."""
    q = None if qmap is None else np.ascontiguousarray(np.asarray(qmap, dtype=np.float32).reshape(-1))
    return Form(int(bits), int(block_size), q, bool(packed), [int(s) for s in segments], int(offset))


def _host(v: Any) -> Any:
    """A 1-D C-contiguous host view or copy of an array (a torch tensor stays a torch tensor)."""
    if hasattr(v, "detach") and hasattr(v, "to"):  # torch
        return v.detach().to("cpu").reshape(-1).contiguous()
    return np.ascontiguousarray(v).reshape(-1)


def convert(n: int, src: Any, values: Any, absmax: Any, dst: Any, where: str, keys: list) -> tuple:
    """(values, absmax) as NumPy arrays in layout ``dst`` of ``n`` elements given as ``values``/``absmax`` in
    layout ``src``; ``keys``: the names of the values, absmax and map in messages (``where: 'key' ...``)."""
    out_v = np.empty(_octopt.slot_values_count(n, dst), np.float32 if dst.bits == 32 else np.uint8)
    out_a = None if dst.bits == 32 else np.empty(_octopt.slot_absmax_count(n, dst), np.float32)
    a = None if absmax is None else _host(absmax)
    _octopt.convert_slot(n, src, _host(values), a, dst, out_v, out_a, where, list(keys))
    return out_v, out_a


def export(plan: Any, index: int, slot: int, n: int, dst: Any, where: str, keys: list) -> tuple:
    """(values, absmax) as NumPy arrays: slot ``slot`` of tensor ``index`` (n elements) of a core StepPlan in
    layout ``dst``."""
    out_v = np.empty(_octopt.slot_values_count(n, dst), np.float32 if dst.bits == 32 else np.uint8)
    out_a = None if dst.bits == 32 else np.empty(_octopt.slot_absmax_count(n, dst), np.float32)
    plan.export_slot(index, slot, dst, out_v, out_a, where, list(keys))
    return out_v, out_a


def infer_bits(n: int, code_bytes: int, where: str, keys: list) -> int:
    """8 or 4: the bits of codes that take ``code_bytes`` bytes for n elements."""
    return _octopt.infer_code_bits(n, code_bytes, where, list(keys))


def infer_block_size(n: int, blocks: int, candidates: list, where: str, keys: list) -> int:
    """The first of ``candidates`` that cuts n elements into ``blocks`` blocks."""
    return _octopt.infer_block_size(n, blocks, [int(c) for c in candidates], where, list(keys))


def pack4(codes: np.ndarray) -> np.ndarray:
    """4-bit codes one per byte -> two per byte (low nibble = even element)."""
    c = np.ascontiguousarray(codes, dtype=np.uint8).reshape(-1)
    out = np.empty((c.size + 1) // 2, np.uint8)
    _octopt.pack_codes4(c, out)
    return out
