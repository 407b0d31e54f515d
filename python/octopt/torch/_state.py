"""State dicts of octopt.torch in torch's format, and import of torch.optim and bitsandbytes state dicts.

Key maps only: which key holds which slot, absmax, map and step. Every source slot is handed to the core
(_slot_convert, cpp/include/octopt/state_convert.hpp) with the layout its keys describe, and the core checks it
and turns it into what this optimizer stores (equal layouts as they are, others through float32).
"""

from __future__ import annotations

from itertools import chain
from typing import Any

import numpy as np
import torch

from .. import _bnb_keys, _hparams, _slot_convert
from ..optimizer import _TensorState
from . import _bnb_import, _dcp, _dist, _slot_copies

FORMAT = 1
# Group keys of bitsandbytes or torch.optim that octopt does not take over on import.
FOREIGN_GROUP_KEYS = (
    "optim_bits",
    "percentile_clipping",
    "block_wise",
    "max_unorm",
    "skip_zeros",
    "is_paged",
    "amsgrad",
    "foreach",
    "fused",
    "capturable",
    "differentiable",
    "decoupled_weight_decay",
)
LAYOUT_KEYS = _hparams.LAYOUT_KEYS


def packed_groups(param_groups: list) -> list:
    """torch's state-dict form of param groups: each group's parameters replaced by their indices in
    the order of all groups."""
    groups, i = [], 0
    for g in param_groups:
        h = {k: v for k, v in g.items() if k != "params"}
        h["params"] = list(range(i, i + len(g["params"])))
        i += len(g["params"])
        groups.append(h)
    return groups


def param_state(t: _TensorState, dist: Any = None, quantized: bool = True) -> dict:
    """One parameter's state in torch's style: live tensors (views of the core's buffers) and its step.
    For a DTensor parameter (``dist``: its _dist.DistSpec) every state is a DTensor laid out like the
    parameter: 32-bit states live, quantized states dequantized to float32 copies of the local shard
    (``quantized=False``: left out, for _dcp.entry to add in their quantized form)."""
    out: dict[str, Any] = {"step": torch.tensor(float(t.step), dtype=torch.float32)}
    if t.mu_product is not None:  # NAdam, as torch.optim.NAdam keeps it
        out[_hparams.tensor_scalar_name(t._owner.kind)] = torch.tensor(t.mu_product, dtype=torch.float32)
    for spec in t.specs:
        data, absmax = t.buffers[spec.index]
        if dist is not None:
            if absmax is not None and not quantized:
                continue
            if t.info.size == 0:  # an empty shard (more ranks than rows): nothing to dequantize
                data = torch.zeros(0, dtype=torch.float32, device=t.param.device)
            elif absmax is not None:
                plan, n = t._owner._plan, t.info.size
                values, _ = _slot_convert.export(plan, t._index, spec.index, n, _slot_convert.FLOAT, "state_dict", [])
                data = torch.from_numpy(values).to(t.param.device)
            out[spec.name] = _dist.as_dtensor(data.view(t.param.shape), dist)
            continue
        out[spec.name] = data if spec.bits == 4 else data.view(t.param.shape)
        if absmax is not None:
            out[spec.name + "_absmax"] = absmax
    return out


def _params(param_groups: list) -> list:
    return [p for g in param_groups for p in g["params"]]


def state_dict(binding: Any, param_groups: list, float32_state: bool) -> dict:
    """octopt.torch's state dict of a CoreBinding's parameters (``float32_state``: quantized DTensor state
    dequantized, see _dcp.dequantized_state_dict)."""
    params = _params(param_groups)
    state, layout = {}, {}
    global_step = max((int(c.global_step) for c in binding.cores.values()), default=0)
    for i, p in enumerate(params):
        t = binding.tensor(p)
        dist = binding.dist(p)
        lay = _dcp.shard_layout(dist, t.info.size) if dist is not None and not float32_state else None
        if lay is not None:  # quantized state as it is (_dcp.py); 32-bit states live
            state[i] = param_state(t, dist, quantized=False)
            _dcp.entry(t, dist, lay, state[i], global_step)
            layout[i] = {s.name: [s.bits, s.block_size, s.state_map] for s in t.specs}
            continue
        state[i] = param_state(t, dist)
        # per slot: [bits, block size, state map] (a DTensor's state in the float32 form: dequantized)
        layout[i] = {
            s.name: [32, 0, "dynamic"] if dist is not None else [s.bits, s.block_size, s.state_map] for s in t.specs
        }
    groups = packed_groups(param_groups)
    meta = {
        "format": FORMAT,
        "optimizer": binding.kind,
        "global_step": global_step,
        "layout": layout,
    }
    return {"state": state, "param_groups": groups, "octopt": meta}


def load_param_state(binding: Any, p: torch.Tensor, entry: Any, fn: str) -> None:
    """Replaces the state of one parameter from a state-dict entry (optimizer.state[p] = entry)."""
    t = binding.tensor(p)
    where = f"{fn}: the state of a parameter of shape {tuple(p.shape)}"
    if not isinstance(entry, dict):
        raise TypeError(f"{where} must be a dict, got {type(entry).__name__}")
    kind = binding.kind
    dist = binding.dist(p)
    if _bnb_keys.NESTED in entry or "state1" in entry:
        pending = _bnb_import.from_bnb(t._owner, t, entry, kind, where)
    elif _dcp.META in entry:
        pending, _ = _dcp.load_entry(t._owner, t, entry, dist, where)
    else:
        pending = _from_native(t._owner, t, local_entry(entry, dist, t, where), None, where)
    step = _step(entry.get("step"), where)
    scalar = _hparams.tensor_scalar_name(kind)
    mu = _hparams.checked_tensor_scalar(kind, entry.get(scalar), where) if scalar is not None else None
    with torch.no_grad():
        for dst, src in pending:
            dst.copy_(src.reshape(dst.shape))
    t.step = step
    core = t._owner
    if core.global_step < step:  # as load_state_dict does without octopt's metadata
        core.global_step = step
    if mu is not None:
        mus = list(t._owner._plan.tensor_mu_products())
        mus[t._index] = mu
        t._owner._plan.set_tensor_mu_products(mus, fn)


def local_entry(entry: dict, dist: Any, t: _TensorState, where: str) -> dict:
    """A state entry with DTensor values replaced by their local shards (checked against the parameter's)."""
    out = {}
    for k, v in entry.items():
        if _dist.is_dtensor(v):
            if dist is None:
                raise ValueError(f"{where}: '{k}' is a DTensor but the parameter is a plain tensor")
            if tuple(v.placements) != dist.placements or v.shape != dist.shape:
                raise ValueError(
                    f"{where}: '{k}' is a DTensor of shape {tuple(v.shape)} with placements "
                    f"{tuple(v.placements)}; the parameter has shape {tuple(dist.shape)} and placements "
                    f"{dist.placements} (redistribute the state, or load it with torch.distributed.checkpoint)"
                )
            v = _dist.local(v)
            spec = next((sp for sp in t.specs if sp.name == k), None)
            if spec is not None and spec.bits != 32 and v.is_floating_point() and _looks_like_codes(v):
                raise ValueError(
                    f"{where}: '{k}' holds only whole numbers in [0, 255]: 8-bit codes of a checkpoint in the "
                    "quantized form, read into the float32 form of octopt.torch.dequantized_state_dict (DCP "
                    "converts dtypes silently); load that checkpoint without dequantized_state_dict"
                )
        elif dist is not None and isinstance(v, torch.Tensor) and v.dim() > 0 and v.shape != t.param.shape:
            raise ValueError(
                f"{where}: '{k}' is a plain tensor of shape {tuple(v.shape)}, but the parameter is a DTensor "
                f"whose local shard has shape {tuple(t.param.shape)}; pass DTensors laid out like the "
                "parameter (torch.distributed.checkpoint's set_optimizer_state_dict does)"
            )
        out[k] = v
    return out


def _looks_like_codes(v: torch.Tensor) -> bool:
    """Whether float values are uint8 codes converted to float (trained optimizer state never is whole
    numbers in [0, 255] of several values with one above 1; a constant state, which can be, is let through)."""
    if v.numel() == 0:
        return False
    hi, lo = float(v.max()), float(v.min())
    return 1 < hi <= 255 and lo >= 0 and hi != lo and torch.equal(v, v.round())


def load_state_dict(binding: Any, param_groups: list, sd: Any, fn: str) -> None:
    """Loads a state dict (octopt.torch's, torch.optim's or bitsandbytes') into a CoreBinding's parameters
    and the user's ``param_groups``; everything is validated before anything changes."""
    kind = binding.kind
    if (
        not isinstance(sd, dict)
        or not isinstance(sd.get("state"), dict)
        or not isinstance(sd.get("param_groups"), list)
    ):
        raise TypeError(
            f"{fn}: argument 'state_dict' must be a dict with 'state' (a dict) and 'param_groups' (a "
            "list), as state_dict() returns"
        )
    meta = sd.get("octopt")
    if meta is not None:
        if not isinstance(meta, dict):
            raise TypeError(f"{fn}: argument 'state_dict' has 'octopt' metadata that is not a dict")
        if meta.get("format") != FORMAT:
            raise ValueError(
                f"{fn}: argument 'state_dict' has octopt metadata of an unknown format {meta.get('format')!r}"
            )
        if meta.get("optimizer") != kind:
            raise ValueError(
                f"{fn}: the state is for optimizer '{meta.get('optimizer')}' but this optimizer is '{kind}'"
            )
    saved_groups = sd["param_groups"]
    if len(saved_groups) != len(param_groups):
        raise ValueError(
            f"{fn}: the state has {len(saved_groups)} param groups but this optimizer has {len(param_groups)}"
        )
    for gi, (h, g) in enumerate(zip(saved_groups, param_groups)):
        if not isinstance(h, dict) or not isinstance(h.get("params"), (list, tuple)):
            raise TypeError(f"{fn}: param group {gi} of the state is not a dict with a 'params' list")
        if len(h["params"]) != len(g["params"]):
            raise ValueError(
                f"{fn}: param group {gi} has {len(h['params'])} parameters in the state but {len(g['params'])} here"
            )
    pending: list[tuple[torch.Tensor, torch.Tensor]] = []
    steps: list[tuple[_TensorState, int]] = []
    # NAdam, per core: a missing entry starts afresh
    mus = {id(c): [1.0] * len(c.tensors) for c in binding.cores.values()}
    any_bnb = False
    dcp_steps: list[int] = []  # the global step in the metadata of quantized DTensor entries
    for i, (saved_id, p) in enumerate(
        zip(chain.from_iterable(h["params"] for h in saved_groups), _params(param_groups))
    ):
        t = binding.tensor(p)
        core = t._owner
        where = f"{fn}: the state of parameter {i}"
        entry = sd["state"].get(saved_id)
        if entry is None:
            pending += _slot_copies.initial(core, t, [s.name for s in t.specs])
            steps.append((t, 0))
            continue
        if not isinstance(entry, dict):
            raise TypeError(f"{where} must be a dict, got {type(entry).__name__}")
        if _bnb_keys.NESTED in entry or "state1" in entry:
            any_bnb = True
            pending += _bnb_import.from_bnb(core, t, entry, kind, where)
        elif _dcp.META in entry:
            copies, gstep = _dcp.load_entry(core, t, entry, binding.dist(p), where)
            pending += copies
            dcp_steps.append(gstep)
        else:
            lay = meta["layout"].get(saved_id) if meta is not None and isinstance(meta.get("layout"), dict) else None
            local = local_entry(entry, binding.dist(p), t, where)
            pending += _from_native(core, t, local, lay, where)
        steps.append((t, _step(entry.get("step"), where)))
        scalar = _hparams.tensor_scalar_name(kind)
        if scalar is not None:
            mus[id(core)][t._index] = _hparams.checked_tensor_scalar(kind, entry.get(scalar), where)
    new_groups = _merged_groups(binding, param_groups, saved_groups, any_bnb, fn)
    if any_bnb and kind == "adam" and any(float(g.get("weight_decay", 0)) != 0 for g in new_groups):
        import warnings

        warnings.warn(
            f"{fn}: bitsandbytes' Adam8bit decays weights decoupled (like AdamW); octopt's Adam adds the "
            "decay to the gradient like torch.optim.Adam. Use AdamW8bit to continue identically.",
            stacklevel=3,
        )
    # everything validated: commit
    with torch.no_grad():
        for dst, src in pending:
            dst.copy_(src.reshape(dst.shape))
    for t, s in steps:
        t.step = s
    if _hparams.has_tensor_scalar(kind):
        for c in binding.cores.values():
            c._plan.set_tensor_mu_products(mus[id(c)], fn)
    for g, new in zip(param_groups, new_groups):
        params = g["params"]
        g.clear()
        g.update(new)
        g["params"] = params
    for c in binding.cores.values():
        if meta is not None:
            c.global_step = int(meta.get("global_step", 0))
        elif dcp_steps:  # torch.distributed.checkpoint keeps no top-level key but 'state' and 'param_groups'
            c.global_step = max(dcp_steps)
        else:
            c.global_step = max((s for _, s in steps), default=0)


def _merged_groups(binding: Any, param_groups: list, saved_groups: list, from_bnb: bool, fn: str) -> list[dict]:
    kind = binding.kind
    skip = set(FOREIGN_GROUP_KEYS) | set(LAYOUT_KEYS) | {"params"}
    if from_bnb and kind != "ademamix":
        skip |= {"alpha", "t_alpha", "t_beta3"}  # bitsandbytes keeps AdEMAMix's keys in every group
    out = []
    for gi, (h, g) in enumerate(zip(saved_groups, param_groups)):
        new = {k: v for k, v in g.items() if k != "params"}
        new.update(
            {k: (tuple(v) if k == "betas" and isinstance(v, list) else v) for k, v in h.items() if k not in skip}
        )
        for link in binding.links[gi]:
            m = dict(binding.defaults)
            m.update({k: v for k, v in new.items() if k in _hparams.GROUP_KEYS})
            m.update(link.fixed)
            _hparams.validate_group(kind, m, f"{fn}: param group {gi}")
        out.append(new)
    return out


def _scalar_keys(kind: str) -> set[str]:
    name = _hparams.tensor_scalar_name(kind)
    return {name} if name is not None else set()


def _step(v: Any, where: str) -> int:
    if isinstance(v, torch.Tensor):
        if v.numel() != 1:
            raise ValueError(f"{where} has a 'step' tensor of {v.numel()} elements; expected one")
        v = v.item()
    if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)) or v < 0 or v != int(v):
        raise ValueError(f"{where} has a bad 'step' {v!r}; expected a non-negative whole number")
    return int(v)


def _from_native(core: Any, t: _TensorState, entry: dict, lay: Any, where: str) -> list:
    names = {s.name for s in t.specs}
    if t.info.size == 0:  # an empty shard of a DTensor (or an empty tensor): no state to restore
        return []
    known = {"step"} | _scalar_keys(core.kind) | names | {n + "_absmax" for n in names}
    unknown = sorted(str(k) for k in entry if k not in known)
    if unknown:
        raise ValueError(
            f"{where} has entries {unknown} that this optimizer does not use (it keeps "
            f"{sorted(names)}); was it saved by a different optimizer?"
        )
    out = []
    for spec in t.specs:
        v = entry.get(spec.name)
        if v is None:
            out += _slot_copies.initial(core, t, [spec.name])
            continue
        v = _slot_copies.tensor(v, where, spec.name)
        keys = [spec.name, spec.name + "_absmax"]
        absmax = entry.get(spec.name + "_absmax")
        if absmax is None:
            out += _slot_copies.into(t, spec, _slot_convert.FLOAT, v, None, where, keys)
            continue
        absmax = _slot_copies.tensor(absmax, where, spec.name + "_absmax")
        src = lay.get(spec.name) if isinstance(lay, dict) else None
        state_map = "dynamic"  # state dicts saved before the option existed hold the dynamic maps
        if src is not None:
            bits, block_size = int(src[0]), int(src[1])
            if len(src) > 2:
                state_map = src[2]
        else:  # a state dict without octopt's metadata: the layout its sizes fit (ours, then the defaults)
            bits = _slot_convert.infer_bits(t.info.size, v.numel(), where, keys)
            candidates = [spec.block_size, 256 if bits == 8 else 128] + [1 << k for k in range(5, 13)]
            block_size = _slot_convert.infer_block_size(t.info.size, absmax.numel(), candidates, where, keys)
        if state_map not in _hparams.STATE_MAPS or (state_map == "fp8" and bits != 8):
            raise ValueError(f"{where}: '{spec.name}' has state map {state_map!r} for {bits}-bit codes in the metadata")
        q = core.slot_map(type(spec)(spec.index, spec.name, spec.signed, bits, block_size, state_map))
        out += _slot_copies.into(t, spec, _slot_convert.form(bits, block_size, q), v, absmax, where, keys)
    return out
