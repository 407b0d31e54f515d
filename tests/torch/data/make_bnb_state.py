"""Writes bnb_adam8bit_state.pt: bitsandbytes' own Adam8bit / AdamW8bit state dicts after a few CPU steps,
with the parameters at that point and bitsandbytes' continuation, so the suite can check octopt.torch's
import without bitsandbytes installed. Run: python tests/torch/data/make_bnb_state.py (needs bitsandbytes)."""

from __future__ import annotations

import os

import torch

FIXTURE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bnb_adam8bit_state.pt")
SHAPES = ((65, 67), (10,))  # 4355 elements: 8-bit state with a partial last block; 10: 32-bit state
STEPS_BEFORE = 5  # steps taken before the state dict is saved
STEPS_AFTER = 5  # steps of the continuation
CASES = {
    "Adam8bit": dict(lr=1e-2, betas=(0.9, 0.995), eps=1e-8, weight_decay=0.0),
    "AdamW8bit": dict(lr=1e-2, betas=(0.9, 0.995), eps=1e-8, weight_decay=0.1),
}


def initial_params() -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(1234)
    return [torch.randn(s, generator=g) for s in SHAPES]


def gradient(step: int, params: list[torch.Tensor]) -> list[torch.Tensor]:
    """The gradient of `step` (deterministic; scaled so that the blocks' absmax values differ)."""
    g = torch.Generator().manual_seed(100 + step)
    return [torch.randn(p.shape, generator=g) * (0.5 + p.detach().abs()) for p in params]


def run_bnb(name: str) -> dict:
    import bitsandbytes as bnb

    params = [torch.nn.Parameter(p) for p in initial_params()]
    opt = getattr(bnb.optim, name)(params, **CASES[name])
    for step in range(STEPS_BEFORE):
        for p, g in zip(params, gradient(step, params)):
            p.grad = g
        opt.step()
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


def main() -> None:
    torch.save({name: run_bnb(name) for name in CASES}, FIXTURE)
    print(f"wrote {FIXTURE}")


if __name__ == "__main__":
    main()
