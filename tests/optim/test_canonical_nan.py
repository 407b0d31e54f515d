"""A NaN that a step makes is stored as the one canonical quiet NaN (float32 0x7FC00000, bfloat16 0x7FC0,
float16 0x7E00) in the parameter, in 32-bit states and in block scales, on every CPU kernel variant
(DESIGN.md, Numerics). x86 hardware gives 0xFFC00000 for an invalid operation and passes an input NaN's
payload through; NVIDIA GPUs give 0x7FFFFFFF: without the canonical NaN the backends store different bits.

The NaNs come from three sources: a parameter holding NaNs with odd payloads and either sign, an infinite
parameter under weight decay (inf - inf, inf / inf), and centered RMSprop with gradients whose squares
overflow (inf - inf in the variance)."""

import numpy as np
import pytest
import torch

import octopt
from octopt import _octopt

ISAS = ("baseline", "avx2", "avx512", "avx512vbmi")
N = 4097
CANONICAL = {torch.float32: 0x7FC00000, torch.bfloat16: 0x7FC0, torch.float16: 0x7E00}
ODD_NANS = (0x7FC12345, 0xFFC00001, 0x7F800001)  # quiet with a payload, negative quiet, signalling

# name -> options under which every slot is live and a weight decay multiplies the parameter
OPTIMIZERS = {
    "Adam": dict(weight_decay=0.1),
    "AdamW": dict(weight_decay=0.1),
    "SGD": dict(momentum=0.9, weight_decay=0.1),
    "RMSprop": dict(momentum=0.5, centered=True, weight_decay=0.1),
    "Adagrad": dict(weight_decay=0.1),
    "Lion": dict(weight_decay=0.1),
    "AdEMAMix": dict(weight_decay=0.1),
    "LAMB": dict(weight_decay=0.1),
    "LARS": dict(weight_decay=0.1),
    "RAdam": dict(weight_decay=0.1),
    "NAdam": dict(weight_decay=0.1),
}


@pytest.fixture
def isa_restore():
    yield
    _octopt.set_simd_level("")


def _bits(t: torch.Tensor) -> np.ndarray:
    t = t.detach().contiguous()
    if t.dtype == torch.float32:
        return t.view(torch.int32).numpy().view(np.uint32)
    return t.view(torch.int16).numpy().view(np.uint16)


def _noncanonical(what: str, t: torch.Tensor) -> str | None:
    """None when every NaN of t has the canonical bits; else a message naming the first other one."""
    t = t.detach().reshape(-1)
    nan = torch.isnan(t).numpy()
    bits = _bits(t)
    bad = np.flatnonzero(nan & (bits != CANONICAL[t.dtype]))
    if bad.size == 0:
        return None
    return f"{what}: {bad.size} NaNs not canonical, first at {bad[0]}: 0x{int(bits[bad[0]]):X}"


def _params(dtype: torch.dtype) -> torch.Tensor:
    p = np.random.default_rng(0).standard_normal(N).astype(np.float32)
    bits = p.view(np.uint32)
    for i, nan in enumerate(ODD_NANS):
        bits[17 + 1000 * i] = nan
    p[2500] = np.inf  # with weight decay: inf - inf or inf / inf in most rules
    p[4096] = -np.inf  # in the partial last block
    return torch.from_numpy(p).to(dtype)


def _grads(name: str, dtype: torch.dtype) -> np.ndarray:
    g = (np.random.default_rng(1).standard_normal(N) * 1e-2).astype(np.float32)
    if name == "RMSprop" and dtype != torch.float16:  # (1e30 is no finite float16 gradient)
        g[3000:3010] = 1e30  # g * g overflows: the centered variance is inf - inf
    return g


def _state_tensors(opt) -> list:
    out = []
    for t in opt.tensors:
        for slot, (data, absmax) in t.buffers.items():
            if np.asarray(data).dtype == np.float32:
                out.append((f"state {slot}", torch.from_numpy(np.asarray(data).copy())))
            if absmax is not None:
                out.append((f"absmax {slot}", torch.from_numpy(np.asarray(absmax).copy())))
    return out


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("bits", [32, 8, 4])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=["f32", "bf16", "f16"])
@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_step_stores_canonical_nans(name, dtype, bits, isa, isa_restore, isa_available):
    if not isa_available(isa):
        pytest.skip(f"this CPU cannot run the {isa} kernels")
    _octopt.set_simd_level(isa)
    p = _params(dtype)
    g = torch.from_numpy(_grads(name, dtype)).to(dtype)
    opt = getattr(octopt, name)([p], lr=1e-3, bits=bits, **OPTIMIZERS[name])
    for _ in range(2):
        assert opt.step([g]) == 0
    assert torch.isnan(p).sum() >= len(ODD_NANS), "the step must carry the NaNs this test is about"
    problems = [_noncanonical("parameter", p)] + [_noncanonical(w, t) for w, t in _state_tensors(opt)]
    problems = [m for m in problems if m]
    assert not problems, "; ".join(problems)


@pytest.mark.parametrize("isa", ISAS)
def test_centered_rmsprop_overflow_makes_canonical_nans(isa, isa_restore, isa_available):
    """The finding's own example: huge gradients under centered RMSprop make NaN variances (inf - inf),
    which x86 encodes as 0xFFC00000; parameters and 32-bit states must hold 0x7FC00000."""
    if not isa_available(isa):
        pytest.skip(f"this CPU cannot run the {isa} kernels")
    _octopt.set_simd_level(isa)
    p = torch.ones(N)
    g = torch.full((N,), 1e30)
    opt = octopt.RMSprop([p], lr=1e-2, centered=True, bits=32)
    opt.step([g])
    assert torch.isnan(p).all()
    assert (_bits(p) == 0x7FC00000).all(), hex(int(_bits(p)[0]))
    square_avg = opt.tensors[0].buffers[0][0]
    assert np.isinf(np.asarray(square_avg)).all()  # the NaN is made in the variance, not in a state


def test_canonical_nan_conversions():
    """float32 -> bfloat16 / float16 stores of any NaN give the canonical 16-bit NaN (dequantize_blockwise
    into bfloat16 and float16 from a NaN block scale)."""
    x = np.ones(300, dtype=np.float32)
    x.view(np.uint32)[5] = 0xFFC00001
    codes, absmax = np.empty(x.size, np.uint8), np.empty(2, np.float32)
    with pytest.raises(ValueError, match="contains NaN or Inf"):  # after writing out=
        octopt.quantize_blockwise(x, block_size=256, out=(codes, absmax))
    assert np.isnan(absmax[0])
    for dtype, want in (("bfloat16", 0x7FC0), ("float16", 0x7E00)):
        y = octopt.dequantize_blockwise(codes, absmax, block_size=256, shape=x.shape, dtype=dtype)
        bits = np.asarray(y).reshape(-1).view(np.uint16)
        assert (bits[:256] == want).all(), (dtype, hex(int(bits[0])))
        assert (bits[256:] == bits[299]).all() and bits[299] != want  # the second block: finite ones
