"""DTensor parameters (FSDP2's ``fully_shard``, tensor parallelism): octopt steps each rank's local shard.

The core holds the local tensor of a DTensor parameter (``p.to_local()``, a view of the rank's shard that
FSDP2 keeps at one address) and allocates state for that shard only, block-aligned on the shard. A step
reads the local shard of the gradient and never communicates. State dicts present each state as a DTensor
with the parameter's mesh, placements, global shape and stride, as torch.optim's own state of a DTensor
parameter is, so torch.distributed.checkpoint saves, loads and reshards it. Quantized states appear
dequantized (float32): their blocks belong to a rank's shard, so codes and absmax have no global layout that
survives a change of the world size (docs/decisions.md).
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import torch

# Optimizers whose update needs a whole-tensor quantity: the norms of the trust ratio.
WHOLE_TENSOR_KINDS = ("lamb", "lars")


class DistSpec(NamedTuple):
    """What a state DTensor of a parameter takes over from it."""

    mesh: Any
    placements: tuple
    shape: torch.Size
    stride: tuple


@functools.cache
def _dtensor_type() -> type | None:
    try:
        from torch.distributed.tensor import DTensor
    except Exception:  # noqa: BLE001 - torch built without distributed support
        return None
    return DTensor


def is_dtensor(t: Any) -> bool:
    cls = _dtensor_type()
    return cls is not None and isinstance(t, cls)


def local(t: torch.Tensor) -> torch.Tensor:
    """The rank's shard of a DTensor (the same memory, no copy); any other tensor as it is."""
    if not is_dtensor(t):
        return t
    with torch.no_grad():
        return t.to_local()


def spec_of(p: torch.Tensor, kind: str, fn: str, arg: str) -> DistSpec | None:
    """The DistSpec of a DTensor parameter (None for a plain tensor); refuses what cannot be stepped
    shard by shard."""
    if not is_dtensor(p):
        return None
    from torch.distributed.tensor import Replicate, Shard

    placements = tuple(p.placements)
    for pl in placements:
        if not isinstance(pl, (Shard, Replicate)):
            raise ValueError(
                f"{fn}: argument '{arg}' is a DTensor with placement {type(pl).__name__} ({pl}); octopt steps Shard and "
                "Replicate placements (a Partial parameter has no value to update)"
            )
    if kind in WHOLE_TENSOR_KINDS and any(isinstance(pl, Shard) for pl in placements):
        raise ValueError(
            f"{fn}: argument '{arg}' is a sharded DTensor; {kind.upper()}'s trust ratio needs the norms of "
            "the whole parameter, and octopt's step computes and applies it in one call, so it cannot "
            "all-reduce the norms of the shards in between. Use another optimizer for sharded parameters, "
            "or replicate them"
        )
    return DistSpec(p.device_mesh, placements, p.shape, tuple(p.stride()))


def global_precision(p: torch.Tensor, ov: dict, min_8bit_size: int) -> dict:
    """The override of a DTensor parameter that makes its state as wide as the whole tensor's would be:
    the core lays out the local shard, and a shard below ``min_8bit_size`` of a tensor above it would
    otherwise keep 32-bit state on some world sizes and not on others."""
    threshold = int(ov.get("min_8bit_size", min_8bit_size))
    if p.numel() >= threshold > local(p).numel():
        return {**ov, "min_8bit_size": 0}
    return ov


def local_grad(p: torch.Tensor, g: torch.Tensor, spec: DistSpec, fn: str) -> torch.Tensor:
    """The local shard of a DTensor parameter's gradient, laid out like the parameter's shard."""
    if not is_dtensor(g):
        raise ValueError(
            f"{fn}: the gradient of the DTensor parameter of shape {tuple(spec.shape)} is a plain tensor; "
            "it must be a DTensor sharded like the parameter"
        )
    if tuple(g.placements) != spec.placements:
        raise ValueError(
            f"{fn}: the gradient of the DTensor parameter of shape {tuple(spec.shape)} has placements "
            f"{tuple(g.placements)}, the parameter {spec.placements}; redistribute the gradient first"
        )
    return local(g)


def as_dtensor(local_value: torch.Tensor, spec: DistSpec) -> torch.Tensor:
    """A state tensor of the rank's shard (the parameter's local shape) as a DTensor laid out like the
    parameter. No communication: the global shape and stride are the parameter's."""
    from torch.distributed.tensor import DTensor

    return DTensor.from_local(
        local_value, spec.mesh, spec.placements, run_check=False, shape=spec.shape, stride=spec.stride
    )
