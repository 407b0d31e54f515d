"""The Optimizer API: param groups, hyper-parameters changed between steps, None gradients, state dicts."""

from __future__ import annotations

import copy

import numpy as np
import octopt
import pytest


def _arrays(seed, shapes):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s).astype(np.float32) for s in shapes]


# ---------------------------------------------------------------------------------------------
# param groups

GROUP_SHAPES = ((4097,), (33, 65), (5000,), (6000,))
GROUPS = [
    {"idx": [0], "lr": 1e-2, "betas": (0.8, 0.99), "bits": 8, "block_size": 128},
    {"idx": [1, 2], "lr": 1e-3, "weight_decay": 0.1, "bits": 32},
    {"idx": [3], "bits": 4, "block_size": 64, "eps": 1e-6},
]


def test_param_groups_step_like_separate_optimizers(grad_sequence, assert_params_bit_equal):
    p0 = _arrays(0, GROUP_SHAPES)
    grads = grad_sequence(np.random.default_rng(1), GROUP_SHAPES, 10)
    params = [p.copy() for p in p0]
    groups = [{"params": [params[i] for i in g["idx"]], **{k: v for k, v in g.items() if k != "idx"}} for g in GROUPS]
    # nearest rounding: stochastic rounding keys its random numbers by the tensor's position in the optimizer
    opt = octopt.Adam(groups, lr=5e-3, bits=8, stochastic_rounding=False)
    alone = []
    for g in GROUPS:
        ps = [p0[i].copy() for i in g["idx"]]
        alone.append(
            (
                g["idx"],
                ps,
                octopt.Adam(
                    ps,
                    lr=g.get("lr", 5e-3),
                    stochastic_rounding=False,
                    **{k: v for k, v in g.items() if k not in ("idx", "lr")},
                ),
            )
        )
    for gs in grads:
        opt.step(gs)
        for idx, _, o in alone:
            o.step([gs[i] for i in idx])
    for idx, ps, _ in alone:
        assert_params_bit_equal([params[i] for i in idx], ps)
    layout = opt.state_layout()
    assert [t["slots"]["exp_avg"]["bits"] for t in layout] == [8, 32, 32, 4]
    assert [t["slots"]["exp_avg"]["block_size"] for t in layout] == [128, 256, 256, 64]
    assert opt.param_groups[0]["betas"] == (0.8, 0.99) and opt.param_groups[2]["lr"] == 5e-3


def test_param_groups_match_torch_groups(grad_sequence):
    torch = pytest.importorskip("torch")
    p0 = _arrays(2, GROUP_SHAPES[:3])
    grads = grad_sequence(np.random.default_rng(3), GROUP_SHAPES[:3], 100)
    params = [p.copy() for p in p0]
    spec = [{"lr": 1e-2, "betas": (0.8, 0.99)}, {"lr": 3e-3, "weight_decay": 0.1, "eps": 1e-6}]
    opt = octopt.Adam([{"params": params[:1], **spec[0]}, {"params": params[1:], **spec[1]}], bits=32)
    ref = [torch.tensor(p) for p in p0]
    ref_opt = torch.optim.Adam([{"params": ref[:1], **spec[0]}, {"params": ref[1:], **spec[1]}], foreach=False)
    for gs in grads:
        opt.step(gs)
        for r, g in zip(ref, gs):
            r.grad = torch.from_numpy(g)
        ref_opt.step()
    for p, r, z in zip(params, ref, p0):
        want = r.double().numpy()
        assert np.abs(p - want).max() <= 1e-5 * np.abs(want - z).max()


def test_add_param_group():
    a, b = _arrays(4, ((300,), (400,)))
    opt = octopt.SGD([a], lr=0.1, bits=32)
    opt.add_param_group({"params": [b], "lr": 0.5})
    assert len(opt.param_groups) == 2 and opt.param_groups[1]["lr"] == 0.5
    a0, b0 = a.copy(), b.copy()
    opt.step([np.ones(300, np.float32), np.ones(400, np.float32)])
    np.testing.assert_array_equal(a, a0 - np.float32(0.1))
    np.testing.assert_array_equal(b, b0 - np.float32(0.5))


# ---------------------------------------------------------------------------------------------
# hyper-parameters changed between steps


@pytest.mark.parametrize("name", ["Adam", "SGD", "RMSprop"])
def test_lr_and_betas_changed_between_steps_take_effect(name, grad_sequence):
    torch = pytest.importorskip("torch")
    kw = {"Adam": {}, "SGD": {"momentum": 0.9}, "RMSprop": {"momentum": 0.5}}[name]
    p0 = _arrays(5, ((4097,),))
    grads = grad_sequence(np.random.default_rng(6), ((4097,),), 100)
    p = p0[0].copy()
    opt = getattr(octopt, name)([p], lr=1e-2, bits=32, **kw)
    r = torch.tensor(p0[0])
    ref_opt = getattr(torch.optim, name)([r], lr=1e-2, foreach=False, **kw)
    for t, gs in enumerate(grads):
        lr = 1e-2 * (0.5 + 0.5 * np.cos(np.pi * t / 100))  # a cosine schedule
        opt.param_groups[0]["lr"] = lr
        ref_opt.param_groups[0]["lr"] = lr
        if name == "Adam" and t == 50:
            opt.param_groups[0]["betas"] = (0.5, 0.9)
            ref_opt.param_groups[0]["betas"] = (0.5, 0.9)
        opt.step(gs)
        r.grad = torch.from_numpy(gs[0])
        ref_opt.step()
    want = r.double().numpy()
    assert np.abs(p - want).max() <= 1e-5 * np.abs(want - p0[0]).max()


def test_zero_lr_freezes_params():
    p = _arrays(7, ((4097,),))[0]
    opt = octopt.SGD([p], lr=0.1, momentum=0.9, bits=8)
    opt.step([np.ones(4097, np.float32)])
    opt.param_groups[0]["lr"] = 0.0
    frozen = p.copy()
    opt.step([np.ones(4097, np.float32)])
    np.testing.assert_array_equal(p, frozen)


# ---------------------------------------------------------------------------------------------
# None gradients


@pytest.mark.parametrize("name, kw", [("Adam", {}), ("SGD", {"momentum": 0.9}), ("Adagrad", {"lr_decay": 0.1})])
def test_none_grads_match_torch(name, kw, grad_sequence):
    torch = pytest.importorskip("torch")
    shapes = ((4097,), (33, 65))
    p0 = _arrays(8, shapes)
    grads = grad_sequence(np.random.default_rng(9), shapes, 60)
    params = [p.copy() for p in p0]
    opt = getattr(octopt, name)(params, lr=1e-2, bits=32, **kw)
    ref = [torch.tensor(p) for p in p0]
    ref_opt = getattr(torch.optim, name)(ref, lr=1e-2, foreach=False, **kw)
    for t, gs in enumerate(grads):
        gs = [None if (i == 1 and t < 20) or (i == 0 and t % 3 == 0) else g for i, g in enumerate(gs)]
        opt.step(gs)
        for r, g in zip(ref, gs):
            r.grad = None if g is None else torch.from_numpy(g)
        ref_opt.step()
    assert [t["step"] for t in opt.state_layout()] == [40, 40]
    for p, r, z in zip(params, ref, p0):
        want = r.double().numpy()
        assert np.abs(p - want).max() <= 1e-5 * np.abs(want - z).max()


def test_none_grad_leaves_that_param_and_its_state_untouched(grad_sequence, state_arrays):
    shapes = ((4097,), (5000,))
    p0 = _arrays(10, shapes)
    grads = grad_sequence(np.random.default_rng(11), shapes, 6)
    params = [p.copy() for p in p0]
    opt = octopt.Adam(params, lr=1e-2, bits=8)
    state0 = state_arrays(opt)
    for gs in grads[:5]:
        assert opt.step([gs[0], None]) == 0
    np.testing.assert_array_equal(params[1], p0[1])
    for k, v in state_arrays(opt).items():
        if k.startswith("1."):
            np.testing.assert_array_equal(v, state0[k], err_msg=k)
    assert [t["step"] for t in opt.state_layout()] == [5, 0]
    # its first real step is a first step (bias correction of step 1), like a fresh optimizer's
    opt.step([grads[5][0], grads[5][1]])
    fresh = p0[1].copy()
    octopt.Adam([fresh], lr=1e-2, bits=8).step([grads[5][1]])
    np.testing.assert_array_equal(params[1], fresh)


# ---------------------------------------------------------------------------------------------
# state dicts

ROUND_TRIPS = [
    ("Adam", {"lr": 1e-2, "bits": 8}, "numpy"),
    ("Adam", {"lr": 1e-2, "bits": 4, "stochastic_rounding": True, "seed": 3}, "numpy"),
    ("Adam", {"lr": 1e-2, "bits": 8, "stochastic_rounding": True}, "torch"),
    ("SGD", {"lr": 1e-2, "momentum": 0.9, "bits": 8}, "numpy"),
    ("AdEMAMix", {"lr": 1e-2, "bits": 8, "t_alpha": 8, "t_beta3": 8}, "numpy"),
    ("LAMB", {"lr": 1e-2, "bits": 4}, "torch"),
    ("RMSprop", {"lr": 1e-3, "momentum": 0.9, "centered": True, "bits": 32}, "numpy"),
]


def _groups_for(params, kw):
    # two groups: the second with other bits, so a round trip covers mixed layouts
    other = dict(kw, bits=32 if kw["bits"] != 32 else 8, lr=kw["lr"] / 2)
    return [{"params": params[:1], **kw}, {"params": params[1:], **other}]


@pytest.mark.parametrize("case", ROUND_TRIPS, ids=[f"{c[0]}-{c[1]['bits']}bit-{c[2]}" for c in ROUND_TRIPS])
def test_state_dict_round_trip_continues_bit_identically(
    case, grad_sequence, assert_params_bit_equal, assert_snapshots_equal, make, snapshot, to_numpy
):
    name, kw, framework = case
    if framework == "torch":
        pytest.importorskip("torch")
    shapes = ((4097,), (5000,), (33, 65))
    grads = grad_sequence(np.random.default_rng(12), shapes, 10)
    cls = getattr(octopt, name)
    opt_kw = {k: v for k, v in kw.items() if k in ("stochastic_rounding", "seed")}
    group_kw = {k: v for k, v in kw.items() if k not in opt_kw}
    params = [make(p, framework) for p in _arrays(13, shapes)]
    opt = cls(_groups_for(params, group_kw), **opt_kw)
    for gs in grads[:5]:
        opt.step([make(g, framework) for g in gs])
    sd = opt.state_dict()
    resumed_params = [make(to_numpy(p), framework) for p in params]
    for gs in grads[5:]:
        opt.step([make(g, framework) for g in gs])

    resumed = cls(_groups_for(resumed_params, group_kw), **opt_kw)
    resumed.load_state_dict(sd)
    for gs in grads[5:]:
        resumed.step([make(g, framework) for g in gs])
    assert_params_bit_equal(resumed_params, params)
    assert_snapshots_equal(snapshot(resumed), snapshot(opt))


def _adam_stepped_three_times(grad_sequence, seed: int, steps: int) -> tuple:
    """(grads, params, optimizer) of an 8-bit Adam after three of `steps` gradient steps; the first tensor keeps
    32-bit state (below min_8bit_size), the second 8-bit."""
    shapes = ((3000,), (5000,))
    grads = grad_sequence(np.random.default_rng(seed), shapes, steps)
    params = _arrays(seed + 1, shapes)
    opt = octopt.Adam(params, lr=1e-2, bits=8)
    for gs in grads[:3]:
        opt.step(gs)
    return grads, params, opt


def test_state_dict_with_float64_32_bit_slots_continues_bit_identically(grad_sequence, assert_params_bit_equal):
    """A state dict whose 32-bit slots went through float64 (a float32 value survives it exactly) loads through the
    core's slot conversion and continues the run bit for bit; the 8-bit slots' codes stay uint8."""
    grads, params, opt = _adam_stepped_three_times(grad_sequence, 21, 6)
    sd = opt.state_dict()
    widened = 0
    for entry in sd["state"]:
        for slot in entry["slots"].values():
            if slot["bits"] == 32:
                slot["data"] = slot["data"].astype(np.float64)
                widened += 1
    assert widened == 2
    resumed_params = [p.copy() for p in params]
    for gs in grads[3:]:
        opt.step(gs)
    resumed = octopt.Adam(resumed_params, lr=1e-2, bits=8)
    resumed.load_state_dict(sd)
    for gs in grads[3:]:
        resumed.step(gs)
    assert_params_bit_equal(resumed_params, params)


def test_state_dict_is_a_copy(snapshot, assert_snapshots_equal):
    p = _arrays(14, ((4097,),))[0]
    opt = octopt.Adam([p], lr=1e-2, bits=8)
    opt.step([np.ones(4097, np.float32)])
    sd = opt.state_dict()
    kept = copy.deepcopy(sd)
    opt.step([np.ones(4097, np.float32)])  # stepping does not write into an earlier state dict
    np.testing.assert_array_equal(
        sd["state"][0]["slots"]["exp_avg"]["data"], kept["state"][0]["slots"]["exp_avg"]["data"]
    )
    before = snapshot(opt)
    sd["state"][0]["slots"]["exp_avg"]["data"][:] = 0  # nor does editing the dict change the optimizer
    sd["param_groups"][0]["lr"] = 123.0
    assert_snapshots_equal(snapshot(opt), before)


def test_load_state_dict_restores_hyperparameters():
    a, b = _arrays(15, ((300,), (300,)))
    src = octopt.Adam([a], lr=0.05, betas=(0.7, 0.9), bits=32)
    dst = octopt.Adam([b], lr=1e-3, bits=32)
    dst.load_state_dict(src.state_dict())
    assert dst.param_groups[0]["lr"] == 0.05 and tuple(dst.param_groups[0]["betas"]) == (0.7, 0.9)


def _mutations():
    """(description, function that edits a valid state dict into an incompatible one, message pattern)."""

    def other_kind(sd):
        sd["optimizer"] = "sgd"

    def fewer_tensors(sd):
        sd["state"].pop()

    def other_size(sd):
        sd["state"][1]["numel"] = 5001

    def wrong_slot_bits(sd):
        sd["state"][1]["slots"]["exp_avg"]["bits"] = 4

    def wrong_group_bits(sd):
        sd["param_groups"][0]["bits"] = 4

    def missing_slot(sd):
        del sd["state"][1]["slots"]["exp_avg_sq"]

    def short_codes(sd):
        e = sd["state"][1]["slots"]["exp_avg_sq"]
        e["data"] = e["data"][:-1]

    def wrong_dtype(sd):
        e = sd["state"][1]["slots"]["exp_avg"]
        e["data"] = e["data"].astype(np.int8)

    def missing_absmax(sd):
        del sd["state"][1]["slots"]["exp_avg"]["absmax"]

    def negative_absmax(sd):
        sd["state"][1]["slots"]["exp_avg"]["absmax"][2] = -1.0

    def bad_lr(sd):
        sd["param_groups"][0]["lr"] = -1.0

    def bad_step(sd):
        sd["state"][0]["step"] = -3

    def not_a_state_dict(sd):
        sd.pop("state")

    return [
        ("other optimizer", other_kind, r"'sgd'.*'adam'"),
        ("fewer tensors", fewer_tensors, r"1 tensors.*2 parameters"),
        ("other size", other_size, r"5001 elements"),
        ("slot bits", wrong_slot_bits, r"bits=4.*8"),
        ("group bits", wrong_group_bits, r"bits=4.*8"),
        ("missing slot", missing_slot, r"slots"),
        ("short codes", short_codes, r"'exp_avg_sq' must hold 5000 uint8 codes \(8-bit\), got 4999 of uint8"),
        ("code dtype", wrong_dtype, r"'exp_avg' must hold 5000 uint8 codes \(8-bit\), got 5000 of int8"),
        ("missing absmax", missing_absmax, r"absmax is missing"),
        ("negative absmax", negative_absmax, r"'exp_avg absmax' holds a negative scale, -1.000000 for block 2"),
        ("negative lr", bad_lr, r"'lr'"),
        ("negative step", bad_step, r"step count"),
        ("not a state dict", not_a_state_dict, r"state_dict\(\)"),
    ]


@pytest.mark.parametrize("what, mutate, pattern", _mutations(), ids=[m[0] for m in _mutations()])
def test_load_state_dict_mismatch_raises_and_changes_nothing(
    what, mutate, pattern, grad_sequence, snapshot, assert_snapshots_equal
):
    grads, src_params, src = _adam_stepped_three_times(grad_sequence, 16, 4)
    shapes = [p.shape for p in src_params]
    sd = src.state_dict()
    mutate(sd)

    params = _arrays(18, shapes)
    opt = octopt.Adam(params, lr=3e-3, bits=8)
    opt.step(grads[0])
    before = snapshot(opt)
    with pytest.raises(ValueError, match=pattern):
        opt.load_state_dict(sd)
    assert_snapshots_equal(snapshot(opt), before)
    assert opt.param_groups[0]["lr"] == 3e-3


def test_load_state_dict_of_other_sizes_raises():
    src = octopt.Adam([np.zeros(5000, np.float32)], bits=8)
    dst = octopt.Adam([np.zeros(6000, np.float32)], bits=8)
    with pytest.raises(ValueError, match=r"5000 elements.*6000"):
        dst.load_state_dict(src.state_dict())
