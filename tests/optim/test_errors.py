"""Every bad input raises an error that names the function, the argument and the problem, and a
refused step changes nothing."""

from __future__ import annotations

import math

import numpy as np
import octopt
import pytest


def _p(n=4097):
    return np.zeros(n, np.float32)


def _readonly():
    a = _p()
    a.flags.writeable = False
    return a


# ---------------------------------------------------------------------------------------------
# construction: parameters

PARAM_ERRORS = [
    (
        "int32",
        lambda: [np.zeros(10, np.int32)],
        TypeError,
        r"'params\[0\]' must have dtype float32.*got int32",
    ),
    ("float64", lambda: [np.zeros(10)], TypeError, r"'params\[0\]' must have dtype .*got float64"),
    ("second param", lambda: [_p(), np.zeros(10, np.int64)], TypeError, r"'params\[1\]'.*got int64"),
    ("read-only", lambda: [_readonly()], ValueError, r"'params\[0\]' is read-only"),
    (
        "non-contiguous",
        lambda: [np.zeros((10, 10), np.float32)[:, ::2]],
        ValueError,
        r"'params\[0\]' must be C-contiguous",
    ),
    (
        "not an array",
        lambda: [[1.0, 2.0]],
        TypeError,
        r"'params\[0\]' must be a NumPy, PyTorch or CuPy array",
    ),
    ("empty list", list, ValueError, r"empty parameter list"),
    ("single array", lambda: _p(), TypeError, r"got a single array"),
    ("a dict", lambda: {"params": [_p()]}, TypeError, r"got a dict"),
    ("mixed groups", lambda: [_p(), {"params": [_p()]}], TypeError, r"mixes arrays and param-group dicts"),
]


@pytest.mark.parametrize("what, params, exc, pattern", PARAM_ERRORS, ids=[e[0] for e in PARAM_ERRORS])
def test_bad_params(what, params, exc, pattern):
    with pytest.raises(exc, match=r"^Adam: .*" + pattern):
        octopt.Adam(params(), bits=32)


@pytest.mark.parametrize("dtype", ["int32", "float64", "int64"])
def test_bad_torch_param_dtype(dtype):
    torch = pytest.importorskip("torch")
    with pytest.raises(TypeError, match=rf"'params\[0\]' must have dtype .*got {dtype}"):
        octopt.SGD([torch.zeros(10, dtype=getattr(torch, dtype))])


def test_non_contiguous_torch_param():
    torch = pytest.importorskip("torch")
    with pytest.raises(ValueError, match=r"'params\[0\]' must be C-contiguous"):
        octopt.SGD([torch.zeros(10, 10).T])


def test_same_array_twice():
    a = _p()
    with pytest.raises(ValueError, match=r"'params\[1\]' appears more than once"):
        octopt.Adam([a, a])
    with pytest.raises(ValueError, match=r"'params\[1\]' appears more than once"):
        octopt.Adam([{"params": [a]}, {"params": [a], "lr": 0.1}])


@pytest.mark.parametrize("second", ["reshape", "slice", "offset slice"])
def test_same_memory_through_another_view(second):
    # a view of a parameter is the same memory: it would be stepped twice per step, by two states
    a = np.zeros((64, 64), np.float32)
    view = {"reshape": a.reshape(-1), "slice": a[:32], "offset slice": a[10:20]}[second]
    with pytest.raises(ValueError, match=r"'params\[1\]' .*(overlaps|appears more than once)"):
        octopt.Adam([a, view])


def test_same_torch_memory_through_another_view():
    torch = pytest.importorskip("torch")
    t = torch.zeros(100)
    for other in (t.view(10, 10), t.numpy()):
        with pytest.raises(ValueError, match=r"'params\[1\]' .*(overlaps|appears more than once)"):
            octopt.Adam([t, other])


def test_disjoint_views_are_fine():
    a = np.zeros(8192, np.float32)
    opt = octopt.SGD([a[:4096], a[4096:]], lr=1.0, bits=32)
    opt.step([np.ones(4096, np.float32), np.full(4096, 2.0, np.float32)])
    np.testing.assert_array_equal(a[:4096], -1.0)
    np.testing.assert_array_equal(a[4096:], -2.0)


# ---------------------------------------------------------------------------------------------
# construction: options and hyper-parameters

HP_ERRORS = [
    ("Adam", {"foo": 1}, TypeError, r"unexpected option 'foo'"),
    ("Adam", {"lr": -0.1}, ValueError, r"'lr' must be in >= 0.0, got -0.1"),
    ("Adam", {"lr": math.nan}, ValueError, r"'lr' must be finite, got nan"),
    ("Adam", {"lr": math.inf}, ValueError, r"'lr' must be finite"),
    ("Adam", {"lr": "0.1"}, TypeError, r"'lr' must be a number, got str"),
    ("Adam", {"lr": True}, TypeError, r"'lr' must be a number, got bool"),
    ("Adam", {"betas": (1.0, 0.999)}, ValueError, r"'betas\[0\]' must be in \[0.0, 1.0\), got 1.0"),
    ("Adam", {"betas": (0.9, -0.1)}, ValueError, r"'betas\[1\]' must be in \[0.0, 1.0\), got -0.1"),
    ("Adam", {"betas": (0.9, math.nan)}, ValueError, r"'betas\[1\]' must be finite"),
    ("Adam", {"betas": 0.9}, ValueError, r"'betas' must be a tuple"),
    ("Adam", {"betas": (0.9, 0.99, 0.999)}, ValueError, r"'betas'"),
    ("AdEMAMix", {"betas": (0.9, 0.999)}, ValueError, r"'betas' must be \(beta1, beta2, beta3\)"),
    ("Adam", {"eps": -1e-8}, ValueError, r"'eps'"),
    ("Adam", {"weight_decay": -0.01}, ValueError, r"'weight_decay'"),
    ("Adam", {"bits": 7}, ValueError, r"'bits' must be 32, 8 or 4, got 7"),
    ("Adam", {"bits": 16}, ValueError, r"'bits' must be 32, 8 or 4, got 16"),
    ("Adam", {"bits": True}, ValueError, r"'bits'"),
    ("Adam", {"first_moment_bits": 16}, ValueError, r"'first_moment_bits'"),
    ("Adam", {"state_map": "fp16"}, ValueError, r"'state_map' must be 'dynamic' or 'fp8', got 'fp16'"),
    ("Adam", {"bits": 4, "state_map": "fp8"}, ValueError, r"'state_map' 'fp8' is an 8-bit map, but 'bits' is 4"),
    (
        "Adam",
        {"block_size": 100},
        ValueError,
        r"'block_size' must be a power of two in \[32, 4096\], got 100",
    ),
    ("Adam", {"block_size": 16}, ValueError, r"'block_size'.*got 16"),
    ("Adam", {"block_size": 8192}, ValueError, r"'block_size'.*got 8192"),
    ("Adam", {"min_8bit_size": -1}, ValueError, r"'min_8bit_size'"),
    ("SGD", {"nesterov": True}, ValueError, r"Nesterov momentum requires momentum > 0"),
    ("SGD", {"nesterov": True, "momentum": 0.9, "dampening": 0.1}, ValueError, r"Nesterov.*zero dampening"),
    ("SGD", {"momentum": -0.5}, ValueError, r"'momentum'"),
    ("SGD", {"dampening": 1.5}, ValueError, r"'dampening'"),
    ("RMSprop", {"alpha": 1.0}, ValueError, r"'alpha' must be in \[0, 1\) for RMSprop"),
    ("Adagrad", {"lr_decay": -1.0}, ValueError, r"'lr_decay'"),
    ("Adagrad", {"initial_accumulator_value": -1.0}, ValueError, r"'initial_accumulator_value'"),
    ("LARS", {"eta": -1.0}, ValueError, r"'eta'"),
    ("AdEMAMix", {"t_alpha": -5}, ValueError, r"'t_alpha'"),
    ("Adam", {"percentile": 101}, ValueError, r"'percentile' must be in \[0, 100\]"),
    ("Adam", {"seed": -1}, ValueError, r"'seed'"),
]


@pytest.mark.parametrize(
    "name, kw, exc, pattern",
    HP_ERRORS,
    ids=[f"{e[0]}-{'-'.join(f'{k}={v}' for k, v in e[1].items())}" for e in HP_ERRORS],
)
def test_bad_hyperparameters(name, kw, exc, pattern):
    with pytest.raises(exc, match=rf"^{name}: .*{pattern}"):
        getattr(octopt, name)([_p()], **kw)


def test_bad_group_option():
    with pytest.raises(ValueError, match=r"unknown option 'foo'"):
        octopt.Adam([{"params": [_p()], "foo": 1}])
    with pytest.raises(ValueError, match=r"'lr' must be in >= 0.0, got -1.0"):
        octopt.Adam([{"params": [_p()]}, {"params": [_p()], "lr": -1.0}])
    with pytest.raises(TypeError, match=r"a param group must be a dict with a 'params' key"):
        octopt.Adam([{"lr": 0.1}])


# ---------------------------------------------------------------------------------------------
# step


@pytest.fixture()
def opt_and_params():
    params = [np.linspace(-1, 1, 4097, dtype=np.float32), np.ones((33, 65), np.float32)]
    opt = octopt.Adam(params, lr=1e-2, bits=8, min_8bit_size=0)
    opt.step([np.ones(4097, np.float32), np.ones((33, 65), np.float32)])
    return opt, params


def _g0():
    return np.ones(4097, np.float32)


STEP_ERRORS = [
    ("too few", lambda ps: [_g0()], ValueError, r"expected 2 gradients \(one per parameter\), got 1"),
    (
        "too many",
        lambda ps: [_g0(), np.ones((33, 65), np.float32), _g0()],
        ValueError,
        r"expected 2 gradients",
    ),
    (
        "one array",
        lambda ps: np.ones((2, 4097), np.float32),
        TypeError,
        r"'grads' must be a sequence of arrays",
    ),
    ("size", lambda ps: [_g0(), np.ones(2144, np.float32)], ValueError, r"'grads\[1\]'.*2144.*2145"),
    (
        "shape",
        lambda ps: [_g0(), np.ones((65, 33), np.float32)],
        ValueError,
        r"'grads\[1\]' has shape \(65, 33\) but parameter 1 has shape \(33, 65\)",
    ),
    ("float64", lambda ps: [_g0(), np.ones((33, 65))], TypeError, r"'grads\[1\]' must be float32"),
    ("int", lambda ps: [_g0().astype(np.int32), np.ones((33, 65), np.float32)], TypeError, r"'grads\[0\]'"),
    (
        "float16",
        lambda ps: [_g0().astype(np.float16), np.ones((33, 65), np.float32)],
        TypeError,
        r"'grads\[0\]' must be float32 or the parameter's dtype \(float32\)",
    ),
    ("the param itself", lambda ps: [_g0(), ps[1]], ValueError, r"'grads\[1\]' is the parameter itself"),
    (
        "a view of the param",
        lambda ps: [ps[0][:], np.ones((33, 65), np.float32)],
        ValueError,
        r"'grads\[0\]' is the parameter itself",
    ),
    (
        "non-contiguous",
        lambda ps: [np.ones(8194, np.float32)[::2][:4097], np.ones((33, 65), np.float32)],
        ValueError,
        r"'grads\[0\]' must be C-contiguous",
    ),
    (
        "a list",
        lambda ps: [[1.0] * 4097, np.ones((33, 65), np.float32)],
        TypeError,
        r"'grads\[0\]' must be an array",
    ),
]


@pytest.mark.parametrize("what, grads, exc, pattern", STEP_ERRORS, ids=[e[0] for e in STEP_ERRORS])
def test_bad_step_changes_nothing(opt_and_params, what, grads, exc, pattern, snapshot, assert_snapshots_equal):
    opt, params = opt_and_params
    before = snapshot(opt)
    with pytest.raises(exc, match=r"^step: .*" + pattern):
        opt.step(grads(params))
    assert_snapshots_equal(snapshot(opt), before)
    assert opt.last_skipped_blocks == 0


@pytest.mark.parametrize(
    "key, value, pattern",
    [
        ("lr", -1.0, r"'lr' must be in >= 0.0"),
        ("lr", math.nan, r"'lr' must be finite"),
        ("betas", (0.9, 1.5), r"'betas\[1\]'"),
        ("bogus", 1, r"unknown option 'bogus'"),
    ],
)
def test_bad_hyperparameter_set_between_steps(opt_and_params, key, value, pattern, snapshot, assert_snapshots_equal):
    opt, _params = opt_and_params
    before = snapshot(opt)
    group = opt.param_groups[0]
    old = group.get(key, None)
    group[key] = value
    with pytest.raises(ValueError, match=r"^step: " + pattern):
        opt.step([_g0(), np.ones((33, 65), np.float32)])
    if old is None:  # the snapshot compares the groups too: put the old value back first
        del group[key]
    else:
        group[key] = old
    assert_snapshots_equal(snapshot(opt), before)


def test_torch_grad_errors():
    torch = pytest.importorskip("torch")
    p = torch.zeros(300)
    opt = octopt.Adam([p], bits=32)
    with pytest.raises(TypeError, match=r"'grads\[0\]' must be float32 or the parameter's dtype"):
        opt.step([torch.zeros(300, dtype=torch.float64)])
    with pytest.raises(ValueError, match=r"'grads\[0\]' is the parameter itself"):
        opt.step([p])
    with pytest.raises(ValueError, match=r"'grads\[0\]' must be C-contiguous"):
        opt.step([torch.zeros(600)[::2]])
    assert opt.state_layout()[0]["step"] == 0 and bool((p == 0).all())
