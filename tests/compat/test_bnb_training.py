"""octopt.bnb in a training script written for bitsandbytes: schedulers, closures, groups added later,
parameters that get their first gradient late."""

from __future__ import annotations

import octopt.bnb as obnb
import pytest
import torch


def test_scheduler_closure_and_groups():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 1))
    head = torch.nn.Linear(4, 4)
    opt = obnb.optim.AdamW8bit(model.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    x, y = torch.randn(32, 64), torch.randn(32, 1)

    def closure():
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        if len(opt.param_groups) == 2:
            head.weight.grad = torch.ones_like(head.weight)
        return loss.detach()

    losses = [float(opt.step(closure))]
    sched.step()
    assert opt.param_groups[0]["lr"] == pytest.approx(5e-3)
    opt.add_param_group({"params": head.parameters(), "lr": 0.0})  # after the layout: laid out at once
    for _ in range(20):
        losses.append(float(opt.step(closure)))
    assert losses[-1] < losses[0]
    assert opt.state[head.weight]["step"] == 20 and opt.state[head.weight]["state1"].dtype == torch.float32


def test_a_parameter_without_gradient_has_no_state_until_it_gets_one(bnb):
    out = []
    for lib in (obnb, bnb):
        torch.manual_seed(0)
        a, b = torch.nn.Parameter(torch.randn(5000)), torch.nn.Parameter(torch.randn(5000))
        opt = lib.optim.Adam8bit([a, b], lr=1e-3)
        for k in range(4):
            g = torch.Generator().manual_seed(k)
            a.grad = torch.randn(5000, generator=g)
            b.grad = torch.randn(5000, generator=g) if k >= 2 else None
            opt.step()
            if k == 1:
                assert a in opt.state and b not in opt.state
        out.append((a.detach().clone(), b.detach().clone(), opt.state[b]["step"]))
    assert out[0][2] == out[1][2] == 2
    for mine, theirs in zip(out[0][:2], out[1][:2]):
        assert float((mine - theirs).norm() / theirs.norm()) < 1e-5
