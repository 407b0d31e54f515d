"""One optimizer step of one parameter as an XLA FFI call, shard-local under a mesh."""

from __future__ import annotations

import threading
from typing import Any

import jax
import numpy as np
from jax.sharding import PartitionSpec

from . import _octopt
from ._jax_state import LeafLayout, SlotState

TARGET = "octopt_step"
UPDATES, PARAMS = 0, 1  # what the handler's first result holds: p_new - p, or p_new (ffi_step.hpp Mode)
FLAGS = dict(nesterov=1, centered=2, bias_correction=4, maximize=8, stochastic_state=16, stochastic_bf16=32)
HP_NAMES = tuple(_octopt.xla_ffi_hyperparam_names())

_lock = threading.Lock()
_registered = False


def ensure_registered(fn: str) -> None:
    """Registers the CPU handler with XLA on first use."""
    global _registered
    if _registered:
        return
    if not _octopt.xla_ffi_built():
        raise ImportError(f"{fn}: this octopt was built without the XLA FFI handler (jaxlib's headers were not found "
                          "at build time); reinstall with jaxlib in the build environment, e.g. `pip install jaxlib` "
                          "then `pip install --no-build-isolation --force-reinstall octopt`, or build with "
                          "-Ccmake.define.OCTOPT_XLA_FFI_INCLUDE_DIR=$(python -c 'import jax.ffi; "
                          "print(jax.ffi.include_dir())')")
    with _lock:
        if not _registered:
            jax.ffi.register_ffi_target(TARGET, _octopt.xla_ffi_step_cpu(), platform="cpu")
            _registered = True


def _shard_map(f: Any, mesh: Any, in_specs: tuple, out_specs: tuple) -> Any:
    # each device steps its own shard with its own blocks: no collective is needed
    if hasattr(jax, "shard_map"):
        return jax.shard_map(f, mesh=mesh, in_specs=in_specs, out_specs=out_specs, check_vma=False)
    from jax.experimental.shard_map import shard_map as legacy  # JAX < 0.7

    return legacy(f, mesh=mesh, in_specs=in_specs, out_specs=out_specs, check_rep=False)


def leaf_step(p: Any, g: Any, slots: list[SlotState], layout: LeafLayout, hp_dynamic: Any, step: Any, attrs: dict,
              mode: int) -> tuple[Any, list[SlotState]]:
    """(updates or new parameter, new slots) of one parameter. ``attrs`` are the handler's
    per-transformation attributes; this adds the per-parameter ones."""
    bits, stochastic, signed = [0, 0, 0], [0, 0, 0], [0, 0, 0]
    operands, in_specs = [p, g, hp_dynamic, step], [layout.pspec, layout.pspec, PartitionSpec(), PartitionSpec()]
    for spec, st in zip(layout.specs, slots):
        bits[spec.index] = spec.bits
        stochastic[spec.index] = int(attrs["stochastic"] and spec.bits == 4)
        signed[spec.index] = int(spec.signed)
        data_spec, absmax_spec = layout.shardings(spec)
        operands.append(st.data)
        in_specs.append(data_spec)
        if spec.bits != 32:
            operands.append(st.absmax)
            in_specs.append(absmax_spec)
    call_attrs = dict(kind=np.int64(attrs["kind"]), mode=np.int64(mode), block_size=np.int64(layout.block_size),
                      slot_bits=np.array(bits, np.int64), slot_stochastic=np.array(stochastic, np.int64),
                      slot_signed=np.array(signed, np.int64), hp_static=attrs["hp_static"],
                      dynamic_mask=np.int64(attrs["dynamic_mask"]), flags=np.int64(attrs["flags"]),
                      seed=np.int64(attrs["seed"]), rng_stream=np.int64(attrs["rng_stream"]))
    n_state = len(operands) - 4

    def call(*ops: Any) -> Any:
        results = [jax.ShapeDtypeStruct(o.shape, o.dtype) for o in (ops[0], *ops[4:])]
        aliases = {4 + i: 1 + i for i in range(n_state)}
        if mode == PARAMS:
            aliases[0] = 0  # with donation the new parameter is written over the old one
        # "sequential": a vmapped step is a loop of exact steps, one per batch element
        return tuple(jax.ffi.ffi_call(TARGET, results, vmap_method="sequential", input_output_aliases=aliases)(
            *ops, **call_attrs))

    if layout.mesh is None:
        outs = call(*operands)
    else:
        out_specs = (layout.pspec, *in_specs[4:])
        outs = _shard_map(call, layout.mesh, tuple(in_specs), out_specs)(*operands)
    new_slots, k = [], 1
    for spec in layout.specs:
        if spec.bits == 32:
            new_slots.append(SlotState(outs[k], slots[len(new_slots)].absmax))
            k += 1
        else:
            new_slots.append(SlotState(outs[k], outs[k + 1]))
            k += 2
    return outs[0], new_slots
