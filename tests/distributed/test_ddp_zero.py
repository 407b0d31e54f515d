"""DistributedDataParallel and ZeroRedundancyOptimizer with octopt.torch on 2 ranks: with the same data on
every rank the averaged gradient is the one-process gradient, so both equal one process (run on each rank,
on its device) bit for bit. ZeRO
gives each rank an AdamW8bit over its partition of the parameters; its state dict consolidates and loads."""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")
ot = pytest.importorskip("octopt.torch")

STEPS = 4


def ddp_training(ctx) -> dict:
    from torch.nn.parallel import DistributedDataParallel as DDP

    m = ctx.lib.model(ctx.device)
    ddp = DDP(m, device_ids=[ctx.device.index] if ctx.device.type == "cuda" else None)
    opt = ot.AdamW8bit(ddp.parameters(), lr=1e-2, min_8bit_size=0)
    ctx.lib.train(ddp, opt, range(STEPS), ctx.device)
    ref, ref_bytes = one_process(ctx.lib, ctx.device, STEPS, {})
    for k, v in ctx.lib.full_params(m).items():
        assert torch.equal(v, ref[k]), f"{k}: DDP differs from one process"
    return {"state_bytes": opt.state_bytes(), "ref_bytes": ref_bytes}


def zero_training(ctx) -> dict:
    from torch.distributed.optim import ZeroRedundancyOptimizer
    from torch.nn.parallel import DistributedDataParallel as DDP

    m = ctx.lib.model(ctx.device)
    ddp = DDP(m, device_ids=[ctx.device.index] if ctx.device.type == "cuda" else None)
    opt = ZeroRedundancyOptimizer(
        ddp.parameters(), optimizer_class=ot.AdamW8bit, lr=1e-2, weight_decay=0.01, min_8bit_size=0
    )
    assert isinstance(opt.optim, ot.AdamW8bit)
    ctx.lib.train(ddp, opt, range(STEPS), ctx.device)
    local_bytes = opt.optim.state_bytes()
    # the consolidated state dict on rank 0, loaded back by every rank, continues identically
    opt.consolidate_state_dict(to=0)
    sd = [opt.state_dict() if ctx.rank == 0 else None]
    torch.distributed.broadcast_object_list(sd, src=0)
    sd = copy.deepcopy(sd[0])  # a saved copy: on rank 0 the state dict holds the live state, as torch's does
    n_params = len(list(m.parameters()))
    assert sorted(sd["state"]) == list(range(n_params))
    params_before = {k: v.detach().clone() for k, v in m.named_parameters()}
    ctx.lib.train(ddp, opt, range(STEPS, STEPS + 2), ctx.device)
    continued = ctx.lib.full_params(m)
    with torch.no_grad():
        for k, v in m.named_parameters():
            v.copy_(params_before[k])
    opt2 = ZeroRedundancyOptimizer(
        ddp.parameters(), optimizer_class=ot.AdamW8bit, lr=1e-2, weight_decay=0.01, min_8bit_size=0
    )
    opt2.load_state_dict(sd)
    ctx.lib.train(ddp, opt2, range(STEPS, STEPS + 2), ctx.device)
    for k, v in ctx.lib.full_params(m).items():
        assert torch.equal(v, continued[k]), f"{k}: resumed from the consolidated state dict differently"
    ref, ref_bytes = one_process(ctx.lib, ctx.device, STEPS + 2, {"weight_decay": 0.01})
    for k, v in continued.items():
        assert torch.equal(v, ref[k]), f"{k}: ZeRO differs from one process"
    return {"local_bytes": local_bytes, "ref_bytes": ref_bytes}


def one_process(lib, device, steps: int, opts: dict) -> tuple[dict, int]:
    """The same training without DDP, on the rank's device: its parameters and state bytes."""
    m = lib.model(device)
    opt = ot.AdamW8bit(m.parameters(), lr=1e-2, min_8bit_size=0, **opts)
    lib.train(m, opt, range(steps), device)
    return lib.full_params(m), opt.state_bytes()


def test_ddp_equals_one_process(launch, dist_backend):
    for r in launch(dist_backend, 2, ddp_training):
        assert r["state_bytes"] == r["ref_bytes"]


def test_zero_redundancy_optimizer_with_adamw8bit(launch, dist_backend):
    results = launch(dist_backend, 2, zero_training)
    state_bytes = results[0]["ref_bytes"]
    # each rank holds the state of its partition: together the one-process state, no rank all of it
    assert sum(r["local_bytes"] for r in results) == state_bytes
    assert all(0 < r["local_bytes"] < state_bytes for r in results)
