"""octopt.torch.Muon under torch.distributed (docs/muon.md): DTensor (FSDP2) parameters are refused with a clear
error; DCP saves and loads its state (plain parameters on every rank) so that a resumed run continues bit for bit."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
ot = pytest.importorskip("octopt.torch")


def refusal(ctx) -> str:
    from torch.distributed.tensor import Shard, distribute_tensor, init_device_mesh

    mesh = init_device_mesh(ctx.device.type, (ctx.world_size,))
    sharded = torch.nn.Parameter(distribute_tensor(torch.zeros(64, 4, device=ctx.device), mesh, [Shard(0)]))
    with pytest.raises(ValueError, match="is a DTensor; Muon's Newton-Schulz step needs the whole matrix") as e:
        ot.Muon([sharded])
    return str(e.value)


def test_dtensor_parameters_are_refused(launch, gloo):
    message = launch(gloo, 2, refusal)[0]
    assert message.startswith("Muon: argument 'params[0]' is a DTensor")


def _make(bits):
    torch.manual_seed(0)
    ps = [torch.nn.Parameter(torch.randn(67, 65)), torch.nn.Parameter(torch.randn(40, 24))]
    return ps, ot.Muon(ps, lr=0.02, bits=bits, min_8bit_size=0)


def _train(ps, opt, steps):
    for s in steps:
        g = torch.Generator().manual_seed(s)
        for p in ps:
            p.grad = torch.randn(p.shape, generator=g)
        opt.step()


def dcp_round_trip(ctx, folder) -> bool:
    import torch.distributed.checkpoint as dcp

    ok = True
    for bits in (32, 8, 4):
        ps, opt = _make(bits)
        _train(ps, opt, range(3))
        dcp.save({"optim": opt.state_dict()}, checkpoint_id=f"{folder}/muon{bits}")
        saved = [p.detach().clone() for p in ps]
        _train(ps, opt, range(3, 6))
        qs, fresh = _make(bits)
        with torch.no_grad():
            for q, s in zip(qs, saved):
                q.copy_(s)
        sd = {"optim": fresh.state_dict()}
        _train(qs, fresh, range(1))  # lay out the state dict's tensors first
        sd = {"optim": fresh.state_dict()}
        dcp.load(sd, checkpoint_id=f"{folder}/muon{bits}")
        fresh.load_state_dict(sd["optim"])
        with torch.no_grad():
            for q, s in zip(qs, saved):
                q.copy_(s)
        _train(qs, fresh, range(3, 6))
        ok = ok and all(torch.equal(p, q) for p, q in zip(ps, qs))
    return ok


def test_dcp_round_trip_continues_bit_identically(launch, gloo, tmp_path):
    assert all(launch(gloo, 2, dcp_round_trip, str(tmp_path)))
