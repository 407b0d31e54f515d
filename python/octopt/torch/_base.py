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
from .binding import CoreBinding, load_state_dict_with_hooks, state_dict_with_hooks

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


class TorchOptimizer(torch.optim.Optimizer):
    """Base of octopt.torch's optimizers: a CoreBinding (binding.py) under octopt.torch's policy: the state
    is laid out when a group is added, the hyper-parameters are the core's own names (copied into the core
    before each step), the per-parameter options come from ``octopt.torch.override``, and the state dict is
    octopt's format (_state.py).

    Another namespace configures a subclass with class keywords instead of attributes:
    ``class X(TorchOptimizer, core=octopt.family.AdamW, default_bits=8, param_rule=rule)``, where ``core`` is
    the octopt.Optimizer class that steps, ``default_bits`` the state width when ``bits`` is None, and
    ``rule(optimizer, param, options) -> options`` amends a parameter's options beyond its group's."""

    _core_base: type = _CoreOptimizer
    _default_bits = 32
    _param_rule: Callable[[Any, torch.Tensor, dict], dict] | None = None

    def __init_subclass__(
        cls,
        *,
        core: type | None = None,
        default_bits: int | None = None,
        param_rule: Callable[[Any, torch.Tensor, dict], dict] | None = None,
        **kwargs: Any,
    ):
        super().__init_subclass__(**kwargs)
        if core is not None:
            cls._core_base = core
        if default_bits is not None:
            cls._default_bits = default_bits
        if param_rule is not None:
            cls._param_rule = staticmethod(param_rule)

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
        # One core (one step plan) per device: "cpu", "cuda:0", "cuda:1", ... Each CUDA plan is one fused
        # launch on its device's current stream; a model split over devices is stepped by all of them.
        self._binding = CoreBinding(self, self._core_base, full, core_opts)
        self._layout: list[dict] = []  # per torch group: its layout keys as added
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
        b = self._binding
        base = {k: group[k] for k in _hparams.GROUP_KEYS if k in group}
        merged = dict(b.defaults)
        merged.update(base)
        _hparams.validate_group(b.kind, merged, fn)
        start = sum(len(g["params"]) for g in self.param_groups[:-1])
        entries = []
        for p in group["params"]:
            ov = self._param_override(p)
            entries.append((p, {**base, **ov}, ov, None))

        def check(options: dict) -> None:
            _hparams.validate_group(b.kind, {**merged, **options}, f"{fn} (with the options of octopt.torch.override)")

        b.add_group(entries, fn, start, check)
        self._layout.append({k: group[k] for k in LAYOUT_KEYS})

    def _param_override(self, p: torch.Tensor) -> dict:
        """The options of this parameter beyond its group's (octopt.torch.override, then the class's rule)."""
        ov = _override.get_override(p)
        rule = type(self)._param_rule
        return ov if rule is None else rule(self, p, ov)

    def _sync(self, fn: str) -> None:
        """Copies the hyper-parameters of the torch groups (changed by schedulers and users) into the core."""
        links = self._binding.links
        if len(self.param_groups) != len(links):
            raise RuntimeError(f"{fn}: param_groups was changed directly; add groups with add_param_group()")
        for gi, (g, group_links) in enumerate(zip(self.param_groups, links)):
            for k, v in self._layout[gi].items():
                if g.get(k) != v:
                    raise ValueError(
                        f"{fn}: param group {gi} has '{k}'={g.get(k)!r} but its state was laid out "
                        f"with {v!r}; the state layout cannot change after the group was added"
                    )
            for link in group_links:
                cg = self._binding.core_group(link)
                for k in HPARAM_KEYS:
                    if k in g and k not in link.fixed:
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
        if not self._binding.cores:
            return loss
        self._sync(fn)
        self._binding.step(fn)
        return loss

    def upload(self) -> None:
        """CUDA graphs: hands the current hyper-parameters (an lr schedule's new ``lr``) and gradient
        addresses to the device without stepping, so that the next replay of a captured ``step()`` uses
        them. Call it eagerly (not while capturing), with the same ``.grad`` tensors the graph uses."""
        fn = f"{type(self).__name__}.upload"
        self._sync(fn)
        self._binding.upload(fn)

    # -- introspection -----------------------------------------------------------------------
    @property
    def _core(self) -> _CoreOptimizer | None:
        """The core of the first device (profiling aids; the optimizer has one core per device)."""
        return self._binding.first_core

    @property
    def skipped_blocks(self) -> int:
        """Blocks left unchanged over all steps because their gradient held NaN/Inf (on a GPU this reads a
        device counter, which waits for the enqueued steps)."""
        return self._binding.skipped_blocks

    def state_bytes(self) -> int:
        """Exact bytes of allocated optimizer state (codes, absmax and 32-bit buffers) on this rank: of
        DTensor parameters, the state of the local shards."""
        return self._binding.state_bytes()

    def state_layout(self) -> list[dict]:
        """Per parameter (in param_groups order): its state slots with bits, block size and map (of the
        local shard for a DTensor parameter)."""
        return self._binding.state_layout(self._param_list())

    # -- state dicts ---------------------------------------------------------------------------
    @torch._disable_dynamo
    def state_dict(self) -> dict:
        """torch's format: ``{"state": {index: {"step": tensor, "exp_avg": tensor, "exp_avg_absmax": ...}},
        "param_groups": [...], "octopt": {...}}``. 32-bit states are float32 tensors of the parameter's shape;
        8-bit codes are uint8 tensors of the parameter's shape, 4-bit codes flat uint8 (two per byte), each
        with float32 ``<name>_absmax`` (one per block). The tensors are the live state, as in torch."""
        return state_dict_with_hooks(self, lambda: self._binding.state_dict(self.param_groups, self._float32_state))

    @torch._disable_dynamo
    def load_state_dict(self, state_dict: dict) -> None:
        """Restores a state dict from state_dict(), from the matching torch.optim optimizer (its float32
        states are quantized) or from bitsandbytes' Adam8bit/AdamW8bit (both layouts). Everything is
        validated before anything changes; tensors are copied onto the optimizer's device."""
        fn = f"{type(self).__name__}.load_state_dict"
        load_state_dict_with_hooks(
            self, state_dict, lambda sd: self._binding.load_state_dict(self.param_groups, sd, fn)
        )

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
        b = self._opt._binding
        if not b.holds(p):
            raise KeyError(p)
        return _state.param_state(b.tensor(p), b.dist(p))

    def __setitem__(self, p: Any, value: dict) -> None:
        """Replaces the state of one parameter from an entry of a state dict (what ZeroRedundancyOptimizer's
        load_state_dict does); validated like load_state_dict."""
        if not self._opt._binding.holds(p):
            raise KeyError(p)
        self._opt._binding.load_param_state(p, value, f"{type(self._opt).__name__}.state[param]")

    def __contains__(self, p: object) -> bool:
        return self._opt._binding.holds(p)

    def __iter__(self) -> Iterator[torch.Tensor]:
        return iter(self._opt._param_list())

    def __len__(self) -> int:
        return len(self._opt._binding.tensor_states)
