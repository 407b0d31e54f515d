"""Import of bitsandbytes' state dicts into octopt.torch: bitsandbytes' key map (_bnb_keys: which state number
holds which slot, its qmap, absmax or per-tensor max); the core converts every slot (_slot_copies.into)."""

from __future__ import annotations

from typing import Any

import torch

from .. import _bnb_keys, _slot_convert
from ..optimizer import _TensorState
from ._slot_copies import initial, into, tensor

BNB_NESTED = _bnb_keys.NESTED
BNB_SLOTS = _bnb_keys.SLOTS
BNB_IGNORED_STATE = _bnb_keys.IGNORED_STATE


def from_bnb(core: Any, t: _TensorState, entry: dict, kind: str, where: str) -> list:
    if kind not in BNB_SLOTS:
        raise ValueError(
            f"{where} is a bitsandbytes state; bitsandbytes has no '{kind}', so its state cannot be imported here"
        )
    flat = {k: v for k, v in entry.items() if k != BNB_NESTED}
    nested = entry.get(BNB_NESTED, {})
    if not isinstance(nested, dict):
        raise TypeError(f"{where}: '{BNB_NESTED}' must be a dict")
    flat.update(nested)
    known = {"step", *BNB_IGNORED_STATE}
    known |= {f"{what}{k}" for what in ("state", "qmap", "absmax", "max", "new_max") for k in "12"}
    unknown = sorted(str(k) for k in flat if k not in known)
    if unknown:
        raise ValueError(f"{where} has bitsandbytes entries {unknown} that octopt cannot import")
    slots = BNB_SLOTS[kind]
    theirs = sorted(k for k in "12" if "state" + k in flat)
    ours = sorted({k for k, _ in slots.values()})
    if theirs != ours:
        raise ValueError(
            f"{where} holds bitsandbytes' {['state' + k for k in theirs]} but its '{kind}' keeps "
            f"{['state' + k for k in ours]}; was it saved by a different optimizer?"
        )
    out = []
    for spec in t.specs:
        if spec.name not in slots:
            out += initial(core, t, [spec.name])
            continue
        k, row = slots[spec.name]
        v = flat.get("state" + k)
        if v is None:
            raise ValueError(f"{where} lacks bitsandbytes' 'state{k}' ({spec.name})")
        v = tensor(v, where, "state" + k)
        if row is not None:
            if v.dim() < 1 or v.shape[0] != 2:
                raise ValueError(
                    f"{where}: bitsandbytes' AdEMAMix 'state{k}' must have two rows, got shape {tuple(v.shape)}"
                )
            v = v[row]
        if v.dtype != torch.uint8:
            out += into(t, spec, _slot_convert.FLOAT, v, None, where, ["state" + k])
            continue
        qmap = flat.get("qmap" + k)
        if qmap is None:
            raise ValueError(f"{where} has 8-bit 'state{k}' but lacks 'qmap{k}'")
        qmap = tensor(qmap, where, "qmap" + k).to("cpu", torch.float32).numpy()
        if flat.get("absmax" + k) is None:
            # quantized per tensor (block_wise=False, bitsandbytes' LAMB8bit's and LARS8bit's default before
            # 0.45): one scale, 'max' (its 'new_max' is the scratch of the next step)
            scale = flat.get("max" + k)
            if scale is None:
                raise ValueError(f"{where} has 8-bit 'state{k}' but neither 'absmax{k}' nor 'max{k}'")
            scale = tensor(scale, where, "max" + k).to("cpu", torch.float32).reshape(-1)
            if row is not None and scale.numel() == 2:
                scale = scale[row : row + 1]
            src = _slot_convert.form(8, 0, qmap)
            out += into(t, spec, src, v, scale, where, ["state" + k, "max" + k, "qmap" + k])
            continue
        absmax = tensor(flat["absmax" + k], where, "absmax" + k)
        if row is not None:
            absmax = absmax[row] if absmax.dim() == 2 and absmax.shape[0] == 2 else absmax
        keys = ["state" + k, "absmax" + k, "qmap" + k]
        # bitsandbytes' block-wise 8-bit optimizers use blocks of 256 (2048 in older releases)
        block_size = _slot_convert.infer_block_size(t.info.size, absmax.numel(), (256, 2048), where, keys)
        out += into(t, spec, _slot_convert.form(8, block_size, qmap), v, absmax, where, keys)
    return out
