"""Exact resume on every optimizer of the core's table, with 32-, 8- and 4-bit state: stopped after 3 steps
and resumed from octopt's state file (``Optimizer.save`` / ``load``) or from a ``torch.save``'d state dict of
octopt.torch, a run continues bit for bit like the uninterrupted one (4-bit codes round stochastically, keyed
by the step count that the checkpoint restores)."""

from __future__ import annotations

import io

import numpy as np
import pytest

import octopt
from octopt import _hparams

KINDS = list(_hparams.TABLE)
SHAPES = ((4097,), (33, 65))
# a direction step (Muon) orthogonalizes matrices: the first size as a matrix
MATRIX_SHAPES = ((17, 241), (33, 65))
# options that give every state slot a use
EXTRA = {
    "sgd": {"momentum": 0.9},
    "lars": {"momentum": 0.9},
    "rmsprop": {"momentum": 0.9, "centered": True},
    "ademamix": {"t_alpha": 8, "t_beta3": 8},
}
BEFORE, AFTER = 3, 3


def _options(kind: str, bits: int) -> dict:
    return {"lr": 1e-3, "bits": bits, "min_8bit_size": 0, "seed": 11, **EXTRA.get(kind, {})}


def _shapes(kind: str) -> tuple:
    return MATRIX_SHAPES if _hparams.TABLE[kind]["direction_step"] else SHAPES


def _initial(kind: str) -> list[np.ndarray]:
    rng = np.random.default_rng(5)
    return [rng.standard_normal(s).astype(np.float32) for s in _shapes(kind)]


def _grads(kind: str, step: int) -> list[np.ndarray]:
    rng = np.random.default_rng(100 + step)
    return [rng.standard_normal(s).astype(np.float32) for s in _shapes(kind)]


def _class(module, kind: str) -> type:
    return getattr(module, _hparams.TABLE[kind]["class_name"])


@pytest.mark.parametrize("bits", (32, 8, 4))
@pytest.mark.parametrize("kind", KINDS)
def test_state_file_resume_is_bit_identical(tmp_path, kind, bits):
    cls, kw = _class(octopt, kind), _options(kind, bits)
    params = _initial(kind)
    opt = cls(params, **kw)
    for s in range(BEFORE):
        opt.step(_grads(kind, s))
    opt.save(tmp_path / "opt.safetensors")
    twins = [p.copy() for p in params]
    for s in range(BEFORE, BEFORE + AFTER):
        opt.step(_grads(kind, s))
    resumed = cls(twins, **kw)
    resumed.load(tmp_path / "opt.safetensors")
    assert [s["bits"] for s in resumed.state_layout()[0]["slots"].values()][0] == bits
    for s in range(BEFORE, BEFORE + AFTER):
        resumed.step(_grads(kind, s))
    for a, b in zip(params, twins):
        assert np.array_equal(a.view(np.uint32), b.view(np.uint32))
    for sa, sb in zip(opt.state_dict()["state"], resumed.state_dict()["state"]):
        assert sa["step"] == sb["step"] == BEFORE + AFTER
        for name, e in sa["slots"].items():
            for key in ("data", "absmax"):
                if key in e:
                    assert np.array_equal(np.asarray(e[key]), np.asarray(sb["slots"][name][key])), (name, key)


@pytest.mark.parametrize("bits", (32, 8, 4))
@pytest.mark.parametrize("kind", KINDS)
def test_torch_save_resume_is_bit_identical(kind, bits):
    torch = pytest.importorskip("torch")
    ot = pytest.importorskip("octopt.torch")
    cls, kw = _class(ot, kind), _options(kind, bits)

    def run(params, opt, steps):
        for s in steps:
            for p, g in zip(params, _grads(kind, s)):
                p.grad = torch.from_numpy(g)
            opt.step()

    params = [torch.nn.Parameter(torch.from_numpy(a)) for a in _initial(kind)]
    opt = cls(params, **kw)
    run(params, opt, range(BEFORE))
    buf = io.BytesIO()
    torch.save(opt.state_dict(), buf)
    twins = [torch.nn.Parameter(p.detach().clone()) for p in params]
    run(params, opt, range(BEFORE, BEFORE + AFTER))
    resumed = cls(twins, **kw)
    buf.seek(0)
    resumed.load_state_dict(torch.load(buf, weights_only=True))
    run(twins, resumed, range(BEFORE, BEFORE + AFTER))
    for a, b in zip(params, twins):
        assert torch.equal(a.detach().view(torch.int32), b.detach().view(torch.int32))
    for a, b in zip(params, twins):
        for k, v in opt.state[a].items():
            assert torch.equal(v, resumed.state[b][k]), k
