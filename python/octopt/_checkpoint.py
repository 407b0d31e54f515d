"""Optimizer state <-> state dicts and state files. Everything is validated before anything changes."""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np

from . import _arrays, _hparams

FORMAT_KEYS = ("octopt.optimizer", "octopt.step", "octopt.hparams", "octopt.tensors")


def check_state_dict(opt: Any, sd: Any, fn: str) -> list[tuple[Any, Any]]:
    """Validates sd against opt; returns the (destination buffer, source array) copies to make."""
    if not isinstance(sd, dict) or not {"optimizer", "param_groups", "state"} <= set(sd):
        raise ValueError(f"{fn}: expected a dict with 'optimizer', 'param_groups' and 'state' (from state_dict())")
    if sd["optimizer"] != opt.kind:
        raise ValueError(f"{fn}: the state is for optimizer '{sd['optimizer']}' but this optimizer is '{opt.kind}'")
    state, groups = sd["state"], sd["param_groups"]
    gstep = sd.get("global_step", 0)
    # the native plan holds it as int64: checked here, before anything changes, not when it is set last
    if isinstance(gstep, bool) or not isinstance(gstep, (int, np.integer)) or not 0 <= gstep < 2**63:
        raise ValueError(f"{fn}: bad global step count {gstep!r}")
    if len(state) != len(opt._tensors):
        raise ValueError(f"{fn}: the state has {len(state)} tensors but this optimizer has {len(opt._tensors)} "
                         "parameters")
    if len(groups) != len(opt.param_groups):
        raise ValueError(f"{fn}: the state has {len(groups)} param groups but this optimizer has "
                         f"{len(opt.param_groups)}")
    for gi, (h, g) in enumerate(zip(groups, opt.param_groups)):
        mine = [i for i, t in enumerate(opt._tensors) if t.group == gi]
        if list(h.get("params", [])) != mine:
            raise ValueError(f"{fn}: param group {gi} holds parameters {list(h.get('params', []))} in the state but "
                             f"{mine} here")
        merged = dict(g)
        merged.update({k: (tuple(v) if k == "betas" else v) for k, v in h.items() if k != "params"})
        _hparams.validate_group(opt.kind, merged, fn)
        for key in ("bits", "block_size", "min_8bit_size", "first_moment_bits"):
            if key in h and h[key] != g[key]:
                raise ValueError(f"{fn}: param group {gi} has {key}={h[key]!r} in the state but {g[key]!r} here")
    copies = []
    for i, (s, t) in enumerate(zip(state, opt._tensors)):
        where = f"{fn}: tensor {i}"
        if int(s.get("numel", -1)) != t.info.size:
            raise ValueError(f"{where} has {s.get('numel')} elements in the state but parameter {i} has {t.info.size}")
        step = s.get("step")
        if isinstance(step, bool) or not isinstance(step, (int, np.integer)) or not 0 <= step < 2**63:
            raise ValueError(f"{where}: bad step count {step!r}")
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
            copies.append((data, _checked(e.get("data"), data, f"{where} slot '{name}' data")))
            if absmax is not None:
                copies.append((absmax, _checked(e.get("absmax"), absmax, f"{where} slot '{name}' absmax")))
    return copies


def _checked(src: Any, dst: Any, what: str) -> np.ndarray:
    if src is None:
        raise ValueError(f"{what} is missing")
    a = _arrays.to_numpy(src)
    d = _arrays.to_numpy(dst) if _arrays.framework_of(dst) != "torch" else None
    want_dtype = d.dtype if d is not None else np.dtype(str(dst.dtype).removeprefix("torch."))
    want_size = d.size if d is not None else dst.numel()
    if a.dtype != want_dtype:
        raise ValueError(f"{what} has dtype {a.dtype}, expected {want_dtype}")
    if a.size != want_size:
        raise ValueError(f"{what} has {a.size} elements, expected {want_size}")
    return a


def _tensor_name(i: int, slot: str, part: str | None) -> str:
    return f"state.{i}.{slot}" + (f".{part}" if part else "")


def save(opt: Any, path: Any) -> None:
    from . import state_file

    opt._sync_steps()  # CUDA: the step counts live on the device

    tensors: dict[str, np.ndarray] = {}
    layout = []
    for i, t in enumerate(opt._tensors):
        slots = {}
        for sp in t.specs:
            data, absmax = t.buffers[sp.index]
            if absmax is None:
                tensors[_tensor_name(i, sp.name, None)] = _arrays.to_numpy(data)
            else:
                tensors[_tensor_name(i, sp.name, "codes")] = _arrays.to_numpy(data)
                tensors[_tensor_name(i, sp.name, "absmax")] = _arrays.to_numpy(absmax)
            slots[sp.name] = {"bits": sp.bits, "block_size": sp.block_size, "map": sp.map_name}
        layout.append({"numel": t.info.size, "shape": list(t.info.shape), "dtype": t.info.dtype, "step": t.step,
                       "slots": slots})
    sd_groups = _groups(opt)
    metadata = {
        "octopt.optimizer": opt.kind,
        "octopt.step": str(int(opt._plan.global_step)),
        "octopt.hparams": json.dumps(sd_groups, sort_keys=True),
        "octopt.tensors": json.dumps(layout, sort_keys=True),
    }
    state_file.save(os.fspath(path), tensors, metadata)


def _groups(opt: Any) -> list[dict]:
    out = []
    for gi, g in enumerate(opt.param_groups):
        h = {k: (list(v) if isinstance(v, tuple) else v) for k, v in g.items() if k != "params"}
        h["params"] = [i for i, t in enumerate(opt._tensors) if t.group == gi]
        out.append(h)
    return out


def _load(opt: Any, path: Any) -> None:
    from . import state_file

    fn = "load"
    tensors, metadata = state_file.load(os.fspath(path))
    missing = [k for k in FORMAT_KEYS if k not in metadata]
    if missing:
        raise state_file.StateFileError(f"{fn}: {os.fspath(path)} is not an octopt optimizer state file "
                                        f"(metadata lacks {', '.join(missing)})")
    try:
        groups = json.loads(metadata["octopt.hparams"])
        layout = json.loads(metadata["octopt.tensors"])
        global_step = int(metadata["octopt.step"])
    except (ValueError, TypeError) as e:
        raise state_file.StateFileError(f"{fn}: {os.fspath(path)} has malformed octopt metadata: {e}") from e
    if not isinstance(layout, list) or not isinstance(groups, list):
        raise state_file.StateFileError(f"{fn}: {os.fspath(path)} has malformed octopt metadata")
    state = []
    for i, entry in enumerate(layout):
        if not isinstance(entry, dict) or not isinstance(entry.get("slots"), dict):
            raise state_file.StateFileError(f"{fn}: {os.fspath(path)}: tensor {i} has malformed metadata")
        slots = {}
        for name, spec in entry["slots"].items():
            e = dict(spec)
            if spec.get("bits") == 32:
                e["data"] = tensors.get(_tensor_name(i, name, None))
            else:
                e["data"] = tensors.get(_tensor_name(i, name, "codes"))
                e["absmax"] = tensors.get(_tensor_name(i, name, "absmax"))
            slots[name] = e
        shape = entry.get("shape")
        t = opt._tensors[i] if i < len(opt._tensors) else None
        if t is not None and shape is not None and tuple(shape) != tuple(t.info.shape) and \
                int(entry.get("numel", -1)) == t.info.size:
            raise ValueError(f"{fn}: tensor {i} has shape {tuple(shape)} in the file but parameter {i} has shape "
                             f"{tuple(t.info.shape)}")
        state.append({"step": entry.get("step"), "numel": entry.get("numel"), "slots": slots})
    sd = {"optimizer": metadata["octopt.optimizer"], "global_step": global_step, "param_groups": groups,
          "state": state}
    opt.load_state_dict(sd)


def load(opt: Any, path: Any) -> None:
    from . import state_file

    # The metadata passed its checksum, but a file octopt did not write may still hold documents of the
    # wrong shape; whatever that raises while being validated (nothing has changed yet) is a bad file.
    try:
        _load(opt, path)
    except (TypeError, AttributeError, KeyError, IndexError) as e:
        raise state_file.StateFileError(f"load: {os.fspath(path)} has malformed octopt metadata: "
                                        f"{type(e).__name__}: {e}") from e
