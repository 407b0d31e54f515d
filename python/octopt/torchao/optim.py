"""torchao.optim's low-bit Adam names with torchao's constructor arguments, stepped by octopt's core.

``Adam8bit``/``AdamW8bit`` keep both moments in 8-bit block-wise dynamic codes (torchao's maps, blocks of
256); ``Adam4bit``/``AdamW4bit`` in 4 bits (blocks of 128; octopt's 4-bit maps, see docs/migrating.md);
``AdamFp8``/``AdamWFp8`` in 8-bit codes of octopt's fp8 e4m3 map (``state_map="fp8"``, blocks of 256: the
values of torchao's float8_e4m3fn scaled so that a block's absmax is the largest code, see docs/migrating.md).
As in torchao, a tensor keeps unquantized state unless it has at least 4096 elements and a whole number of
blocks. ``Adam*`` add weight decay to the gradient (torch.optim.Adam); ``AdamW*`` decay decoupled.
``_AdamW`` is torchao's unquantized AdamW (no ``block_size`` argument; float32 state for every tensor), the
optimizer its README names for bf16 training: ``bf16_stochastic_round`` rounds bfloat16 parameters
stochastically. The learning rate of each param
group is held as a tensor, as torchao holds it (change it with ``param_groups[i]["lr"].fill_(...)``; a
float written there is taken too).
"""

from __future__ import annotations

import inspect
from typing import Any

import torch

from .. import family as _family
from ..torch import TorchOptimizer
from ..torch.binding import bind_arguments

_P = inspect.Parameter
MIN_QUANTIZED_NUMEL = 4096  # torchao (following bitsandbytes) quantizes tensors of at least this size

# (name, decoupled weight decay, state bits, default block size, default weight decay, state map); a block
# size of None: no block_size argument and unquantized state (torchao's _AdamW passes block_size=inf)
TABLE = (
    ("Adam8bit", False, 8, 256, 0, "dynamic"),
    ("Adam4bit", False, 4, 128, 0, "dynamic"),
    ("AdamFp8", False, 8, 256, 0, "fp8"),
    ("AdamW8bit", True, 8, 256, 1e-2, "dynamic"),
    ("AdamW4bit", True, 4, 128, 1e-2, "dynamic"),
    ("AdamWFp8", True, 8, 256, 1e-2, "fp8"),
    ("_AdamW", True, 32, None, 1e-2, "dynamic"),
)


def _partial_block_rule(opt: Any, p: torch.Tensor, options: dict) -> dict:
    """torchao keeps a tensor of a partial last block unquantized (octopt.torch's override() wins)."""
    if opt.block_size is not None and p.numel() % opt.block_size != 0 and "bits" not in options:
        return dict(options, bits=32)
    return options


class TorchaoAdam(TorchOptimizer, default_bits=8, param_rule=_partial_block_rule):
    """torchao's _AdamBase semantics over octopt.torch's binding: torchao's argument names, its
    per-tensor rule for quantized state, the learning rate as a tensor (the subclasses set the state
    width, map and core)."""

    _state_map = "dynamic"

    def __init__(self, params, lr, betas, eps, weight_decay, amsgrad, *, bf16_stochastic_round, block_size=None):
        if not 0.0 <= lr:
            raise ValueError("Invalid learning rate: {}".format(lr))
        if not 0.0 <= eps:
            raise ValueError("Invalid epsilon value: {}".format(eps))
        if not 0.0 <= betas[0] < 1.0:
            raise ValueError("Invalid beta parameter at index 0: {}".format(betas[0]))
        if not 0.0 <= betas[1] < 1.0:
            raise ValueError("Invalid beta parameter at index 1: {}".format(betas[1]))
        if amsgrad:
            raise ValueError(
                f"{type(self).__name__}: argument 'amsgrad=True' is not supported (octopt keeps no "
                "maximum of the second moment)"
            )
        self.block_size = block_size
        self.bf16_stochastic_round = bf16_stochastic_round
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)
        super().__init__(
            params,
            defaults,
            block_size=block_size,
            min_8bit_size=MIN_QUANTIZED_NUMEL,
            state_map=self._state_map,
            stochastic_bf16=bool(bf16_stochastic_round),
            stochastic_rounding=False,  # torchao rounds its codes to the nearest
        )

    def add_param_group(self, param_group: dict) -> None:
        super().add_param_group(param_group)
        group = self.param_groups[-1]
        if not isinstance(group["lr"], torch.Tensor):
            group["lr"] = torch.tensor(group["lr"], dtype=torch.float32)


def _make(name: str, decoupled: bool, bits: int, block_size: int | None, weight_decay: float, state_map: str) -> type:
    sig = inspect.Signature(
        [
            _P("self", _P.POSITIONAL_OR_KEYWORD),
            _P("params", _P.POSITIONAL_OR_KEYWORD),
            _P("lr", _P.POSITIONAL_OR_KEYWORD, default=1e-3),
            _P("betas", _P.POSITIONAL_OR_KEYWORD, default=(0.9, 0.999)),
            _P("eps", _P.POSITIONAL_OR_KEYWORD, default=1e-8),
            _P("weight_decay", _P.POSITIONAL_OR_KEYWORD, default=weight_decay),
            _P("amsgrad", _P.POSITIONAL_OR_KEYWORD, default=False),
        ]
        + ([] if block_size is None else [_P("block_size", _P.KEYWORD_ONLY, default=block_size)])
        + [_P("bf16_stochastic_round", _P.KEYWORD_ONLY, default=False)],
        return_annotation=None,
    )

    def __init__(self: Any, *pos: Any, **kw: Any) -> None:
        TorchaoAdam.__init__(self, **bind_arguments(sig, name, self, pos, kw))

    __init__.__signature__ = sig  # type: ignore[attr-defined]
    rule = "decoupled weight decay (AdamW)" if decoupled else "weight decay added to the gradient (Adam)"
    codes = "fp8 e4m3 block-wise" if state_map == "fp8" else f"{bits}-bit block-wise" if bits < 32 else "float32"
    doc = f"torchao's {name}: {codes} state, {rule}, stepped by octopt's core."
    return type(
        name,
        (TorchaoAdam,),
        {
            "__init__": __init__,
            "__doc__": doc,
            "__module__": __name__,
            "_state_map": state_map,
        },
        core=_family.AdamW if decoupled else _family.Adam,
        default_bits=bits,
    )


ALL = tuple(_make(*row) for row in TABLE)
globals().update({c.__name__: c for c in ALL})
__all__ = [c.__name__ for c in ALL]
