"""octopt.bnb.nn: bitsandbytes' Embedding and StableEmbedding (the 8-bit optimizers paper, section 2.3):
Xavier-uniform init, the layer norm after the lookup, and 32-bit optimizer state for the weight."""

from __future__ import annotations

import inspect
import math

import octopt.bnb as obnb
import pytest
import torch


@pytest.mark.parametrize("name", ["StableEmbedding", "Embedding"])
def test_init_is_xavier_uniform_with_a_zero_padding_row(fresh_manager, name):
    torch.manual_seed(0)
    emb = getattr(obnb.nn, name)(1000, 64, padding_idx=3)
    bound = math.sqrt(6.0 / (1000 + 64))
    w = emb.weight.detach()
    assert float(w.abs().max()) <= bound and float(w.abs().max()) > 0.95 * bound
    assert float(w.std()) == pytest.approx(bound / math.sqrt(3), rel=0.05)  # uniform, not normal
    assert torch.equal(w[3], torch.zeros(64))


def test_stable_embedding_normalizes_after_the_lookup(fresh_manager):
    torch.manual_seed(0)
    emb = obnb.nn.StableEmbedding(100, 32)
    ids = torch.tensor([[1, 2, 3], [4, 5, 6]])
    out = emb(ids)
    want = torch.nn.functional.layer_norm(emb.weight[ids], (32,), emb.norm.weight, emb.norm.bias)
    assert torch.allclose(out, want)
    assert torch.allclose(out.mean(-1), torch.zeros(2, 3), atol=1e-5)
    assert isinstance(emb.norm, torch.nn.LayerNorm)
    plain = obnb.nn.Embedding(100, 32)
    assert torch.equal(plain(ids), plain.weight[ids])


def test_half_precision_stable_embedding_normalizes_in_full_precision(fresh_manager):
    emb = obnb.nn.StableEmbedding(100, 32, dtype=torch.bfloat16)
    out = emb(torch.tensor([1, 2]))
    assert out.dtype == torch.bfloat16 and emb.norm.weight.dtype == torch.float32


@pytest.mark.parametrize("name", ["StableEmbedding", "Embedding"])
def test_embedding_weight_gets_32bit_state_automatically(fresh_manager, name):
    torch.manual_seed(0)
    model = torch.nn.ModuleDict({"emb": getattr(obnb.nn, name)(1000, 64), "out": torch.nn.Linear(64, 100)})
    opt = obnb.optim.Adam8bit(model.parameters())
    x = model["out"](model["emb"](torch.tensor([1, 2, 3]))).sum()
    x.backward()
    opt.step()
    assert opt.state[model["emb"].weight]["state1"].dtype == torch.float32  # 64000 elements, still 32-bit
    assert opt.state[model["out"].weight]["state1"].dtype == torch.uint8


@pytest.mark.parametrize("name", ["StableEmbedding", "Embedding"])
def test_nn_matches_bitsandbytes_live(bnb, fresh_manager, name):
    theirs = inspect.signature(getattr(bnb.nn, name).__init__)
    ours = inspect.signature(getattr(obnb.nn, name).__init__)
    assert [(p.name, p.default) for p in ours.parameters.values()] == [
        (p.name, p.default) for p in theirs.parameters.values()
    ]
    torch.manual_seed(0)
    a = getattr(bnb.nn, name)(50, 16, padding_idx=0)
    torch.manual_seed(0)
    b = getattr(obnb.nn, name)(50, 16, padding_idx=0)
    assert torch.equal(a.weight, b.weight)  # the same init from the same generator
    ids = torch.tensor([0, 7, 49])
    assert torch.equal(a(ids), b(ids))
