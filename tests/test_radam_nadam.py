"""RAdam and NAdam numerics through the native step plan (_octopt.StepPlan, as octopt.Optimizer drives it):
32-bit parity with torch.optim.RAdam / NAdam, every CPU kernel variant computing the same bits, and
8-/4-bit state staying close to 32-bit. The optimizer classes come with the optimizer table; until then
these tests build the plan themselves (tests/cpp/test_radam_nadam.cpp covers decoupled decay,
momentum_decay and mu_product against a float64 reference)."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import torch_cuda_usable
from octopt import _layout, _octopt
from optim_helpers import (
    SHAPES,
    _single_threaded_libraries,  # noqa: F401 - an autouse fixture
    grad_sequence,
)

KINDS = ("radam", "nadam")


def _zeros(like, n, dtype, fill=0):
    """A state buffer beside the parameter `like`: NumPy for NumPy, torch on its device for torch."""
    if isinstance(like, np.ndarray):
        return np.full(n, fill, dtype)
    import torch

    return torch.full((n,), fill, dtype=getattr(torch, np.dtype(dtype).name), device=like.device)


class Plan:
    """One step plan over float32 (or bf16) parameters, with Adam's two state slots at `bits`."""

    def __init__(self, kind, params, bits=32, block_size=256, seed=0):
        self.plan = _octopt.StepPlan(kind, seed)
        for bits_, signed in sorted(_layout.CODEBOOKS, key=_layout.CODEBOOKS.get):
            q = _layout.slot_map(_layout.SlotSpec(0, "", signed, bits_, 0))
            self.plan.add_codebook(np.ascontiguousarray(q, dtype=np.float32), bits_, not signed)
        self.params, self.state, self.steps = params, [], np.zeros(len(params), np.int64)
        for p in params:
            n = int(np.prod(p.shape))
            slots = []
            for k, signed in ((0, True), (1, False)):
                if bits == 32:
                    slots.append((_zeros(p, n, np.float32), None))
                    continue
                spec = _layout.SlotSpec(k, "", signed, bits, block_size)
                code, _ = _layout.initial_fill(spec, 0.0)
                codes = _zeros(p, (n + 1) // 2 if bits == 4 else n, np.uint8, code)
                slots.append((codes, _zeros(p, (n + block_size - 1) // block_size, np.float32)))
            self.state.append(slots)
            states = [(bits, 0 if bits == 32 else _layout.CODEBOOKS[(bits, signed)], data, absmax, bits == 4)
                      for (data, absmax), signed in zip(slots, (True, False))]
            self.plan.add_tensor(p, block_size, 0, states)

    def step(self, grads, hp, stochastic_bf16=False, percentile=0.0):
        self.steps += np.array([g is not None for g in grads], np.int64)
        return self.plan.step(grads, self.steps.copy(), [hp], False, False, stochastic_bf16, percentile)


def hyper_params(**kw):
    """_octopt.HyperParams from torch.optim's keyword names (betas -> beta1, beta2)."""
    hp = _octopt.HyperParams()
    for key, value in kw.items():
        if key == "betas":
            hp.beta1, hp.beta2 = value
        elif hasattr(hp, key):
            setattr(hp, key, value)
        else:
            pytest.skip(f"the HyperParams binding does not expose '{key}' yet")
    return hp


STEPS = 200
TOL = 1e-5  # of the total displacement, as tests/test_optim_torch_parity.py

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


@pytest.mark.parametrize("case", CASES, ids=[c[0] + "-" + "-".join(f"{k}={v}" for k, v in c[1].items()) for c in CASES])
def test_matches_torch_optim(case):
    torch = pytest.importorskip("torch")
    kind, kw = case
    hp = hyper_params(**kw)
    rng = np.random.default_rng(1234)
    p0 = [rng.standard_normal(s).astype(np.float32) for s in SHAPES]
    grads = grad_sequence(rng, SHAPES, STEPS)
    params = [p.copy() for p in p0]
    plan = Plan(kind, params)
    ref = [torch.tensor(p, requires_grad=True) for p in p0]
    ref_opt = {"radam": torch.optim.RAdam, "nadam": torch.optim.NAdam}[kind](ref, foreach=False, **kw)
    for gs in grads:
        plan.step(gs, hp)
        for r, g in zip(ref, gs):
            r.grad = torch.from_numpy(g)
        ref_opt.step()
    for i, (p, r, z) in enumerate(zip(params, ref, p0)):
        want = r.detach().double().numpy()
        displacement = np.abs(want - z).max()
        assert displacement > 0.05, "the trajectory barely moved: the comparison would prove nothing"
        err = np.abs(p - want).max()
        assert err <= TOL * displacement, f"param {i}: max error {err:.3g} vs displacement {displacement:.3g}"
        for k, key in enumerate(("exp_avg", "exp_avg_sq")):
            want_s = ref_opt.state[r][key].double().numpy().ravel()
            got_s = plan.state[i][k][0]
            assert np.abs(got_s - want_s).max() <= 1e-4 * np.abs(want_s).max(), f"{key} of param {i}"


def _isa_available(isa):
    try:
        _octopt.set_simd_level(isa)
        return True
    except ValueError:
        return False
    finally:
        _octopt.set_simd_level("")


def _run_all_paths():
    """Outputs of 32/8/4-bit steps (a skipped block, percentile scaling, bf16 with stochastic writes)."""
    torch = pytest.importorskip("torch")
    out = []
    hp = hyper_params(lr=1e-2, weight_decay=0.01)
    for kind in KINDS:
        for bits in (32, 8, 4):
            for percentile in (0.0, 99.0) if bits != 32 else (0.0,):
                params = [np.random.default_rng(1).standard_normal(n).astype(np.float32) for n in (5000, 4097, 300)]
                plan = Plan(kind, params, bits=bits, block_size=128 if bits == 4 else 256)
                for s in range(8):
                    g = [np.random.default_rng(10 + s).standard_normal(p.shape).astype(np.float32) for p in params]
                    g[0][7] = np.nan if s == 1 else g[0][7]
                    g[2] = None if s == 3 else g[2]
                    plan.step(g, hp, percentile=percentile)
                out += params + [a for slots in plan.state for pair in slots for a in pair if a is not None]
        bf = [torch.from_numpy(np.random.default_rng(2).standard_normal(n).astype(np.float32)).to(torch.bfloat16)
              for n in (5000, 300)]
        plan = Plan(kind, bf, bits=8)
        for s in range(4):
            plan.step([torch.from_numpy(np.random.default_rng(20 + s).standard_normal(p.shape).astype(np.float32))
                       for p in bf], hp, stochastic_bf16=True)
        out += [p.view(torch.int16).numpy().copy() for p in bf]
        out += [a for slots in plan.state for pair in slots for a in pair if a is not None]
    return out


@pytest.mark.parametrize("isa", ("avx2", "avx512"))
def test_kernel_variants_match_the_baseline(isa):
    if not _isa_available(isa):
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
        plan = Plan(kind, params, bits=b, block_size=128 if b == 4 else 256)
        for gs in grads:
            assert plan.step(gs, hyper_params(lr=1e-3)) == 0
        runs.append(params)
    return max(np.abs(pq - p32).max() / np.abs(p32 - z).max() for p32, pq, z in zip(*runs, p0))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("bits", (8, 4))
def test_quantized_state_follows_32bit(kind, bits):
    """With 8-/4-bit state the only difference is state quantization: the trajectory departs from the
    32-bit one no more than Adam's does under the same gradients (unstructured noise, the worst case
    for 4-bit: Adam's own 4-bit deviation is ~0.75 of the displacement here, 8-bit ~0.02)."""
    rng = np.random.default_rng(5)
    p0 = [rng.standard_normal(s).astype(np.float32) for s in ((8192,), (64, 65))]
    grads = grad_sequence(rng, tuple(p.shape for p in p0), 60)
    adam = _quantized_deviation("adam", bits, p0, grads)
    got = _quantized_deviation(kind, bits, p0, grads)
    assert got <= 1.25 * adam, f"{kind} {bits}-bit: deviation {got:.3g} vs Adam's {adam:.3g}"
    if bits == 8:
        assert got <= 0.05


def _raw(a):
    """The bytes of a NumPy array or a torch tensor (any device)."""
    if isinstance(a, np.ndarray):
        return a.reshape(-1).view(np.uint8)
    import torch

    t = a.detach().cpu().contiguous()
    if t.dtype in (torch.bfloat16, torch.float16):
        t = t.view(torch.int16)
    return t.numpy().reshape(-1).view(np.uint8)


@pytest.mark.skipif(not torch_cuda_usable(), reason="needs PyTorch with a usable CUDA device")
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("bits", (32, 8, 4))
@pytest.mark.parametrize("dtype", ("float32", "bfloat16"))
def test_cuda_matches_cpu(kind, bits, dtype):
    """The fused CUDA kernel computes the CPU's bits (nearest rounding; NAdam's device mu_product
    advances like the CPU's): a skipped block, a tensor sitting out a step, several tiles."""
    if not _octopt.cuda_available():
        pytest.skip("octopt was built without CUDA or sees no GPU")
    import torch

    sizes = (1000, 4097, 70001)
    outs = []
    for device in ("cpu", "cuda"):
        rng = np.random.default_rng(7)
        params = [torch.from_numpy(rng.standard_normal(n).astype(np.float32)).to(device, getattr(torch, dtype))
                  for n in sizes]
        plan = Plan(kind, params, bits=bits, block_size=128 if bits == 4 else 256)
        hp = hyper_params(lr=1e-2, weight_decay=0.01)
        for s in range(6):
            g = [torch.from_numpy(np.random.default_rng([s, n]).standard_normal(n).astype(np.float32)).to(device)
                 for n in sizes]
            if s == 1:
                g[2][300] = float("nan")
            if s == 3:
                g[0] = None
            plan.step(g, hp)  # CUDA keeps its own step counts
        torch.cuda.synchronize()
        outs.append([_raw(p) for p in params] + [_raw(a) for slots in plan.state for pair in slots for a in pair
                                                  if a is not None])
    for i, (a, b) in enumerate(zip(*outs)):
        assert np.array_equal(a, b), f"output {i}: {np.count_nonzero(a != b)} bytes differ"
