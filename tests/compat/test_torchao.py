"""octopt.torchao.optim against torchao.optim: signatures, errors, and trajectories on the CPU (from the
stored runs of data/make_torchao_runs.py; live under -m slow, since torchao compiles every step)."""

from __future__ import annotations

import inspect

import octopt.torchao as ota
import pytest
import torch

NAMES = ("Adam8bit", "AdamW8bit", "Adam4bit", "AdamW4bit")


def _relative(ours, theirs, start) -> list:
    return [float((o - t).norm() / (t - s).norm()) for o, t, s in zip(ours, theirs, start)]


@pytest.mark.parametrize("name", NAMES)
def test_signature_is_torchaos_own(torchao_optim, name):
    assert inspect.signature(getattr(ota.optim, name).__init__) == inspect.signature(
        getattr(torchao_optim, name).__init__
    )


@pytest.mark.parametrize("name", NAMES)
def test_trajectories_match_torchao(make_torchao_runs, name):
    theirs = torch.load(make_torchao_runs.FIXTURE, weights_only=True)[name]
    ours = make_torchao_runs.run(ota.optim, name)
    rel = _relative(ours, theirs, make_torchao_runs.initial_params())
    # tensors torchao keeps unquantized (not a whole number of blocks; fewer than 4096 elements)
    assert rel[1] < 1e-4 and rel[2] < 1e-4
    # 8-bit: the same maps and blocks, codes to the nearest as torchao's; 4-bit: octopt's second-moment
    # map is not torchao's linear one (docs/migrating.md), so only the direction of travel agrees
    assert rel[0] < (1e-3 if "8bit" in name else 0.5)


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_trajectories_match_torchao_live(torchao_optim, make_torchao_runs, name):
    theirs = make_torchao_runs.run(torchao_optim, name)
    ours = make_torchao_runs.run(ota.optim, name)
    rel = _relative(ours, theirs, make_torchao_runs.initial_params())
    assert rel[1] < 1e-4 and rel[0] < (1e-3 if "8bit" in name else 0.5)


def test_state_layout_follows_torchao():
    big = torch.nn.Parameter(torch.randn(64, 128))  # quantized
    ragged = torch.nn.Parameter(torch.randn(65, 67))  # no whole number of blocks: unquantized in torchao
    small = torch.nn.Parameter(torch.randn(10))
    opt = ota.optim.AdamW4bit([big, ragged, small])
    layout = [t["slots"]["exp_avg"] for t in opt.state_layout()]
    assert layout[0] == {"bits": 4, "block_size": 128, "map": "dynamic_signed_4"}
    assert layout[1]["bits"] == 32 and layout[2]["bits"] == 32
    assert opt.state_layout()[0]["slots"]["exp_avg_sq"]["bits"] == 4
    assert isinstance(opt.param_groups[0]["lr"], torch.Tensor)  # as torchao holds it
    opt8 = ota.optim.Adam8bit([torch.nn.Parameter(torch.randn(4096))], block_size=512)
    assert opt8.state_layout()[0]["slots"]["exp_avg"]["block_size"] == 512


def test_lr_is_changed_in_place_or_by_assignment():
    w = torch.nn.Parameter(torch.ones(8192))
    opt = ota.optim.AdamW8bit([w], weight_decay=0.0)
    opt.param_groups[0]["lr"].fill_(0.0)
    w.grad = torch.ones_like(w)
    opt.step()
    assert torch.equal(w.detach(), torch.ones(8192))
    opt.param_groups[0]["lr"] = 0.1  # a scheduler writing a float
    opt.step()
    assert float(w.detach()[0]) < 1.0


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(lr=-1.0), "Invalid learning rate: -1.0"),
        (dict(eps=-1.0), "Invalid epsilon value: -1.0"),
        (dict(betas=(1.0, 0.999)), "Invalid beta parameter at index 0: 1.0"),
        (dict(betas=(0.9, -0.1)), "Invalid beta parameter at index 1: -0.1"),
        (dict(amsgrad=True), "'amsgrad=True' is not supported"),
    ],
)
def test_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        ota.optim.AdamW8bit([torch.nn.Parameter(torch.zeros(3))], **kwargs)


def test_bf16_stochastic_round_is_octopts_stochastic_bf16():
    w = torch.nn.Parameter(torch.zeros(8192, dtype=torch.bfloat16))
    opt = ota.optim.AdamW8bit([w], bf16_stochastic_round=True)
    assert opt._core.stochastic_bf16
