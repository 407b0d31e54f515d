"""Half-precision parameters (fp16, bf16) with gradients of the parameter's dtype or float32.

A half-precision step is the float32 step of the widened parameter, rounded to nearest even on the
way back. A float32 "shadow" optimizer that is handed the widened values before every step therefore
predicts the half-precision parameter bit for bit, over many steps (its state stays identical).
"""

from __future__ import annotations

import numpy as np
import octopt
import pytest


CASES = [
    ("Adam", {"lr": 1e-2, "weight_decay": 0.01}, 32),
    ("Adam", {"lr": 1e-2}, 8),
    ("AdamW", {"lr": 1e-2}, 4),
    ("SGD", {"lr": 1e-2, "momentum": 0.9, "nesterov": True}, 8),
    ("LAMB", {"lr": 1e-2, "weight_decay": 0.01}, 32),
    ("Lion", {"lr": 1e-3}, 8),
]

# (framework, param dtype, grad dtype)
KINDS = [
    ("torch", "bfloat16", "bfloat16"),
    ("torch", "bfloat16", "float32"),
    ("torch", "float16", "float16"),
    ("torch", "float16", "float32"),
    ("numpy", "float16", "float16"),
    ("numpy", "float16", "float32"),
]


def _narrow(make, values: np.ndarray, framework: str, dtype: str):
    """float32 values rounded to `dtype` (nearest even), as an array of that framework."""
    return make(values, framework, dtype)


@pytest.mark.parametrize("kind", KINDS, ids=["-".join(k) for k in KINDS])
@pytest.mark.parametrize("case", CASES, ids=[f"{c[0]}-{c[2]}bit" for c in CASES])
def test_half_params_step_like_float32_then_round(case, kind, grad_sequence, to_numpy, raw, make):
    framework, pdtype, gdtype = kind
    if framework == "torch":
        pytest.importorskip("torch")
    name, kw, bits = case
    rng = np.random.default_rng(11)
    shapes = ((4097,), (40, 70))
    p0 = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    grads = grad_sequence(rng, shapes, 30)
    params = [_narrow(make, p, framework, pdtype) for p in p0]
    shadow = [to_numpy(p).astype(np.float32) for p in params]
    opt = getattr(octopt, name)(params, bits=bits, **kw)
    ref = getattr(octopt, name)(shadow, bits=bits, **kw)
    moved = False
    for gs in grads:
        g_half = [_narrow(make, g, framework, gdtype) for g in gs]
        for s, p in zip(shadow, params):
            s[...] = to_numpy(p)  # exact: every fp16/bf16 value is a float32
        before = [raw(p) for p in params]
        opt.step(g_half)
        ref.step([to_numpy(g).astype(np.float32) for g in g_half])
        for i, (p, s) in enumerate(zip(params, shadow)):
            np.testing.assert_array_equal(raw(p), raw(_narrow(make, s, framework, pdtype)), err_msg=f"param {i}")
            moved |= not np.array_equal(before[i], raw(p))
    assert moved
    # the state is float32 (or codes) whatever the parameter's dtype
    for slot in opt.state_dict()["state"][0]["slots"].values():
        assert str(slot["data"].dtype).removeprefix("torch.") == ("float32" if slot["bits"] == 32 else "uint8")


@pytest.mark.parametrize(
    "framework, pdtype, gdtype",
    [
        ("torch", "float16", "bfloat16"),
        ("torch", "bfloat16", "float16"),
        ("torch", "float32", "float16"),
        ("torch", "float32", "bfloat16"),
        ("torch", "float16", "float64"),
        ("numpy", "float16", "float64"),
        ("numpy", "float32", "float16"),
        ("numpy", "float32", "float64"),
    ],
)
def test_grad_of_another_dtype_raises(framework, pdtype, gdtype, make, raw):
    if framework == "torch":
        pytest.importorskip("torch")
    p = make(np.ones(300, np.float32), framework, pdtype)
    opt = octopt.Adam([p], lr=0.1, bits=32)
    before = raw(p)
    g = make(np.ones(300, np.float32), framework, gdtype)
    with pytest.raises(TypeError, match=rf"grads\[0\].*float32 or the parameter's dtype \({pdtype}\)"):
        opt.step([g])
    np.testing.assert_array_equal(raw(p), before)
    assert opt.state_layout()[0]["step"] == 0
