"""Writes bnb_8bit_states.pt: for every 8-bit optimizer class of bitsandbytes, its own state dict after a
few CPU steps, the parameters at that point and bitsandbytes' continuation from there; and for every
32-bit rule (LAMB and LARS with their update-norm clipping active) the parameters after a few steps. The
suite checks octopt.bnb against them without bitsandbytes installed. Run: python tests/compat/data/make_bnb_states.py
(needs bitsandbytes; the fixture records its version)."""

from __future__ import annotations

import os

import torch

FIXTURE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bnb_8bit_states.pt")
SHAPES = ((65, 67), (10,))  # 4355 elements: 8-bit state with a partial last block; 10: 32-bit state
STEPS_BEFORE = 5  # steps taken before the state dict is saved
STEPS_AFTER = 5  # steps of the continuation
# Every 8-bit class, with bitsandbytes' default hyper-parameters (and weight decay, to exercise it).
CASES = {
    "Adam8bit": dict(weight_decay=0.01),
    "AdamW8bit": dict(),
    "Lion8bit": dict(weight_decay=0.1),
    "SGD8bit": dict(lr=1e-3, momentum=0.9, weight_decay=0.01),
    "RMSprop8bit": dict(lr=1e-3, weight_decay=0.01),
    "Adagrad8bit": dict(lr=1e-3, weight_decay=0.01),
    "AdEMAMix8bit": dict(),
    "LAMB8bit": dict(weight_decay=0.01),
    "LARS8bit": dict(lr=1e-3, momentum=0.9, weight_decay=0.01),
}


# 32-bit runs: class -> arguments. max_unorm is small enough for the clipping to act on most steps.
CASES32 = {
    "Adam32bit": dict(lr=1e-2, weight_decay=0.1),
    "AdamW32bit": dict(lr=1e-2),
    "Lion32bit": dict(lr=1e-3, weight_decay=0.1),
    "SGD32bit": dict(lr=1e-2, momentum=0.9, weight_decay=0.1),
    "RMSprop32bit": dict(lr=1e-3, weight_decay=0.1),
    "Adagrad32bit": dict(lr=1e-2, weight_decay=0.1),
    "AdEMAMix": dict(lr=1e-2, t_alpha=5, t_beta3=5),  # bitsandbytes' AdEMAMix32bit fails on the CPU
    "LAMB32bit": dict(lr=1e-2, weight_decay=0.1, max_unorm=0.01),
    "LARS32bit": dict(lr=1e-2, momentum=0.9, weight_decay=0.1),
    "RMSprop": dict(lr=1e-3, args=None),  # with args.max_unorm below
}
ARGS_MAX_UNORM = 0.001  # RMSprop's update-norm clipping through bitsandbytes' `args`
STEPS32 = 6


def initial_params() -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(1234)
    return [torch.randn(s, generator=g) for s in SHAPES]


def gradient(step: int, params: list[torch.Tensor]) -> list[torch.Tensor]:
    """The gradient of `step` (deterministic; scaled so that the blocks' absmax values differ)."""
    g = torch.Generator().manual_seed(100 + step)
    return [torch.randn(p.shape, generator=g) * (0.5 + p.detach().abs()) for p in params]


def args_object() -> object:
    """An ``args`` object as bitsandbytes' MockArgs holds it (the 32-bit RMSprop run clips updates)."""

    class Args:
        optim_bits = 32
        min_8bit_size = 4096
        max_unorm = ARGS_MAX_UNORM
        skip_zeros = False

    return Args()


def run(optim, name: str, params: list[torch.Tensor], steps: range, cases: dict = CASES):
    kwargs = dict(cases[name])
    if "args" in kwargs:
        kwargs["args"] = args_object()
    opt = getattr(optim, name)(params, **kwargs)
    for step in steps:
        for p, g in zip(params, gradient(step, params)):
            p.grad = g
        opt.step()
    return opt


def run_bnb(name: str) -> dict:
    import bitsandbytes as bnb

    params = [torch.nn.Parameter(p) for p in initial_params()]
    opt = run(bnb.optim, name, params, range(STEPS_BEFORE))
    sd = opt.state_dict()
    sd = {"state": {k: _clone(v) for k, v in sd["state"].items()}, "param_groups": sd["param_groups"]}
    at_save = [p.detach().clone() for p in params]
    for step in range(STEPS_BEFORE, STEPS_BEFORE + STEPS_AFTER):
        for p, g in zip(params, gradient(step, params)):
            p.grad = g
        opt.step()
    return {
        "state_dict": sd,
        "params_at_save": at_save,
        "params_after": [p.detach().clone() for p in params],
        "bitsandbytes": bnb.__version__,
    }


def _clone(v):
    if isinstance(v, dict):
        return {k: _clone(x) for k, x in v.items()}
    return v.detach().clone() if isinstance(v, torch.Tensor) else v


def run32_bnb(name: str) -> list[torch.Tensor]:
    import bitsandbytes as bnb

    params = [torch.nn.Parameter(p) for p in initial_params()]
    run(bnb.optim, name, params, range(STEPS32), CASES32)
    return [p.detach().clone() for p in params]


def main() -> None:
    import bitsandbytes as bnb

    data = {name: run_bnb(name) for name in CASES}
    data["32bit"] = {name: run32_bnb(name) for name in CASES32}
    data["bitsandbytes"] = bnb.__version__
    torch.save(data, FIXTURE)
    print(f"wrote {FIXTURE}")


if __name__ == "__main__":
    main()
