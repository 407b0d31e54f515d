"""One optimizer step of many parameters as one XLA FFI call, shard-local under a mesh."""

from __future__ import annotations

import threading
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec

from .. import _octopt
from ._state import SlotState

TARGET = "octopt_step"
UPDATES, PARAMS = 0, 1  # what the handler's first result holds: p_new - p, or p_new (ffi_step.hpp Mode)
FLAGS = dict(_octopt.xla_ffi_flag_bits())  # bit of each flag in the handlers' `flags` attribute
HP_NAMES = tuple(_octopt.xla_ffi_hyperparam_names())

_lock = threading.Lock()
_registered = False


def ensure_registered(fn: str) -> None:
    """Registers the handlers with XLA on first use: the CPU one, and the CUDA one when built (under
    the same target name: XLA picks the handler of the platform the call is compiled for)."""
    global _registered
    if _registered:
        return
    if not _octopt.xla_ffi_built():
        raise ImportError(
            f"{fn}: this octopt was built without the XLA FFI handler (jaxlib's headers were not found "
            "at build time); reinstall with jaxlib in the build environment, e.g. `pip install jaxlib` "
            "then `pip install --no-build-isolation --force-reinstall octopt`, or build with "
            "-Ccmake.define.OCTOPT_XLA_FFI_INCLUDE_DIR=$(python -c 'import jax.ffi; "
            "print(jax.ffi.include_dir())')"
        )
    with _lock:
        if not _registered:
            jax.ffi.register_ffi_target(TARGET, _octopt.xla_ffi_step_cpu(), platform="cpu")
            if _octopt.xla_ffi_cuda_built():
                jax.ffi.register_ffi_target(TARGET, _octopt.xla_ffi_step_cuda(), platform="CUDA")
            _registered = True


def check_platform(arrays: list, fn: str) -> None:
    """Raises for concrete arrays on a platform without a handler (traced ones are checked by XLA)."""
    for a in arrays:
        if isinstance(a, jax.core.Tracer) or not isinstance(a, jax.Array):
            continue
        for d in a.devices():
            if d.platform == "cpu" or (d.platform in ("gpu", "cuda") and _octopt.xla_ffi_cuda_built()):
                continue
            why = (
                "octopt was built without CUDA"
                if d.platform in ("gpu", "cuda")
                else f"octopt has no handler for platform '{d.platform}'"
            )
            raise ValueError(
                f"{fn}: an array is on {d} but {why}; the step runs on the CPU and, when octopt is "
                "built with CUDA and jaxlib's headers, on NVIDIA GPUs (see docs/jax.md)"
            )


def _shard_map(f: Any, mesh: Any, in_specs: tuple, out_specs: tuple) -> Any:
    # each device steps its own shard with its own blocks: no collective is needed
    if hasattr(jax, "shard_map"):
        return jax.shard_map(f, mesh=mesh, in_specs=in_specs, out_specs=out_specs, check_vma=False)
    from jax.experimental.shard_map import shard_map as legacy  # JAX < 0.7

    return legacy(f, mesh=mesh, in_specs=in_specs, out_specs=out_specs, check_rep=False)


def step_tensors(tensors: list, hp_dynamic: Any, step: Any, attrs: dict, mode: int) -> list:
    """One FFI call stepping every tensor in ``tensors`` (all unsharded, or all sharded over one mesh):
    a list of (p, g, slots, scalars, LeafLayout, rng_stream), ``scalars`` the tensor's per-tensor scalar
    state (float32 scalars in the core's order). Returns (updates or new parameter, new slots, new
    scalars) per tensor. ``attrs`` are the handler's per-transformation attributes; this adds the
    per-tensor ones."""
    mesh = tensors[0][4].mesh
    blocks, bits, stochastic, codebooks, streams = [], [], [], [], []
    # the handlers' tensor_scalars: every tensor's scalars, tensor after tensor (replicated under a mesh)
    flat = [jnp.asarray(v, jnp.float32).reshape(()) for t in tensors for v in t[3]]
    scalars = jnp.stack(flat) if flat else jnp.zeros((0,), jnp.float32)
    operands, in_specs = [hp_dynamic, step, scalars], [PartitionSpec(), PartitionSpec(), PartitionSpec()]
    sources = [2]  # per result, the operand it replaces (same shape and dtype): first the scalars
    aliases = {2: 0} if flat else {}  # operand -> result written over it
    for p, g, slots, _scalars, layout, stream in tensors:
        pspec = layout.pspec if layout.pspec is not None else PartitionSpec()
        if mode == PARAMS:
            aliases[len(operands)] = len(sources)  # with donation the new parameter is written over the old one
        sources.append(len(operands))
        operands += [p, g]
        in_specs += [pspec, pspec]
        tb, ts, tsg = ([0] * _octopt.MAX_STATE_SLOTS for _ in range(3))
        for spec, st in zip(layout.specs, slots):
            tb[spec.index] = spec.bits
            ts[spec.index] = int(attrs["stochastic"] and spec.bits == 4)
            if spec.bits != 32:  # the slot's map: the core's codebook index
                tsg[spec.index] = _octopt.state_map_index(spec.bits, spec.signed, spec.state_map)
            data_spec, absmax_spec = layout.shardings(spec)
            for arr, sp in ((st.data, data_spec), (st.absmax, absmax_spec))[: 1 if spec.bits == 32 else 2]:
                aliases[len(operands)] = len(sources)  # the state is updated in place
                sources.append(len(operands))
                operands.append(arr)
                in_specs.append(sp if sp is not None else PartitionSpec())
        blocks.append(layout.block_size)
        bits += tb
        stochastic += ts
        codebooks += tsg
        streams.append(stream)
    out_specs = tuple(in_specs[i] for i in sources)
    call_attrs = dict(
        kind=np.int64(attrs["kind"]),
        mode=np.int64(mode),
        hp_static=attrs["hp_static"],
        dynamic_mask=np.int64(attrs["dynamic_mask"]),
        flags=np.int64(attrs["flags"]),
        seed=np.int64(attrs["seed"]),
        block_sizes=np.array(blocks, np.int64),
        slot_bits=np.array(bits, np.int64),
        slot_stochastic=np.array(stochastic, np.int64),
        slot_codebooks=np.array(codebooks, np.int64),
        rng_streams=np.array(streams, np.int64),
    )

    def call(*ops: Any) -> Any:
        results = [jax.ShapeDtypeStruct(ops[i].shape, ops[i].dtype) for i in sources]
        # "sequential": a vmapped step is a loop of exact steps, one per batch element
        return tuple(
            jax.ffi.ffi_call(TARGET, results, vmap_method="sequential", input_output_aliases=aliases)(
                *ops, **call_attrs
            )
        )

    if mesh is None:
        outs = call(*operands)
    else:
        outs = _shard_map(call, mesh, tuple(in_specs), out_specs)(*operands)
    new_scalars, j = outs[0], 0
    done, k = [], 1
    for _p, _g, slots, tensor_scalars, layout, _s in tensors:
        out = outs[k]
        k += 1
        new_slots = []
        for spec, st in zip(layout.specs, slots):
            if spec.bits == 32:
                new_slots.append(SlotState(outs[k], st.absmax))
                k += 1
            else:
                new_slots.append(SlotState(outs[k], outs[k + 1]))
                k += 2
        done.append((out, new_slots, [new_scalars[j + m] for m in range(len(tensor_scalars))]))
        j += len(tensor_scalars)
    return done
