"""The torch.optim.Optimizer adapter: torch owns the param groups, octopt's core owns state and numerics.

Each torch param group maps to one or more groups of an internal framework-neutral ``octopt.Optimizer``
(one per distinct per-parameter override). That core holds the parameters by reference and steps all of
them in one native call; this class only collects the gradients and copies the hyper-parameters the user
(or an lr scheduler) set in ``param_groups`` into the core before each step.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Callable

import torch

from .. import _arrays, _hparams
from ..optimizer import Optimizer as _CoreOptimizer
from . import _override, _state

# Group keys that fix the state layout: set when a group is added, never changed afterwards.
LAYOUT_KEYS = ("bits", "block_size", "min_8bit_size", "first_moment_bits")
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
        )
        full = dict(_hparams.COMMON_DEFAULTS)
        full.update(self._core_base.defaults)
        full.update(defaults)
        _hparams.validate_group(self._core_base.kind, full, fn)
        self._core_defaults = full  # every option the core needs, for keys a torch group does not carry
        self._core_opts = core_opts
        self._core: _CoreOptimizer | None = None
        self._links: list[list[tuple[int, dict]]] = []  # per torch group: (core group, overrides) pairs
        self._layout: list[dict] = []  # per torch group: its layout keys as added
        self._tensors: dict[int, Any] = {}  # id(param) -> the core's _TensorState
        self._ptrs: list[int] = []  # per core tensor: the param's data_ptr() when added
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
        for j, p in enumerate(group["params"]):
            self._check_param(p, fn, f"params[{start + j}]")
            ov = self._param_override(p)
            buckets.setdefault(tuple(sorted(ov.items())), (ov, []))[1].append(p)
        for ov, _ in buckets.values():
            m = dict(merged)
            m.update(ov)
            _hparams.validate_group(kind, m, f"{fn} (with the options of octopt.torch.override)")
        links = []
        for ov, ps in buckets.values():
            cg = dict(base)
            cg.update(ov)
            cg["params"] = ps
            first = 0 if self._core is None else len(self._core.tensors)
            if self._core is None:
                self._core = _core_class(type(self))([cg], **self._core_opts)
            else:
                self._core.add_param_group(cg)
            links.append((len(self._core.param_groups) - 1, ov))
            for t in self._core.tensors[first:]:
                self._tensors[id(t.param)] = t
                self._ptrs.append(t.param.data_ptr())
                _override.mark_held(t.param, self)
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
        if p.device.type != "cpu":
            raise ValueError(f"{fn}: argument '{arg}' is on {p.device}; this build steps CPU tensors only")

    def _sync(self, fn: str) -> None:
        """Copies the hyper-parameters of the torch groups (changed by schedulers and users) into the core."""
        core = self._core
        if len(self.param_groups) != len(self._links):
            raise RuntimeError(f"{fn}: param_groups was changed directly; add groups with add_param_group()")
        for gi, (g, links) in enumerate(zip(self.param_groups, self._links)):
            for k, v in self._layout[gi].items():
                if g.get(k) != v:
                    raise ValueError(
                        f"{fn}: param group {gi} has '{k}'={g.get(k)!r} but its state was laid out "
                        f"with {v!r}; the state layout cannot change after the group was added"
                    )
            for cgi, ov in links:
                cg = core.param_groups[cgi]
                for k in HPARAM_KEYS:
                    if k in g and k not in ov:
                        cg[k] = g[k]

    def _param_list(self) -> list[torch.Tensor]:
        return [p for g in self.param_groups for p in g["params"]]

    # -- stepping ----------------------------------------------------------------------------
    @torch._disable_dynamo
    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """One fused step of every parameter that has a gradient (``grad is None``: skipped, its state and
        step count untouched). ``closure`` re-evaluates the model and returns the loss, which is returned."""
        fn = f"{type(self).__name__}.step"
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        if self._core is None:
            return loss
        self._native_step(fn)
        return loss

    def _native_step(self, fn: str, replace: dict | None = None) -> None:
        """Steps the core once from the parameters' gradients; ``replace`` maps a core tensor index to a
        float32 gradient used instead of ``param.grad`` (the bitsandbytes namespace's clipped gradients)."""
        core = self._core
        self._sync(fn)
        n = len(core.tensors)
        addresses, dtypes = [0] * n, [0] * n
        keep = []  # contiguous copies of non-contiguous gradients, alive for the call
        for i, t in enumerate(core.tensors):
            p = t.param
            if p.data_ptr() != self._ptrs[i]:
                raise RuntimeError(
                    f"{fn}: the memory of a parameter of shape {tuple(p.shape)} was replaced "
                    "(param.data = ..., or the model moved with .to() after the optimizer was "
                    "created); create the optimizer after moving the model"
                )
            g = p.grad if replace is None else replace.get(i, p.grad)
            if g is None:
                continue
            code = _DTYPE_CODES.get(g.dtype)
            if g.layout is not torch.strided or code is None or (g.dtype is not p.dtype and code != 0):
                self._bad_grad(p, g, fn)
            if g.shape != p.shape:
                raise ValueError(
                    f"{fn}: the gradient of a parameter of shape {tuple(p.shape)} has shape {tuple(g.shape)}"
                )
            if g.is_cuda != p.is_cuda or (p.is_cuda and g.get_device() != p.get_device()):
                raise ValueError(f"{fn}: the gradient of a parameter on {p.device} is on {g.device}")
            if not g.is_contiguous():
                g = g.contiguous()
                keep.append(g)
            addresses[i] = g.data_ptr()
            dtypes[i] = code
        p0 = core.tensors[0].param
        stream = torch.cuda.current_stream(p0.device).cuda_stream if p0.is_cuda else 0
        core._step_addresses(addresses, dtypes, stream)

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
    def skipped_blocks(self) -> int:
        """Blocks left unchanged over all steps because their gradient held NaN/Inf."""
        return 0 if self._core is None else self._core.skipped_blocks

    def state_bytes(self) -> int:
        """Exact bytes of allocated optimizer state (codes, absmax and 32-bit buffers)."""
        return 0 if self._core is None else self._core.state_bytes()

    def state_layout(self) -> list[dict]:
        """Per parameter (in param_groups order): its state slots with bits, block size and map."""
        if self._core is None:
            return []
        layout = self._core.state_layout()
        index = {id(t): i for i, t in enumerate(self._core.tensors)}
        return [layout[index[id(self._tensors[id(p)])]] for p in self._param_list()]

    # -- state dicts ---------------------------------------------------------------------------
    @torch._disable_dynamo
    def state_dict(self) -> dict:
        """torch's format: ``{"state": {index: {"step": tensor, "exp_avg": tensor, "exp_avg_absmax": ...}},
        "param_groups": [...], "octopt": {...}}``. 32-bit states are float32 tensors of the parameter's shape;
        8-bit codes are uint8 tensors of the parameter's shape, 4-bit codes flat uint8 (two per byte), each
        with float32 ``<name>_absmax`` (one per block). The tensors are the live state, as in torch."""
        for pre_hook in self._optimizer_state_dict_pre_hooks.values():
            pre_hook(self)
        sd = _state.state_dict(self)
        for post_hook in self._optimizer_state_dict_post_hooks.values():
            result = post_hook(self, sd)
            if result is not None:
                sd = result
        return sd

    @torch._disable_dynamo
    def load_state_dict(self, state_dict: dict) -> None:
        """Restores a state dict from state_dict(), from the matching torch.optim optimizer (its float32
        states are quantized) or from any bitsandbytes 8-bit or 32-bit optimizer (both layouts). Everything is
        validated before anything changes; tensors are copied onto the optimizer's device."""
        state_dict = state_dict.copy() if isinstance(state_dict, dict) else state_dict
        for pre_hook in self._optimizer_load_state_dict_pre_hooks.values():
            result = pre_hook(self, state_dict)
            if result is not None:
                state_dict = result
        _state.load_state_dict(self, state_dict)
        for post_hook in self._optimizer_load_state_dict_post_hooks.values():
            post_hook(self)

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
        return _state.param_state(t, live=True)

    def __contains__(self, p: object) -> bool:
        return isinstance(p, torch.Tensor) and id(p) in self._opt._tensors

    def __iter__(self) -> Iterator[torch.Tensor]:
        return iter(self._opt._param_list())

    def __len__(self) -> int:
        return len(self._opt._tensors)
