"""Paged optimizers: on the CPU they are the unpaged ones; on CUDA their large state lives in CUDA
managed memory, prefetched to the device before each step (skipped without a GPU; kept small)."""

from __future__ import annotations

import octopt.bnb as obnb
import pytest
import torch


@pytest.mark.parametrize(
    "paged, plain",
    [
        ("PagedAdamW8bit", "AdamW8bit"),
        ("PagedLion", "Lion"),
        ("PagedAdEMAMix32bit", "AdEMAMix32bit"),
        ("PagedAdam", "Adam"),
    ],
)
def test_paged_on_the_cpu_is_unpaged(paged, plain):
    out = []
    for name in (paged, plain):
        torch.manual_seed(0)
        w = torch.nn.Parameter(torch.randn(5000))
        opt = getattr(obnb.optim, name)([w])
        for _ in range(3):
            w.grad = torch.randn(5000)
            opt.step()
        out.append((w.detach().clone(), opt.state_dict()["state"][0]["step"], opt.is_paged))
    assert torch.equal(out[0][0], out[1][0]) and out[0][1] == out[1][1] == 3
    assert out[0][2] is True and out[1][2] is False


def test_is_paged_argument_makes_an_optimizer_paged():
    w = torch.nn.Parameter(torch.zeros(10))
    assert obnb.optim.Adam8bit([w], is_paged=True).is_paged
    assert obnb.optim.PagedAdam([w], is_paged=False).is_paged  # bitsandbytes' PagedAdam ignores it too


def test_paged_state_is_managed_memory_on_cuda(torch_cuda):
    import octopt

    w = torch.nn.Parameter(torch.randn(200_000, device="cuda"))  # above bitsandbytes' paging threshold
    small = torch.nn.Parameter(torch.randn(1000, device="cuda"))
    opt = obnb.optim.PagedAdamW8bit([w, small])
    ref_w = torch.nn.Parameter(w.detach().clone())
    ref = obnb.optim.AdamW8bit([ref_w])
    for _ in range(2):
        w.grad = torch.randn_like(w)
        small.grad = torch.randn_like(small)
        ref_w.grad = w.grad.clone()
        opt.step()
        ref.step()
    torch.cuda.synchronize()
    assert torch.equal(w.detach(), ref_w.detach())
    managed = opt._core_opts["_state_factory"].managed
    assert len(managed) == 2  # state1 and state2 of the large tensor; absmax and the small one stay plain
    ptrs = {t.data_ptr() for _, t in managed}
    assert opt.state[w]["state1"].data_ptr() in ptrs and octopt.cuda_available()
