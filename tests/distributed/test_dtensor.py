"""DTensor parameters (Shard and Replicate placements) on 2 ranks: each rank's shard is stepped exactly as a
plain tensor of the shard would be, without any collective; the state is allocated for the shard and shown as
DTensors laid out like the parameter; what cannot be stepped shard by shard is refused."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
ot = pytest.importorskip("octopt.torch")

# (global shape, placement): shards of 301 rows are uneven and no multiple of a block; 1001 elements too.
PARAMS = (((301, 37), "shard"), ((1001,), "shard"), ((5,), "shard"), ((64, 3), "replicate"))


def _placement(name: str):
    from torch.distributed.tensor import Replicate, Shard

    return [Shard(0)] if name == "shard" else [Replicate()]


def steps_by_shard(ctx, bits: int, steps: int = 3) -> dict:
    from torch.distributed.tensor import DTensor, distribute_tensor, init_device_mesh

    mesh = init_device_mesh(ctx.device.type, (ctx.world_size,))
    torch.manual_seed(0)
    fulls = [torch.randn(shape, device=ctx.device) for shape, _ in PARAMS]
    params = [
        torch.nn.Parameter(distribute_tensor(f.clone(), mesh, _placement(pl))) for f, (_, pl) in zip(fulls, PARAMS)
    ]
    opts = dict(lr=1e-2, weight_decay=0.1, bits=bits, min_8bit_size=0)
    opt = ot.AdamW(params, **opts)
    # references: the same optimizer on plain copies of this rank's shards, and (32-bit) on the whole tensors
    shards = [p.to_local().detach().clone() for p in params]
    ref_shards = ot.AdamW(shards, **opts)
    wholes = [f.clone() for f in fulls]
    ref_wholes = ot.AdamW(wholes, **opts)
    collectives = []
    for s in range(steps):
        torch.manual_seed(100 + s)
        grads = [torch.randn(shape, device=ctx.device) for shape, _ in PARAMS]
        for p, g, sh, w, (_, pl) in zip(params, grads, shards, wholes, PARAMS):
            p.grad = distribute_tensor(g, mesh, _placement(pl))
            sh.grad = p.grad.to_local().clone()
            w.grad = g.clone()
        collectives += ctx.lib.counted_step(opt)
        ref_shards.step()
        ref_wholes.step()
    for p, sh, w in zip(params, shards, wholes):
        assert torch.equal(p.to_local(), sh), "a shard moved differently from the same tensor stepped alone"
        if bits == 32:  # element-wise update: the shards together are the whole tensor's step, bit for bit
            assert torch.equal(p.full_tensor(), w)
    layout = []
    for p, (shape, _) in zip(params, PARAMS):
        st = opt.state[p]
        assert float(st["step"]) == steps
        for name in ("exp_avg", "exp_avg_sq"):
            v = st[name]
            assert isinstance(v, DTensor) and v.dtype == torch.float32
            assert v.shape == p.shape and v.placements == p.placements and v.device_mesh == mesh
            assert v.to_local().shape == p.to_local().shape
        layout.append(opt.state_layout()[len(layout)]["numel"])
        if bits == 32:  # live state: the DTensor is a view of the optimizer's buffer
            assert torch.equal(st["exp_avg"].to_local(), ref_shards.state[shards[len(layout) - 1]]["exp_avg"])
    return {
        "collectives": collectives,
        "state_bytes": opt.state_bytes(),
        "ref_state_bytes": ref_shards.state_bytes(),
        "local_numel": layout,
    }


@pytest.mark.parametrize("bits", (32, 8, 4))
def test_each_rank_steps_its_shard_alone_without_collectives(launch, dist_backend, bits):
    results = launch(dist_backend, 2, steps_by_shard, bits)
    for rank, r in enumerate(results):
        assert r["collectives"] == [], f"rank {rank}: the step issued {r['collectives']}"
        # state for the local shard only: exactly what the shard alone needs
        assert r["state_bytes"] == r["ref_state_bytes"]
    sharded = [n for n, (_, pl) in zip(results[0]["local_numel"], PARAMS)]
    assert sharded[0] == 151 * 37 and results[1]["local_numel"][0] == 150 * 37
    assert results[0]["local_numel"][3] == 64 * 3  # a replicated parameter is whole on every rank


def refusals(ctx) -> list[str]:
    from torch.distributed.tensor import DTensor, Partial, Replicate, distribute_tensor, init_device_mesh

    mesh = init_device_mesh(ctx.device.type, (ctx.world_size,))
    sharded = torch.nn.Parameter(distribute_tensor(torch.zeros(64, 4, device=ctx.device), mesh, _placement("shard")))
    replicated = torch.nn.Parameter(distribute_tensor(torch.zeros(8, device=ctx.device), mesh, [Replicate()]))
    messages = []
    for cls in (ot.LAMB, ot.LARS8bit):
        with pytest.raises(ValueError, match="trust ratio needs the norms of the whole parameter") as e:
            cls([sharded])
        messages.append(str(e.value))
        cls([replicated])  # a replicated parameter is whole on every rank: LAMB/LARS are fine
    partial = torch.nn.Parameter(DTensor.from_local(torch.zeros(8, device=ctx.device), mesh, [Partial()]))
    with pytest.raises(ValueError, match="placement Partial"):
        ot.AdamW([partial])
    opt = ot.AdamW8bit([sharded])
    sharded.grad = torch.zeros(64, 4, device=ctx.device)  # a plain tensor: not a gradient of the shard
    with pytest.raises(ValueError, match="is a plain tensor; it must be a DTensor sharded like the parameter"):
        opt.step()
    sharded.grad = distribute_tensor(torch.zeros(64, 4, device=ctx.device), mesh, [Replicate()])
    with pytest.raises(ValueError, match="redistribute the gradient first"):
        opt.step()
    return messages


def test_what_cannot_be_stepped_shard_by_shard_is_refused(launch, gloo):
    messages = launch(gloo, 2, refusals)[0]
    assert messages[0].startswith("LAMB: argument 'params[0]' is a sharded DTensor; LAMB's trust ratio")
    assert messages[1].startswith("LARS8bit: argument 'params[0]' is a sharded DTensor; LARS's trust ratio")
