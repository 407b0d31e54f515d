"""The base of octopt.bnb.optim's optimizers: bitsandbytes' constructor arguments, param groups, state keys
and configuration overrides, stepped by octopt's core.

bitsandbytes names its optimizers' update rules ("adam", "momentum", ...); each maps to one of octopt's
core optimizers with the hyper-parameters bitsandbytes actually uses (bitsandbytes' "adam" decays weights
decoupled, like AdamW; its "momentum" and "lars" ignore dampening and nesterov; its "rmsprop" ignores
momentum). The state is laid out lazily, at the first step (or the first read of the state, or a load),
as bitsandbytes does, so ``GlobalOptimManager.override_config`` may come after the optimizer was built.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from ... import _hparams, _octopt
from ... import family as _family
from ...torch.binding import CoreBinding, check_param, load_state_dict_with_hooks, state_dict_with_hooks
from . import _clip, _manager, _state

# bitsandbytes' update rule -> octopt's core optimizer
CORE_KIND = {
    "adam": "adamw",
    "lamb": "adamw",
    "ademamix": "ademamix",
    "momentum": "sgd",
    "lars": "sgd",
    "lion": "lion",
    "rmsprop": "rmsprop",
    "adagrad": "adagrad",
}
BLOCK_SIZE = 256  # bitsandbytes' block size of 8-bit state
# bitsandbytes' one-state optimizers quantize every state with the signed dynamic map, the non-negative
# sums of RMSprop and Adagrad too; octopt.bnb does the same so that it steps (and imports) their state
# as bitsandbytes does (octopt's own RMSprop and Adagrad use the unsigned map)
SIGNED_MAP_RULES = ("rmsprop", "adagrad")
LAYOUT_CONFIG = ("optim_bits", "min_8bit_size")


class MockArgs:
    """bitsandbytes' ``args``: an object whose attributes are the optimizer-wide options."""

    def __init__(self, initial_data: dict):
        for key in initial_data:
            setattr(self, key, initial_data[key])


def _freeze(v: Any) -> Any:
    if isinstance(v, dict):
        return tuple(sorted((k, _freeze(x)) for k, x in v.items()))
    if isinstance(v, (list, tuple)):
        return tuple(_freeze(x) for x in v)
    if isinstance(v, torch.Tensor):
        return ("tensor", id(v))
    return v


_CORE_CLASSES = {c.kind: c for c in _family.ALL}


class BnbOptimizer(torch.optim.Optimizer):
    """bitsandbytes' Optimizer8bit semantics: octopt.torch's CoreBinding (which owns the cores, the parameters,
    the gradients and the streams) under bitsandbytes' policy: the state is laid out at the first step, the
    hyper-parameters come from bitsandbytes' names and GlobalOptimManager, the state dict is bitsandbytes'.
    Subclasses set ``_bnb_name`` (bitsandbytes' update rule) and ``_two_state`` (bitsandbytes'
    Optimizer2State: groups carry alpha/t_alpha/t_beta3)."""

    _bnb_name = "adam"
    _two_state = True

    def __init__(
        self,
        params: Any,
        lr: float = 1e-3,
        betas: Any = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        optim_bits: int = 32,
        args: Any = None,
        min_8bit_size: int = 4096,
        max_unorm: float = 0.0,
        skip_zeros: bool = False,
        is_paged: bool = False,
        alpha: float = 0.0,
        t_alpha: int | None = None,
        t_beta3: int | None = None,
        percentile_clipping: int = 100,
        block_wise: bool = True,
    ):
        if not 0.0 <= lr:
            raise ValueError(f"Invalid learning rate: {lr}")
        if not 0.0 <= eps:
            raise ValueError(f"Invalid epsilon value: {eps}")
        if isinstance(betas, str) and self._two_state:
            betas = [float(b) for b in betas.replace("(", "").replace(")", "").strip().split(",")]
        for i in range(len(betas)):
            if not 0.0 <= betas[i] < 1.0:
                raise ValueError(f"Invalid beta parameter at index {i}: {betas[i]}")
        if not 0.0 <= weight_decay:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        if isinstance(percentile_clipping, bool) or not isinstance(percentile_clipping, int):
            raise TypeError(f"{type(self).__name__}: 'percentile_clipping' must be an int, got {percentile_clipping!r}")
        if not 1 <= percentile_clipping <= 100:
            raise ValueError(
                f"{type(self).__name__}: 'percentile_clipping' must be in [1, 100] (the percentile of the last "
                f"100 gradient norms to clip at; 100 turns clipping off), got {percentile_clipping}"
            )
        defaults: dict[str, Any] = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)
        if self._two_state:
            defaults.update(alpha=alpha, t_alpha=t_alpha, t_beta3=t_beta3)
        self._core_opts: dict[str, Any] = {}  # the core's options, set when the state is laid out
        self._bound: CoreBinding | None = None  # the cores and parameters, from the first step on
        self._buckets: list[_state.Bucket] = []
        self._extra: dict[int, dict] = {}  # id(param) -> gnorm_vec / unorm_vec, as bitsandbytes keeps them
        self._pairs: dict[int, tuple] = {}  # AdEMAMix: id(param) -> (m1 and m2 as one tensor, their absmax)
        self._seen_version = -1
        super().__init__(params, defaults)
        self.initialized = False
        self.is_paged = is_paged
        self.mng = _manager.GlobalOptimManager.get_instance()
        self.optimizer_name = self._bnb_name
        if args is None:
            args = MockArgs(
                dict(
                    optim_bits=optim_bits,
                    min_8bit_size=min_8bit_size,
                    max_unorm=max_unorm,
                    skip_zeros=skip_zeros,
                    percentile_clipping=percentile_clipping,
                    block_wise=block_wise,
                )
            )
        self.args = args
        self.state = _state.StateView(self)  # type: ignore[assignment]

    # octopt's core optimizer that bitsandbytes' update rule maps to
    @property
    def _core_kind(self) -> str:
        return CORE_KIND[self._bnb_name]

    # -- param groups: recorded now, laid out at the first step ------------------------------------
    def add_param_group(self, param_group: dict) -> None:
        super().add_param_group(param_group)
        if self._bound is not None:
            try:
                self._build_group(len(self.param_groups) - 1)
            except BaseException:
                self.param_groups.pop()
                raise

    def get_config(self, gindex: int, pindex: int, group: dict) -> dict:
        """A parameter's configuration, as bitsandbytes computes it: the group's values and ``args``,
        updated by the overrides of GlobalOptimManager."""
        a = self.args
        config = {
            "betas": group["betas"],
            "eps": group["eps"],
            "weight_decay": group["weight_decay"],
            "lr": group["lr"],
            "alpha": group.get("alpha", 0.0),
            "t_alpha": group.get("t_alpha", None),
            "t_beta3": group.get("t_beta3", None),
            "optim_bits": a.optim_bits,
            "min_8bit_size": a.min_8bit_size,
            "max_unorm": a.max_unorm,
            "skip_zeros": a.skip_zeros,
            "percentile_clipping": getattr(a, "percentile_clipping", 100),
            "block_wise": getattr(a, "block_wise", True),
        }
        if (gindex, pindex) in self.mng.index2config:
            config.update(self.mng.index2config[(gindex, pindex)])
        p = self.param_groups[gindex]["params"][pindex]
        if id(p) in self.mng.pid2config:
            config.update(self.mng.pid2config[id(p)])
        return config

    def check_overrides(self) -> None:
        """Resolves GlobalOptimManager.register_module_override (StableEmbedding's 32-bit state)."""
        for module, attr, config in self.mng.module_weight_config_triple:
            target = getattr(module, attr)
            for gindex, group in enumerate(self.param_groups):
                for pindex, p in enumerate(group["params"]):
                    if p is target:
                        self.mng.pid2config[id(p)] = config
                        self.mng.index2config[(gindex, pindex)] = config

    def _core_hparams(self, c: dict) -> dict:
        """The hyper-parameters of octopt's core optimizer that do what bitsandbytes' rule does."""
        name, b = self._bnb_name, c["betas"]
        if name in ("adam", "lamb"):
            return dict(lr=c["lr"], betas=(b[0], b[1]), eps=c["eps"], weight_decay=c["weight_decay"])
        if name == "ademamix":
            return dict(
                lr=c["lr"],
                betas=tuple(b),
                alpha=c["alpha"],
                t_alpha=c["t_alpha"] or None,  # bitsandbytes schedules only for a truthy t_alpha / t_beta3
                t_beta3=c["t_beta3"] or None,
                eps=c["eps"],
                weight_decay=c["weight_decay"],
            )
        if name in ("momentum", "lars"):  # bitsandbytes' momentum ignores dampening and nesterov
            return dict(lr=c["lr"], momentum=b[0], weight_decay=c["weight_decay"])
        if name == "lion":
            return dict(lr=c["lr"], betas=(b[0], b[1]), weight_decay=c["weight_decay"])
        if name == "rmsprop":  # bitsandbytes' rmsprop ignores momentum
            return dict(lr=c["lr"], alpha=b[0], eps=c["eps"], weight_decay=c["weight_decay"])
        return dict(lr=c["lr"], eps=c["eps"], weight_decay=c["weight_decay"])  # adagrad

    def _param_list(self) -> list[torch.Tensor]:
        return [p for g in self.param_groups for p in g["params"]]

    @property
    def _tensors(self) -> Any:
        """id(param) -> the core's state of that parameter (empty before the state is laid out)."""
        return {} if self._bound is None else self._bound.tensor_states

    @staticmethod
    def _check_param(p: torch.Tensor, fn: str, arg: str) -> None:
        """As octopt.torch's, but CUDA parameters are taken where octopt was built with CUDA (stepped on the
        current stream; the paged optimizers' state lives in managed memory)."""
        if p.is_cuda and p.layout == torch.strided and _octopt.cuda_built():
            if p.dtype not in (torch.float32, torch.float16, torch.bfloat16):
                raise TypeError(f"{fn}: argument '{arg}' must be float32, float16 or bfloat16, got {p.dtype}")
            if not p.is_contiguous():
                raise ValueError(
                    f"{fn}: argument '{arg}' must be contiguous: octopt updates the parameter's memory in place"
                )
            return  # the core checks the device
        check_param(p, fn, arg)

    # -- laying out the state ----------------------------------------------------------------------
    def _ensure_core(self) -> None:
        if self._bound is not None:
            return
        self.check_overrides()
        self.initialized = True
        self._core_opts = {"_state_factory": _state.StateFactory(self)}
        if self._bnb_name in SIGNED_MAP_RULES:
            self._core_opts["_signed_maps"] = True
        kind = CORE_KIND[self._bnb_name]
        defaults = dict(_hparams.COMMON_DEFAULTS)
        defaults.update(_hparams.defaults(kind))
        self._bound = CoreBinding(self, _CORE_CLASSES[kind], defaults, self._core_opts, self._check_param)
        self._seen_version = self.mng.version
        for gi in range(len(self.param_groups)):
            self._build_group(gi)

    def _build_group(self, gi: int) -> None:
        fn = type(self).__name__
        group = self.param_groups[gi]
        start = sum(len(g["params"]) for g in self.param_groups[:gi])
        entries, positions = [], {}
        for pi, p in enumerate(group["params"]):
            c = self.get_config(gi, pi, group)
            if c["optim_bits"] not in (8, 32):
                raise NotImplementedError(f"Amount of optimizer bits not supported: {c['optim_bits']}")
            hp = self._core_hparams(c)
            options = dict(
                hp,
                bits=c["optim_bits"],
                block_size=BLOCK_SIZE if c["optim_bits"] == 8 else None,
                min_8bit_size=int(c["min_8bit_size"]),
            )
            # one bucket (core group) per configuration; the core's hyper-parameters are all bnb's
            entries.append((p, options, hp, _freeze(c)))
            positions[id(p)] = (pi, c)
        for added in self._bound.add_group(entries, fn, start):
            pcs = [positions[id(p)] for p in added.params]
            c = pcs[0][1]
            self._buckets.append(_state.Bucket(gi, [pi for pi, _ in pcs], added.links, c))
            tensors = [self._bound.tensor(p) for p in added.params]
            for t in tensors:
                self._extra[id(t.param)] = _clip.extra_state(t.param, c)
            _state.check_pairs(self, tensors)

    def _sync(self, fn: str) -> None:
        """Hands every bucket's current configuration (group values, schedulers, overrides) to the core."""
        if len(self.param_groups) != len(self._bound.links):
            raise RuntimeError(f"{fn}: param_groups was changed directly; add groups with add_param_group()")
        recheck = self.mng.version != self._seen_version
        for b in self._buckets:
            group = self.param_groups[b.group]
            c = self.get_config(b.group, b.positions[0], group)
            if recheck:
                _state.check_bucket(self, b, c, fn)
            b.config = c
            for link in b.links:
                self._bound.core_group(link).update(self._core_hparams(c))
        self._seen_version = self.mng.version

    # -- stepping ------------------------------------------------------------------------------------
    @torch._disable_dynamo
    @torch.no_grad()
    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """One step of every parameter that has a gradient, as bitsandbytes' step (percentile clipping of
        the gradient and update-norm clipping included)."""
        fn = f"{type(self).__name__}.step"
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        if not any(p.grad is not None for g in self.param_groups for p in g["params"]):
            return loss
        self._ensure_core()
        self._sync(fn)
        self._prefetch()
        replace, unorm = _clip.before_step(self)
        self._native_step(fn, replace)
        _clip.after_step(self, unorm, replace)
        return loss

    def _native_step(self, fn: str, replace: dict | None = None) -> None:
        """Steps the cores once from the parameters' gradients; ``replace`` maps id(param) to a float32
        gradient used instead of ``param.grad`` (the clipped gradients)."""
        self._sync(fn)
        self._bound.step(fn, None if not replace else lambda p: replace.get(id(p), p.grad))

    def _prefetch(self) -> None:
        factory = self._core_opts.get("_state_factory")
        if factory is not None:
            factory.prefetch()

    def upload(self) -> None:
        """CUDA graphs: hands the current hyper-parameters and gradient addresses to the device without
        stepping (as octopt.torch's upload)."""
        fn = f"{type(self).__name__}.upload"
        self._ensure_core()
        self._sync(fn)
        self._bound.upload(fn)

    # -- introspection -------------------------------------------------------------------------------
    @property
    def skipped_blocks(self) -> int:
        """Blocks left unchanged because their gradient held NaN/Inf (see octopt.torch)."""
        return 0 if self._bound is None else self._bound.skipped_blocks

    def state_bytes(self) -> int:
        """Exact bytes of allocated optimizer state (0 before the state is laid out at the first step)."""
        return 0 if self._bound is None else self._bound.state_bytes()

    def state_layout(self) -> list[dict]:
        """Per parameter (in param_groups order): its state slots with bits, block size and map."""
        self._ensure_core()
        return self._bound.state_layout(self._param_list())

    # -- state dicts -----------------------------------------------------------------------------------
    @torch._disable_dynamo
    def state_dict(self) -> dict:
        """bitsandbytes' format: per parameter that has taken a step, ``step`` and (nested under
        ``__bnb_optimizer_quant_state__``, as bitsandbytes >= 0.45 writes it) ``state1``, ``qmap1``,
        ``absmax1``, ... The tensors are the live state."""
        return state_dict_with_hooks(self, lambda: _state.state_dict(self))

    @torch._disable_dynamo
    def load_state_dict(self, state_dict: dict, move_to_device: bool = True) -> None:
        """Loads a state dict of this optimizer or of the matching bitsandbytes optimizer (either layout,
        8-bit block-wise, 8-bit per tensor or 32-bit); 8-bit codes in other maps or blocks are
        requantized. Everything is validated before anything changes."""
        load_state_dict_with_hooks(self, state_dict, self._load_native_state_dict)

    def _load_native_state_dict(self, state_dict: dict) -> None:
        self._ensure_core()
        fn = f"{type(self).__name__}.load_state_dict"
        extra = _clip.loaded_extra(self, state_dict, fn)
        self._bound.load_state_dict(self.param_groups, state_dict, fn)
        for key, src in extra:
            key.copy_(src)

    def __getstate__(self) -> dict:
        raise TypeError(
            f"{type(self).__name__}: cannot be pickled or deep-copied (its state lives in a native "
            "step plan); save state_dict() instead"
        )
