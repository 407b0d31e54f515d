"""octopt.bnb.nn: bitsandbytes' Embedding and StableEmbedding (Dettmers et al. 2022, section 2.3).

Both initialize the weight Xavier-uniform and register it with GlobalOptimManager for 32-bit optimizer
state (octopt.bnb.optim's optimizers honour that at their first step). StableEmbedding also normalizes
each looked-up vector with a LayerNorm, computed in the default dtype and returned in the weight's dtype.
"""

from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor, device

from .optim import GlobalOptimManager

__all__ = ["Embedding", "StableEmbedding"]


class _XavierEmbedding(torch.nn.Embedding):
    def reset_parameters(self) -> None:
        torch.nn.init.xavier_uniform_(self.weight)
        self._fill_padding_idx_with_zero()

    def _fill_padding_idx_with_zero(self) -> None:
        if self.padding_idx is not None:
            with torch.no_grad():
                self.weight[self.padding_idx].fill_(0)

    def _lookup(self, input: Tensor) -> Tensor:
        return F.embedding(
            input, self.weight, self.padding_idx, self.max_norm, self.norm_type, self.scale_grad_by_freq, self.sparse
        )


class StableEmbedding(_XavierEmbedding):
    """An embedding for training with 8-bit optimizers: Xavier-uniform init, a LayerNorm after the lookup,
    and 32-bit optimizer state for its weight."""

    def __init__(
        self,
        num_embeddings: int,
        embedding_dim: int,
        padding_idx: Optional[int] = None,
        max_norm: Optional[float] = None,
        norm_type: float = 2.0,
        scale_grad_by_freq: bool = False,
        sparse: bool = False,
        _weight: Optional[Tensor] = None,
        device=None,
        dtype=None,
    ) -> None:
        super().__init__(
            num_embeddings,
            embedding_dim,
            padding_idx,
            max_norm,
            norm_type,
            scale_grad_by_freq,
            sparse,
            _weight,
            device=device,  # by keyword: torch's Embedding has _freeze before device
            dtype=dtype,
        )
        self.norm = torch.nn.LayerNorm(embedding_dim, device=device)
        GlobalOptimManager.get_instance().register_module_override(self, "weight", {"optim_bits": 32})

    def forward(self, input: Tensor) -> Tensor:
        emb = self._lookup(input).to(torch.get_default_dtype())  # the norm in full precision
        return self.norm(emb).to(self.weight.dtype)


class Embedding(_XavierEmbedding):
    """An embedding with Xavier-uniform init and 32-bit optimizer state for its weight."""

    def __init__(
        self,
        num_embeddings: int,
        embedding_dim: int,
        padding_idx: Optional[int] = None,
        max_norm: Optional[float] = None,
        norm_type: float = 2.0,
        scale_grad_by_freq: bool = False,
        sparse: bool = False,
        _weight: Optional[Tensor] = None,
        device: Optional[device] = None,
    ) -> None:
        super().__init__(
            num_embeddings,
            embedding_dim,
            padding_idx,
            max_norm,
            norm_type,
            scale_grad_by_freq,
            sparse,
            _weight,
            device=device,
        )
        GlobalOptimManager.get_instance().register_module_override(self, "weight", {"optim_bits": 32})

    def forward(self, input: Tensor) -> Tensor:
        return self._lookup(input)
