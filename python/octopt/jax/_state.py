"""octopt.optax's state: a pytree of uint8 codes and float32 absmax arrays per parameter, plus the
static layout (which optimizer made it, block sizes, shard-local layout) as pytree metadata."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec

from .. import _layout


class SlotState(NamedTuple):
    """One state slot (exp_avg, exp_avg_sq, momentum_buffer, ...) of one parameter."""

    data: Any  # float32 values (32-bit state) or uint8 codes, in the parameter's shape; 4-bit codes: 1-D, two per byte
    absmax: Any  # float32, one per block (shard after shard when sharded); None for 32-bit state


@dataclass(frozen=True)
class LeafLayout:
    """How one parameter's state is laid out; static (hashable) so that jit sees it as metadata."""

    shape: tuple  # the parameter's (global) shape
    block_size: int
    specs: tuple  # _layout.SlotSpec per used slot
    mesh: Any = None  # jax.sharding.Mesh when the parameter is sharded: each device steps its own shard
    pspec: Any = None  # the parameter's PartitionSpec
    axes: tuple = ()  # mesh axes the parameter is split over, in order: the absmax's 1-D sharding

    @property
    def local_shape(self) -> tuple:
        if self.mesh is None:
            return self.shape
        return tuple(d // _split(self.mesh, e) for d, e in zip(self.shape, _padded(self.pspec, len(self.shape))))

    @property
    def shards(self) -> int:
        return 1 if self.mesh is None else math.prod(self.mesh.shape[a] for a in self.axes)

    def slot_shapes(self, spec: _layout.SlotSpec) -> tuple[tuple, tuple]:
        """(data shape, absmax shape) of a slot."""
        n = math.prod(self.local_shape)
        if spec.bits == 32:
            return self.shape, (0,)
        blocks = self.shards * -(-n // self.block_size)
        data = self.shape if spec.bits == 8 else (self.shards * ((n + 1) // 2),)
        return data, (blocks,)

    def shardings(self, spec: _layout.SlotSpec) -> tuple[Any, Any]:
        """(data, absmax) PartitionSpecs inside shard_map."""
        flat = PartitionSpec(self.axes) if self.axes else PartitionSpec()
        return (self.pspec if spec.bits != 4 else flat), flat


@jax.tree_util.register_static
@dataclass(frozen=True)
class StateLayout:
    """Static part of the state: the configuration that made it and each parameter's layout."""

    config: tuple  # (optimizer kind, structural options) of the transformation
    slot_names: tuple  # names of the state slots, in slot order
    leaves: tuple  # LeafLayout per parameter leaf, in tree_leaves order
    # names of the per-tensor scalar state (the core's order, _octopt.xla_ffi_tensor_scalars), after the slots in absmax
    scalar_names: tuple = ()


class OctoptState(NamedTuple):
    """The state of an octopt.optax transformation.

    ``slots`` maps each state slot's name (optax's: ``mu``, ``nu``, ``trace``, ...; the ``*8bit`` and
    ``torch_style`` transformations use torch's: ``exp_avg``, ...) to a tree with the parameters'
    structure holding its values (32-bit state) or codes: the trees ``optax.tree.map_params`` and
    ``optax.tree.get(state, "mu")`` find. ``absmax`` holds each quantized slot's scales, per slot (in
    ``layout.slot_names`` order) a tuple with one float32 array per parameter (None for 32-bit state),
    then the optimizer's per-tensor scalar state, per name in ``layout.scalar_names`` a tuple with one
    float32 scalar per parameter (NAdam's ``mu_product``, torch's ``state['mu_product']``; read it with
    ``tensor_scalar``). An optimizer without per-tensor scalars has none there, so its state has the
    structure it had before they existed (docs/jax.md)."""

    count: Any  # int32 scalar: steps taken
    slots: dict  # slot name -> a tree shaped like the params with one data array per parameter
    absmax: tuple  # per slot, a tuple of one absmax array per parameter; then per per-tensor scalar, one scalar each
    layout: StateLayout  # static: no leaves

    def slot(self, name: str) -> Any:
        """The slot ``name`` as a tree shaped like the params with one ``SlotState(data, absmax)`` per
        parameter."""
        if name not in self.slots:
            raise KeyError(f"OctoptState.slot: no slot {name!r}; this state has {list(self.slots)}")
        leaves, treedef = jax.tree_util.tree_flatten(self.slots[name])
        scales = self.absmax[self.layout.slot_names.index(name)]
        return treedef.unflatten([SlotState(d, a) for d, a in zip(leaves, scales)])

    def tensor_scalar(self, name: str) -> Any:
        """The per-tensor scalar state ``name`` (NAdam's ``mu_product``) as a tree shaped like the params with
        one float32 scalar per parameter."""
        names = self.layout.scalar_names
        if name not in names:
            raise KeyError(f"OctoptState.tensor_scalar: no per-tensor scalar {name!r}; this state has {list(names)}")
        treedef = (
            jax.tree_util.tree_structure(self.slots[self.layout.slot_names[0]]) if self.layout.slot_names else None
        )
        values = self.absmax[len(self.layout.slot_names) + names.index(name)]
        return list(values) if treedef is None else treedef.unflatten(list(values))


class NonParams:
    """A leaf standing for the non-parameter parts of a state (absmax, layout) in the state that init
    returns for optax.tree.map_params' placeholder (see placeholder_state)."""

    def __repr__(self) -> str:
        return "NonParams()"


def is_placeholder(params: Any) -> bool:
    """Whether ``params`` is the leafless placeholder optax.tree.map_params calls init with, to find the
    trees shaped like the parameters in a state (optax's own masked transformation checks for it too)."""
    cls = type(params)
    return cls.__name__ == "_ParamsPlaceholder" and cls.__module__.startswith("optax")


def placeholder_state(params: Any, names: tuple) -> OctoptState:
    """The state init returns for map_params' placeholder: the placeholder in place of each slot's tree (the
    trees the function maps over) and a leaf in place of the scales, the per-tensor scalars and the layout
    (state it does not)."""
    return OctoptState(jnp.zeros([], jnp.int32), {name: params for name in names}, NonParams(), NonParams())


def _padded(pspec: Any, ndim: int) -> tuple:
    entries = tuple(pspec)
    return entries + (None,) * (ndim - len(entries))


def _names(entry: Any) -> tuple:
    if entry is None:
        return ()
    return tuple(entry) if isinstance(entry, tuple) else (entry,)


def _split(mesh: Any, entry: Any) -> int:
    return math.prod(mesh.shape[a] for a in _names(entry))


def leaf_sharding(p: Any) -> tuple[Any, Any, tuple]:
    """(mesh, PartitionSpec, axes) of a concrete parameter split over a mesh, else (None, None, ())."""
    sharding = getattr(p, "sharding", None) if isinstance(p, jax.Array) and not isinstance(p, jax.core.Tracer) else None
    if not isinstance(sharding, NamedSharding) or sharding.is_fully_replicated:
        return None, None, ()
    pspec = PartitionSpec(*_padded(sharding.spec, p.ndim))
    axes = tuple(a for e in pspec for a in _names(e))
    return sharding.mesh, pspec, axes


def check_divisible(layout: LeafLayout, fn: str, arg: str) -> None:
    if layout.mesh is None:
        return
    for d, e in zip(layout.shape, layout.pspec):
        if d % _split(layout.mesh, e):
            raise ValueError(
                f"{fn}: argument '{arg}' of shape {layout.shape} does not split evenly over its sharding {layout.pspec}"
            )


def _device(layout: LeafLayout, pspec: Any, like: Any) -> Any:
    """Where a state array of this parameter goes: its shard-local sharding, else the parameter's
    device (replicated over its mesh when the parameter is), else the default device."""
    if layout.mesh is not None:
        return NamedSharding(layout.mesh, pspec)
    # an uncommitted parameter gets uncommitted state: jit keys its cache on commitment, and a state committed
    # beside uncommitted parameters (or the other way round) would compile the step a second time
    if isinstance(like, jax.Array) and not isinstance(like, jax.core.Tracer) and like.committed:
        sharding = like.sharding
        if isinstance(sharding, NamedSharding):
            return NamedSharding(sharding.mesh, PartitionSpec())
        return sharding
    return None


def scalar_device(layout: LeafLayout, like: Any) -> Any:
    """Where a per-tensor scalar of this parameter goes: replicated over its mesh, else the parameter's device."""
    return _device(layout, PartitionSpec(), like)


def init_slot(layout: LeafLayout, spec: _layout.SlotSpec, init: float, like: Any, dtype: Any = None) -> SlotState:
    """A slot whose every value is ``init``, placed like the parameter ``like``; 32-bit state is stored in
    ``dtype`` (None: float32). The arrays are allocated by XLA (not wrapped NumPy memory) so that the fused
    step can donate them."""
    data_shape, absmax_shape = layout.slot_shapes(spec)
    data_spec, absmax_spec = layout.shardings(spec)
    data_dev, absmax_dev = _device(layout, data_spec, like), _device(layout, absmax_spec, like)
    if spec.bits == 32:
        # no absmax (None, no pytree leaf): a zero-size placeholder array is refused by checkpointers (Orbax)
        return SlotState(jnp.full(data_shape, init, jnp.float32 if dtype is None else dtype, device=data_dev), None)
    code, absmax = _layout.initial_fill(spec, init)
    return SlotState(
        jnp.full(data_shape, code, jnp.uint8, device=data_dev),
        jnp.full(absmax_shape, absmax, jnp.float32, device=absmax_dev),
    )


def _register_flax() -> None:
    """flax.serialization stores the arrays; the static layout comes back from the restore target."""
    import importlib.util

    if importlib.util.find_spec("flax") is None:
        return
    from flax import serialization

    serialization.register_serialization_state(
        StateLayout, lambda layout: {}, lambda target, state: target, override=True
    )


_register_flax()
