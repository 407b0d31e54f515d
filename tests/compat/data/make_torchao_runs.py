"""Writes torchao_runs.pt: the parameters after a few CPU steps of each of torchao's low-bit Adams that
octopt.torchao names, so the suite checks them without torchao installed.
Run: python tests/compat/data/make_torchao_runs.py (needs torchao; its steps compile, about a minute)."""

from __future__ import annotations

import os

import torch

FIXTURE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "torchao_runs.pt")
# 8192 elements: quantized state; 4355 (no whole number of blocks) and 10: unquantized state in torchao
SHAPES = ((64, 128), (65, 67), (10,))
STEPS = 4
CASES = {
    "Adam8bit": dict(lr=1e-2, weight_decay=0.1),
    "AdamW8bit": dict(lr=1e-2, weight_decay=0.1),
    "Adam4bit": dict(lr=1e-2, weight_decay=0.1),
    "AdamW4bit": dict(lr=1e-2, weight_decay=0.1),
    "AdamFp8": dict(lr=1e-2, weight_decay=0.1),
    "AdamWFp8": dict(lr=1e-2, weight_decay=0.1),
}


def initial_params() -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return [torch.randn(s, generator=g) for s in SHAPES]


def run(optim, name: str, options: dict | None = None) -> list[torch.Tensor]:
    """The parameters after STEPS steps of optim.name (with CASES[name], or ``options``)."""
    params = [torch.nn.Parameter(p) for p in initial_params()]
    opt = getattr(optim, name)(params, **(CASES[name] if options is None else options))
    for step in range(STEPS):
        g = torch.Generator().manual_seed(100 + step)
        for p in params:
            p.grad = torch.randn(p.shape, generator=g) * (0.5 + p.detach().abs())
        opt.step()
    return [p.detach().clone() for p in params]


def main() -> None:
    import torchao
    import torchao.optim

    data = {name: run(torchao.optim, name) for name in CASES}
    data["torchao"] = torchao.__version__
    torch.save(data, FIXTURE)
    print(f"wrote {FIXTURE}")


if __name__ == "__main__":
    main()
