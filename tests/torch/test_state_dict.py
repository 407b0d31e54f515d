"""octopt.torch state dicts: torch's format, round trips through torch.save/torch.load(weights_only=True),
import of torch.optim and bitsandbytes state dicts (both of bitsandbytes' layouts)."""

from __future__ import annotations

import copy
import importlib
import io

import octopt
import pytest

torch = pytest.importorskip("torch")
ot = pytest.importorskip("octopt.torch")

SHAPES = ((33, 130), (4097,), (7,), (64, 80))
NESTED = "__bnb_optimizer_quant_state__"  # where bitsandbytes >= 0.45 puts its quantization tensors


def make_params(seed: int = 0) -> list:
    g = torch.Generator().manual_seed(seed)
    return [torch.nn.Parameter(torch.randn(s, generator=g)) for s in SHAPES]


def set_grads(step: int, params: list) -> None:
    g = torch.Generator().manual_seed(500 + step)
    for p in params:
        p.grad = torch.randn(p.shape, generator=g)


def build(params: list, **kw) -> ot.AdamW8bit:
    # three layouts: 8-bit (default), 4-bit with its own block size, and 32-bit
    return ot.AdamW8bit(
        [
            {"params": params[:2]},
            {"params": params[2:3], "bits": 32},
            {"params": params[3:], "bits": 4, "block_size": 64, "lr": 5e-3},
        ],
        lr=1e-2,
        **kw,
    )


def roundtrip(sd: dict) -> dict:
    buf = io.BytesIO()
    torch.save(sd, buf)
    buf.seek(0)
    return torch.load(buf, weights_only=True, map_location="cpu")


def test_state_dict_format():
    params = make_params()
    opt = build(params)
    set_grads(0, params)
    opt.step()
    sd = opt.state_dict()
    assert set(sd) == {"state", "param_groups", "octopt"}
    assert sorted(sd["state"]) == [0, 1, 2, 3]
    s0 = sd["state"][0]
    assert s0["step"].dtype == torch.float32 and float(s0["step"]) == 1.0
    assert s0["exp_avg"].dtype == torch.uint8 and s0["exp_avg"].shape == (33, 130)
    assert s0["exp_avg_absmax"].dtype == torch.float32 and s0["exp_avg_absmax"].shape == (-(-33 * 130 // 256),)
    assert sd["state"][2]["exp_avg"].dtype == torch.float32 and "exp_avg_absmax" not in sd["state"][2]
    assert sd["state"][3]["exp_avg_sq"].shape == (64 * 80 // 2,)  # 4-bit: two codes per byte
    assert sd["state"][3]["exp_avg_absmax"].shape == (64 * 80 // 64,)
    assert [g["params"] for g in sd["param_groups"]] == [[0, 1], [2], [3]]
    assert sd["param_groups"][2]["lr"] == 5e-3
    assert sd["octopt"]["layout"][3] == {"exp_avg": [4, 64, "dynamic"], "exp_avg_sq": [4, 64, "dynamic"]}


@pytest.mark.parametrize("stochastic", (False, True))
def test_round_trip_through_torch_save_continues_bit_identically(stochastic):
    params = make_params()
    opt = build(params, stochastic_rounding=stochastic, seed=7)
    sched = torch.optim.lr_scheduler.ExponentialLR(opt, gamma=0.9)
    for step in range(3):
        set_grads(step, params)
        opt.step()
        sched.step()
    sd = roundtrip(opt.state_dict())
    twins = [torch.nn.Parameter(p.detach().clone()) for p in params]
    opt2 = build(twins, stochastic_rounding=stochastic, seed=7)
    opt2.load_state_dict(sd)
    assert [g["lr"] for g in opt2.param_groups] == [g["lr"] for g in opt.param_groups]
    for step in range(3, 6):
        set_grads(step, params)
        set_grads(step, twins)
        opt.step()
        opt2.step()
    for a, b in zip(params, twins):
        assert torch.equal(a.detach(), b.detach())
    for a, b in zip(params, twins):
        for k, v in opt.state[a].items():
            assert torch.equal(v, opt2.state[b][k]), k


def test_load_changes_nothing_on_error():
    params = make_params()
    opt = build(params)
    set_grads(0, params)
    opt.step()
    good = copy.deepcopy(opt.state_dict())
    before = {k: v.clone() for k, v in opt.state[params[0]].items()}
    fn = "AdamW8bit.load_state_dict"

    def bad(edit, match):
        sd = copy.deepcopy(good)
        edit(sd)
        with pytest.raises(ValueError, match=match):
            opt.load_state_dict(sd)
        assert all(torch.equal(opt.state[params[0]][k], v) for k, v in before.items())

    bad(lambda sd: sd["param_groups"].pop(), f"{fn}: the state has 2 param groups but this optimizer has 3")
    bad(lambda sd: sd["param_groups"][0]["params"].pop(), f"{fn}: param group 0 has 1 parameters in the state")
    bad(lambda sd: sd["octopt"].update(optimizer="sgd"), "the state is for optimizer 'sgd'")
    bad(
        lambda sd: sd["state"][1].update(step=torch.tensor(-1.0)),
        f"{fn}: the state of parameter 1 has a bad 'step'",
    )
    bad(lambda sd: sd["state"][0].update(momentum_buffer=torch.zeros(3)), r"entries \['momentum_buffer'\]")
    bad(
        lambda sd: sd["state"][0].update(exp_avg=torch.zeros(5, dtype=torch.uint8)),
        "must hold 4290 uint8 codes",
    )
    bad(lambda sd: sd["state"][0].update(exp_avg_absmax=torch.zeros(3)), "absmax must hold 17 float32 values")
    bad(lambda sd: sd["param_groups"][1].update(lr=-1.0), f"{fn}: param group 1: 'lr' must be")
    bad(
        lambda sd: sd["state"][2].update(exp_avg=torch.full((7,), float("nan"), dtype=torch.float64)[:3]),
        "must hold 7 floating-point values",
    )
    with pytest.raises(TypeError, match=f"{fn}: argument 'state_dict' must be a dict"):
        opt.load_state_dict({"state": []})


def test_state_dict_hooks_run():
    params = make_params()
    opt = build(params)
    calls = []
    opt.register_state_dict_pre_hook(lambda o: calls.append("pre"))
    opt.register_state_dict_post_hook(lambda o, sd: {**sd, "extra": 1})
    opt.register_load_state_dict_pre_hook(lambda o, sd: calls.append("load_pre"))
    opt.register_load_state_dict_post_hook(lambda o: calls.append("load_post"))
    sd = opt.state_dict()
    assert sd["extra"] == 1
    opt.load_state_dict(sd)
    assert calls == ["pre", "load_pre", "load_post"]


def test_missing_entries_reset_the_state():
    params = make_params()
    opt = build(params)
    fresh = {k: v.clone() for k, v in opt.state[params[0]].items()}
    set_grads(0, params)
    opt.step()
    sd = copy.deepcopy(opt.state_dict())
    del sd["state"][0]
    opt.load_state_dict(sd)
    assert all(torch.equal(opt.state[params[0]][k], v) for k, v in fresh.items())
    assert int(opt.state[params[1]]["step"]) == 1


def test_torch_optim_state_loads_into_8bit_and_32bit():
    params = make_params()
    ref = torch.optim.AdamW(params, lr=1e-2)
    for step in range(3):
        set_grads(step, params)
        ref.step()
    sd = roundtrip(ref.state_dict())
    # 32-bit: the same state, so the continuation matches torch to float32 rounding
    twins = [torch.nn.Parameter(p.detach().clone()) for p in params]
    opt32 = ot.AdamW(twins, lr=1e-2)
    opt32.load_state_dict(sd)
    assert torch.equal(opt32.state[twins[0]]["exp_avg"], ref.state[params[0]]["exp_avg"])
    # 8-bit: quantized on load
    twins8 = [torch.nn.Parameter(p.detach().clone()) for p in params]
    opt8 = ot.AdamW8bit(twins8, lr=1e-2)
    opt8.load_state_dict(sd)
    st = opt8.state[twins8[0]]
    deq = octopt.dequantize_blockwise(st["exp_avg"], st["exp_avg_absmax"], block_size=256)
    torch.testing.assert_close(
        deq, ref.state[params[0]]["exp_avg"], atol=2e-2 * float(st["exp_avg_absmax"].max()), rtol=0
    )
    assert int(st["step"]) == 3
    set_grads(3, params)
    set_grads(3, twins)
    ref.step()
    opt32.step()
    for a, b in zip(params, twins):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)
    # and the other way: octopt's 32-bit state dict is torch's
    back = torch.optim.AdamW([torch.nn.Parameter(p.detach().clone()) for p in params], lr=1e-2)
    back.load_state_dict(roundtrip(opt32.state_dict()))


def test_8bit_state_loads_into_a_32bit_optimizer():
    params = make_params()
    opt8 = ot.AdamW8bit(params, lr=1e-2)
    for step in range(2):
        set_grads(step, params)
        opt8.step()
    opt32 = ot.AdamW([torch.nn.Parameter(p.detach().clone()) for p in params], lr=1e-2)
    opt32.load_state_dict(roundtrip(opt8.state_dict()))
    st8, st32 = opt8.state[params[0]], opt32.state[opt32.param_groups[0]["params"][0]]
    assert torch.equal(octopt.dequantize_blockwise(st8["exp_avg"], st8["exp_avg_absmax"]), st32["exp_avg"])


# -- bitsandbytes -------------------------------------------------------------------------------


@pytest.fixture(scope="module", params=("fixture", "live"))
def bnb_cases(request, make_bnb_state):
    """bitsandbytes' runs: from the stored fixture (made by data/make_bnb_state.py), and live when
    bitsandbytes imports."""
    if request.param == "fixture":
        return torch.load(make_bnb_state.FIXTURE, weights_only=True)
    try:
        importlib.import_module("bitsandbytes")
    except Exception as e:  # noqa: BLE001 - a broken install counts as missing
        pytest.skip(f"bitsandbytes is not importable: {e}")
    return {name: make_bnb_state.run_bnb(name) for name in make_bnb_state.CASES}


def _flat(sd: dict) -> dict:
    """The layout of bitsandbytes before 0.45: quantization tensors next to 'step'."""
    out = {"state": {}, "param_groups": sd["param_groups"]}
    for k, v in sd["state"].items():
        e = {kk: vv for kk, vv in v.items() if kk != NESTED}
        e.update(v.get(NESTED, {}))
        out["state"][k] = e
    return out


def _continue(make_bnb_state, name: str, case: dict, sd: dict) -> list:
    params = [torch.nn.Parameter(p.clone()) for p in case["params_at_save"]]
    opt = getattr(ot, name)(params, **make_bnb_state.CASES[name])
    opt.load_state_dict(sd)
    for step in range(make_bnb_state.STEPS_BEFORE, make_bnb_state.STEPS_BEFORE + make_bnb_state.STEPS_AFTER):
        for p, g in zip(params, make_bnb_state.gradient(step, params)):
            p.grad = g
        opt.step()
    return params, opt


@pytest.mark.parametrize("layout", ("nested", "flat"))
@pytest.mark.parametrize("name", ["Adam8bit", "AdamW8bit"])  # the CASES of data/make_bnb_state.py
def test_bitsandbytes_state_imports_and_continues_like_bitsandbytes(bnb_cases, name, layout, make_bnb_state):
    case = bnb_cases[name]
    sd = case["state_dict"] if layout == "nested" else _flat(case["state_dict"])
    entry = case["state_dict"]["state"][0]
    if layout == "nested":
        assert NESTED in entry  # what bitsandbytes >= 0.45 writes
    params, opt = _continue(make_bnb_state, name, case, roundtrip(sd))
    # the 8-bit state was taken over as it is: same maps, same blocks of 256
    q = entry[NESTED]
    assert torch.equal(q["qmap1"], torch.from_numpy(octopt.dynamic_map(True)))
    assert torch.equal(q["qmap2"], torch.from_numpy(octopt.dynamic_map(False)))
    assert opt.state_layout()[0]["slots"]["exp_avg"] == {
        "bits": 8,
        "block_size": 256,
        "map": "dynamic_signed_8",
    }
    assert opt.state_layout()[1]["slots"]["exp_avg"]["bits"] == 32  # bitsandbytes keeps small tensors in 32 bits
    for p, after, at_save in zip(params, case["params_after"], case["params_at_save"]):
        moved = (after - at_save).norm()
        assert (p.detach() - after).norm() <= 1e-2 * moved  # within 1% of bitsandbytes' own continuation
    # ... and much closer than a continuation from a fresh state
    fresh = [torch.nn.Parameter(p.clone()) for p in case["params_at_save"]]
    opt_fresh = getattr(ot, name)(fresh, **make_bnb_state.CASES[name])
    for step in range(make_bnb_state.STEPS_BEFORE, make_bnb_state.STEPS_BEFORE + make_bnb_state.STEPS_AFTER):
        for p, g in zip(fresh, make_bnb_state.gradient(step, fresh)):
            p.grad = g
        opt_fresh.step()
    after = case["params_after"][0]
    assert (fresh[0].detach() - after).norm() > 10 * (params[0].detach() - after).norm()


def test_bitsandbytes_import_right_after_load_holds_the_same_codes(bnb_cases, make_bnb_state):
    case = bnb_cases["AdamW8bit"]
    params = [torch.nn.Parameter(p.clone()) for p in case["params_at_save"]]
    opt = ot.AdamW8bit(params, **make_bnb_state.CASES["AdamW8bit"])
    opt.load_state_dict(case["state_dict"])
    st, q = opt.state[params[0]], case["state_dict"]["state"][0][NESTED]
    for mine, theirs in (
        ("exp_avg", "state1"),
        ("exp_avg_absmax", "absmax1"),
        ("exp_avg_sq", "state2"),
        ("exp_avg_sq_absmax", "absmax2"),
    ):
        assert torch.equal(st[mine], q[theirs]), mine
    assert int(st["step"]) == make_bnb_state.STEPS_BEFORE
    assert opt.param_groups[0]["weight_decay"] == 0.1 and "t_alpha" not in opt.param_groups[0]


def test_bitsandbytes_import_into_other_layouts_and_errors(bnb_cases, make_bnb_state):
    case = bnb_cases["AdamW8bit"]
    sd = case["state_dict"]
    # into 4-bit state: dequantized with bitsandbytes' map, requantized
    params = [torch.nn.Parameter(p.clone()) for p in case["params_at_save"]]
    opt4 = ot.AdamW(params, bits=4, min_8bit_size=0, **make_bnb_state.CASES["AdamW8bit"])
    opt4.load_state_dict(sd)
    assert opt4.state_layout()[1]["slots"]["exp_avg"]["bits"] == 4
    with pytest.raises(ValueError, match="saved by a different optimizer"):
        ot.Lion8bit([torch.nn.Parameter(p.clone()) for p in case["params_at_save"]]).load_state_dict(sd)
    broken = copy.deepcopy(_flat(sd))
    del broken["state"][0]["absmax1"]
    with pytest.raises(ValueError, match="has 8-bit 'state1' but neither 'absmax1' nor 'max1'"):
        ot.AdamW8bit([torch.nn.Parameter(p.clone()) for p in case["params_at_save"]]).load_state_dict(broken)
    broken = copy.deepcopy(_flat(sd))
    broken["state"][0]["qmap1"] = torch.flip(broken["state"][0]["qmap1"], (0,))
    with pytest.raises(ValueError, match="qmap1"):
        ot.AdamW8bit([torch.nn.Parameter(p.clone()) for p in case["params_at_save"]]).load_state_dict(broken)


def test_bitsandbytes_adam_with_weight_decay_warns():
    sd = {
        "state": {0: {"step": 1, "state1": torch.zeros(10), "state2": torch.zeros(10)}},
        "param_groups": [
            {
                "lr": 1e-3,
                "betas": (0.9, 0.999),
                "eps": 1e-8,
                "weight_decay": 0.1,
                "alpha": 0.0,
                "t_alpha": None,
                "t_beta3": None,
                "params": [0],
            }
        ],
    }
    opt = ot.Adam8bit([torch.nn.Parameter(torch.zeros(10))])
    with pytest.warns(UserWarning, match="decoupled"):
        opt.load_state_dict(sd)


def test_fp8_state_map_round_trips_through_torch_save():
    """state_map="fp8": the state dict records the map per slot (and the group key), so a load restores the
    codes as they are, and a load into the dynamic maps decodes them with the fp8 map first."""
    a_params, b_params = make_params(), make_params()
    a = ot.AdamW(a_params, bits=8, state_map="fp8")
    for s in range(3):
        set_grads(s, a_params)
        a.step()
    buf = io.BytesIO()
    torch.save(a.state_dict(), buf)
    buf.seek(0)
    sd = torch.load(buf, weights_only=True)
    assert sd["param_groups"][0]["state_map"] == "fp8"
    assert sd["octopt"]["layout"][1]["exp_avg_sq"] == [8, 256, "fp8"]
    b = ot.AdamW(b_params, bits=8, state_map="fp8")
    b.load_state_dict(sd)
    with torch.no_grad():
        for pa, pb in zip(a_params, b_params):
            pb.copy_(pa)
    for s in range(3, 5):
        set_grads(s, a_params)
        set_grads(s, b_params)
        a.step()
        b.step()
    assert all(torch.equal(pa, pb) for pa, pb in zip(a_params, b_params))
    # the group's layout is this optimizer's; the state is converted through float32
    c = ot.AdamW(make_params(), bits=8)
    c.load_state_dict(sd)
    assert c.param_groups[0]["state_map"] == "dynamic"
    p1 = c.param_groups[0]["params"][1]
    want = octopt.dequantize_blockwise(
        sd["state"][1]["exp_avg_sq"], sd["state"][1]["exp_avg_sq_absmax"], qmap=octopt.fp8_map()
    )
    got = octopt.dequantize_blockwise(
        c.state[p1]["exp_avg_sq"], c.state[p1]["exp_avg_sq_absmax"], qmap=octopt.dynamic_map(False)
    )
    assert torch.allclose(got, want, rtol=0.1, atol=1e-3 * float(want.max()))
    bad = copy.deepcopy(sd)
    bad["octopt"]["layout"][1]["exp_avg"] = [4, 256, "fp8"]
    with pytest.raises(ValueError, match="'exp_avg' has state map 'fp8' for 4-bit codes"):
        ot.AdamW(make_params(), bits=8).load_state_dict(bad)


def test_state_map_is_a_layout_key():
    params = make_params()
    opt = ot.AdamW(params, bits=8, state_map="fp8")
    opt.param_groups[0]["state_map"] = "dynamic"
    set_grads(0, params)
    with pytest.raises(ValueError, match="'state_map'='dynamic' but its state was laid out with 'fp8'"):
        opt.step()
    with pytest.raises(ValueError, match="^AdamW: 'state_map' must be 'dynamic' or 'fp8', got 'int8'"):
        ot.AdamW(make_params(), bits=8, state_map="int8")


def test_quantized_dtensor_entries_are_refused_for_plain_parameters():
    import json

    p = torch.nn.Parameter(torch.randn(4097))
    opt = ot.AdamW8bit([p])
    p.grad = torch.ones_like(p)
    opt.step()
    before = opt.state_dict()["state"][0]["exp_avg"].clone()
    sd = opt.state_dict()
    sd["state"][0]["octopt"] = json.dumps({"format": 2, "global_step": 1, "slots": {}})
    with pytest.raises(
        ValueError, match="holds the quantized state of a DTensor parameter, but the parameter is a plain"
    ):
        opt.load_state_dict(sd)
    sd["state"][0]["octopt"] = "{not json"
    with pytest.raises(ValueError, match="'octopt' must be octopt's JSON metadata"):
        opt.load_state_dict(sd)
    sd["state"][0]["octopt"] = json.dumps({"format": 3, "slots": {}})
    with pytest.raises(ValueError, match="'octopt' metadata of an unknown format"):
        opt.load_state_dict(sd)
    assert torch.equal(opt.state_dict()["state"][0]["exp_avg"], before)  # nothing changed


def test_dequantized_state_dict_needs_an_octopt_optimizer():
    p = torch.nn.Parameter(torch.randn(8))
    with pytest.raises(TypeError, match="dequantized_state_dict: argument 'optimizer' must be an octopt.torch"):
        ot.dequantized_state_dict(torch.optim.SGD([p], lr=0.1))
    opt = ot.AdamW8bit([p])
    with ot.dequantized_state_dict(opt) as same:
        assert same is opt and opt._float32_state
    assert not opt._float32_state
