"""NumPy bfloat16 (ml_dtypes) parameters step like torch's bfloat16 parameters, bit for bit, with nearest and
with stochastic rounding of the parameter (finding 11 of issue 21: they used to fail with "argument
'params[0]' is not a writable array", since NumPy exports that dtype neither through DLPack nor through the
buffer protocol)."""

import numpy as np
import pytest
import torch

import octopt

ml_dtypes = pytest.importorskip("ml_dtypes")
N = 4097


def _values(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(N).astype(np.float32)


def _bits_torch(t: torch.Tensor) -> np.ndarray:
    return t.view(torch.int16).numpy().view(np.uint16)


@pytest.mark.parametrize("grad_dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("stochastic_bf16", [False, True])
@pytest.mark.parametrize("name,bits", [("Adam", 8), ("AdamW", 32), ("SGD", 32), ("Lion", 4)])
def test_numpy_bf16_steps_like_torch_bf16(name, bits, stochastic_bf16, grad_dtype):
    p_np = _values(0).astype(ml_dtypes.bfloat16)
    p_t = torch.from_numpy(_values(0)).to(torch.bfloat16)
    assert (p_np.view(np.uint16) == _bits_torch(p_t)).all()
    cls = getattr(octopt, name)
    kw = dict(lr=1e-2, bits=bits, stochastic_bf16=stochastic_bf16, seed=5)
    opt_np, opt_t = cls([p_np], **kw), cls([p_t], **kw)
    for step in range(3):
        g = _values(10 + step) * np.float32(0.1)
        g_t = torch.from_numpy(g)
        if grad_dtype == "bfloat16":
            g, g_t = g.astype(ml_dtypes.bfloat16), g_t.to(torch.bfloat16)
        assert opt_np.step([g]) == opt_t.step([g_t]) == 0
    assert (p_np.view(np.uint16) == _bits_torch(p_t)).all()
    assert not (p_np.view(np.uint16) == _values(0).astype(ml_dtypes.bfloat16).view(np.uint16)).all()
    for a, b in zip(opt_np.tensors[0].buffers.values(), opt_t.tensors[0].buffers.values()):
        np.testing.assert_array_equal(np.asarray(a[0]), np.asarray(b[0]))


def test_stochastic_rounding_changes_numpy_bf16_params():
    """stochastic_bf16 reaches the NumPy bfloat16 parameter: its bits differ from nearest rounding's."""
    out = []
    for stochastic in (False, True):
        p = _values(0).astype(ml_dtypes.bfloat16)
        opt = octopt.AdamW([p], lr=1e-3, bits=32, stochastic_bf16=stochastic, seed=1)
        opt.step([_values(1).astype(ml_dtypes.bfloat16)])
        out.append(p.view(np.uint16).copy())
    assert (out[0] != out[1]).sum() > N // 20


def test_uint16_gradient_is_refused():
    p = _values(0).astype(ml_dtypes.bfloat16)
    opt = octopt.Adam([p])
    with pytest.raises(TypeError, match=r"step: argument 'grads\[0\]' must be float32 or the parameter's dtype"):
        opt.step([np.zeros(N, np.uint16)])


def test_float16_gradient_is_refused_for_bf16_param():
    p = _values(0).astype(ml_dtypes.bfloat16)
    opt = octopt.Adam([p])
    with pytest.raises(TypeError, match=r"grads\[0\]"):
        opt.step([np.zeros(N, np.float16)])
