"""The engine behind an octopt.optax transformation: option checks, init, and the per-parameter
FFI steps of update and of the fused, donating step."""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec
import numpy as np

from .. import _hparams, _layout, _octopt
from ._call import FLAGS, HP_NAMES, PARAMS, UPDATES, check_platform, ensure_registered, step_tensors
from ._state import (
    LeafLayout,
    OctoptState,
    SlotState,
    StateLayout,
    check_divisible,
    init_slot,
    leaf_sharding,
    is_placeholder,
    placeholder_state,
    scalar_device,
)

# The core's table: each float hyper-parameter by its optax name, with its default (a default
# HyperParams': the value an optimizer that does not take it steps with) and its range.
_HP_TABLE = {h["optax_key"]: h for h in _hparams.HPARAMS if h["type"] != "flag"}
_CORE_DEFAULTS = {name: float(getattr(_octopt.HyperParams(), h["field"])) for name, h in _HP_TABLE.items()}


def _is_array(v: Any) -> bool:
    return isinstance(v, jax.Array)  # a traced or device value: a runtime operand of the step


def _check_real(v: Any, fn: str, name: str, kind: str, label: str | None = None) -> None:
    """Raises for a concrete ``v`` outside the core's range of hyper-parameter ``name`` (named ``label``,
    the user's argument, in the message)."""
    label = label or name
    if isinstance(v, jax.core.Tracer):
        return  # checked by the handler when it runs
    if isinstance(v, bool) or not isinstance(v, (int, float, np.number, np.ndarray, jax.Array)):
        raise TypeError(f"{fn}: argument '{label}' must be a number, got {type(v).__name__}")
    if np.ndim(v) != 0:
        raise ValueError(f"{fn}: argument '{label}' must be a scalar, got shape {np.shape(v)}")
    x = float(v)
    if not math.isfinite(x):
        raise ValueError(f"{fn}: argument '{label}' must be finite, got {x}")
    h = _HP_TABLE.get(name)
    lo, hi, hi_open = (h["lo"], h["hi"], h["hi_open"]) if h is not None else (0.0, math.inf, False)
    hi = None if math.isinf(hi) else hi
    if (kind, name) == ("rmsprop", "alpha"):  # a smoothing constant (AdEMAMix's alpha is a mixing weight)
        lo, hi, hi_open = 0.0, 1.0, True
    if x < lo or (hi is not None and (x >= hi if hi_open else x > hi)):
        bound = f"in [{lo}, {hi})" if hi_open else (f"in [{lo}, {hi}]" if hi is not None else f">= {lo}")
        raise ValueError(f"{fn}: argument '{label}' must be {bound}, got {x}")


def _static_int(v: Any, fn: str, name: str) -> Any:
    """A structural option as a Python int (inject_hyperparams turns ints into arrays)."""
    if v is None or isinstance(v, bool):
        return v
    if isinstance(v, jax.core.Tracer):
        raise TypeError(
            f"{fn}: argument '{name}' is traced; it fixes the state's layout, so it must be static "
            f"(with optax.inject_hyperparams pass static_args=('{name}',))"
        )
    if np.ndim(v) != 0 or float(v) != int(v):
        raise TypeError(f"{fn}: argument '{name}' must be an int, got {v!r}")
    return int(v)


def _static_initial(parts: list, fn: str) -> float:
    """The value a slot starts from: the sum of (value, argument name) parts, each read at init."""
    total = 0.0
    for v, name in parts:
        if isinstance(v, jax.core.Tracer):
            raise TypeError(
                f"{fn}: argument '{name}' is traced; it sets where the state starts, so it must be static "
                f"(with optax.inject_hyperparams pass static_args=('{name}',))"
            )
        total += float(v)
    return total


class Engine:
    """The closure behind one transformation: its options, hyper-parameters and the jitted fused step.

    ``hp`` holds the float hyper-parameters by the core's optax names (``learning_rate``, ``b1``, ...,
    ``alpha``, ``momentum_decay``); those named in ``schedules`` may be functions of the step count. The
    keyword arguments are what an optax-style transformation needs beyond the core's table:
    ``arg_names`` (core name -> the user's argument, for messages), ``names`` (torch slot name -> the
    state's slot name), ``initial`` (slot index -> [(value, argument name)], summed: where the slot
    starts), ``buffer`` (whether a momentum buffer is kept; None: when momentum is an array or non-zero),
    ``state_dtypes`` (slot index -> storage dtype of 32-bit state), ``decay_mask`` (optax's ``mask``: a
    tree of bools or a function of the updates; False leaves are not decayed) and ``derive``
    (``derive(count, values) -> values``: per-step hyper-parameters from the given ones); with
    ``decay_grads`` the weight decay is added to the gradient before the step (optax's
    add_decayed_weights ahead of LARS's trust ratio) instead of inside it."""

    def __init__(
        self,
        kind: str,
        fn: str,
        hp: dict,
        flags: dict,
        options: dict,
        *,
        arg_names: dict | None = None,
        names: dict | None = None,
        initial: dict | None = None,
        buffer: bool | None = None,
        state_dtypes: dict | None = None,
        decay_mask: Any = None,
        derive: Any = None,
        decay_grads: bool = False,
        schedules: tuple = ("learning_rate",),
    ):
        self.kind, self.fn = kind, fn
        self.arg_names = arg_names or {}
        for name, v in hp.items():
            if v is not None and not (name in schedules and callable(v)):
                _check_real(v, fn, name, kind, self.arg_names.get(name))
        self.hp = hp
        self.initial = initial or {}
        for parts in self.initial.values():
            for v, name in parts:
                _check_real(v, fn, name, kind)
        self.state_dtypes = {k: jnp.dtype(d) for k, d in (state_dtypes or {}).items()}
        self.decay_mask, self.derive, self.decay_grads = decay_mask, derive, decay_grads
        opts = {
            k: _static_int(options.get(k), fn, k)
            for k in ("bits", "block_size", "min_8bit_size", "first_moment_bits", "seed")
        }
        group = _hparams.defaults(kind)  # the hyper-parameters themselves are checked by _check_real
        group.update(
            bits=32 if opts["bits"] is None else opts["bits"],
            block_size=opts["block_size"],
            first_moment_bits=opts["first_moment_bits"],
            min_8bit_size=4096 if opts["min_8bit_size"] is None else opts["min_8bit_size"],
            state_map=_hparams.state_map("dynamic" if options.get("state_map") is None else options["state_map"], fn),
        )
        group.update({k: v for k, v in flags.items() if k in ("nesterov", "centered", "eps_in_sqrt")})
        # momentum decides whether SGD/LARS/RMSprop keep a momentum buffer. An array (a value under
        # inject_hyperparams: concrete at init, traced at update) may change, so it keeps one, and the
        # state's shape is the same at init and at every update.
        momentum, dampening = hp.get("momentum", 0.0), hp.get("dampening", 0.0)
        m = None if _is_array(momentum) else float(momentum)
        if buffer is None:
            buffer = m is None or m != 0.0
        group["momentum"] = (m if m else 1.0) if buffer else 0.0
        group["dampening"] = 0.0 if _is_array(dampening) else float(dampening)
        _hparams.validate_group(kind, group, fn)
        self.group = group
        self.seed = opts["seed"] or 0
        if not 0 <= self.seed < 2**63:
            raise ValueError(f"{fn}: argument 'seed' must be in [0, 2**63), got {self.seed}")
        self.stochastic = options.get("stochastic_rounding")
        self.flags = sum(FLAGS[k] for k, v in flags.items() if v)
        if self.stochastic:
            self.flags |= FLAGS["stochastic_state"]
        if options.get("stochastic_bf16"):
            self.flags |= FLAGS["stochastic_bf16"]
        self.used = _layout.used_slots(kind, group)
        torch_names = {s[0]: s[0] for s in _layout.SLOTS[kind]}
        torch_names.update(names or {})
        self.slot_names = tuple(torch_names[_layout.SLOTS[kind][k][0]] for k in self.used)
        # the per-tensor scalar state the core defines for this optimizer (NAdam's mu_product): (name, initial)
        self.scalars = tuple(_octopt.xla_ffi_tensor_scalars(kind))
        self.config = (
            kind,
            tuple(sorted((k, group[k]) for k in _hparams.LAYOUT_KEYS)),
            self.stochastic,
            self.slot_names,
            tuple(sorted((k, d.name) for k, d in self.state_dtypes.items())),
        )
        self._fused = None

    def _dtype(self, spec: Any) -> Any:
        return self.state_dtypes.get(spec.index, jnp.dtype(jnp.float32)) if spec.bits == 32 else jnp.dtype(jnp.uint8)

    # -- init -----------------------------------------------------------------------------------
    def init(self, params: Any) -> OctoptState:
        ensure_registered(self.fn)
        fn = f"{self.fn}.init"
        starts = {k: _static_initial(parts, fn) for k, parts in self.initial.items()}
        scalar_names = tuple(name for name, _ in self.scalars)
        if is_placeholder(params):
            return placeholder_state(params, self.slot_names)
        leaves = jax.tree_util.tree_flatten_with_path(params)[0]
        check_platform([p for _, p in leaves], fn)
        layouts, slot_trees = [], []
        for path, p in leaves:
            arg = f"params{jax.tree_util.keystr(path)}"
            _check_param(p, fn, arg)
            block_size, specs = _layout.layout_slots(self.kind, self.group, math.prod(p.shape), fn)
            mesh, pspec, axes = leaf_sharding(p)
            if mesh is not None and _hparams.TABLE[self.kind]["trust_ratio"]:
                raise ValueError(
                    f"{fn}: argument '{arg}' is sharded, but {self.kind}'s trust ratio needs the whole "
                    "tensor's norm; replicate it"
                )
            layout = LeafLayout(tuple(p.shape), block_size, tuple(specs), mesh, pspec, axes)
            check_divisible(layout, fn, arg)
            layouts.append(layout)
            slot_trees.append(
                [init_slot(layout, s, starts.get(s.index, 0.0), p, self.state_dtypes.get(s.index)) for s in specs]
            )
        treedef = jax.tree_util.tree_structure(params)
        names = self.slot_names
        slots = {name: treedef.unflatten([t[k].data for t in slot_trees]) for k, name in enumerate(names)}
        absmax = tuple(tuple(t[k].absmax for t in slot_trees) for k in range(len(names)))
        # per-tensor scalars after the scales: one float32 scalar per parameter, placed like the parameter
        # (replicated over its mesh)
        absmax += tuple(
            tuple(
                jnp.full([], initial, jnp.float32, device=scalar_device(lay, p)) for lay, (_, p) in zip(layouts, leaves)
            )
            for _, initial in self.scalars
        )
        # the count is placed like the state (committed where the parameters are), so that jit sees one
        # commitment for the whole state and compiles the step once
        placed = [
            leaf
            for leaf in jax.tree_util.tree_leaves(slots)
            if isinstance(leaf, jax.Array) and not isinstance(leaf, jax.core.Tracer) and leaf.committed
        ]
        count = jnp.zeros([], jnp.int32)
        if placed:
            sharding = placed[0].sharding
            if isinstance(sharding, NamedSharding):
                sharding = NamedSharding(sharding.mesh, PartitionSpec())
            count = jax.device_put(count, sharding)
        return OctoptState(count, slots, absmax, StateLayout(self.config, names, tuple(layouts), scalar_names))

    # -- update ---------------------------------------------------------------------------------
    def update(
        self, updates: Any, state: OctoptState, params: Any = None, **extra_args: Any
    ) -> tuple[Any, OctoptState]:
        """optax's update; extra keyword arguments (optax.GradientTransformationExtraArgs: a loss value, ...)
        are accepted and ignored."""
        del extra_args
        fn = f"{self.fn}.update"
        if params is None:
            raise ValueError(f"{fn}: argument 'params' is required (octopt computes the step from the parameters)")
        return self._apply(params, updates, state, UPDATES, fn, "updates")

    def fused_step(self, params: Any, grads: Any, state: OctoptState) -> tuple[Any, OctoptState]:
        if self._fused is None:
            self._fused = jax.jit(
                lambda p, g, s: self._apply(p, g, s, PARAMS, f"{self.fn}.step", "grads"), donate_argnums=(0, 2)
            )
        return self._fused(params, grads, state)

    def _values(self, count: Any) -> dict:
        """The hyper-parameters of the step after ``count`` steps: schedules evaluated at the steps taken so
        far (optax's convention), then ``derive``."""
        values = {name: (v(count) if callable(v) else v) for name, v in self.hp.items() if v is not None}
        return self.derive(count, values) if self.derive is not None else values

    def _hp_operands(self, values: dict, decay: bool = True) -> tuple[Any, np.ndarray, int]:
        if not decay or self.decay_grads:
            values = dict(values, weight_decay=0.0)
        static = [float(_CORE_DEFAULTS[n]) for n in HP_NAMES]
        dynamic = [jnp.zeros([], jnp.float32)] * len(HP_NAMES)
        mask = 0
        for name, v in values.items():
            k = HP_NAMES.index(name)
            if _is_array(v):
                dynamic[k] = jnp.asarray(v, jnp.float32).reshape(())
                mask |= 1 << k
            else:
                static[k] = float(v)
        return jnp.stack(dynamic), np.array(static, np.float64), mask

    def _decayed(self, grads: Any, treedef: Any, fn: str, grads_arg: str) -> list:
        """Per parameter, whether weight decay applies (optax's ``mask``: a tree of bools with the
        parameters' structure or a prefix of it, or a function of the updates returning one)."""
        n = treedef.num_leaves
        if self.decay_mask is None:
            return [True] * n
        mask = self.decay_mask(grads) if callable(self.decay_mask) else self.decay_mask
        try:
            per_leaf = jax.tree_util.tree_map(lambda m, sub: jax.tree_util.tree_map(lambda _: m, sub), mask, grads)
            flags = treedef.flatten_up_to(per_leaf)
        except (ValueError, TypeError) as e:
            raise ValueError(
                f"{fn}: argument 'mask' must be a tree of bools with the structure of '{grads_arg}' (or a prefix "
                f"of it): {e}"
            ) from None
        out = []
        for m in flags:
            if isinstance(m, jax.core.Tracer):
                raise TypeError(f"{fn}: argument 'mask' must hold Python bools (static), got a traced value")
            out.append(bool(m))
        return out

    def _apply(self, params: Any, grads: Any, state: Any, mode: int, fn: str, grads_arg: str) -> tuple[Any, Any]:
        ensure_registered(self.fn)
        p_leaves, treedef = jax.tree_util.tree_flatten_with_path(params)
        g_leaves, g_def = jax.tree_util.tree_flatten(grads)
        if g_def != treedef:
            raise ValueError(f"{fn}: argument '{grads_arg}' has tree structure {g_def} but 'params' has {treedef}")
        layout = _check_state(state, self.config, treedef, len(p_leaves), fn)
        check_platform([p for _, p in p_leaves], fn)
        step_no = state.count + 1
        if not p_leaves:
            return treedef.unflatten([]), OctoptState(step_no, state.slots, state.absmax, layout)
        data = [treedef.flatten_up_to(state.slots[name]) for name in layout.slot_names]
        scalars = state.absmax[len(layout.slot_names) :]
        decayed = self._decayed(grads, treedef, fn, grads_arg)
        values = self._values(state.count)
        attrs = dict(
            kind=_octopt.xla_ffi_kind(self.kind),
            flags=self.flags,
            seed=self.seed,
            stochastic=self.stochastic is None,
        )
        calls: dict = {}  # one FFI call per mesh (unsharded parameters: None) and decay, over its parameters
        for i, ((path, p), g, lay) in enumerate(zip(p_leaves, g_leaves, layout.leaves)):
            where = jax.tree_util.keystr(path)
            _check_param(p, fn, f"params{where}")
            _check_grad(p, g, lay, fn, f"{grads_arg}{where}", f"params{where}")
            if self.decay_grads and decayed[i]:  # optax's add_decayed_weights before the step (LARS)
                g = g + jnp.asarray(values.get("weight_decay", 0.0), jnp.float32).astype(g.dtype) * p.astype(g.dtype)
            slots = [SlotState(d[i], a[i]) for d, a in zip(data, state.absmax)]
            _check_slots(slots, lay, fn, where, layout.slot_names, self._dtype)
            # 32-bit state kept in another dtype (mu_dtype) is stepped in float32 and stored back rounded
            slots = [SlotState(s.data.astype(jnp.float32), s.absmax) if s.data.dtype != jnp.uint8 else s for s in slots]
            tensor_scalars = [values[i] for values in scalars]
            for name, v in zip(layout.scalar_names, tensor_scalars):
                if tuple(getattr(v, "shape", (None,))) != () or jnp.dtype(getattr(v, "dtype", None)) != jnp.float32:
                    raise ValueError(
                        f"{fn}: argument 'state' entry '{name}' of 'params{where}' must be a float32 scalar, got "
                        f"{getattr(v, 'dtype', type(v).__name__)}{list(getattr(v, 'shape', ()))}"
                    )
            calls.setdefault((lay.mesh, decayed[i]), []).append((i, (p, g, slots, tensor_scalars, lay, i)))
        operands = {d: self._hp_operands(values, d) for d in set(decayed)}
        done = [None] * len(p_leaves)
        for (_mesh, decay), group in calls.items():
            hp_dynamic, hp_static, mask = operands[decay]
            call_attrs = dict(attrs, hp_static=hp_static, dynamic_mask=mask)
            for (i, _), result in zip(
                group, step_tensors([t for _, t in group], hp_dynamic, step_no, call_attrs, mode)
            ):
                done[i] = result
        outs = [d[0] for d in done]
        new_data, new_absmax = [], []
        for k in range(len(layout.slot_names)):
            new_data.append(
                [done[i][1][k].data.astype(self._dtype(lay.specs[k])) for i, lay in enumerate(layout.leaves)]
            )
            new_absmax.append(tuple(done[i][1][k].absmax for i in range(len(done))))
        new_absmax += [tuple(done[i][2][k] for i in range(len(done))) for k in range(len(layout.scalar_names))]
        new_state = OctoptState(
            step_no,
            {name: treedef.unflatten(d) for name, d in zip(layout.slot_names, new_data)},
            tuple(new_absmax),
            layout,
        )
        return treedef.unflatten(outs), new_state


def _check_param(p: Any, fn: str, arg: str) -> None:
    dtype = getattr(p, "dtype", None)
    if dtype is None or not hasattr(p, "shape"):
        raise TypeError(f"{fn}: argument '{arg}' must be an array, got {type(p).__name__}")
    if jnp.dtype(dtype) not in (jnp.float32, jnp.float16, jnp.bfloat16):
        why = ""
        if jnp.issubdtype(dtype, jnp.complexfloating):
            # optax steps a complex leaf with |g|^2 = g * conj(g) in its second moment; the core's kernels
            # hold real moments of real numbers (docs/jax.md, docs/decisions.md)
            why = (
                ": complex parameters are not supported (optax's update of a complex parameter keeps |g|^2 in "
                "its second moment, which octopt's real-valued kernels do not compute); step the complex "
                "leaves with optax's own transformation through optax.partition"
            )
        raise TypeError(f"{fn}: argument '{arg}' must have dtype float32, float16 or bfloat16, got {dtype}{why}")


def _check_grad(p: Any, g: Any, lay: LeafLayout, fn: str, arg: str, parg: str) -> None:
    dtype = getattr(g, "dtype", None)
    if dtype is None or not hasattr(g, "shape"):
        raise TypeError(f"{fn}: argument '{arg}' must be an array, got {type(g).__name__}")
    if jnp.dtype(dtype) not in (jnp.float32, jnp.dtype(p.dtype)):
        raise TypeError(f"{fn}: argument '{arg}' must be float32 or the parameter's dtype ({p.dtype}), got {dtype}")
    if tuple(g.shape) != tuple(p.shape):
        raise ValueError(f"{fn}: argument '{arg}' has shape {tuple(g.shape)} but '{parg}' has {tuple(p.shape)}")
    if tuple(p.shape) != lay.shape:
        raise ValueError(f"{fn}: argument '{parg}' has shape {tuple(p.shape)} but the state was made for {lay.shape}")


def _check_state(state: Any, config: tuple, treedef: Any, n: int, fn: str) -> StateLayout:
    if not isinstance(state, OctoptState) or not isinstance(state.layout, StateLayout):
        raise TypeError(
            f"{fn}: argument 'state' must be the OctoptState this transformation's init returned, got "
            f"{type(state).__name__}"
        )
    layout = state.layout
    if layout.config != config:
        raise ValueError(
            f"{fn}: argument 'state' was made by another configuration ({layout.config}) than this "
            f"transformation's ({config})"
        )
    if len(layout.leaves) != n or set(state.slots) != set(layout.slot_names):
        raise ValueError(f"{fn}: argument 'state' holds {len(layout.leaves)} parameters but 'params' has {n}")
    for name in layout.slot_names:
        try:
            treedef.flatten_up_to(state.slots[name])
        except (ValueError, TypeError) as e:
            raise ValueError(
                f"{fn}: argument 'state' does not have the tree structure of 'params' (slot '{name}'): {e}"
            ) from None
    absmax = state.absmax
    if n and (
        not isinstance(absmax, tuple)
        or len(absmax) != len(layout.slot_names) + len(layout.scalar_names)
        or any(not isinstance(a, tuple) or len(a) != n for a in absmax)
    ):
        extra = f" and per per-tensor scalar ({', '.join(layout.scalar_names)})" if layout.scalar_names else ""
        raise ValueError(f"{fn}: argument 'state' field 'absmax' must hold one tuple of {n} arrays per slot{extra}")
    return layout


def _check_slots(slots: list, lay: LeafLayout, fn: str, where: str, names: tuple, dtype_of: Any) -> None:
    for spec, st, name in zip(lay.specs, slots, names):
        data_shape, absmax_shape = lay.slot_shapes(spec)
        dtype = dtype_of(spec)
        if (
            tuple(st.data.shape) != data_shape
            or jnp.dtype(st.data.dtype) != dtype
            or (spec.bits != 32 and tuple(st.absmax.shape) != absmax_shape)
        ):
            raise ValueError(
                f"{fn}: argument 'state' slot '{name}' of 'params{where}' has "
                f"{st.data.dtype}{list(st.data.shape)} but this configuration needs "
                f"{jnp.dtype(dtype).name}{list(data_shape)} (absmax {list(absmax_shape)})"
            )
