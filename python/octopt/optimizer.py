"""The framework-neutral optimizer family: a thin front end over the core's StepPlan, which owns the
layout, the state, the step counters and the files. This module converts arguments and keeps the
user-facing ``param_groups`` dicts in step with the core's groups."""

from __future__ import annotations

import copy
import threading
from typing import Any, Iterable

import numpy as np

from . import _arrays, _hparams, _layout, _octopt, _placement


class _TensorState:
    """One parameter and its optimizer state, as the core laid it out."""

    __slots__ = ("param", "info", "group", "block_size", "specs", "buffers", "_owner", "_index")

    def __init__(
        self,
        param: Any,
        info: _arrays.ArrayInfo,
        group: int,
        block_size: int,
        specs: list,
        owner: Any = None,
        index: int = -1,
    ):
        self.param = param  # the user's array, held by reference and updated in place
        self.info = info
        self.group = group
        self.block_size = block_size
        self.specs = specs  # _layout.SlotSpec per used state slot
        self.buffers: dict[int, tuple[Any, Any]] = {}  # slot -> (float32 values | uint8 codes, absmax | None)
        self._owner = owner
        self._index = index

    @property
    def step(self) -> int:
        """Steps this tensor has taken (its grad was not None); the core's counter."""
        return int(self._owner._plan.tensor_steps()[self._index])

    @step.setter
    def step(self, value: int) -> None:
        plan = self._owner._plan
        steps = list(plan.tensor_steps())
        steps[self._index] = int(value)
        plan.set_tensor_steps(steps, "step")

    @property
    def mu_product(self) -> float | None:
        """NAdam: the running product of this tensor's momentum coefficients (None for other optimizers)."""
        if not _hparams.has_tensor_scalar(self._owner.kind):
            return None
        return float(self._owner._plan.tensor_mu_products()[self._index])


def _numpy_grad_args(grads: Any, tensors: list, fn: str) -> list:
    """NumPy gradients as the native layer takes them: a bfloat16 (ml_dtypes) gradient as the uint16 view of
    its bits, as its parameter was added (NumPy exports that dtype neither through DLPack nor through the
    buffer protocol). A plain uint16 array is refused here, since the native layer reads such views as bits."""
    out = list(grads)
    for i, g in enumerate(out):
        if not isinstance(g, np.ndarray):
            continue
        if g.dtype.name == "bfloat16":
            out[i] = g.view(np.uint16)
        elif g.dtype == np.uint16 and i < len(tensors):
            raise TypeError(
                f"{fn}: argument 'grads[{i}]' must be float32 or the parameter's dtype "
                f"({tensors[i].info.dtype}), got uint16"
            )
    return out


class _LikeAllocator:
    """The core's state allocator: arrays in the framework and on the device of the parameter being
    added (set before each add_tensor), host buffers starting where the core asks within a page
    (_placement.py). ``factory(count, dtype, param, info, slot, buffer, page_offset)``, when set,
    allocates instead (the bitsandbytes namespace's paged and paired buffers)."""

    __slots__ = ("like", "factory")

    def __init__(self, factory: Any = None):
        self.like: tuple[Any, _arrays.ArrayInfo] | None = None
        self.factory = factory

    def __call__(self, count: int, dtype: str, slot: int, buffer: str, page_offset: int) -> Any:
        param, info = self.like
        if self.factory is not None:
            return self.factory(count, dtype, param, info, slot, buffer, page_offset)
        return _placement.state_empty(param, info, count, dtype, page_offset)


def group_params(fn: str, group: dict) -> list:
    """The arrays of a param group (one array or an iterable of them), after checking that it is a dict with
    'params'."""
    if not isinstance(group, dict) or "params" not in group:
        raise TypeError(f"{fn}: a param group must be a dict with a 'params' key")
    params = group["params"]
    return [params] if _arrays.framework_of(params) is not None else list(params)


class Optimizer:
    """Base of octopt's optimizers. Subclasses (octopt.family) set ``kind`` and ``defaults`` from the
    core's optimizer table.

    ``params`` is an iterable of arrays (NumPy, torch CPU or CUDA tensors, CuPy arrays) or of
    param-group dicts (``{"params": [...], "lr": ..., "bits": ...}``) whose keys override the
    defaults. All parameters live on one device; state is allocated there. On a GPU a step is
    enqueued on a stream and never synchronizes (see docs/cuda.md).
    """

    kind = ""
    defaults: dict = {}

    def __init__(
        self,
        params: Iterable,
        *,
        seed: int = 0,
        stochastic_rounding: bool | None = None,
        stochastic_bf16: bool = False,
        percentile: float = 0.0,
        strict: bool = False,
        _state_factory: Any = None,
        _signed_maps: bool = False,
        **options: Any,
    ):
        fn = type(self).__name__
        defaults = _hparams.defaults(self.kind)
        defaults.update(self.defaults)
        for key in options:
            if key not in defaults:
                raise TypeError(f"{fn}: unexpected option '{key}'")
        defaults.update(options)
        self._defaults = defaults
        if isinstance(percentile, bool) or not isinstance(percentile, (int, float)):
            raise TypeError(f"{fn}: 'percentile' must be a number, got {type(percentile).__name__}")
        if not (0.0 <= float(percentile) <= 100.0):
            raise ValueError(f"{fn}: 'percentile' must be in [0, 100], got {percentile}")
        self.seed = _arrays.check_int(seed, fn, "seed", 0, 2**64 - 1)
        # None: stochastic for 4-bit states, nearest for 8-bit; True/False: for every quantized state
        self.stochastic_rounding = None if stochastic_rounding is None else bool(stochastic_rounding)
        self.stochastic_bf16 = bool(stochastic_bf16)
        self.percentile = float(percentile)
        self.strict = bool(strict)
        self.param_groups: list[dict] = []
        self._tensors: list[_TensorState] = []
        self._alloc = _LikeAllocator(_state_factory)
        self._plan = _octopt.StepPlan(
            self.kind,
            self.seed,
            self.stochastic_rounding,
            self.stochastic_bf16,
            self.percentile,
            self.strict,
            self._alloc,
            fn,
            signed_maps=bool(_signed_maps),  # octopt.bnb: bitsandbytes' maps for RMSprop and Adagrad
        )
        self._synced: list[tuple] = []  # per group: the values last handed to the core
        # Held for a whole step, so that a second thread is refused before anything changes.
        self._step_lock = threading.Lock()
        groups = _as_groups(params, fn)
        if not groups:
            raise ValueError(f"{fn}: got an empty parameter list")
        for g in groups:
            self.add_param_group(g)

    # -- construction -------------------------------------------------------------------------
    def add_param_group(self, group: dict) -> None:
        fn = type(self).__name__
        params = group_params(fn, group)
        full = dict(self._defaults)
        full.update({k: v for k, v in group.items() if k != "params"})
        hp, lo = _hparams.convert_group(self.kind, full, fn)
        seen = {id(t.param) for t in self._tensors}
        infos = []
        for i, p in enumerate(params):
            arg = f"params[{len(self._tensors) + i}]"
            info = _arrays.check(p, fn, arg, _arrays.FLOAT_DTYPES, writeable=True)
            if info.device == "cuda":
                if not _octopt.cuda_built():
                    raise ValueError(f"{fn}: argument '{arg}' is on {info.where} but octopt was built without CUDA")
                if self.strict:
                    raise ValueError(
                        f"{fn}: argument 'strict' must be False for CUDA parameters (checking the "
                        "gradients first would synchronize every step); read skipped_blocks instead"
                    )
            where = self._tensors[0].info.where if self._tensors else (infos[0].where if infos else None)
            if where is not None and info.where != where:
                raise ValueError(
                    f"{fn}: argument '{arg}' is on {info.where} but 'params[0]' is on {where}; "
                    "all parameters of an optimizer must be on one device"
                )
            if id(p) in seen:
                raise ValueError(f"{fn}: argument '{arg}' appears more than once")
            seen.add(id(p))
            infos.append(info)
        gid = self._plan.add_group(hp, lo, fn)
        full["params"] = params
        self.param_groups.append(full)
        self._synced.append(self._group_key(full))
        for p, info in zip(params, infos):
            self._alloc.like = (p, info)
            try:
                arg, bf16_bits = _arrays.float_kernel_arg(p)
                index = self._plan.add_tensor(gid, arg, fn, bf16_bits)
            finally:
                self._alloc.like = None
            self._tensors.append(self._tensor_state(p, info, gid, index))

    def _tensor_state(self, p: Any, info: _arrays.ArrayInfo, gid: int, index: int) -> _TensorState:
        t = _TensorState(p, info, gid, self._plan.tensor_block_size(index), [], self, index)
        for slot, name, signed, bits, block_size, state_map, _stochastic, data, absmax in self._plan.tensor_state(
            index
        ):
            t.specs.append(_layout.SlotSpec(slot, name, signed, bits, block_size, state_map))
            t.buffers[slot] = (data, absmax)
        return t

    @property
    def tensors(self) -> list[_TensorState]:
        """Each parameter with its state as the core laid it out (what the adapters build on)."""
        return self._tensors

    @staticmethod
    def slot_map(spec: _layout.SlotSpec) -> np.ndarray:
        """The quantization map of a quantized state slot."""
        return _layout.slot_map(spec)

    def initial_buffers(self, t: _TensorState) -> dict[int, tuple[Any, Any]]:
        """Fresh arrays holding the initial state of t's slots (what a new optimizer starts from)."""
        group = self.param_groups[t.group]
        out = {}
        for spec in t.specs:
            init = _layout.initial_value(self.kind, spec, group)
            n = t.info.size
            if spec.bits == 32:
                values = _arrays.empty(t.param, t.info, (n,), "float32")
                _fill(values, init)
                out[spec.index] = (values, None)
                continue
            codes = _arrays.empty(t.param, t.info, ((n + 1) // 2 if spec.bits == 4 else n,), "uint8")
            absmax = _arrays.empty(t.param, t.info, (_arrays.num_blocks(n, spec.block_size),), "float32")
            code, _ = _layout.initial_fill(spec, init)
            _fill(codes, code)
            _fill(absmax, init)
            out[spec.index] = (codes, absmax)
        return out

    # -- hyper-parameters ---------------------------------------------------------------------
    @staticmethod
    def _group_key(g: dict) -> tuple:
        return (len(g), *(g.get(k) for k in _hparams.GROUP_KEYS))  # len: an unknown key added is seen too

    def _sync_hparams(self, fn: str) -> None:
        """Hands the groups whose values changed since the last step to the core, which validates them."""
        for gi, g in enumerate(self.param_groups):
            key = self._group_key(g)
            if key == self._synced[gi]:
                continue
            lo = self._plan.layout_options(gi)
            for k in _hparams.LAYOUT_KEYS:
                here = getattr(lo, k) or None if k in ("block_size", "first_moment_bits") else getattr(lo, k)
                if g.get(k) != here:
                    raise ValueError(
                        f"{fn}: param group {gi} has '{k}'={g.get(k)!r} but its state was laid out "
                        f"with {here!r}; the state layout cannot change after the group was added"
                    )
            _hparams.check_keys(self.kind, g, fn)
            self._plan.set_hparams(gi, _hparams.to_core(self.kind, g, fn), fn)
            self._synced[gi] = key

    # -- stepping -----------------------------------------------------------------------------
    @property
    def params(self) -> list:
        return [t.param for t in self._tensors]

    @property
    def device(self) -> str:
        """Where the parameters live: "cpu" or "cuda:N"."""
        return self._tensors[0].info.where

    @property
    def skipped_blocks(self) -> int:
        """Blocks left unchanged over all steps because their gradient held NaN/Inf. On a GPU
        this reads a device counter, which waits for the enqueued steps."""
        return int(self._plan.skipped_blocks(False))

    @property
    def last_skipped_blocks(self) -> int:
        """The same count for the last step only."""
        return int(self._plan.skipped_blocks(True))

    @property
    def global_step(self) -> int:
        """Steps taken by the optimizer (keys stochastic rounding)."""
        return int(self._plan.global_step)

    @global_step.setter
    def global_step(self, value: int) -> None:
        self._plan.global_step = int(value)

    def _grads(self, grads: Any, fn: str) -> Any:
        if not isinstance(grads, (list, tuple)):
            if _arrays.framework_of(grads) is not None or isinstance(grads, (str, bytes, dict)):
                raise TypeError(f"{fn}: argument 'grads' must be a sequence of arrays, one per parameter")
            grads = list(grads)
        return grads

    def upload(self, grads: Iterable, stream: Any = None) -> None:
        """CUDA only: uploads the gradients' addresses and the current hyper-parameters to the
        device without stepping, on ``stream`` (None: the framework's current stream). This is how
        a step captured in a CUDA graph sees a new learning rate: change ``param_groups``, call
        ``upload`` with the same gradients, replay."""
        grads = self._grads(grads, "upload")
        self._sync_hparams("upload")
        handle = _arrays.stream_handle(self._tensors[0].info, stream, "upload")
        self._plan.upload([_arrays.kernel_arg(g) if g is not None else None for g in grads], handle)

    def step(self, grads: Iterable, stream: Any = None) -> int | None:
        """Updates every parameter in place from its gradient (None: skip that parameter).

        CPU: returns the number of blocks left unchanged because their gradient held NaN/Inf
        (with ``strict=True`` such a gradient raises ValueError and nothing changes).
        CUDA: enqueues the step on ``stream`` (None: the framework's current stream; an int
        handle or an object with ``__cuda_stream__``) and returns None without synchronizing;
        ``skipped_blocks`` reads the count on request.

        A second thread stepping the same optimizer meanwhile gets RuntimeError (its step does nothing)."""
        if not self._step_lock.acquire(blocking=False):
            raise RuntimeError("step: this optimizer is already being stepped by another thread")
        try:
            grads = self._grads(grads, "step")
            self._sync_hparams("step")
            info = self._tensors[0].info
            if info.device == "cpu":
                if info.framework == "torch":
                    grads = [g.detach() if g is not None else None for g in grads]
                elif info.framework == "numpy":
                    grads = _numpy_grad_args(grads, self._tensors, "step")
                return int(self._plan.step(grads, 0))
            handle = _arrays.stream_handle(info, stream, "step")
            self._plan.step([_arrays.kernel_arg(g) if g is not None else None for g in grads], handle)
            return None
        finally:
            self._step_lock.release()

    def _step_addresses(self, addresses: list, dtypes: list, stream: int = 0) -> int:
        """The adapters' hot path: one step from gradient addresses (0: no gradient) and dtype codes
        (0 float32, 1 float16, 2 bfloat16) that the caller has checked against the parameters (dtype, shape,
        device, C-contiguity) and keeps alive for the call. Returns what step() returns (CUDA: -1)."""
        if not self._step_lock.acquire(blocking=False):
            raise RuntimeError("step: this optimizer is already being stepped by another thread")
        try:
            self._sync_hparams("step")
            return int(self._plan.step_addresses(addresses, dtypes, stream))
        finally:
            self._step_lock.release()

    def _sync_steps(self) -> None:
        """Kept for callers of the previous design: the core's counters are always current."""

    # -- introspection ------------------------------------------------------------------------
    def state_bytes(self) -> int:
        """Exact bytes of allocated optimizer state (codes, absmax and 32-bit buffers)."""
        return int(self._plan.state_bytes())

    def state_layout(self) -> list[dict]:
        """Per parameter: its slots with bits, block size and map."""
        steps = self._plan.tensor_steps()
        return [
            {
                "numel": t.info.size,
                "step": int(s),
                "slots": {p.name: {"bits": p.bits, "block_size": p.block_size, "map": p.map_name} for p in t.specs},
            }
            for t, s in zip(self._tensors, steps)
        ]

    def trust_ratios(self) -> list[float]:
        """LAMB/LARS: the trust ratio each tensor used in the last step."""
        return list(self._plan.trust_ratios())

    # -- state dicts --------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """Plain data: hyper-parameters, per-tensor step counts and copies of the state arrays."""
        from ._checkpoint import groups_of

        steps = self._plan.tensor_steps()
        scalar = _hparams.tensor_scalar_name(self.kind)
        mus = self._plan.tensor_mu_products() if scalar is not None else None
        state = []
        for i, (t, step) in enumerate(zip(self._tensors, steps)):
            slots = {}
            for s in t.specs:
                data, absmax = t.buffers[s.index]
                entry = {"bits": s.bits, "block_size": s.block_size, "map": s.map_name, "data": _copy(data)}
                if absmax is not None:
                    entry["absmax"] = _copy(absmax)
                slots[s.name] = entry
            state.append({"step": int(step), "numel": t.info.size, "slots": slots})
            if mus is not None:  # NAdam's running product of its momentum coefficients (torch's key)
                state[-1][scalar] = float(mus[i])
        return {
            "optimizer": self.kind,
            "global_step": self.global_step,
            "param_groups": groups_of(self),
            "state": state,
        }

    def load_state_dict(self, sd: dict) -> None:
        """Restores state_dict() output. Everything is validated before anything changes."""
        from ._checkpoint import check_state_dict

        pending, hps = check_state_dict(self, sd, "load_state_dict")
        for dst, src in pending:
            _copy_into(dst, src)
        self._plan.set_tensor_steps([int(s["step"]) for s in sd["state"]], "load_state_dict")
        scalar = _hparams.tensor_scalar_name(self.kind)
        if scalar is not None:
            self._plan.set_tensor_mu_products([float(s[scalar]) for s in sd["state"]], "load_state_dict")
        for gi, (g, h) in enumerate(zip(self.param_groups, sd["param_groups"])):
            for k, v in h.items():
                if k != "params":
                    g[k] = tuple(v) if k == "betas" else v
            self._plan.set_hparams(gi, hps[gi], "load_state_dict")
            self._synced[gi] = self._group_key(g)
        self._plan.global_step = int(sd.get("global_step", 0))

    def save(self, path: Any) -> None:
        """Writes the state to a safetensors-compatible file, atomically (the core's state file)."""
        from ._checkpoint import save

        save(self, path)

    def load(self, path: Any) -> None:
        """Reads a file written by save(); refuses a file that does not match these parameters
        and changes nothing unless the whole file validated."""
        from ._checkpoint import load

        load(self, path)

    def __repr__(self) -> str:
        bits = sorted({s.bits for t in self._tensors for s in t.specs}) or [32]
        return (
            f"{type(self).__name__}({len(self._tensors)} tensors, {len(self.param_groups)} group(s), "
            f"state bits {bits}, {self.state_bytes()} bytes of state)"
        )


def _as_groups(params: Any, fn: str) -> list[dict]:
    if _arrays.framework_of(params) is not None:
        raise TypeError(f"{fn}: 'params' must be an iterable of arrays or of param-group dicts, got a single array")
    if isinstance(params, dict):
        raise TypeError(f"{fn}: 'params' must be an iterable of arrays or param-group dicts, got a dict")
    items = list(params)
    if items and all(isinstance(p, dict) for p in items):
        return [dict(p) for p in items]
    if any(isinstance(p, dict) for p in items):
        raise TypeError(f"{fn}: 'params' mixes arrays and param-group dicts")
    return [{"params": items}] if items else []


def _fill(a: Any, value: float) -> None:
    if _arrays.framework_of(a) == "torch":
        a.fill_(value)
    else:
        a.fill(value)


def _copy(a: Any) -> Any:
    if _arrays.framework_of(a) == "torch":
        return a.detach().clone()
    return copy.copy(a) if not isinstance(a, np.ndarray) else a.copy()


def _copy_into(dst: Any, src: Any) -> None:
    if _arrays.framework_of(dst) == "cupy":
        import cupy

        with cupy.cuda.Device(dst.device.id):
            dst[...] = cupy.asarray(src if _arrays.framework_of(src) == "cupy" else _arrays.to_numpy(src)).reshape(
                dst.shape
            )
        return
    if _arrays.framework_of(dst) == "torch":
        import torch

        dst.copy_(torch.as_tensor(np.asarray(src) if _arrays.framework_of(src) == "numpy" else src).reshape(dst.shape))
    else:
        np.copyto(dst, _arrays.to_numpy(src).reshape(dst.shape))
