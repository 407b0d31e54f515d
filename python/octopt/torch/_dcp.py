"""Quantized state of DTensor parameters in state dicts (what torch.distributed.checkpoint saves): codes and
absmax as they are, ~2 bytes per parameter for 8-bit Adam instead of 8 (docs/decisions.md, "Distributed
checkpoints").

A parameter sharded along dim 0 (FSDP2's ``Shard(0)``, on one mesh dimension; any other mesh dimension
``Replicate``) holds a contiguous range of its flattened global tensor, and the core blocks that range from
its own start. Its state dict entry holds, per quantized slot:

- ``<slot>``: the codes as a uint8 DTensor laid out like the parameter (4-bit codes two per byte in rows of
  ``R // 2`` when a row of R elements is even, else one per byte). DCP reshards them element by element.
- ``<slot>_absmax``, in one of two forms, chosen from the global shape only (so every world size agrees):
  ``rows`` when a row is a whole number of blocks (``R % block_size == 0``): a DTensor of shape
  ``(rows, R // block_size)`` laid out like the parameter, whose shards are the core's absmax as they are, on
  every world size; ``table`` otherwise: the absmax of every shard's blocks, in shard order, in one
  float32 tensor of ``ceil(N / B) + min(rows - 1, max(ceil(N / B), 64))`` values (padded with zeros) that every
  rank of the shard group holds (gathered by an all-reduce in ``state_dict()``), with the shard starts in the metadata.
- ``octopt``: JSON metadata: format, global step, and per slot bits, block size, map, form and shard starts.

Loading on the shards that saved gives the state back bit for bit. On other shards, a block of the new
layout that is a block of the saved one (same start and end) is copied; every other block is re-blocked:
dequantized with the saved absmax and quantized on the new block (the error bound is in docs/decisions.md).
"""

from __future__ import annotations

import json
from typing import Any, NamedTuple

import torch

from .. import _hparams, _slot_convert
from . import _dist, _slot_copies

META = "octopt"
FORMAT = 2


class ShardLayout(NamedTuple):
    """Where a rank's shard of a DTensor parameter lies in the flattened global tensor."""

    numel: int  # elements of the global tensor
    rows: int  # its dim-0 length
    row: int  # elements per dim-0 row
    starts: tuple[int, ...]  # flat start of each shard along the sharding mesh dimension, then numel
    index: int  # this rank's shard
    mesh_dim: int | None  # the mesh dimension that shards dim 0 (None: replicated)

    @property
    def offset(self) -> int:
        return self.starts[self.index]


def shard_layout(dist: _dist.DistSpec, local_numel: int) -> ShardLayout | None:
    """The layout of a parameter sharded along dim 0 by at most one mesh dimension (None for any other
    placement: its state is saved as float32)."""
    from torch.distributed.tensor import Replicate, Shard

    shape = tuple(dist.shape)
    numel = 1
    for s in shape:
        numel *= s
    rows = shape[0] if shape else 1
    row = numel // rows if rows else 0
    sharded = [d for d, pl in enumerate(dist.placements) if isinstance(pl, Shard)]
    if any(not isinstance(pl, (Shard, Replicate)) for pl in dist.placements) or len(sharded) > 1:
        return None
    if not sharded:
        return ShardLayout(numel, rows, row, (0, numel), 0, None)
    d = sharded[0]
    if dist.placements[d].dim != 0:
        return None
    k = dist.mesh.size(d)
    chunk = -(-rows // k)  # torch.chunk's split, as DTensor's Shard uses
    starts = tuple(min(i * chunk, rows) * row for i in range(k)) + (numel,)
    index = dist.mesh.get_local_rank(d)
    if starts[index + 1] - starts[index] != local_numel:
        return None
    return ShardLayout(numel, rows, row, starts, index, d)


def quantized_form(lay: ShardLayout, block_size: int) -> str:
    return "rows" if lay.rows and lay.row % block_size == 0 and lay.numel != lay.rows else "table"


def _packed(lay: ShardLayout, bits: int) -> bool:
    return bits == 4 and lay.row % 2 == 0


def _blocks(n: int, block_size: int) -> int:
    return -(-n // block_size)


# Room in a table for blocks beyond the tensor's own: each shard boundary inside a block adds one. The table
# then fits every world size that gives a tensor at most max(its blocks, SPARE_BLOCKS) + 1 shards.
SPARE_BLOCKS = 64


def _table_len(lay: ShardLayout, block_size: int) -> int:
    cells = _blocks(lay.numel, block_size)
    return cells + max(min(lay.rows - 1, max(cells, SPARE_BLOCKS)), 0)


def _shard_blocks(starts: tuple[int, ...], block_size: int) -> list[int]:
    return [_blocks(starts[i + 1] - starts[i], block_size) for i in range(len(starts) - 1)]


def _global(local_value: torch.Tensor, dist: _dist.DistSpec, shape: tuple) -> torch.Tensor:
    from torch.distributed.tensor import DTensor

    stride, acc = [], 1
    for size in reversed(shape):
        stride.insert(0, acc)
        acc *= size
    return DTensor.from_local(
        local_value, dist.mesh, dist.placements, run_check=False, shape=shape, stride=tuple(stride)
    )


def _all_sum(x: torch.Tensor, dist: _dist.DistSpec, lay: ShardLayout) -> torch.Tensor:
    """Sums x over the ranks of the shard group. Each value is held by one rank, the others add +0.0, so
    the sum is that value bit for bit."""
    if lay.mesh_dim is None or dist.mesh.size(lay.mesh_dim) == 1:
        return x
    import torch.distributed as tdist

    tdist.all_reduce(x, group=dist.mesh.get_group(lay.mesh_dim))
    return x


def entry(t: Any, dist: _dist.DistSpec, lay: ShardLayout, out: dict, global_step: int) -> None:
    """Adds the quantized slots of one DTensor parameter (t: the core's _TensorState of its shard) and
    the metadata to its state-dict entry ``out``; 32-bit slots are already in it, as live DTensors."""
    meta: dict = {"format": FORMAT, "global_step": int(global_step), "slots": {}}
    n = t.info.size
    local_rows = (lay.starts[lay.index + 1] - lay.offset) // lay.row if lay.row else 0
    for spec in t.specs:
        if spec.bits == 32:
            meta["slots"][spec.name] = {"bits": 32}
            continue
        data, absmax = t.buffers[spec.index]
        bs, form = spec.block_size, quantized_form(lay, spec.block_size)
        q = t._owner.slot_map(spec)
        info = {"bits": spec.bits, "block_size": bs, "map": spec.state_map, "form": form}
        starts = lay.starts
        codes = data
        table = None
        if form == "table":
            counts = _shard_blocks(starts, bs)
            length = _table_len(lay, bs)
            if sum(counts) > length:
                # more shards than blocks: the blocks of the shards are re-blocked on the global tensor
                codes, table = _regrid(t, spec, q, lay, dist, length)
                starts = (0, lay.numel)
            else:
                table = torch.zeros(length, dtype=torch.float32, device=absmax.device)
                base = sum(counts[: lay.index])
                table[base : base + counts[lay.index]] = absmax
                table = _all_sum(table, dist, lay)
            info["starts"] = list(starts)
        if spec.bits == 4 and not _packed(lay, 4):  # one code per byte, as the core exports them
            one_per_byte = _slot_convert.form(4, bs, q, packed=False)
            loose, _ = _slot_convert.export(t._owner._plan, t._index, spec.index, n, one_per_byte, "state_dict", [])
            codes = torch.from_numpy(loose).to(data.device)
        if spec.bits == 4 and _packed(lay, 4):
            out[spec.name] = _global(codes.view(local_rows, lay.row // 2), dist, (lay.rows, lay.row // 2))
        else:
            out[spec.name] = _global(codes.view(t.param.shape), dist, tuple(dist.shape))
        if form == "rows":
            per_row = lay.row // bs
            out[spec.name + "_absmax"] = _global(absmax.view(local_rows, per_row), dist, (lay.rows, per_row))
        else:
            out[spec.name + "_absmax"] = table
        meta["slots"][spec.name] = info
    out[META] = json.dumps(meta, sort_keys=True)


def _regrid(t: Any, spec: Any, q: Any, lay: ShardLayout, dist: _dist.DistSpec, length: int) -> tuple:
    """(codes of this shard, absmax table) of the slot quantized on the blocks of the global tensor: for a
    tensor with more shards than blocks, whose blocks then do not fit the table. The tensor is small
    (fewer elements than shards times a block), so its values are summed over the shard group whole."""
    absmax = t.buffers[spec.index][1]
    n = t.info.size
    where = f"state_dict: '{spec.name}'"
    values = torch.zeros(lay.numel, dtype=torch.float32, device=absmax.device)
    if n:
        plan, i = t._owner._plan, t._index
        local, _ = _slot_convert.export(plan, i, spec.index, n, _slot_convert.FLOAT, where, [spec.name])
        values[lay.offset : lay.offset + n] = torch.from_numpy(local).to(absmax.device)
    values = _all_sum(values, dist, lay)
    one_per_byte = _slot_convert.form(spec.bits, spec.block_size, q, packed=False)
    codes, am = _slot_convert.convert(lay.numel, _slot_convert.FLOAT, values, None, one_per_byte, where, [spec.name])
    mine = codes[lay.offset : lay.offset + n]
    if spec.bits == 4:
        mine = _slot_convert.pack4(mine) if n else mine[:0]
    table = torch.zeros(length, dtype=torch.float32, device=absmax.device)
    table[: am.size] = torch.from_numpy(am).to(absmax.device)
    return torch.from_numpy(mine).to(absmax.device), table


def read_meta(entry_value: Any, where: str) -> dict:
    try:
        meta = json.loads(entry_value)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{where}: '{META}' must be octopt's JSON metadata, got {entry_value!r:.80}") from e
    if not isinstance(meta, dict) or meta.get("format") != FORMAT or not isinstance(meta.get("slots"), dict):
        raise ValueError(f"{where}: '{META}' metadata of an unknown format: {entry_value!r:.80}")
    return meta


def local_slot(
    core: Any, t: Any, spec: Any, entry: dict, info: dict, dist: _dist.DistSpec, lay: ShardLayout, where: str
) -> tuple[Any, torch.Tensor, torch.Tensor]:
    """The saved quantized slot on this rank's shard, as (layout, codes, absmax) for the core to convert: the
    rows form is the shard's own blocks; the table form holds every saved shard's blocks, which the core
    reads as segments (a block of this optimizer's layout that is a saved block keeps its codes and absmax)."""
    from .._layout import SlotSpec

    name = spec.name
    bits, bs, state_map, form = int(info["bits"]), int(info["block_size"]), info.get("map", "dynamic"), info["form"]
    q = core.slot_map(SlotSpec(spec.index, name, spec.signed, bits, bs, state_map))
    codes_v, absmax_v = entry.get(name), entry.get(name + "_absmax")
    if codes_v is None or absmax_v is None:
        raise ValueError(f"{where} lacks '{name}' or '{name}_absmax' that its metadata announces")
    codes = _dist.local(codes_v).detach().reshape(-1)
    packed = bits != 4 or _packed(lay, 4)
    if form == "rows":
        absmax = _dist.local(absmax_v).detach().reshape(-1).to(torch.float32)
        return _slot_convert.form(bits, bs, q, packed), codes, absmax
    starts = tuple(int(s) for s in info["starts"])
    table = _dist.local(absmax_v).detach().reshape(-1)
    if starts[-1] != lay.numel or list(starts) != sorted(starts) or starts[0] != 0:
        raise ValueError(f"{where}: '{name}' has shard starts {list(starts)} for a tensor of {lay.numel} elements")
    return _slot_convert.form(bits, bs, q, packed, starts, lay.offset), codes, table


def load_entry(core: Any, t: Any, entry: dict, dist: Any, where: str) -> tuple[list, int]:
    """Copies that restore a DTensor parameter's state from its quantized state-dict entry (_dcp.py), and
    the global step it records."""
    from ._state import local_entry  # _state imports this module

    meta = read_meta(entry[META], where)
    if dist is None:
        raise ValueError(
            f"{where} holds the quantized state of a DTensor parameter, but the parameter is a plain tensor"
        )
    lay = shard_layout(dist, t.info.size)
    if lay is None:
        raise ValueError(
            f"{where} holds quantized sharded state, but the parameter's placements {dist.placements} do not "
            "shard it along dim 0 only"
        )
    names = {s.name for s in t.specs}
    if set(meta["slots"]) != names:
        raise ValueError(
            f"{where} has state slots {sorted(meta['slots'])} in the state but {sorted(names)} here; "
            "was it saved by a different optimizer?"
        )
    scalar = _hparams.tensor_scalar_name(core.kind)
    known = {"step", META} | ({scalar} if scalar else set()) | names | {n + "_absmax" for n in names}
    unknown = sorted(str(k) for k in entry if k not in known)
    if unknown:
        raise ValueError(f"{where} has entries {unknown} that this optimizer does not use")
    out = []
    for spec in t.specs:
        info = meta["slots"][spec.name]
        if int(info.get("bits", 0)) == 32:
            v = entry.get(spec.name)
            if v is None:
                raise ValueError(f"{where} lacks '{spec.name}'")
            local_v = local_entry({spec.name: v}, dist, t, where)[spec.name]
            if t.info.size:
                local_v = _slot_copies.tensor(local_v, where, spec.name)
                out += _slot_copies.into(t, spec, _slot_convert.FLOAT, local_v, None, where, [spec.name])
            continue
        src, codes, absmax = local_slot(core, t, spec, entry, info, dist, lay, where)
        out += _slot_copies.into(t, spec, src, codes, absmax, where, [spec.name, spec.name + "_absmax"])
    return out, int(meta.get("global_step", 0))


class dequantized_state_dict:  # noqa: N801 - used as a function: ``with dequantized_state_dict(opt):``
    """Within ``with octopt.torch.dequantized_state_dict(optimizer):``, ``optimizer.state_dict()`` (and so
    ``get_optimizer_state_dict``) shows the quantized state of DTensor parameters as float32 DTensors laid
    out like the parameters: the form octopt wrote before state-dict format 2. Use it to load such a
    checkpoint with torch.distributed.checkpoint (``set_optimizer_state_dict`` then quantizes the values),
    or to write a checkpoint that does not depend on octopt's layout."""

    def __init__(self, optimizer: Any):
        if not hasattr(optimizer, "_float32_state"):
            raise TypeError(
                "dequantized_state_dict: argument 'optimizer' must be an octopt.torch optimizer, got "
                f"{type(optimizer).__name__}"
            )
        self._opt = optimizer
        self._before = False

    def __enter__(self) -> Any:
        self._before = self._opt._float32_state
        self._opt._float32_state = True
        return self._opt

    def __exit__(self, *exc: Any) -> None:
        self._opt._float32_state = self._before
