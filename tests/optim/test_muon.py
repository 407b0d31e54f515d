"""Muon with quantized momentum (issue 22 item 5; docs/muon.md): octopt.torch.Muon against torch.optim.Muon and
octopt.Muon on NumPy against a float32 NumPy reference of the same algorithm (32-bit: float32 rounding), 8/4-bit
close to 32-bit, non-2-D parameters refused as torch refuses them, state dicts and state files round trip,
bad arguments named."""

from __future__ import annotations

import math

import numpy as np
import pytest

import octopt

torch = pytest.importorskip("torch")
ot = pytest.importorskip("octopt.torch")

# (rows, cols): 4355 and 5141 elements are no multiple of any block size; tall, wide and square
SHAPES = ((65, 67), (97, 53), (48, 48))


def _grads(steps: int, seed: int = 0) -> list:
    g = torch.Generator().manual_seed(seed)
    return [[torch.randn(s, generator=g) for s in SHAPES] for _ in range(steps)]


def _run_torch(cls, steps: int, **kw) -> list:
    torch.manual_seed(1)
    params = [torch.nn.Parameter(torch.randn(s)) for s in SHAPES]
    opt = cls(params, **kw)
    for gs in _grads(steps):
        for p, g in zip(params, gs):
            p.grad = g.clone()
        opt.step()
    return [p.detach().clone() for p in params]


@pytest.mark.parametrize("nesterov", [True, False])
@pytest.mark.parametrize("adjust_lr_fn", [None, "match_rms_adamw"])
def test_32bit_matches_torch_optim_muon(nesterov, adjust_lr_fn):
    kw = dict(lr=0.02, weight_decay=0.1, momentum=0.9, nesterov=nesterov, adjust_lr_fn=adjust_lr_fn)
    ref = _run_torch(torch.optim.Muon, 6, **kw)
    got = _run_torch(ot.Muon, 6, **kw)
    for r, o in zip(ref, got):
        torch.testing.assert_close(o, r, rtol=0, atol=2e-6)


@pytest.mark.parametrize("bits,tol", [(8, 0.02), (4, 0.2)])
def test_quantized_momentum_close_to_32bit(bits, tol):
    full = _run_torch(ot.Muon, 6, lr=0.02)
    q = _run_torch(ot.Muon, 6, lr=0.02, bits=bits, min_8bit_size=0)
    start = _run_torch(ot.Muon, 0, lr=0.02)
    for f, x, s in zip(full, q, start):
        moved = (f - s).norm()
        assert (x - f).norm() <= tol * moved  # the quantized run moved where the 32-bit one did
        assert not torch.equal(x, f)  # and its state really was quantized


def _numpy_reference(params: list, grads: list, lr: float, wd: float, mom: float, eps: float) -> list:
    """torch.optim.Muon's algorithm in float32 NumPy (Newton-Schulz in float32, as octopt.Muon on NumPy)."""
    a, b, c = (np.float32(v) for v in (3.4445, -4.7750, 2.0315))
    bufs = [np.zeros_like(p) for p in params]
    for gs in grads:
        for i, (p, g) in enumerate(zip(params, gs)):
            bufs[i] += np.float32(1 - mom) * (g - bufs[i])
            d = g + np.float32(mom) * (bufs[i] - g)
            x = d.T if d.shape[0] > d.shape[1] else d
            x = x / np.float32(max(float(np.sqrt((x * x).sum())), eps))
            for _ in range(5):
                gram = x @ x.T
                x = a * x + (b * gram + c * (gram @ gram)) @ x
            o = x.T if d.shape[0] > d.shape[1] else x
            adj = lr * math.sqrt(max(1, p.shape[0] / p.shape[1]))
            p *= np.float32(1 - lr * wd)
            p -= np.float32(adj) * o
    return params


def test_numpy_32bit_matches_reference():
    rng = np.random.default_rng(0)
    params = [rng.standard_normal(s).astype(np.float32) for s in SHAPES]
    grads = [[rng.standard_normal(s).astype(np.float32) for s in SHAPES] for _ in range(5)]
    ref = _numpy_reference([p.copy() for p in params], grads, 0.02, 0.1, 0.95, 1e-7)
    opt = octopt.Muon(params, lr=0.02, weight_decay=0.1, bits=32)
    for gs in grads:
        opt.step(gs)
    for p, r in zip(params, ref):
        np.testing.assert_allclose(p, r, rtol=0, atol=2e-5)
    assert opt.params[0] is params[0]  # the user's arrays, updated in place


def test_non_2d_parameters_are_refused_like_torch():
    with pytest.raises(ValueError, match="2D parameters"):
        torch.optim.Muon([torch.nn.Parameter(torch.zeros(4))])
    with pytest.raises(ValueError, match=r"Muon: argument 'params\[1\]' must be a 2-D matrix"):
        ot.Muon([torch.nn.Parameter(torch.zeros(4, 4)), torch.nn.Parameter(torch.zeros(4))])
    with pytest.raises(ValueError, match=r"Muon: argument 'params\[0\]' must be a 2-D matrix"):
        octopt.Muon([np.zeros((2, 3, 4), np.float32)])


@pytest.mark.parametrize(
    "kw,match",
    [
        (dict(ns_steps=100), "argument 'ns_steps' must be an int in"),
        (dict(ns_coefficients=(1.0, 2.0)), "argument 'ns_coefficients' must be three finite numbers"),
        (dict(adjust_lr_fn="rms"), "argument 'adjust_lr_fn' must be None, 'original' or 'match_rms_adamw'"),
        (dict(momentum=-0.5), "momentum"),
        (dict(lr=-1.0), "lr"),
    ],
)
def test_bad_arguments_are_named(kw, match):
    with pytest.raises(ValueError, match=match):
        ot.Muon([torch.nn.Parameter(torch.zeros(4, 4))], **kw)
    with pytest.raises(ValueError, match=match):
        octopt.Muon([np.zeros((4, 4), np.float32)], **kw)


def test_a_group_may_not_change_the_newton_schulz_options():
    opt = ot.Muon([torch.nn.Parameter(torch.zeros(4, 4))])
    with pytest.raises(ValueError, match="param group argument 'ns_steps'=3 differs"):
        opt.add_param_group({"params": [torch.nn.Parameter(torch.zeros(4, 4))], "ns_steps": 3})


@pytest.mark.parametrize("bits", [32, 8, 4])
def test_state_dict_round_trip_continues_bit_identically(bits):
    def make():
        torch.manual_seed(1)
        ps = [torch.nn.Parameter(torch.randn(s)) for s in SHAPES]
        return ps, ot.Muon(ps, lr=0.02, bits=bits, min_8bit_size=0)

    grads = _grads(6)
    pa, a = make()
    for gs in grads[:3]:
        for p, g in zip(pa, gs):
            p.grad = g.clone()
        a.step()
    sd = a.state_dict()
    assert "momentum_buffer" in sd["state"][0]
    pb, b = make()
    with torch.no_grad():
        for x, y in zip(pb, pa):
            x.copy_(y)
    b.load_state_dict(sd)
    for gs in grads[3:]:
        for ps, o in ((pa, a), (pb, b)):
            for p, g in zip(ps, gs):
                p.grad = g.clone()
            o.step()
    for x, y in zip(pa, pb):
        assert torch.equal(x, y)


@pytest.mark.parametrize("bits", [32, 8, 4])
def test_state_file_round_trip(tmp_path, bits):
    rng = np.random.default_rng(0)
    params = [rng.standard_normal(s).astype(np.float32) for s in SHAPES]
    grads = [[rng.standard_normal(s).astype(np.float32) for s in SHAPES] for _ in range(4)]
    a = octopt.Muon(params, lr=0.02, bits=bits, min_8bit_size=0)
    for gs in grads[:2]:
        a.step(gs)
    a.save(tmp_path / "muon.safetensors")
    assert "muon" in str(octopt.state_file.inspect(tmp_path / "muon.safetensors"))
    params_b = [p.copy() for p in params]
    b = octopt.Muon(params_b, lr=0.02, bits=bits, min_8bit_size=0)
    b.load(tmp_path / "muon.safetensors")
    for gs in grads[2:]:
        a.step(gs)
        b.step(gs)
    for x, y in zip(params, params_b):
        np.testing.assert_array_equal(x, y)


def test_nonfinite_gradient_leaves_the_matrix_and_state_unchanged():
    p = np.ones((64, 64), np.float32)
    opt = octopt.Muon([p], lr=0.02, bits=32)
    g = np.full((64, 64), np.nan, np.float32)
    skipped = opt.step([g])
    assert skipped > 0
    np.testing.assert_array_equal(p, np.float32(1 - 0.02 * 0.1))  # only the decay: the direction was zero
    assert not np.any(opt.state_dict()["state"][0]["slots"]["momentum_buffer"]["data"])


@pytest.mark.parametrize("bits", [32, 8])
def test_loads_a_torch_optim_muon_state_dict(bits):
    # torch.optim.Muon keeps momentum_buffer and no step count: its state dict loads and the run continues as
    # torch's would (32-bit: to float32 rounding, as test_32bit_matches_torch_optim_muon; 8-bit: the momentum
    # requantized, close)
    torch.manual_seed(0)
    w0 = torch.randn(67, 65)  # 4355 elements: quantized at 8 bits
    grads = [torch.randn(67, 65) for _ in range(6)]
    w = torch.nn.Parameter(w0.clone())
    ref = torch.optim.Muon([w], lr=0.02)
    for g in grads[:3]:
        w.grad = g.clone()
        ref.step()
    saved = ref.state_dict()
    assert "step" not in saved["state"][0]
    v = torch.nn.Parameter(w.detach().clone())
    opt = ot.Muon([v], lr=0.02, bits=bits)
    opt.load_state_dict(saved)
    for g in grads[3:]:
        w.grad = g.clone()
        ref.step()
        v.grad = g.clone()
        opt.step()
    err = (v - w).abs().max().item()
    assert err <= 2e-6 if bits == 32 else err < 1e-2 * (w - w0).abs().max().item()
