"""The framework-neutral optimizer family: params held by reference, stepped in place."""

from __future__ import annotations

import copy
import threading
from typing import Any, Iterable

import numpy as np

from . import _arrays, _hparams, _layout, _octopt


class _TensorState:
    """One parameter and its optimizer state."""

    __slots__ = ("param", "info", "group", "block_size", "specs", "buffers", "step")

    def __init__(self, param: Any, info: _arrays.ArrayInfo, group: int, block_size: int, specs: list):
        self.param = param  # the user's array, held by reference and updated in place
        self.info = info
        self.group = group
        self.block_size = block_size
        self.specs = specs  # _layout.SlotSpec per used state slot
        self.buffers: dict[int, tuple[Any, Any]] = {}  # slot -> (float32 values | uint8 codes, absmax | None)
        self.step = 0  # steps this tensor has taken (its grad was not None)


class Optimizer:
    """Base of octopt's optimizers. Subclasses set ``kind`` and ``defaults``.

    ``params`` is an iterable of arrays (NumPy, torch CPU or CUDA tensors, CuPy arrays) or of
    param-group dicts (``{"params": [...], "lr": ..., "bits": ...}``) whose keys override the
    defaults. All parameters live on one device; state is allocated there. On a GPU a step is
    enqueued on a stream and never synchronizes (see docs/cuda.md).
    """

    kind = ""
    defaults: dict = {}

    def __init__(self, params: Iterable, *, seed: int = 0, stochastic_rounding: bool | None = None,
                 stochastic_bf16: bool = False, percentile: float = 0.0, strict: bool = False, **options: Any):
        fn = type(self).__name__
        defaults = dict(_hparams.COMMON_DEFAULTS)
        defaults.update(self.defaults)
        for key in options:
            if key not in defaults:
                raise TypeError(f"{fn}: unexpected option '{key}'")
        defaults.update(options)
        self._defaults = defaults
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
        self._plan = _octopt.StepPlan(self.kind, self.seed)
        for bits, signed in sorted(_layout.CODEBOOKS, key=_layout.CODEBOOKS.get):
            q = self._map(_layout.SlotSpec(0, "", signed, bits, 0))
            # unsigned (second-moment) states never round a positive value to zero: see docs/numerics.md
            self._plan.add_codebook(np.ascontiguousarray(q, dtype=np.float32), bits, not signed)
        # Held for a whole step: the step counts are read before the native step and advanced after it,
        # so a second thread getting in between would step with stale counts (the native guard alone
        # covers only the state buffers).
        self._step_lock = threading.Lock()
        self._skipped_blocks = 0  # CPU: blocks skipped over all steps because their gradient held NaN/Inf
        self._last_skipped_blocks = 0
        groups = _as_groups(params, fn)
        if not groups:
            raise ValueError(f"{fn}: got an empty parameter list")
        for g in groups:
            self.add_param_group(g)

    # -- construction -------------------------------------------------------------------------
    def add_param_group(self, group: dict) -> None:
        fn = type(self).__name__
        if not isinstance(group, dict) or "params" not in group:
            raise TypeError(f"{fn}: a param group must be a dict with a 'params' key")
        params = group["params"]
        params = [params] if _arrays.framework_of(params) is not None else list(params)
        full = dict(self._defaults)
        full.update({k: v for k, v in group.items() if k != "params"})
        full["params"] = params
        _hparams.validate_group(self.kind, full, fn)
        seen = {id(t.param) for t in self._tensors}
        # views of one array are one parameter: stepping both would update that memory twice per step
        spans = [(i, _arrays.memory_span(t.param, t.info)) for i, t in enumerate(self._tensors)]
        gid = len(self.param_groups)
        new = []
        for i, p in enumerate(params):
            arg = f"params[{len(self._tensors) + len(new)}]"
            info = _arrays.check(p, fn, arg, _arrays.FLOAT_DTYPES, writeable=True)
            if info.device == "cuda":
                if not _octopt.cuda_built():
                    raise ValueError(f"{fn}: argument '{arg}' is on {info.where} but octopt was built without CUDA")
                if self.strict:
                    raise ValueError(f"{fn}: argument 'strict' must be False for CUDA parameters (checking the "
                                     "gradients first would synchronize every step); read skipped_blocks instead")
            where = self._tensors[0].info.where if self._tensors else (new[0].info.where if new else None)
            if where is not None and info.where != where:
                first = "params[0]"
                raise ValueError(f"{fn}: argument '{arg}' is on {info.where} but '{first}' is on {where}; "
                                 "all parameters of an optimizer must be on one device")
            if id(p) in seen:
                raise ValueError(f"{fn}: argument '{arg}' appears more than once")
            seen.add(id(p))
            spans.append((len(self._tensors) + len(new), _arrays.memory_span(p, info)))
            block_size, specs = _layout.plan_slots(self.kind, full, info.size)
            new.append(_TensorState(p, info, gid, block_size, specs))
        _check_disjoint(spans, fn)
        for t in new:
            self._allocate(t, full)
            self._register(t)
            self._tensors.append(t)
        self.param_groups.append(full)

    def _allocate(self, t: _TensorState, group: dict) -> None:
        n = t.info.size
        for spec in t.specs:
            init = _layout.initial_value(self.kind, spec, group)
            if spec.bits == 32:
                values = _arrays.empty(t.param, t.info, (n,), "float32")
                _fill(values, init)
                t.buffers[spec.index] = (values, None)
                continue
            codes = _arrays.empty(t.param, t.info, ((n + 1) // 2 if spec.bits == 4 else n,), "uint8")
            absmax = _arrays.empty(t.param, t.info, (_arrays.num_blocks(n, spec.block_size),), "float32")
            code, _ = _layout.initial_fill(spec, init)
            _fill(codes, code)
            _fill(absmax, init)
            t.buffers[spec.index] = (codes, absmax)

    def _map(self, spec: _layout.SlotSpec) -> np.ndarray:
        return _layout.slot_map(spec)

    def _register(self, t: _TensorState) -> None:
        states: list[Any] = [None, None, None]
        for spec in t.specs:
            data, absmax = t.buffers[spec.index]
            cb = 0 if spec.bits == 32 else _layout.CODEBOOKS[(spec.bits, spec.signed)]
            # 4-bit codes round stochastically unless told otherwise: with 16 levels the bias of
            # nearest rounding accumulates over steps (docs/decisions.md)
            stochastic = spec.bits == 4 if self.stochastic_rounding is None else False
            states[spec.index] = (spec.bits, cb, _arrays.kernel_arg(data),
                                  None if absmax is None else _arrays.kernel_arg(absmax), stochastic)
        self._plan.add_tensor(_arrays.kernel_arg(t.param), t.block_size, t.group, states)

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
        if self._plan.device >= 0:
            return int(self._plan.skipped_blocks(False))
        return self._skipped_blocks

    @property
    def last_skipped_blocks(self) -> int:
        """The same count for the last step only."""
        if self._plan.device >= 0:
            return int(self._plan.skipped_blocks(True))
        return self._last_skipped_blocks

    def _cuda_args(self, grads: Iterable, fn: str) -> tuple[list, list]:
        if _arrays.framework_of(grads) is not None:
            raise TypeError(f"{fn}: argument 'grads' must be a sequence of arrays, one per parameter")
        grads = list(grads)
        if len(grads) != len(self._tensors):
            raise ValueError(f"{fn}: expected {len(self._tensors)} gradients (one per parameter), got {len(grads)}")
        for g in self.param_groups:
            _hparams.validate_group(self.kind, g, fn)
        return grads, [_hparams.to_core(self.kind, g) for g in self.param_groups]

    def upload(self, grads: Iterable, stream: Any = None) -> None:
        """CUDA only: uploads the gradients' addresses and the current hyper-parameters to the
        device without stepping, on ``stream`` (None: the framework's current stream). This is how
        a step captured in a CUDA graph sees a new learning rate: change ``param_groups``, call
        ``upload`` with the same gradients, replay."""
        grads, hps = self._cuda_args(grads, "upload")
        handle = _arrays.stream_handle(self._tensors[0].info, stream, "upload")
        kgrads = [_arrays.kernel_arg(g) if g is not None else None for g in grads]
        self._plan.upload(kgrads, hps, bool(self.stochastic_rounding), self.stochastic_bf16, self.percentile, handle)

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
            return self._step(grads, stream)
        finally:
            self._step_lock.release()

    def _step(self, grads: Iterable, stream: Any) -> int | None:
        if _arrays.framework_of(grads) is not None:
            raise TypeError("step: argument 'grads' must be a sequence of arrays, one per parameter")
        grads = list(grads)
        if len(grads) != len(self._tensors):
            raise ValueError(f"step: expected {len(self._tensors)} gradients (one per parameter), got {len(grads)}")
        for i, (t, g) in enumerate(zip(self._tensors, grads)):
            shape = getattr(g, "shape", None)
            if shape is not None and tuple(shape) != t.info.shape:
                size = _arrays.prod(tuple(shape))
                sizes = f" ({size} vs {t.info.size} elements)" if size != t.info.size else ""
                raise ValueError(f"step: argument 'grads[{i}]' has shape {tuple(shape)} but parameter {i} "
                                 f"has shape {t.info.shape}{sizes}")
        for g in self.param_groups:
            _hparams.validate_group(self.kind, g, "step")
        hps = [_hparams.to_core(self.kind, g) for g in self.param_groups]
        steps = np.fromiter((t.step + (g is not None) for t, g in zip(self._tensors, grads)), dtype=np.int64,
                            count=len(grads))
        kgrads = [_arrays.kernel_arg(g) if g is not None else None for g in grads]
        handle = _arrays.stream_handle(self._tensors[0].info, stream, "step")
        skipped = self._plan.step(kgrads, steps, hps, self.strict, bool(self.stochastic_rounding), self.stochastic_bf16,
                                  self.percentile, handle)
        for t, g in zip(self._tensors, grads):
            if g is not None:
                t.step += 1  # CUDA: the device counters are authoritative (graph replays advance them too)
        if self._plan.device >= 0:
            return None
        self._last_skipped_blocks = int(skipped)
        self._skipped_blocks += int(skipped)
        return int(skipped)

    def _sync_steps(self) -> None:
        """CUDA: refreshes the per-tensor step counts from the device (waits for enqueued steps)."""
        if self._plan.device >= 0:
            for t, s in zip(self._tensors, self._plan.device_steps()):
                t.step = int(s)

    # -- introspection ------------------------------------------------------------------------
    def state_bytes(self) -> int:
        """Exact bytes of allocated optimizer state (codes, absmax and 32-bit buffers)."""
        total = 0
        for t in self._tensors:
            for data, absmax in t.buffers.values():
                total += _nbytes(data) + (0 if absmax is None else _nbytes(absmax))
        return total

    def state_layout(self) -> list[dict]:
        """Per parameter: its slots with bits, block size and map."""
        self._sync_steps()
        return [{"numel": t.info.size, "step": t.step,
                 "slots": {s.name: {"bits": s.bits, "block_size": s.block_size, "map": s.map_name} for s in t.specs}}
                for t in self._tensors]

    def trust_ratios(self) -> list[float]:
        """LAMB/LARS: the trust ratio each tensor used in the last step."""
        return list(self._plan.trust_ratios())

    # -- state dicts --------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """Plain data: hyper-parameters, per-tensor step counts and copies of the state arrays."""
        self._sync_steps()
        state = []
        for t in self._tensors:
            slots = {}
            for s in t.specs:
                data, absmax = t.buffers[s.index]
                entry = {"bits": s.bits, "block_size": s.block_size, "map": s.map_name, "data": _copy(data)}
                if absmax is not None:
                    entry["absmax"] = _copy(absmax)
                slots[s.name] = entry
            state.append({"step": t.step, "numel": t.info.size, "slots": slots})
        from ._checkpoint import _groups

        return {"optimizer": self.kind, "global_step": int(self._plan.global_step), "param_groups": _groups(self),
                "state": state}

    def load_state_dict(self, sd: dict) -> None:
        """Restores state_dict() output. Everything is validated before anything changes."""
        from ._checkpoint import check_state_dict

        pending = check_state_dict(self, sd, "load_state_dict")
        for dst, src in pending:
            _copy_into(dst, src)
        for t, s in zip(self._tensors, sd["state"]):
            t.step = int(s["step"])
        if self._plan.device >= 0:
            self._plan.set_device_steps([t.step for t in self._tensors])
        for g, h in zip(self.param_groups, sd["param_groups"]):
            for k, v in h.items():
                if k != "params":
                    g[k] = tuple(v) if k == "betas" else v
        self._plan.global_step = int(sd.get("global_step", 0))

    def save(self, path: Any) -> None:
        """Writes the state to a safetensors-compatible file, atomically."""
        from ._checkpoint import save

        save(self, path)

    def load(self, path: Any) -> None:
        """Reads a file written by save(); refuses a file that does not match these parameters
        and changes nothing unless the whole file validated."""
        from ._checkpoint import load

        load(self, path)

    def __repr__(self) -> str:
        bits = sorted({s.bits for t in self._tensors for s in t.specs}) or [32]
        return (f"{type(self).__name__}({len(self._tensors)} tensors, {len(self.param_groups)} group(s), "
                f"state bits {bits}, {self.state_bytes()} bytes of state)")


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


def _check_disjoint(spans: list, fn: str) -> None:
    """Raises naming the later of two parameters whose memory overlaps."""
    ordered = sorted((s[:2], s[2], s[3], i) for i, s in spans if s is not None)
    for prev, cur in zip(ordered, ordered[1:]):
        if prev[0] == cur[0] and cur[1] < prev[2]:
            i, j = max(prev[3], cur[3]), min(prev[3], cur[3])
            raise ValueError(f"{fn}: argument 'params[{i}]' overlaps the memory of params[{j}] (views of one "
                             "array); pass each parameter once")


def _fill(a: Any, value: float) -> None:
    if _arrays.framework_of(a) == "torch":
        a.fill_(value)
    else:
        a.fill(value)


def _nbytes(a: Any) -> int:
    if _arrays.framework_of(a) == "torch":
        return a.numel() * a.element_size()
    return int(a.nbytes)


def _copy(a: Any) -> Any:
    if _arrays.framework_of(a) == "torch":
        return a.detach().clone()
    return copy.copy(a) if not isinstance(a, np.ndarray) else a.copy()


def _copy_into(dst: Any, src: Any) -> None:
    if _arrays.framework_of(dst) == "cupy":
        import cupy

        with cupy.cuda.Device(dst.device.id):
            dst[...] = cupy.asarray(src if _arrays.framework_of(src) == "cupy" else _arrays.to_numpy(src)).reshape(dst.shape)
        return
    if _arrays.framework_of(dst) == "torch":
        import torch

        dst.copy_(torch.as_tensor(np.asarray(src) if _arrays.framework_of(src) == "numpy" else src).reshape(dst.shape))
    else:
        np.copyto(dst, _arrays.to_numpy(src).reshape(dst.shape))
