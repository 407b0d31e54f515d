"""What the distributed scenarios share (no test itself): the model they shard, its data, a counter of the
collectives a piece of code issues, and full (gathered) copies of sharded tensors. The scenarios get it as
``ctx.lib`` on every rank; the tests, for their single-process references, as the fixture ``dist_lib``."""

from __future__ import annotations

from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

# Row counts that no world size of the tests divides evenly: shards of 301 x 37 weights (151 + 150 rows on
# 2 ranks, 76 + 76 + 76 + 73 on 4) are no multiple of any block size.
IN, HIDDEN, OUT = 37, 301, 7


def model(device: Any = "cpu") -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(IN, HIDDEN), torch.nn.Tanh(), torch.nn.Linear(HIDDEN, OUT)).to(device)


def shard(m: torch.nn.Module, mesh: Any = None) -> torch.nn.Module:
    """FSDP2: each Linear is a unit, then the root."""
    from torch.distributed.fsdp import fully_shard

    for layer in m:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(m, mesh=mesh)
    return m


def batch(step: int, device: Any = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """The data of a step, the same on every rank (so an averaged gradient is the one-process gradient)."""
    g = torch.Generator().manual_seed(1000 + step)
    x = torch.randn(32, IN, generator=g)
    y = torch.randn(32, OUT, generator=g)
    return x.to(device), y.to(device)


def train(m: torch.nn.Module, opt: Any, steps: range, device: Any = "cpu") -> list[float]:
    losses = []
    for s in steps:
        x, y = batch(s, device)
        loss = torch.nn.functional.mse_loss(m(x), y)
        loss.backward()
        loss = loss.detach()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    return losses


def full(t: Any) -> torch.Tensor:
    """A CPU copy of the whole tensor (gathers a DTensor: a test aid, never part of a step)."""
    from torch.distributed.tensor import DTensor

    if isinstance(t, DTensor):
        t = t.full_tensor()
    return t.detach().cpu().clone()


def full_params(m: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: full(v) for k, v in m.named_parameters()}


def full_state(osd: dict) -> dict:
    """{fqn: {name: full tensor}} of a state dict from get_optimizer_state_dict."""
    return {k: {n: full(v) for n, v in entry.items()} for k, entry in osd["state"].items()}


class CollectiveCounter(TorchDispatchMode):
    """Records every c10d operation (eager collectives and functional ones) dispatched while active."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if "c10d" in func.namespace:
            self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


def counted_step(opt: Any) -> list[str]:
    """The collectives one ``opt.step()`` issues; the counter is first shown to see an all-reduce."""
    import torch.distributed as dist

    with CollectiveCounter() as probe:
        dist.all_reduce(torch.ones(1, device=_device_of(opt)))
    assert probe.ops, "the counter does not see collectives; the check below would prove nothing"
    with CollectiveCounter() as c:
        opt.step()
    return c.ops


def count_step_collectives(opt: Any) -> list[list[str]]:
    """Counts the collectives of every later ``opt.step()`` (the list of each step), through the step hooks:
    it works where the step is called from a compiled function, in which a dispatch mode entered outside
    would be traced instead."""
    counts: list[list[str]] = []
    active: list[CollectiveCounter] = []

    def pre(o, args, kwargs):
        active.append(CollectiveCounter())
        active[-1].__enter__()

    def post(o, args, kwargs):
        mode = active.pop()
        mode.__exit__(None, None, None)
        counts.append(mode.ops)

    opt.register_step_pre_hook(pre)
    opt.register_step_post_hook(post)
    return counts


def _device_of(opt: Any) -> torch.device:
    p = opt.param_groups[0]["params"][0]
    return p.device
