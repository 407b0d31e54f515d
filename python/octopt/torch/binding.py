"""The one core binding that the torch-facing namespaces (octopt.torch, octopt.bnb, octopt.torchao) compose.

A ``CoreBinding`` owns what every torch.optim.Optimizer front end over octopt's core needs: one core (an
``octopt.Optimizer``, one step plan) per device, the parameters with the tensors the cores step (a DTensor's
local shard) and their addresses, the links from each user param group to core groups, the gradients (checked
and handed over as addresses) and each device's current stream. A namespace's optimizer class holds a binding
and its own policy (when the state is laid out, the names of its hyper-parameters, the format of its state and
state dict) and reaches into no other namespace's attributes.

This module is the package-internal interface that octopt.bnb and octopt.torchao build on (not a user API):
``CoreBinding``, ``Link``, ``check_param``, the state-dict hook runners, and the shared helpers re-exported at
the end (``bind_arguments``, ``packed_groups``).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from typing import Any, NamedTuple

import numpy as np
import torch

from .. import _arrays, _octopt
from . import _dist, _override, _state
from ._signature import bind_arguments
from ._state import packed_groups

__all__ = [
    "Added",
    "CoreBinding",
    "Link",
    "bind_arguments",
    "check_param",
    "load_state_dict_with_hooks",
    "packed_groups",
    "state_dict_with_hooks",
]

# The core's dtype codes (octopt::DType) of the gradient dtypes a step takes.
_DTYPE_CODES = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2}
_CORE_CLASSES: dict[tuple[type, str], type] = {}


class Link(NamedTuple):
    """A core group holding (part of) one user param group."""

    device: str  # "cpu", "cuda:0", ...: the core
    group: int  # the core group's index in that core's param_groups
    fixed: dict  # the options the namespace gave these parameters beyond their group's


class Added(NamedTuple):
    """One bucket of a param group as it was laid out: the namespace's key, its parameters, its core groups."""

    key: Hashable
    params: list
    links: list[Link]


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


def _named_core(base: type, name: str) -> type:
    """A subclass of the core optimizer `base` named `name`, so that the core's messages name the class the
    user called."""
    key = (base, name)
    if key not in _CORE_CLASSES:
        _CORE_CLASSES[key] = type(name, (base,), {})
    return _CORE_CLASSES[key]


def check_param(p: torch.Tensor, fn: str, arg: str) -> None:
    """What every torch-facing optimizer requires of a (local) parameter tensor."""
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
        raise ValueError(f"{fn}: argument '{arg}' must be contiguous: octopt updates the parameter's memory in place")
    if p.device.type not in ("cpu", "cuda"):
        raise ValueError(f"{fn}: argument '{arg}' is on {p.device}; octopt steps CPU and CUDA tensors")
    if p.device.type == "cuda" and not _octopt.cuda_built():
        raise ValueError(f"{fn}: argument '{arg}' is on {p.device} but octopt was built without CUDA")


class CoreBinding:
    """One core per device and the parameters it steps, for one torch-facing optimizer (``owner``).

    ``core_class``: the octopt.Optimizer class that steps (its ``kind``); ``defaults``: every option of a core
    group, for the keys a bucket's options lack; ``options``: the core's per-optimizer options (``seed``, ...);
    ``check``: the namespace's check of a parameter (``check(tensor, fn, arg)``)."""

    def __init__(
        self,
        owner: Any,
        core_class: type,
        defaults: dict,
        options: dict,
        check: Callable[[torch.Tensor, str, str], None] = check_param,
    ):
        self.owner = owner  # held in the registry of octopt.torch.override (weakly)
        self.kind: str = core_class.kind
        self.defaults = dict(defaults)
        self.options = dict(options)
        self._core_class = _named_core(core_class, type(owner).__name__)
        self._check = check
        self._cores: dict[str, Any] = {}  # device -> core
        self._members: dict[str, list[_Member]] = {}  # per core: its parameters, in the core's order
        self._tensors: dict[int, Any] = {}  # id(param) -> the core's _TensorState
        self._dist: dict[int, _dist.DistSpec] = {}  # id(param) -> mesh/placements of a DTensor parameter
        self.links: list[list[Link]] = []  # per user param group laid out: its core groups

    # -- laying out --------------------------------------------------------------------------
    def add_group(
        self,
        entries: list[tuple[torch.Tensor, dict, dict, Hashable]],
        fn: str,
        start: int,
        check_options: Callable[[dict], None] | None = None,
    ) -> list[Added]:
        """Lays out one user param group. ``entries``, one per parameter in the group's order: (param, its core
        group options, the part of them fixed for this parameter, the namespace's bucket key). Parameters of
        one key and one fixed part (after a DTensor's is widened, see _dist.global_precision) share core groups,
        one per device. ``check_options(options)`` may refuse a bucket before anything changes."""
        buckets: dict[tuple, tuple[Hashable, dict, dict, list]] = {}
        specs = {}
        for j, (p, options, fixed, key) in enumerate(entries):
            arg = f"params[{start + j}]"
            self._check(_dist.local(p), fn, arg)
            spec = _dist.spec_of(p, self.kind, fn, arg)
            if spec is not None:
                specs[id(p)] = spec
                merged = {**self.defaults, **options}
                wide = _dist.global_precision(p, fixed, merged["min_8bit_size"])
                options, fixed = {**options, **wide}, wide
            bucket = (key, tuple(sorted(fixed.items())))
            buckets.setdefault(bucket, (key, options, fixed, []))[3].append(p)
        if check_options is not None:
            for _, options, _, _ in buckets.values():
                check_options(options)
        self._dist.update(specs)
        added, links = [], []
        for key, options, fixed, ps in buckets.values():
            mine = []
            by_device: dict[str, list] = {}
            for p in ps:
                by_device.setdefault(_where(_dist.local(p)), []).append(p)
            for dev, dps in by_device.items():
                mine.append(self._add_core_group(dev, dps, options, fixed))
            added.append(Added(key, ps, mine))
            links += mine
        self.links.append(links)
        return added

    def _add_core_group(self, dev: str, params: list, options: dict, fixed: dict) -> Link:
        cg = dict(options)
        cg["params"] = [_dist.local(p) for p in params]
        core = self._cores.get(dev)
        if core is None:
            core = self._cores[dev] = self._core_class([cg], **self.options)
            self._members[dev] = []
        else:
            core.add_param_group(cg)
        first = len(self._members[dev])
        for p, t in zip(params, core.tensors[first:]):
            self._tensors[id(p)] = t
            self._members[dev].append(_Member(p, t.param, t.param.data_ptr(), self._dist.get(id(p))))
            _override.mark_held(p, self.owner)
        return Link(dev, len(core.param_groups) - 1, fixed)

    # -- what is laid out ---------------------------------------------------------------------
    @property
    def cores(self) -> Mapping[str, Any]:
        """The cores by device ("cpu", "cuda:0", ...), in the order they were created."""
        return self._cores

    @property
    def first_core(self) -> Any:
        """The core of the first device (None before anything is laid out)."""
        return next(iter(self._cores.values()), None)

    @property
    def tensor_states(self) -> Mapping[int, Any]:
        """id(param) -> the core's state of that parameter (its _TensorState)."""
        return self._tensors

    def holds(self, p: Any) -> bool:
        return isinstance(p, torch.Tensor) and id(p) in self._tensors

    def tensor(self, p: torch.Tensor) -> Any:
        """The core's state of parameter p: its slots, buffers (views of the live state) and step."""
        return self._tensors[id(p)]

    def dist(self, p: torch.Tensor) -> _dist.DistSpec | None:
        """The DTensor layout of parameter p (None for a plain tensor)."""
        return self._dist.get(id(p))

    def core_group(self, link: Link) -> dict:
        """The core group of a link, whose hyper-parameters the namespace keeps in step with its own."""
        return self._cores[link.device].param_groups[link.group]

    @staticmethod
    def slot_map(spec: Any) -> np.ndarray:
        """The quantization map of a quantized state slot."""
        from ..optimizer import Optimizer

        return Optimizer.slot_map(spec)

    # -- stepping ------------------------------------------------------------------------------
    def step(self, fn: str, grad_of: Callable[[torch.Tensor], Any] | None = None) -> None:
        """One fused step per core on its device's current stream, from each parameter's gradient
        (``grad_of(param)``, default ``param.grad``; None: skipped)."""
        for dev, core in self._cores.items():
            keep: list = []  # contiguous copies of non-contiguous gradients, alive for the call
            addresses, dtypes = self._gradients(self._members[dev], fn, keep, grad_of)
            core._step_addresses(addresses, dtypes, _stream(dev))

    def upload(self, fn: str) -> None:
        """CUDA graphs: hands the current hyper-parameters and gradient addresses to each device's core
        without stepping."""
        for dev, core in self._cores.items():
            if dev == "cpu":
                continue
            keep: list = []
            addresses, _ = self._gradients(self._members[dev], fn, keep, None)
            grads = [
                _dist.local(m.param.grad) if a else None for m, a in zip(self._members[dev], addresses, strict=True)
            ]
            core.upload(grads, stream=_stream(dev))

    def _gradients(self, members: list[_Member], fn: str, keep: list, grad_of: Any) -> tuple[list, list]:
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
            g = m.param.grad if grad_of is None else grad_of(m.param)
            if g is None:
                continue
            if m.dist is not None:
                g = _dist.local_grad(m.param, g, m.dist, fn)
            addresses[i], dtypes[i] = _grad_address(p, g, fn, keep)
        return addresses, dtypes

    # -- introspection -------------------------------------------------------------------------
    @property
    def skipped_blocks(self) -> int:
        return sum(c.skipped_blocks for c in self._cores.values())

    def state_bytes(self) -> int:
        return sum(c.state_bytes() for c in self._cores.values())

    def state_layout(self, params: list) -> list[dict]:
        """Per parameter of ``params``: its state slots with bits, block size and map."""
        layouts = {dev: c.state_layout() for dev, c in self._cores.items()}
        out = []
        for p in params:
            t = self._tensors[id(p)]
            dev = next(d for d, c in self._cores.items() if c is t._owner)
            out.append(layouts[dev][t._index])
        return out

    # -- state dicts in octopt.torch's format (also how the others import foreign state) --------
    def state_dict(self, param_groups: list, float32_state: bool = False) -> dict:
        return _state.state_dict(self, param_groups, float32_state)

    def load_state_dict(self, param_groups: list, state_dict: Any, fn: str) -> None:
        """Loads octopt.torch's format, torch.optim's or bitsandbytes' (validated before anything changes)."""
        _state.load_state_dict(self, param_groups, state_dict, fn)

    def load_param_state(self, p: torch.Tensor, entry: Any, fn: str) -> None:
        _state.load_param_state(self, p, entry, fn)


def _grad_address(p: torch.Tensor, g: torch.Tensor, fn: str, keep: list) -> tuple[int, int]:
    """The address and dtype code of parameter p's gradient g, checked (dtype, shape, device); a
    non-contiguous g is copied and the copy kept alive in ``keep`` for the call."""
    code = _DTYPE_CODES.get(g.dtype)
    if g.layout is not torch.strided or code is None or (g.dtype is not p.dtype and code != 0):
        _bad_grad(p, g, fn)
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


# -- torch.optim's state-dict hooks around a namespace's own format ------------------------------
def state_dict_with_hooks(opt: torch.optim.Optimizer, make: Callable[[], dict]) -> dict:
    """``make()``'s state dict between the pre- and post-hooks registered on ``opt``."""
    for pre_hook in opt._optimizer_state_dict_pre_hooks.values():
        pre_hook(opt)
    sd = make()
    for post_hook in opt._optimizer_state_dict_post_hooks.values():
        result = post_hook(opt, sd)
        if result is not None:
            sd = result
    return sd


def load_state_dict_with_hooks(opt: torch.optim.Optimizer, state_dict: Any, load: Callable[[Any], None]) -> None:
    """``load(state_dict)`` between the load pre- and post-hooks registered on ``opt``."""
    state_dict = state_dict.copy() if isinstance(state_dict, dict) else state_dict
    for pre_hook in opt._optimizer_load_state_dict_pre_hooks.values():
        result = pre_hook(opt, state_dict)
        if result is not None:
            state_dict = result
    load(state_dict)
    for post_hook in opt._optimizer_load_state_dict_post_hooks.values():
        post_hook(opt)
