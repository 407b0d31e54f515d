"""FSDP2 (``fully_shard``) training with octopt.torch on 2 and 4 ranks: the sharded run trains like one
process (32-bit: torch.optim.AdamW's result to float32 rounding), each rank holds the state of its shards
only, and the optimizer step issues no collective (FSDP2's own all-gathers and reduce-scatters happen in
forward and backward)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
ot = pytest.importorskip("octopt.torch")

STEPS = 6
BITS = (32, 8, 4)


def fsdp_training(ctx) -> dict:
    lib = ctx.lib
    out = {}
    for bits in BITS:
        m = lib.shard(lib.model(ctx.device))
        opt = ot.AdamW(m.parameters(), lr=1e-2, weight_decay=0.01, bits=bits, min_8bit_size=0)
        lib.train(m, opt, range(STEPS - 1), ctx.device)
        x, y = lib.batch(STEPS - 1, ctx.device)
        torch.nn.functional.mse_loss(m(x), y).backward()
        collectives = lib.counted_step(opt)
        local_numel = sum(p.to_local().numel() for p in m.parameters())
        out[bits] = {
            "params": lib.full_params(m),
            "collectives": collectives,
            "state_bytes": opt.state_bytes(),
            "local_numel": local_numel,
        }
    if ctx.rank == 0:
        out["one_process"] = one_process(lib, ctx.device)
    return out


def one_process(lib, device) -> dict:
    """The same training in one process, on the same device: torch.optim.AdamW, and octopt with each width."""
    out = {}
    for bits in ("torch", *BITS):
        m = lib.model(device)
        if bits == "torch":
            opt = torch.optim.AdamW(m.parameters(), lr=1e-2, weight_decay=0.01)
        else:
            opt = ot.AdamW(m.parameters(), lr=1e-2, weight_decay=0.01, bits=bits, min_8bit_size=0)
        lib.train(m, opt, range(STEPS), device)
        out[bits] = lib.full_params(m)
    return out


def _rel(a: dict, b: dict, start: dict) -> float:
    """The largest difference of two runs relative to how far the parameters moved."""
    return max(float((a[k] - b[k]).norm() / (b[k] - start[k]).norm()) for k in a)


@pytest.mark.parametrize("world_size", (2, 4))
def test_fsdp2_trains_like_one_process_without_collectives_in_the_step(launch, dist_backend, dist_lib, world_size):
    results = launch(dist_backend, world_size, fsdp_training)
    one_process = results[0]["one_process"]
    start = {k: v.detach() for k, v in dist_lib.model().named_parameters()}
    n_params = sum(v.numel() for v in start.values())
    for bits in BITS:
        r = results[0][bits]
        for rank, other in enumerate(results):
            assert other[bits]["collectives"] == [], f"rank {rank}, {bits}-bit: the step issued collectives"
            for k in r["params"]:  # every rank sees the same model
                assert torch.equal(other[bits]["params"][k], r["params"][k])
        # the state of the local shards only: all ranks together hold about one model's worth
        per_elem = {32: 8, 8: 2, 4: 1}[bits]
        total = sum(o[bits]["state_bytes"] for o in results)
        assert sum(o[bits]["local_numel"] for o in results) == n_params
        assert per_elem * n_params <= total <= per_elem * n_params * 1.05 + 64 * world_size * 6
        if bits == 32:
            for k, v in r["params"].items():
                torch.testing.assert_close(v, one_process["torch"][k], rtol=2e-5, atol=2e-6)
        else:
            # other blocks than in one process (they end at shard boundaries), and for 4 bits other
            # stochastic-rounding draws: sharding moves the result less than quantizing the state does
            quantization = _rel(one_process[bits], one_process[32], start)
            assert _rel(r["params"], one_process[bits], start) < 2 * quantization + 0.02


def compiled_fsdp_training(ctx) -> dict:
    lib = ctx.lib
    m = lib.shard(lib.model(ctx.device))
    opt = ot.AdamW8bit(m.parameters(), lr=1e-2, min_8bit_size=0)
    counts = lib.count_step_collectives(opt)

    def train_step(x, y):
        loss = torch.nn.functional.mse_loss(m(x), y)
        loss.backward()
        opt.step()  # dynamo breaks the graph here: the step runs eagerly
        opt.zero_grad()
        return loss.detach()

    step = torch.compile(train_step, backend="aot_eager")
    losses = [float(step(*lib.batch(0, ctx.device))) for _ in range(3)]  # one batch: the loss must fall
    with lib.CollectiveCounter() as probe:  # the counter sees the collectives of FSDP2's forward
        m(lib.batch(0, ctx.device)[0])
    return {"losses": losses, "step_collectives": counts, "forward_collectives": probe.ops}


def test_a_compiled_fsdp2_training_step_issues_no_collective_in_the_optimizer_step(launch, gloo):
    for r in launch(gloo, 2, compiled_fsdp_training):
        assert r["step_collectives"] == [[], [], []]
        assert any("allgather" in op.replace("_", "") for op in r["forward_collectives"]), r["forward_collectives"]
        assert r["losses"][-1] < r["losses"][0]
