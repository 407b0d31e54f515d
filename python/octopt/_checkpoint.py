"""Optimizer state <-> state dicts (plain Python data) and state files (written and read by the core's
StepPlan, docs/format.md section 5). Everything is validated before anything changes."""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from . import _arrays, _hparams, _layout, _slot_convert


def groups_of(opt: Any) -> list[dict]:
    """The param groups as plain data: every key, and the indices of the group's parameters."""
    out = []
    for gi, g in enumerate(opt.param_groups):
        h = {k: (list(v) if isinstance(v, tuple) else v) for k, v in g.items() if k != "params"}
        h["params"] = [i for i, t in enumerate(opt._tensors) if t.group == gi]
        out.append(h)
    return out


def check_state_dict(opt: Any, sd: Any, fn: str) -> tuple[list[tuple[Any, Any]], list[Any]]:
    """Validates sd against opt; returns the (destination buffer, source array) copies to make and the
    core HyperParams of each group."""
    if not isinstance(sd, dict) or not {"optimizer", "param_groups", "state"} <= set(sd):
        raise ValueError(f"{fn}: expected a dict with 'optimizer', 'param_groups' and 'state' (from state_dict())")
    if sd["optimizer"] != opt.kind:
        raise ValueError(f"{fn}: the state is for optimizer '{sd['optimizer']}' but this optimizer is '{opt.kind}'")
    state, groups = sd["state"], sd["param_groups"]
    gstep = sd.get("global_step", 0)
    # the core holds it as int64: checked here, before anything changes, not when it is set last
    if isinstance(gstep, bool) or not isinstance(gstep, (int, np.integer)) or not 0 <= gstep < 2**63:
        raise ValueError(f"{fn}: bad global step count {gstep!r}")
    if len(state) != len(opt._tensors):
        raise ValueError(
            f"{fn}: the state has {len(state)} tensors but this optimizer has {len(opt._tensors)} parameters"
        )
    if len(groups) != len(opt.param_groups):
        raise ValueError(
            f"{fn}: the state has {len(groups)} param groups but this optimizer has {len(opt.param_groups)}"
        )
    hps = []
    for gi, (h, g) in enumerate(zip(groups, opt.param_groups)):
        mine = [i for i, t in enumerate(opt._tensors) if t.group == gi]
        if list(h.get("params", [])) != mine:
            raise ValueError(
                f"{fn}: param group {gi} holds parameters {list(h.get('params', []))} in the state but {mine} here"
            )
        merged = dict(g)
        merged.update({k: (tuple(v) if k == "betas" else v) for k, v in h.items() if k != "params"})
        hp, _ = _hparams.convert_group(opt.kind, merged, fn)
        for key in _hparams.LAYOUT_KEYS:
            if key in h and h[key] != g[key]:
                raise ValueError(f"{fn}: param group {gi} has {key}={h[key]!r} in the state but {g[key]!r} here")
        if _layout.used_slots(opt.kind, merged) != _layout.used_slots(opt.kind, g):
            raise ValueError(
                f"{fn}: param group {gi}: the state's hyper-parameters (momentum, centered) need other "
                "state slots than this optimizer's"
            )
        hps.append(hp)
    copies = []
    for i, (s, t) in enumerate(zip(state, opt._tensors)):
        where = f"{fn}: tensor {i}"
        if int(s.get("numel", -1)) != t.info.size:
            raise ValueError(f"{where} has {s.get('numel')} elements in the state but parameter {i} has {t.info.size}")
        step = s.get("step")
        if isinstance(step, bool) or not isinstance(step, (int, np.integer)) or not 0 <= step < 2**63:
            raise ValueError(f"{where}: bad step count {step!r}")
        scalar = _hparams.tensor_scalar_name(opt.kind)
        if scalar is not None:
            _hparams.checked_tensor_scalar(opt.kind, s.get(scalar), where)
        slots = s.get("slots", {})
        want = {sp.name: sp for sp in t.specs}
        if set(slots) != set(want):
            raise ValueError(f"{where} has state slots {sorted(slots)} in the state but {sorted(want)} here")
        for name, sp in want.items():
            e = slots[name]
            for key, mine_v in (("bits", sp.bits), ("block_size", sp.block_size), ("map", sp.map_name)):
                if e.get(key) != mine_v:
                    raise ValueError(f"{where} slot '{name}' has {key}={e.get(key)!r} in the state but {mine_v!r} here")
            data, absmax = t.buffers[sp.index]
            for key in ("data",) + (("absmax",) if absmax is not None else ()):
                if e.get(key) is None:
                    raise ValueError(f"{where} slot '{name}' {key} is missing")
            # the core checks the arrays (element type, size) against the slot's layout and copies them
            mine = opt._plan.slot_form(i, sp.index)
            keys = [name, f"{name} absmax"]
            src = [_arrays.to_numpy(e["data"]), _arrays.to_numpy(e["absmax"]) if absmax is not None else None]
            v, a = _slot_convert.convert(t.info.size, mine, src[0], src[1], mine, where, keys)
            copies.append((data, v))
            if absmax is not None:
                copies.append((absmax, a))
    return copies, hps


def save(opt: Any, path: Any) -> None:
    opt._sync_hparams("save")  # the file holds values set since the last step too
    opt._plan.save(os.fspath(path))


def load(opt: Any, path: Any) -> None:
    opt._plan.load(os.fspath(path))
    # the core replaced the groups' hyper-parameters: the user-facing dicts follow
    table = {h["key"]: h for h in _hparams.HPARAMS}
    for gi, g in enumerate(opt.param_groups):
        hp = opt._plan.hparams(gi)
        for key in _hparams.GROUP_KEYS:
            if key in _hparams.LAYOUT_KEYS:
                continue
            if key == "betas":
                n = 3 if _hparams.TABLE[opt.kind]["num_betas"] == 3 else 2
                g[key] = (hp.beta1, hp.beta2, hp.beta3)[:n]
            elif key == "initial_accumulator_value":
                g[key] = opt._plan.layout_options(gi).initial_accumulator_value
            else:
                v = getattr(hp, key)
                g[key] = None if table[key]["type"] == "optional_real" and v == 0 else v
        opt._synced[gi] = opt._group_key(g)
