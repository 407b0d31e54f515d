"""bitsandbytes' two gradient/update clippings, around octopt's fused step.

``percentile_clipping`` (Dettmers et al. 2022, the 8-bit optimizers paper): each parameter keeps the squared
norms of its last 100 gradients (``gnorm_vec``; the first step fills all 100 with its own); when the current
norm exceeds the given percentile of them, the gradient is scaled down to it. bitsandbytes multiplies the
gradient by that scale inside its kernel, before anything else (weight decay included); a scaled float32
copy of the gradient handed to the core is the same arithmetic.

``max_unorm`` (bitsandbytes' LAMB, LARS and ``args.max_unorm``): when the norm of the update exceeds
``max_unorm`` times the norm of the parameter (taken before the step), the update is scaled down to it.
bitsandbytes applies it only to 32-bit state, and only for its adam/lamb, momentum/lars and rmsprop rules;
octopt does the same: the core steps, and where the norm of the update (recomputed from the fresh 32-bit
state, exactly as bitsandbytes forms it) is too large, the parameter is recomputed from its value before
the step with the scaled update. ``unorm_vec`` holds the last update norm, as in bitsandbytes.
"""

from __future__ import annotations

import math
from typing import Any

import torch

HISTORY = 100  # gradient norms kept for percentile clipping
UNORM_RULES = ("adam", "lamb", "momentum", "lars", "rmsprop")


def extra_state(p: torch.Tensor, c: dict) -> dict:
    """The per-parameter tensors bitsandbytes keeps for clipping under this configuration."""
    out = {}
    if c["percentile_clipping"] < 100:
        out["gnorm_vec"] = torch.zeros((HISTORY,), device=p.device)
    if c["max_unorm"] > 0.0:
        out["unorm_vec"] = torch.zeros((1,), device=p.device)
    return out


def _uses_unorm(opt: Any, t: Any, c: dict) -> bool:
    return c["max_unorm"] > 0.0 and opt._bnb_name in UNORM_RULES and t.specs and t.specs[0].bits == 32


def before_step(opt: Any) -> tuple[dict, list]:
    """Clipped gradients (id(param) -> float32 tensor) and, for update-norm clipping, what the correction
    after the step needs: (tensor, config, parameter norm, parameter before the step, gradient used)."""
    replace: dict[int, torch.Tensor] = {}
    unorm: list = []
    if all(b.config["percentile_clipping"] >= 100 and b.config["max_unorm"] <= 0.0 for b in opt._buckets):
        return replace, unorm  # the common case: nothing to do
    for b in opt._buckets:
        c = b.config
        group = opt.param_groups[b.group]
        clip = c["percentile_clipping"] < 100
        if not clip and c["max_unorm"] <= 0.0:
            continue
        for pi in b.positions:
            p = group["params"][pi]
            if p.grad is None:
                continue
            t = opt._bound.tensor(p)
            extra = opt._extra[id(p)]
            g = p.grad
            if clip:
                if "gnorm_vec" not in extra:  # clipping switched on by an override after the layout
                    extra["gnorm_vec"] = torch.zeros((HISTORY,), device=p.device)
                scale = _percentile_scale(g, extra["gnorm_vec"], t.step + 1, int(c["percentile_clipping"]))
                if scale != 1.0:
                    g = g.float() * scale
                    replace[id(p)] = g
            if _uses_unorm(opt, t, c):
                if "unorm_vec" not in extra:
                    extra["unorm_vec"] = torch.zeros((1,), device=p.device)
                pf = p.detach().float()
                unorm.append((t, c, float(torch.norm(pf)), pf.clone(), g))
    return replace, unorm


def _percentile_scale(g: torch.Tensor, gnorm_vec: torch.Tensor, step: int, percentile: int) -> float:
    sq = g.float().pow(2).sum()
    slot = step % HISTORY
    gnorm_vec[slot] = 0.0
    if step == 1:
        gnorm_vec += sq  # the first step fills the whole history with its own norm
    else:
        gnorm_vec[slot] += sq
    current = torch.sqrt(gnorm_vec[slot])
    clip_value = torch.sqrt(torch.sort(gnorm_vec).values[percentile])
    return float(clip_value / current) if bool(current > clip_value) else 1.0


def after_step(opt: Any, unorm: list, replace: dict) -> None:
    for t, c, pnorm, p_old, g in unorm:
        update = _update(opt, t, c, p_old, g)
        if update is None:
            continue
        vec = opt._extra[id(t.param)]["unorm_vec"]
        u = float(torch.norm(update))
        vec.fill_(u)
        limit = c["max_unorm"] * pnorm
        if not u > limit:
            continue
        scale = limit / u
        lr, wd = float(c["lr"]), float(c["weight_decay"])
        p_new = p_old
        if opt._bnb_name in ("adam", "lamb"):
            b1, b2 = c["betas"][0], c["betas"][1]
            step = t.step
            correction1 = 1.0 - b1**step
            correction2 = math.sqrt(1.0 - b2**step)
            if wd > 0.0:
                p_new = p_new * (1.0 - lr * wd)
            p_new = p_new + update * (-lr * correction2 / correction1 * scale)
        else:
            p_new = p_new + update * (-lr * scale)
        with torch.no_grad():
            t.param.copy_(p_new.view(t.param.shape))


def _update(opt: Any, t: Any, c: dict, p_old: torch.Tensor, g: torch.Tensor) -> torch.Tensor | None:
    """The update whose norm bitsandbytes clips, from the fresh 32-bit state (None: a skipped step)."""
    name = opt._bnb_name
    s1 = t.buffers[t.specs[0].index][0].view(t.param.shape)
    if name in ("adam", "lamb"):
        s2 = t.buffers[t.specs[1].index][0].view(t.param.shape)
        correction2 = math.sqrt(1.0 - c["betas"][1] ** t.step)
        return s1 / (s2.sqrt() + c["eps"] * correction2)
    if name in ("momentum", "lars"):
        return s1.clone()
    wd = float(c["weight_decay"])  # rmsprop: the gradient (with weight decay) over the root mean square
    g = g.float() + p_old * wd if wd > 0.0 else g.float()
    return g / (s1.sqrt() + c["eps"])


def loaded_extra(opt: Any, sd: Any, fn: str) -> list:
    """(destination, source) pairs of the clipping tensors of a bitsandbytes state dict."""
    out = []
    if (
        not isinstance(sd, dict)
        or not isinstance(sd.get("state"), dict)
        or not isinstance(sd.get("param_groups"), list)
    ):
        return out  # the state dict's own checks name the problem
    ids = [i for h in sd["param_groups"] if isinstance(h, dict) for i in h.get("params", [])]
    for saved_id, p in zip(ids, opt._param_list()):
        entry = sd["state"].get(saved_id)
        if not isinstance(entry, dict):
            continue
        flat = dict(entry)
        flat.update(entry.get(_NESTED, {}) if isinstance(entry.get(_NESTED), dict) else {})
        extra = opt._extra[id(p)]
        for key, size in (("gnorm_vec", HISTORY), ("unorm_vec", 1)):
            v = flat.get(key)
            if v is None:
                continue
            if not isinstance(v, torch.Tensor) or v.numel() != size or not v.is_floating_point():
                raise ValueError(f"{fn}: the state of parameter {saved_id}: '{key}' must be {size} float values")
            if key not in extra:
                extra[key] = torch.zeros((size,), device=p.device)
            out.append((extra[key], v.detach().reshape(size).to(extra[key].device, torch.float32)))
    return out


_NESTED = "__bnb_optimizer_quant_state__"
