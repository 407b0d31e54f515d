"""octopt.bnb's state under bitsandbytes' names: views of octopt's state (reads and writes reach the
optimizer), state dicts in bitsandbytes' format and their round trips, and imports of bitsandbytes states
(per-tensor 8-bit ones included)."""

from __future__ import annotations

import copy
import io

import octopt
import octopt.bnb as obnb
import pytest
import torch

NESTED = "__bnb_optimizer_quant_state__"


def _stepped(name: str, n: int = 5000, steps: int = 2, **kw):
    g = torch.Generator().manual_seed(7)
    w = torch.nn.Parameter(torch.randn(n, generator=g))
    small = torch.nn.Parameter(torch.randn(10, generator=g))
    opt = getattr(obnb.optim, name)([w, small], **kw)
    for _ in range(steps):
        w.grad = torch.randn(n, generator=g)
        small.grad = torch.randn(10, generator=g)
        opt.step()
    return opt, w, small


def _roundtrip(sd: dict) -> dict:
    buf = io.BytesIO()
    torch.save(sd, buf)
    buf.seek(0)
    return torch.load(buf, weights_only=True)


@pytest.mark.parametrize(
    "name, keys",
    [
        ("Adam8bit", {"step", "state1", "state2", "qmap1", "qmap2", "absmax1", "absmax2"}),
        ("Adam32bit", {"step", "state1", "state2"}),
        ("Lion8bit", {"step", "state1", "qmap1", "absmax1"}),
        ("SGD8bit", {"step", "state1", "qmap1", "absmax1"}),
        ("LAMB8bit", {"step", "state1", "state2", "qmap1", "qmap2", "absmax1", "absmax2", "unorm_vec"}),
        ("LARS32bit", {"step", "state1", "unorm_vec"}),
        ("AdEMAMix8bit", {"step", "state1", "state2", "qmap1", "qmap2", "absmax1", "absmax2"}),
    ],
)
def test_state_keys_are_bitsandbytes_and_views_of_octopts_state(name, keys):
    kw = dict(lr=0.1, momentum=0.9) if name.startswith(("SGD", "LARS")) else {}
    opt, w, small = _stepped(name, **kw)
    st = opt.state[w]
    assert set(st) == keys
    assert st["step"] == 2 and isinstance(st["step"], int)
    core = opt._tensors[id(w)]
    ours = {id(s): s for s in (b for pair in core.buffers.values() for b in pair if b is not None)}
    for key in ("state1", "state2", "absmax1", "absmax2"):
        if key in st:
            t = st[key]
            # the tensor shares memory with one of octopt's buffers (AdEMAMix: m1 and m2 are its rows)
            assert any(t.untyped_storage().data_ptr() == b.untyped_storage().data_ptr() for b in ours.values()), key
    if "8bit" in name:
        assert st["state1"].shape == ((2, *w.shape) if name.startswith("AdEMAMix") else w.shape)
        assert torch.equal(st["qmap1"], torch.from_numpy(octopt.dynamic_map(True)))
    if "state2" in st and "8bit" in name:
        assert torch.equal(st["qmap2"], torch.from_numpy(octopt.dynamic_map(False)))
    assert opt.state[small]["state1"].dtype == torch.float32  # small tensors keep 32-bit state


def test_writes_through_the_state_reach_the_optimizer():
    opt, w, _ = _stepped("AdamW8bit")
    st = opt.state[w]
    st["state1"].zero_()  # in place, as code written for bitsandbytes does
    st["absmax1"].zero_()
    st["state2"].fill_(0)
    st["absmax2"].fill_(0)
    st["step"] = 0
    assert opt.state[w]["step"] == 0 and opt._tensors[id(w)].step == 0
    # a fresh optimizer from the same parameters now takes the same step
    twin = torch.nn.Parameter(w.detach().clone())
    fresh = obnb.optim.AdamW8bit([twin])
    w.grad = torch.ones_like(w)
    twin.grad = torch.ones_like(w)
    opt.step()
    fresh.step()
    assert torch.equal(w.detach(), twin.detach())
    # assignment copies into the live state
    values = torch.full((5000,), 7, dtype=torch.uint8)
    opt.state[w]["state1"] = values
    assert torch.equal(opt.state[w]["state1"], values)
    with pytest.raises(KeyError, match="'exp_avg' is not a state"):
        opt.state[w]["exp_avg"] = values


def test_state_is_empty_until_the_first_step_like_bitsandbytes():
    w = torch.nn.Parameter(torch.zeros(10))
    opt = obnb.optim.Adam8bit([w])
    assert len(opt.state) == 0 and opt.state_dict()["state"] == {}
    w.grad = torch.ones_like(w)
    opt.step()
    assert len(opt.state) == 1 and w in opt.state


@pytest.mark.parametrize("name", ["Adam8bit", "AdEMAMix8bit", "RMSprop8bit", "LARS32bit", "Lion32bit"])
def test_state_dict_round_trip(name):
    kw = dict(lr=0.1, momentum=0.9) if name.startswith(("SGD", "LARS")) else {}
    opt, w, small = _stepped(name, **kw)
    sd = opt.state_dict()
    assert set(sd["state"]) == {0, 1} and NESTED in sd["state"][0] and sd["state"][0]["step"] == 2
    assert "state1" not in sd["state"][0] and "state1" in sd["state"][0][NESTED]  # bitsandbytes >= 0.45's layout
    saved = _roundtrip(copy.deepcopy(sd))
    w2 = torch.nn.Parameter(w.detach().clone())
    s2 = torch.nn.Parameter(small.detach().clone())
    other = getattr(obnb.optim, name)([w2, s2], **kw)
    other.load_state_dict(saved)
    for key, v in opt.state[w].items():
        assert (v == other.state[w2][key]) if key == "step" else torch.equal(v, other.state[w2][key]), key
    # and both continue identically
    g = torch.Generator().manual_seed(1)
    for p, q in ((w, w2), (small, s2)):
        p.grad = torch.randn(p.shape, generator=g)
        q.grad = p.grad.clone()
    opt.step()
    other.step()
    assert torch.equal(w.detach(), w2.detach()) and torch.equal(small.detach(), s2.detach())


def test_state_dict_of_octopt_bnb_loads_into_bitsandbytes_live(bnb):
    opt, w, small = _stepped("AdamW8bit")
    sd = opt.state_dict()
    w2, s2 = torch.nn.Parameter(w.detach().clone()), torch.nn.Parameter(small.detach().clone())
    theirs = bnb.optim.AdamW8bit([w2, s2])
    theirs.load_state_dict(sd)
    g = torch.Generator().manual_seed(1)
    for p, q in ((w, w2), (small, s2)):
        p.grad = torch.randn(p.shape, generator=g)
        q.grad = p.grad.clone()
    opt.step()
    theirs.step()
    moved = float((w.detach() - w2.detach()).norm() / w2.detach().norm())
    assert moved < 1e-6


def test_per_tensor_8bit_state_is_converted():
    """bitsandbytes before 0.45 wrote LAMB8bit/LARS8bit state quantized per tensor (block_wise=False):
    codes, qmap1 and the scale max1 (new_max1 is its scratch)."""
    g = torch.Generator().manual_seed(5)
    n = 5000
    values = torch.randn(n, generator=g) * 0.01
    qmap = torch.from_numpy(octopt.dynamic_map(True))
    scale = values.abs().max()
    codes = (values.view(-1, 1) / scale - qmap.view(1, -1)).abs().argmin(dim=1).to(torch.uint8)
    decoded = qmap[codes.long()] * scale
    w = torch.nn.Parameter(torch.randn(n, generator=g))
    sd = {
        "state": {0: {"step": 3, "state1": codes, "qmap1": qmap, "max1": scale.view(1), "new_max1": torch.zeros(1)}},
        "param_groups": [dict(lr=0.1, betas=(0.9, 0.0), eps=0.0, weight_decay=0.0, params=[0])],
    }
    opt = obnb.optim.LARS8bit([w], lr=0.1, momentum=0.9)
    opt.load_state_dict(sd)
    st = opt.state[w]
    ours = octopt.dequantize_blockwise(st["state1"].reshape(-1), st["absmax1"], octopt.dynamic_map(True), 256)
    # requantized block-wise: within half a code step of the decoded per-tensor values
    assert torch.allclose(ours, decoded, rtol=0, atol=float(scale) * 0.02)
    assert st["step"] == 3
    with pytest.raises(ValueError, match="'max1' must be one finite non-negative"):
        bad = copy.deepcopy(sd)
        bad["state"][0]["max1"] = torch.tensor([float("nan")])
        opt.load_state_dict(bad)


def test_gnorm_vec_of_a_state_dict_is_imported():
    w = torch.nn.Parameter(torch.zeros(10))
    opt = obnb.optim.Adam([w], percentile_clipping=5)
    history = torch.arange(100, dtype=torch.float32)
    sd = {
        "state": {0: {"step": 4, "state1": torch.zeros(10), "state2": torch.zeros(10), "gnorm_vec": history}},
        "param_groups": [
            dict(
                lr=1e-3,
                betas=(0.9, 0.999),
                eps=1e-8,
                weight_decay=0.0,
                alpha=0.0,
                t_alpha=None,
                t_beta3=None,
                params=[0],
            )
        ],
    }
    opt.load_state_dict(sd)
    assert torch.equal(opt.state[w]["gnorm_vec"], history)


def test_a_state_of_another_optimizer_is_refused():
    opt, w, small = _stepped("AdamW8bit")
    sd = opt.state_dict()
    lion = obnb.optim.Lion8bit([torch.nn.Parameter(w.detach().clone()), torch.nn.Parameter(small.detach().clone())])
    with pytest.raises(ValueError, match="saved by a different optimizer"):
        lion.load_state_dict(sd)


def test_octopt_torch_classes_import_every_bitsandbytes_8bit_state(make_bnb_states):
    """octopt.torch's classes of the same update rule import bitsandbytes' states too."""
    import octopt.torch as ot

    data = torch.load(make_bnb_states.FIXTURE, weights_only=True)
    for name, target in [("Lion8bit", ot.Lion8bit), ("SGD8bit", ot.SGD8bit), ("AdEMAMix8bit", ot.AdEMAMix8bit)]:
        case = data[name]
        params = [torch.nn.Parameter(p.clone()) for p in case["params_at_save"]]
        kw = dict(momentum=0.9) if name == "SGD8bit" else {}
        opt = target(params, **kw)
        opt.load_state_dict(case["state_dict"])
        q = case["state_dict"]["state"][0][NESTED]
        first = {"Lion8bit": "exp_avg", "SGD8bit": "momentum_buffer", "AdEMAMix8bit": "m1"}[name]
        codes = q["state1"][0] if name == "AdEMAMix8bit" else q["state1"]
        assert torch.equal(opt.state[params[0]][first], codes), name


@pytest.mark.parametrize("name", ["RMSprop8bit", "Adagrad8bit"])
def test_one_state_rules_keep_bitsandbytes_signed_map(make_bnb_states, name):
    """bitsandbytes quantizes RMSprop's and Adagrad's non-negative state with the signed map; octopt.bnb
    does too (the core's signed_maps plan option), so their state dicts import code for code."""
    case = torch.load(make_bnb_states.FIXTURE, weights_only=True)[name]
    params = [torch.nn.Parameter(p.clone()) for p in case["params_at_save"]]
    opt = getattr(obnb.optim, name)(params, **make_bnb_states.CASES[name])
    opt.load_state_dict(case["state_dict"])
    q = case["state_dict"]["state"][0][NESTED]
    st = opt.state[params[0]]
    assert torch.equal(st["state1"], q["state1"]) and torch.equal(st["absmax1"], q["absmax1"])
    assert torch.equal(st["qmap1"], q["qmap1"])
    assert opt.state_layout()[0]["slots"][next(iter(opt.state_layout()[0]["slots"]))]["map"] == "dynamic_signed_8"
