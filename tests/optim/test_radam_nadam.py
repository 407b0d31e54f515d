"""RAdam and NAdam, added through the optimizer table alone: 32-bit parity with torch.optim.RAdam / NAdam on
every surface that steps them (octopt, octopt.torch; octopt.optax bit for bit with octopt), every CPU kernel
variant computing the same bits, 8-/4-bit state staying close to 32-bit, and NAdam's running mu_product
surviving state dicts and files. (tests/cpp/test_radam_nadam.cpp checks the numerics against a float64
reference; the CUDA kernel is checked against the CPU in tests/cuda when a GPU is present.)"""

from __future__ import annotations

import numpy as np
import octopt
import pytest
from octopt import _octopt

KINDS = ("radam", "nadam")
CLASSES = {"radam": octopt.RAdam, "nadam": octopt.NAdam}
SHAPES = ((4097,), (64, 65), (300,))
STEPS = 200
TOL = 1e-5  # of the total displacement, as tests/optim/test_torch_parity.py

CASES = [
    ("radam", {"lr": 1e-2}),
    ("radam", {"lr": 1e-2, "betas": (0.8, 0.99), "eps": 1e-6, "weight_decay": 0.1}),
    ("radam", {"lr": 1e-2, "betas": (0.9, 0.95), "weight_decay": 0.05, "maximize": True}),
    ("radam", {"lr": 1e-2, "weight_decay": 0.3, "decoupled_weight_decay": True}),
    ("nadam", {"lr": 1e-2}),
    ("nadam", {"lr": 1e-2, "betas": (0.85, 0.99), "eps": 1e-6, "weight_decay": 0.1}),
    ("nadam", {"lr": 1e-2, "weight_decay": 0.05, "maximize": True}),
    ("nadam", {"lr": 1e-2, "momentum_decay": 0.02, "weight_decay": 0.3, "decoupled_weight_decay": True}),
]
IDS = [c[0] + "-" + "-".join(f"{k}={v}" for k, v in c[1].items()) for c in CASES]


def _torch_reference(torch, kind, kw, p0, grads):
    ref = [torch.tensor(p, requires_grad=True) for p in p0]
    opt = {"radam": torch.optim.RAdam, "nadam": torch.optim.NAdam}[kind](ref, foreach=False, **kw)
    for gs in grads:
        for r, g in zip(ref, gs):
            r.grad = torch.from_numpy(g)
        opt.step()
    return ref, opt


def _assert_close(got, want, p0):
    for i, (p, r, z) in enumerate(zip(got, want, p0)):
        displacement = np.abs(r - z).max()
        assert displacement > 0.05, "the trajectory barely moved: the comparison would prove nothing"
        err = np.abs(p - r).max()
        assert err <= TOL * displacement, f"param {i}: max error {err:.3g} vs displacement {displacement:.3g}"


def test_table_entries():
    assert octopt.RAdam.kind == "radam" and octopt.NAdam.kind == "nadam"
    assert octopt.NAdam.defaults["lr"] == 2e-3 and octopt.NAdam.defaults["momentum_decay"] == 4e-3
    assert octopt.RAdam.defaults["decoupled_weight_decay"] is False


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_numpy_path_matches_torch_optim(case, grad_sequence):
    torch = pytest.importorskip("torch")
    kind, kw = case
    rng = np.random.default_rng(1234)
    p0 = [rng.standard_normal(s).astype(np.float32) for s in SHAPES]
    grads = grad_sequence(rng, SHAPES, STEPS)
    params = [p.copy() for p in p0]
    opt = CLASSES[kind](params, bits=32, **kw)
    for gs in grads:
        assert opt.step(gs) == 0
    ref, ref_opt = _torch_reference(torch, kind, kw, p0, grads)
    _assert_close(params, [r.detach().double().numpy() for r in ref], p0)
    sd = opt.state_dict()
    for i, r in enumerate(ref):
        for key in ("exp_avg", "exp_avg_sq"):
            want = ref_opt.state[r][key].double().numpy().ravel()
            got = sd["state"][i]["slots"][key]["data"]
            assert np.abs(got - want).max() <= 1e-4 * np.abs(want).max(), f"{key} of param {i}"
        if kind == "nadam":
            assert sd["state"][i]["mu_product"] == pytest.approx(float(ref_opt.state[r]["mu_product"]), rel=1e-6)


@pytest.mark.parametrize("case", [CASES[3], CASES[7]], ids=[IDS[3], IDS[7]])
def test_torch_adapter_matches_torch_optim(case, grad_sequence):
    torch = pytest.importorskip("torch")
    import octopt.torch as ot

    kind, kw = case
    rng = np.random.default_rng(99)
    p0 = [rng.standard_normal(s).astype(np.float32) for s in SHAPES]
    grads = grad_sequence(rng, SHAPES, 60)
    mine = [torch.nn.Parameter(torch.from_numpy(p.copy())) for p in p0]
    opt = {"radam": ot.RAdam, "nadam": ot.NAdam}[kind](mine, **kw)
    for gs in grads:
        for p, g in zip(mine, gs):
            p.grad = torch.from_numpy(g)
        opt.step()
    ref, ref_opt = _torch_reference(torch, kind, kw, p0, grads)
    _assert_close([p.detach().numpy() for p in mine], [r.detach().double().numpy() for r in ref], p0)
    if kind == "nadam":
        assert float(opt.state[mine[0]]["mu_product"]) == pytest.approx(float(ref_opt.state[ref[0]]["mu_product"]))
        # torch.optim.NAdam's own state dict continues in octopt.torch.NAdam (its float32 state)
        cont = [torch.nn.Parameter(r.detach().clone()) for r in ref]
        again = ot.NAdam(cont, **kw)
        again.load_state_dict(ref_opt.state_dict())
        assert float(again.state[cont[0]]["mu_product"]) == float(ref_opt.state[ref[0]]["mu_product"])


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("bits", (32, 8, 4))
def test_save_load_continues_bit_for_bit(kind, bits, tmp_path, grad_sequence):
    rng = np.random.default_rng(3)
    p0 = [rng.standard_normal(s).astype(np.float32) for s in SHAPES]
    grads = grad_sequence(rng, SHAPES, 12)
    a = [p.copy() for p in p0]
    opt = CLASSES[kind](a, lr=1e-2, bits=bits, min_8bit_size=0)
    for gs in grads[:6]:
        opt.step(gs)
    opt.save(tmp_path / "s.safetensors")
    b = [p.copy() for p in a]
    other = CLASSES[kind]([p for p in b], lr=1e-2, bits=bits, min_8bit_size=0)
    other.load(tmp_path / "s.safetensors")
    c = [p.copy() for p in a]
    third = CLASSES[kind](c, lr=1e-2, bits=bits, min_8bit_size=0)
    third.load_state_dict(opt.state_dict())
    for gs in grads[6:]:
        opt.step(gs)
        other.step(gs)
        third.step(gs)
    for x, y, z in zip(a, b, c):
        assert np.array_equal(x, y) and np.array_equal(x, z)


def test_nadam_mu_product_is_validated():
    opt = octopt.NAdam([np.zeros(10, np.float32)], bits=32)
    sd = opt.state_dict()
    sd["state"][0]["mu_product"] = 1.5
    with pytest.raises(ValueError, match="mu_product"):
        opt.load_state_dict(sd)


def _run_all_paths():
    """Outputs of 32/8/4-bit steps (a skipped block, a tensor sitting out a step, percentile scaling)."""
    out = []
    for kind in KINDS:
        for bits in (32, 8, 4):
            for percentile in (0.0, 99.0) if bits != 32 else (0.0,):
                params = [np.random.default_rng(1).standard_normal(n).astype(np.float32) for n in (5000, 4097, 300)]
                opt = CLASSES[kind](
                    params, lr=1e-2, weight_decay=0.01, bits=bits, min_8bit_size=0, percentile=percentile
                )
                for s in range(8):
                    g = [np.random.default_rng(10 + s).standard_normal(p.shape).astype(np.float32) for p in params]
                    g[0][7] = np.nan if s == 1 else g[0][7]
                    g[2] = None if s == 3 else g[2]
                    opt.step(g)
                out += params + [a for t in opt.tensors for pair in t.buffers.values() for a in pair if a is not None]
    return out


@pytest.mark.parametrize("isa", ("avx2", "avx512", "avx512vbmi"))
def test_kernel_variants_match_the_baseline(isa, isa_available):
    if not isa_available(isa):
        pytest.skip(f"this CPU cannot run the {isa} kernels")
    try:
        _octopt.set_simd_level("baseline")
        want = _run_all_paths()
        _octopt.set_simd_level(isa)
        got = _run_all_paths()
    finally:
        _octopt.set_simd_level("")
    assert len(want) == len(got)
    for i, (a, b) in enumerate(zip(want, got)):
        assert np.array_equal(np.asarray(a).view(np.uint8), np.asarray(b).view(np.uint8)), f"output {i} on {isa}"


def _quantized_deviation(kind, bits, p0, grads):
    """max |p_bits - p_32| / max |p_32 - p_0| over the tensors, after the same steps."""
    runs = []
    for b in (32, bits):
        params = [p.copy() for p in p0]
        opt = CLASSES.get(kind, octopt.Adam)(params, lr=1e-3, bits=b, min_8bit_size=0)
        for gs in grads:
            assert opt.step(gs) == 0
        runs.append(params)
    return max(np.abs(pq - p32).max() / np.abs(p32 - z).max() for p32, pq, z in zip(*runs, p0))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("bits", (8, 4))
def test_quantized_state_follows_32bit(kind, bits, grad_sequence):
    """With 8-/4-bit state the only difference is state quantization: the trajectory departs from the
    32-bit one no more than Adam's does under the same gradients."""
    rng = np.random.default_rng(5)
    p0 = [rng.standard_normal(s).astype(np.float32) for s in ((8192,), (64, 65))]
    grads = grad_sequence(rng, tuple(p.shape for p in p0), 60)
    adam = _quantized_deviation("adam", bits, p0, grads)
    got = _quantized_deviation(kind, bits, p0, grads)
    assert got <= 1.25 * adam, f"{kind} {bits}-bit: deviation {got:.3g} vs Adam's {adam:.3g}"
    if bits == 8:
        assert got <= 0.05


@pytest.mark.parametrize(
    "kind, kw, pattern",
    [
        ("nadam", {"momentum_decay": -1.0}, r"^NAdam: 'momentum_decay' must be in >= 0\.0, got -1\.0"),
        ("nadam", {"momentum_decay": float("nan")}, r"^NAdam: 'momentum_decay' must be finite, got nan"),
        ("radam", {"betas": (0.9, 1.0)}, r"^RAdam: 'betas\[1\]' must be in \[0\.0, 1\.0\), got 1\.0"),
        ("radam", {"decoupled_weight_decay": True, "weight_decay": -0.1}, r"^RAdam: 'weight_decay' must be in >= 0\.0"),
    ],
)
def test_bad_hyper_parameters_are_refused(kind, kw, pattern):
    with pytest.raises(ValueError, match=pattern):
        CLASSES[kind]([np.zeros(10, np.float32)], **kw)
