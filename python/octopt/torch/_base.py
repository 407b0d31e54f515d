"""The torch.optim.Optimizer adapter: torch owns the param groups, octopt's core owns state and numerics.

Each torch param group maps to one or more groups of an internal framework-neutral ``octopt.Optimizer``
(one per distinct per-parameter override). That core holds the parameters by reference and steps all of
them in one native call; this class only collects the gradients and copies the hyper-parameters the user
(or an lr scheduler) set in ``param_groups`` into the core before each step.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Callable, NamedTuple

import torch

from .. import _arrays, _hparams, _octopt
from ..optimizer import Optimizer as _CoreOptimizer
from . import _dist, _override, _state

# Group keys that fix the state layout: set when a group is added, never changed afterwards.
LAYOUT_KEYS = _hparams.LAYOUT_KEYS
# Group keys copied into the core before every step.
HPARAM_KEYS = tuple(k for k in _hparams.GROUP_KEYS if k not in LAYOUT_KEYS)
# Options of octopt's core that are per optimizer, not per group.
CORE_OPTIONS = ("seed", "stochastic_rounding", "stochastic_bf16", "percentile", "strict")
# torch.optim options accepted for drop-in compatibility: (name, values that are accepted).
TORCH_OPTIONS = {
    "foreach": None,
    "fused": None,
    "capturable": (False,),
    "differentiable": (False,),
    "amsgrad": (False,),
}

_CORE_CLASSES: dict[type, type] = {}
# The core's dtype codes (octopt::DType) of the gradient dtypes a step takes.
_DTYPE_CODES = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2}


class _Member(NamedTuple):
    """A parameter of one core: the user's tensor, the tensor the core steps (its local shard for a
    DTensor), that tensor's address when added, and the DTensor layout (None for a plain tensor)."""

    param: torch.Tensor
    local: torch.Tensor
    ptr: int
    dist: _dist.DistSpec | None


def _where(t: torch.Tensor) -> str:
    return "cpu" if t.device.type == "cpu" else f"cuda:{t.device.index or 0}"


def _stream(dev: str) -> int:
    """The handle of the current stream of a CUDA device (where torch enqueues its work); 0 on the CPU."""
    if dev == "cpu":
        return 0
    return int(torch.cuda.current_stream(torch.device(dev)).cuda_stream)


def _core_class(cls: type) -> type:
    """A subclass of the core optimizer named like `cls`, so that the core's messages name the class the
    user called."""
    if cls not in _CORE_CLASSES:
        _CORE_CLASSES[cls] = type(cls.__name__, (cls._core_base,), {})
    return _CORE_CLASSES[cls]


class TorchOptimizer(torch.optim.Optimizer):
    """Base of octopt.torch's optimizers. Subclasses set ``_core_base`` (an octopt.Optimizer class) and
    ``_default_bits``, and pass their torch-style hyper-parameters as ``defaults``."""

    _core_base: type = _CoreOptimizer
    _default_bits = 32

    def __init__(
        self,
        params: Any,
        defaults: dict,
        *,
        bits: int | None = None,
        block_size: int | None = None,
        min_8bit_size: int = 4096,
        first_moment_bits: int | None = None,
        state_map: str = "dynamic",
        **options: Any,
    ):
        fn = type(self).__name__
        core_opts = {}
        for key, value in options.items():
            if key in CORE_OPTIONS:
                core_opts[key] = value
            elif key in TORCH_OPTIONS:
                ok = TORCH_OPTIONS[key]
                if ok is not None and value not in ok:
                    raise ValueError(
                        f"{fn}: argument '{key}={value!r}' is not supported (octopt steps every "
                        "tensor in one fused native call)"
                    )
            else:
                raise TypeError(f"{fn}: unexpected argument '{key}'")
        _arrays.check_int(core_opts.get("seed", 0), fn, "seed", 0, 2**64 - 1)
        if not 0.0 <= float(core_opts.get("percentile", 0.0)) <= 100.0:
            raise ValueError(f"{fn}: argument 'percentile' must be in [0, 100], got {core_opts['percentile']}")
        defaults = dict(defaults)
        defaults.update(
            bits=self._default_bits if bits is None else bits,
            block_size=block_size,
            min_8bit_size=min_8bit_size,
            first_moment_bits=first_moment_bits,
            state_map=state_map,
        )
        full = dict(_hparams.COMMON_DEFAULTS)
        full.update(self._core_base.defaults)
        full.update(defaults)
        _hparams.validate_group(self._core_base.kind, full, fn)
        self._core_defaults = full  # every option the core needs, for keys a torch group does not carry
        self._core_opts = core_opts
        # One core (one step plan) per device: "cpu", "cuda:0", "cuda:1", ... Each CUDA plan is one fused
        # launch on its device's current stream; a model split over devices is stepped by all of them.
        self._cores: dict[str, _CoreOptimizer] = {}
        self._members: dict[str, list[_Member]] = {}  # per core: its parameters, in the core's order
        self._links: list[list[tuple[str, int, dict]]] = []  # per torch group: (core, core group, overrides)
        self._layout: list[dict] = []  # per torch group: its layout keys as added
        self._tensors: dict[int, Any] = {}  # id(param) -> the core's _TensorState
        self._dist: dict[int, _dist.DistSpec] = {}  # id(param) -> mesh/placements of a DTensor parameter
        # state_dict() shows quantized DTensor state as float32 (the form of octopt 0.x, see _dcp.py)
        self._float32_state = False
        super().__init__(params, defaults)
        self.state = _StateView(self)  # type: ignore[assignment]

    # -- param groups ------------------------------------------------------------------------
    def add_param_group(self, param_group: dict) -> None:
        """Adds a param group (also after construction: e.g. unfreezing layers while fine-tuning)."""
        fn = f"{type(self).__name__}.add_param_group"
        if not isinstance(param_group, dict) or "params" not in param_group:
            raise TypeError(f"{fn}: argument 'param_group' must be a dict with a 'params' key")
        super().add_param_group(param_group)
        group = self.param_groups[-1]
        try:
            self._attach(group, fn if isinstance(getattr(self, "state", None), _StateView) else type(self).__name__)
        except BaseException:
            self.param_groups.pop()
            raise

    def _attach(self, group: dict, fn: str) -> None:
        kind = self._core_base.kind
        base = {k: group[k] for k in _hparams.GROUP_KEYS if k in group}
        merged = dict(self._core_defaults)
        merged.update(base)
        _hparams.validate_group(kind, merged, fn)
        start = sum(len(g["params"]) for g in self.param_groups[:-1])
        buckets: dict[tuple, tuple[dict, list]] = {}
        specs = {}
        for j, p in enumerate(group["params"]):
            self._check_param(_dist.local(p), fn, f"params[{start + j}]")
            spec = _dist.spec_of(p, kind, fn, f"params[{start + j}]")
            ov = self._param_override(p)
            if spec is not None:
                specs[id(p)] = spec
                ov = _dist.global_precision(p, ov, merged["min_8bit_size"])
            buckets.setdefault(tuple(sorted(ov.items())), (ov, []))[1].append(p)
        for ov, _ in buckets.values():
            m = dict(merged)
            m.update(ov)
            _hparams.validate_group(kind, m, f"{fn} (with the options of octopt.torch.override)")
        self._dist.update(specs)
        links = []
        for ov, ps in buckets.values():
            by_device: dict[str, list] = {}
            for p in ps:
                by_device.setdefault(_where(_dist.local(p)), []).append(p)
            for dev, dps in by_device.items():
                cg = dict(base)
                cg.update(ov)
                cg["params"] = [_dist.local(p) for p in dps]
                core = self._cores.get(dev)
                if core is None:
                    core = self._cores[dev] = _core_class(type(self))([cg], **self._core_opts)
                    self._members[dev] = []
                else:
                    core.add_param_group(cg)
                links.append((dev, len(core.param_groups) - 1, ov))
                first = len(self._members[dev])
                for p, t in zip(dps, core.tensors[first:]):
                    self._tensors[id(p)] = t
                    self._members[dev].append(_Member(p, t.param, t.param.data_ptr(), self._dist.get(id(p))))
                    _override.mark_held(p, self)
        self._links.append(links)
        self._layout.append({k: group[k] for k in LAYOUT_KEYS})

    def _param_override(self, p: torch.Tensor) -> dict:
        """The options of this parameter beyond its group's (octopt.torch.override; subclasses add theirs)."""
        return _override.get_override(p)

    @staticmethod
    def _check_param(p: torch.Tensor, fn: str, arg: str) -> None:
        if p.layout != torch.strided:
            raise TypeError(f"{fn}: argument '{arg}' must be a dense tensor, got layout {p.layout}")
        if p.is_complex():
            raise TypeError(
                f"{fn}: argument '{arg}' is complex ({p.dtype}); octopt optimizes real tensors only "
                "(view it as real with torch.view_as_real before building the model)"
            )
        if str(p.dtype).removeprefix("torch.") not in _arrays.FLOAT_DTYPES:
            raise TypeError(f"{fn}: argument '{arg}' must be float32, float16 or bfloat16, got {p.dtype}")
        if not p.is_contiguous():
            raise ValueError(
                f"{fn}: argument '{arg}' must be contiguous: octopt updates the parameter's memory in place"
            )
        if p.device.type not in ("cpu", "cuda"):
            raise ValueError(f"{fn}: argument '{arg}' is on {p.device}; octopt steps CPU and CUDA tensors")
        if p.device.type == "cuda" and not _octopt.cuda_built():
            raise ValueError(f"{fn}: argument '{arg}' is on {p.device} but octopt was built without CUDA")

    def _sync(self, fn: str) -> None:
        """Copies the hyper-parameters of the torch groups (changed by schedulers and users) into the core."""
        if len(self.param_groups) != len(self._links):
            raise RuntimeError(f"{fn}: param_groups was changed directly; add groups with add_param_group()")
        for gi, (g, links) in enumerate(zip(self.param_groups, self._links)):
            for k, v in self._layout[gi].items():
                if g.get(k) != v:
                    raise ValueError(
                        f"{fn}: param group {gi} has '{k}'={g.get(k)!r} but its state was laid out "
                        f"with {v!r}; the state layout cannot change after the group was added"
                    )
            for dev, cgi, ov in links:
                cg = self._cores[dev].param_groups[cgi]
                for k in HPARAM_KEYS:
                    if k in g and k not in ov:
                        cg[k] = g[k]

    def _param_list(self) -> list[torch.Tensor]:
        return [p for g in self.param_groups for p in g["params"]]

    # -- stepping ----------------------------------------------------------------------------
    @torch._disable_dynamo
    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """One fused step of every parameter that has a gradient (``grad is None``: skipped, its state and
        step count untouched). ``closure`` re-evaluates the model and returns the loss, which is returned.
        CUDA parameters are stepped on their device's current stream without synchronizing; DTensor
        parameters shard by shard, without communicating."""
        fn = f"{type(self).__name__}.step"
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        if not self._cores:
            return loss
        self._sync(fn)
        for dev, core in self._cores.items():
            keep: list = []  # contiguous copies of non-contiguous gradients, alive for the call
            addresses, dtypes = self._gradients(self._members[dev], fn, keep)
            core._step_addresses(addresses, dtypes, _stream(dev))
        return loss

    def upload(self) -> None:
        """CUDA graphs: hands the current hyper-parameters (an lr schedule's new ``lr``) and gradient
        addresses to the device without stepping, so that the next replay of a captured ``step()`` uses
        them. Call it eagerly (not while capturing), with the same ``.grad`` tensors the graph uses."""
        fn = f"{type(self).__name__}.upload"
        self._sync(fn)
        for dev, core in self._cores.items():
            if dev == "cpu":
                continue
            keep: list = []
            addresses, dtypes = self._gradients(self._members[dev], fn, keep)
            grads = [
                _dist.local(m.param.grad) if a else None for m, a in zip(self._members[dev], addresses, strict=True)
            ]
            core.upload(grads, stream=_stream(dev))

    def _gradients(self, members: list[_Member], fn: str, keep: list) -> tuple[list, list]:
        """The gradients' addresses (0: no gradient) and dtype codes, checked against the parameters."""
        n = len(members)
        addresses, dtypes = [0] * n, [0] * n
        for i, m in enumerate(members):
            p = m.local
            if p.data_ptr() != m.ptr or (m.dist is not None and _dist.local(m.param).data_ptr() != m.ptr):
                raise RuntimeError(
                    f"{fn}: the memory of a parameter of shape {tuple(m.param.shape)} was replaced "
                    "(param.data = ..., or the model moved with .to() after the optimizer was "
                    "created); create the optimizer after moving the model"
                )
            g = m.param.grad
            if g is None:
                continue
            if m.dist is not None:
                g = _dist.local_grad(m.param, g, m.dist, fn)
            addresses[i], dtypes[i] = self._grad_address(p, g, fn, keep)
        return addresses, dtypes

    @classmethod
    def _grad_address(cls, p: torch.Tensor, g: torch.Tensor, fn: str, keep: list) -> tuple[int, int]:
        """The address and dtype code of parameter p's gradient g, checked (dtype, shape, device); a
        non-contiguous g is copied and the copy kept alive in ``keep`` for the call."""
        code = _DTYPE_CODES.get(g.dtype)
        if g.layout is not torch.strided or code is None or (g.dtype is not p.dtype and code != 0):
            cls._bad_grad(p, g, fn)
        if g.shape != p.shape:
            raise ValueError(f"{fn}: the gradient of a parameter of shape {tuple(p.shape)} has shape {tuple(g.shape)}")
        if g.device != p.device:
            raise ValueError(f"{fn}: the gradient of a parameter on {p.device} is on {g.device}")
        if not g.is_contiguous():
            g = g.contiguous()
            keep.append(g)
        if g.numel() == 0:
            # an empty gradient (a DTensor's empty shard) still counts as a step, as on the other ranks:
            # address 0 would mean "no gradient", so it gets the address of one element that is never read
            g = torch.empty(1, dtype=g.dtype, device=g.device)
            keep.append(g)
        return g.data_ptr(), code

    @staticmethod
    def _bad_grad(p: torch.Tensor, g: torch.Tensor, fn: str) -> None:
        if g.layout != torch.strided:
            raise TypeError(
                f"{fn}: the gradient of a parameter of shape {tuple(p.shape)} is sparse "
                f"({g.layout}); octopt's optimizers need dense gradients"
            )
        if g.is_complex():
            raise TypeError(
                f"{fn}: the gradient of a parameter of shape {tuple(p.shape)} is complex "
                f"({g.dtype}); octopt's optimizers need real gradients"
            )
        raise TypeError(
            f"{fn}: argument 'grads' of a parameter of shape {tuple(p.shape)} must be float32 or the "
            f"parameter's dtype ({str(p.dtype).removeprefix('torch.')}), got {str(g.dtype).removeprefix('torch.')}"
        )

    # -- introspection -----------------------------------------------------------------------
    @property
    def _core(self) -> _CoreOptimizer | None:
        """The core of the first device (profiling aids; the optimizer has one core per device)."""
        return next(iter(self._cores.values()), None)

    @property
    def skipped_blocks(self) -> int:
        """Blocks left unchanged over all steps because their gradient held NaN/Inf (on a GPU this reads a
        device counter, which waits for the enqueued steps)."""
        return sum(c.skipped_blocks for c in self._cores.values())

    def state_bytes(self) -> int:
        """Exact bytes of allocated optimizer state (codes, absmax and 32-bit buffers) on this rank: of
        DTensor parameters, the state of the local shards."""
        return sum(c.state_bytes() for c in self._cores.values())

    def state_layout(self) -> list[dict]:
        """Per parameter (in param_groups order): its state slots with bits, block size and map (of the
        local shard for a DTensor parameter)."""
        layouts = {dev: c.state_layout() for dev, c in self._cores.items()}
        out = []
        for p in self._param_list():
            t = self._tensors[id(p)]
            dev = next(d for d, c in self._cores.items() if c is t._owner)
            out.append(layouts[dev][t._index])
        return out

    # -- state dicts ---------------------------------------------------------------------------
    @torch._disable_dynamo
    def state_dict(self) -> dict:
        """torch's format: ``{"state": {index: {"step": tensor, "exp_avg": tensor, "exp_avg_absmax": ...}},
        "param_groups": [...], "octopt": {...}}``. 32-bit states are float32 tensors of the parameter's shape;
        8-bit codes are uint8 tensors of the parameter's shape, 4-bit codes flat uint8 (two per byte), each
        with float32 ``<name>_absmax`` (one per block). The tensors are the live state, as in torch."""
        for pre_hook in self._optimizer_state_dict_pre_hooks.values():
            pre_hook(self)
        sd = self._native_state_dict()
        for post_hook in self._optimizer_state_dict_post_hooks.values():
            result = post_hook(self, sd)
            if result is not None:
                sd = result
        return sd

    def _native_state_dict(self) -> dict:
        """The state dict itself, between torch's hooks (subclasses with another format override it)."""
        return _state.state_dict(self)

    @torch._disable_dynamo
    def load_state_dict(self, state_dict: dict) -> None:
        """Restores a state dict from state_dict(), from the matching torch.optim optimizer (its float32
        states are quantized) or from bitsandbytes' Adam8bit/AdamW8bit (both layouts). Everything is
        validated before anything changes; tensors are copied onto the optimizer's device."""
        state_dict = state_dict.copy() if isinstance(state_dict, dict) else state_dict
        for pre_hook in self._optimizer_load_state_dict_pre_hooks.values():
            result = pre_hook(self, state_dict)
            if result is not None:
                state_dict = result
        self._load_native_state_dict(state_dict)
        for post_hook in self._optimizer_load_state_dict_post_hooks.values():
            post_hook(self)

    def _load_native_state_dict(self, state_dict: dict) -> None:
        """Loads the state dict itself, between torch's hooks (subclasses with another format override it)."""
        _state.load_state_dict(self, state_dict)

    def __getstate__(self) -> dict:
        raise TypeError(
            f"{type(self).__name__}: cannot be pickled or deep-copied (its state lives in a native "
            "step plan); save state_dict() instead"
        )


class _StateView(Mapping):
    """``optimizer.state[param]``: the live state tensors of a parameter and its step count."""

    def __init__(self, opt: TorchOptimizer):
        self._opt = opt

    def __getitem__(self, p: Any) -> dict:
        t = self._opt._tensors.get(id(p)) if isinstance(p, torch.Tensor) else None
        if t is None:
            raise KeyError(p)
        return _state.param_state(t, self._opt._dist.get(id(p)))

    def __setitem__(self, p: Any, value: dict) -> None:
        """Replaces the state of one parameter from an entry of a state dict (what ZeroRedundancyOptimizer's
        load_state_dict does); validated like load_state_dict."""
        if not (isinstance(p, torch.Tensor) and id(p) in self._opt._tensors):
            raise KeyError(p)
        _state.load_param_state(self._opt, p, value)

    def __contains__(self, p: object) -> bool:
        return isinstance(p, torch.Tensor) and id(p) in self._opt._tensors

    def __iter__(self) -> Iterator[torch.Tensor]:
        return iter(self._opt._param_list())

    def __len__(self) -> int:
        return len(self._opt._tensors)
