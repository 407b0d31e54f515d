"""bitsandbytes' PytorchLARS: torch.optim.SGD (32-bit momentum, dampening and nesterov honoured) whose update
is scaled down when its norm exceeds ``max_unorm`` times the parameter's norm."""

from __future__ import annotations

from typing import Any, Callable

import torch

from ...torch import SGD


class PytorchLARS(SGD):
    """bitsandbytes' PytorchLARS over octopt.torch.SGD with 32-bit state (``state[p]["momentum_buffer"]``)."""

    def __init__(self, params, lr=0.01, momentum=0, dampening=0, weight_decay=0, nesterov=False, max_unorm=0.02):
        # (unannotated: the signature is bitsandbytes' own, annotations included)
        if lr < 0.0:
            raise ValueError(f"Invalid learning rate: {lr}")
        if momentum < 0.0:
            raise ValueError(f"Invalid momentum value: {momentum}")
        if weight_decay < 0.0:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")
        super().__init__(params, lr, momentum, dampening, weight_decay, nesterov, bits=32)
        for g in self.param_groups:
            g.setdefault("max_unorm", max_unorm)
        self.defaults["max_unorm"] = max_unorm

    @torch._disable_dynamo
    @torch.no_grad()
    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        saved = []
        for g in self.param_groups:
            if g["max_unorm"] > 0.0:
                saved += [(g, p, p.detach().float().clone(), p.grad) for p in g["params"] if p.grad is not None]
        super().step()
        for g, p, p_old, grad in saved:
            buf = self.state[p].get("momentum_buffer")
            d_p = grad.float() + p_old * g["weight_decay"] if g["weight_decay"] != 0 else grad.float()
            if buf is None or g["momentum"] == 0:
                update = d_p
            else:
                buf = buf.view(p.shape)
                update = d_p + buf * g["momentum"] if g["nesterov"] else buf
            pnorm, unorm = torch.norm(p_old), torch.norm(update)
            if unorm > g["max_unorm"] * pnorm:
                scale = float(g["max_unorm"] * pnorm / unorm)
                p.copy_((p_old + update * (-g["lr"] * scale)).view(p.shape))
        return loss
