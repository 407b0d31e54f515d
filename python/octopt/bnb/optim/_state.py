"""octopt.bnb's state under bitsandbytes' names: ``optimizer.state[p]`` holds ``step``, ``state1``,
``state2``, ``qmap1``, ``qmap2``, ``absmax1``, ``absmax2`` (and ``gnorm_vec`` / ``unorm_vec`` where
percentile or update-norm clipping is on) as views of octopt's own state, so reads and in-place writes
reach the optimizer; the state dict in bitsandbytes' format; and the allocator that lays AdEMAMix's two
first moments out as the one two-row tensor bitsandbytes names ``state1``, and pages state on CUDA."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any

import torch

from ... import _arrays, _bnb_keys, _octopt, _placement
from ...torch.binding import CoreBinding, Link, packed_groups

NESTED = _bnb_keys.NESTED
# octopt's slot -> bitsandbytes' state number, per core optimizer (AdEMAMix: m1 and m2 are rows of state1)
NUMBER = {name: {slot: k for slot, (k, _) in slots.items()} for name, slots in _bnb_keys.SLOTS.items()}
PAGED_MIN_NUMEL = 100_000  # bitsandbytes pages the state of tensors this large (smaller ones stay on the device)
_QUANT_KEYS = ("state1", "state2", "qmap1", "qmap2", "absmax1", "absmax2", "gnorm_vec", "unorm_vec")


@dataclass
class Bucket:
    """Parameters of one param group with one configuration: one core group per device."""

    group: int  # index into param_groups
    positions: list  # the parameters' positions in the group
    links: list[Link]  # its core groups
    config: dict  # the configuration last handed to the core


def check_bucket(opt: Any, b: Bucket, c: dict, fn: str) -> None:
    """After an override changed: every parameter of a bucket must still share its configuration (the
    core steps them as one group); layout keys changed after the state was laid out are ignored, as
    bitsandbytes ignores them once the state exists."""
    group = opt.param_groups[b.group]

    def hp(conf: dict) -> dict:
        return {k: v for k, v in conf.items() if k not in ("optim_bits", "min_8bit_size", "block_wise")}

    for pi in b.positions[1:]:
        if hp(opt.get_config(b.group, pi, group)) != hp(c):
            raise ValueError(
                f"{fn}: GlobalOptimManager.override_config gave parameter {pi} of param group {b.group} "
                "its own values after the optimizer laid out its state together with other parameters; "
                "override it before the first step (octopt steps parameters of one configuration as one group)"
            )


class StateFactory:
    """The core's state allocator for octopt.bnb: AdEMAMix's m1 and m2 (and their absmax) are the two
    rows of one tensor, as bitsandbytes' ``state1`` is; on CUDA a paged optimizer's large buffers live in
    managed memory and are prefetched to the device before each step."""

    def __init__(self, opt: Any):
        self.paired = opt._bnb_name == "ademamix"
        self.paged = bool(opt.is_paged)
        self.rows: dict[int, list] = {}
        self.managed: list[tuple[Any, torch.Tensor]] = []  # (owner, tensor) of every managed buffer

    def __call__(
        self, count: int, dtype: str, param: Any, info: _arrays.ArrayInfo, slot: int, buffer: str, page_offset: int
    ) -> Any:
        if self.paired and slot in (0, 2):
            # AdEMAMix's m1 (slot 0) allocates a two-row tensor per buffer (values, then absmax, as the core asks
            # for them) and m2 (slot 2) takes its second row
            rows = self.rows.setdefault(id(param), [])
            if slot == 0:
                pair = self._empty(2 * count, dtype, param, info, page_offset).view(2, count)
                rows.append(pair)
                return pair[0]
            return rows[0 if buffer == "values" else 1][1]
        return self._empty(count, dtype, param, info, page_offset)

    def _empty(self, count: int, dtype: str, param: Any, info: _arrays.ArrayInfo, page_offset: int) -> Any:
        if self.paged and info.device == "cuda" and count >= PAGED_MIN_NUMEL:
            owner = _octopt.ManagedBuffer(count * (1 if dtype == "uint8" else 4), int(param.get_device()))
            t = torch.as_tensor(owner, device=param.device).view(getattr(torch, dtype))
            self.managed.append((owner, t))
            return t
        return _placement.state_empty(param, info, count, dtype, page_offset)

    def prefetch(self) -> None:
        """Moves the managed state to the device on the current stream (it may have been evicted)."""
        for owner, _ in self.managed:
            owner.prefetch(torch.cuda.current_stream(owner.device).cuda_stream)


def check_pairs(opt: Any, tensors: list) -> None:
    """AdEMAMix: checks that the core's m1 and m2 are the rows of the paired tensors (the allocation
    order the factory relies on) and records them for ``state1``/``absmax1``."""
    if opt._bnb_name != "ademamix":
        return
    factory = opt._core_opts["_state_factory"]
    for t in tensors:
        rows = factory.rows.pop(id(t.param), None)
        if t.info.size == 0:  # nothing was allocated
            eight = t.buffers[0][1] is not None
            empty = torch.empty((2, 0), dtype=torch.uint8 if eight else torch.float32, device=t.param.device)
            opt._pairs[id(t.param)] = (empty, torch.empty((2, 0), device=t.param.device) if eight else None)
            continue
        m1, m2 = t.buffers[0], t.buffers[2]
        ok = (
            rows is not None and rows[0][0].data_ptr() == m1[0].data_ptr() and rows[0][1].data_ptr() == m2[0].data_ptr()
        )
        if ok and m1[1] is not None:
            ok = (
                len(rows) == 2
                and rows[1][0].data_ptr() == m1[1].data_ptr()
                and rows[1][1].data_ptr() == m2[1].data_ptr()
            )
        if not ok:
            raise RuntimeError(
                f"{type(opt).__name__}: the core allocated AdEMAMix's state in an unexpected order; "
                "octopt.bnb cannot present m1 and m2 as bitsandbytes' two-row 'state1'"
            )
        opt._pairs[id(t.param)] = (rows[0], rows[1] if len(rows) == 2 else None)


_MAPS: dict[tuple, torch.Tensor] = {}


def _qmap(t: Any, spec: Any) -> torch.Tensor:
    key = (spec.bits, spec.signed, str(t.param.device))
    if key not in _MAPS:
        _MAPS[key] = torch.from_numpy(CoreBinding.slot_map(spec).copy()).to(t.param.device)
    return _MAPS[key]


class ParamState(MutableMapping):
    """One parameter's state under bitsandbytes' names; the tensors are octopt's state (views)."""

    def __init__(self, opt: Any, p: torch.Tensor):
        self._opt, self._p = opt, p
        self._t = opt._bound.tensor(p)

    def _entries(self) -> dict:
        t, opt = self._t, self._opt
        out: dict[str, Any] = {"step": t.step}
        number = NUMBER[opt._core_kind]
        pairs = opt._pairs.get(id(self._p))
        for spec in t.specs:
            k = number.get(spec.name)
            if k is None:
                continue
            data, absmax = t.buffers[spec.index]
            if pairs is not None and spec.name in ("m1", "m2"):
                if spec.name == "m2":
                    continue
                data, absmax = pairs[0], pairs[1]
                out["state" + k] = data.view(2, *self._p.shape)
            else:
                out["state" + k] = data.view(self._p.shape)
            if spec.bits == 8:
                out["qmap" + k] = _qmap(t, spec)
                out["absmax" + k] = absmax
        out.update(opt._extra.get(id(self._p), {}))
        return out

    def __getitem__(self, key: str) -> Any:
        return self._entries()[key]

    def __setitem__(self, key: str, value: Any) -> None:
        entries = self._entries()
        if key == "step":
            self._t.step = int(value)
        elif key in entries and isinstance(entries[key], torch.Tensor):
            # bitsandbytes' state is a dict of tensors; here the tensors are octopt's state: write through
            with torch.no_grad():
                entries[key].copy_(value)
        else:
            raise KeyError(f"{type(self._opt).__name__}.state: '{key}' is not a state of this parameter")

    def __delitem__(self, key: str) -> None:
        raise TypeError(f"{type(self._opt).__name__}.state: the state of a parameter cannot be deleted")

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries())

    def __len__(self) -> int:
        return len(self._entries())

    def __repr__(self) -> str:
        return repr(self._entries())


class StateView(Mapping):
    """``optimizer.state``: empty until the state is laid out (bitsandbytes' too); then, per parameter
    that has taken a step, its ParamState (``state[p]`` reads any parameter of the optimizer)."""

    def __init__(self, opt: Any):
        self._opt = opt

    def __getitem__(self, p: Any) -> Any:
        opt = self._opt
        if not isinstance(p, torch.Tensor):
            raise KeyError(p)
        if opt._bound is None:
            if any(q is p for g in opt.param_groups for q in g["params"]):
                opt._ensure_core()
            else:
                raise KeyError(p)
        if not opt._bound.holds(p):
            raise KeyError(p)
        return ParamState(opt, p)

    def __contains__(self, p: object) -> bool:
        opt = self._opt
        return opt._bound is not None and opt._bound.holds(p) and opt._bound.tensor(p).step > 0

    def __iter__(self) -> Iterator[torch.Tensor]:
        opt = self._opt
        return iter([p for p in opt._param_list() if p in self])

    def __len__(self) -> int:
        return sum(1 for _ in self)


def state_dict(opt: Any) -> dict:
    params = opt._param_list()
    state = {}
    for i, p in enumerate(params):
        if p not in opt.state:
            continue
        entries = dict(ParamState(opt, p).items())
        quant = {k: entries.pop(k) for k in _QUANT_KEYS if k in entries}
        entries[NESTED] = quant
        state[i] = entries
    groups = packed_groups(opt.param_groups)
    return {"state": state, "param_groups": groups}
