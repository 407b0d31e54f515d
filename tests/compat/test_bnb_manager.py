"""GlobalOptimManager: overrides before or after the optimizer is built, by key/value or dict, by
parameter identity or registered index, as bitsandbytes applies them."""

from __future__ import annotations

import octopt.bnb as obnb
import pytest
import torch


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(64, 80), torch.nn.Linear(80, 64))


def _step(opt, model):
    for p in model.parameters():
        p.grad = torch.ones_like(p)
    opt.step()


def test_get_instance_is_the_one_manager(fresh_manager):
    assert obnb.optim.GlobalOptimManager.get_instance() is fresh_manager
    with pytest.raises(RuntimeError, match="Call get_instance"):
        obnb.optim.GlobalOptimManager()


@pytest.mark.parametrize("when", ["before", "after_construction"])
@pytest.mark.parametrize("form", ["key_value", "dict"])
def test_override_optim_bits_before_the_first_step(fresh_manager, when, form):
    model = _model()
    target = model[0].weight  # 5120 elements: 8-bit state unless overridden

    def override():
        if form == "key_value":
            fresh_manager.override_config(target, "optim_bits", 32)
        else:
            fresh_manager.override_config([target], key_value_dict={"optim_bits": 32})

    if when == "before":
        fresh_manager.register_parameters(model.parameters())
        override()
    opt = obnb.optim.Adam(model.parameters(), optim_bits=8)
    if when == "after_construction":
        override()  # bitsandbytes lays state out at the first step: this still counts
    _step(opt, model)
    assert opt.state[target]["state1"].dtype == torch.float32
    assert opt.state[model[1].weight]["state1"].dtype == torch.uint8


def test_registered_index_survives_a_new_parameter_object(fresh_manager):
    model = _model()
    fresh_manager.register_parameters(model.parameters())  # the parameters as they are now ...
    fresh_manager.override_config(model[0].weight, "optim_bits", 32)
    fresh_manager.register_parameters(model.parameters())
    copy = _model()  # ... and an optimizer over other parameter objects at the same positions
    opt = obnb.optim.Adam8bit(copy.parameters())
    _step(opt, copy)
    assert opt.state[copy[0].weight]["state1"].dtype == torch.float32


def test_hyperparameter_override_after_the_first_step(fresh_manager):
    model = _model()
    w = model[1].weight
    fresh_manager.override_config(w, "lr", 0.5)  # its own bucket from the start
    opt = obnb.optim.SGD32bit(model.parameters(), lr=0.1, momentum=0.9)
    _step(opt, model)
    fresh_manager.override_config(w, "lr", 0.0)  # after the state exists: the next steps use it
    before = w.detach().clone()
    other = model[0].weight.detach().clone()
    _step(opt, model)
    assert torch.equal(before, w.detach())  # lr 0: unchanged
    assert not torch.equal(other, model[0].weight.detach())


def test_override_that_splits_a_group_after_the_layout_is_refused(fresh_manager):
    model = _model()
    opt = obnb.optim.Adam(model.parameters())
    _step(opt, model)
    fresh_manager.override_config(model[0].weight, "lr", 0.5)
    with pytest.raises(ValueError, match="override it before the first step"):
        _step(opt, model)


def test_layout_override_after_the_layout_is_ignored_like_bitsandbytes(fresh_manager):
    model = _model()
    opt = obnb.optim.Adam8bit(model.parameters())
    _step(opt, model)
    for p in model.parameters():
        fresh_manager.override_config(p, "optim_bits", 32)
    _step(opt, model)
    assert opt.state[model[0].weight]["state1"].dtype == torch.uint8


def test_overrides_match_bitsandbytes_live(bnb, fresh_manager):
    """The same override script on both libraries: the same state widths and the same parameters."""
    theirs_mng = bnb.optim.GlobalOptimManager.get_instance()
    theirs_mng.initialize()
    try:
        results = []
        for lib, mng in ((obnb, fresh_manager), (bnb, theirs_mng)):
            model = _model()
            mng.register_parameters(model.parameters())
            opt = lib.optim.Adam(model.parameters(), lr=1e-2, optim_bits=8)
            mng.override_config(model[0].weight, key_value_dict={"optim_bits": 32, "lr": 1e-3})
            for k in range(3):
                g = torch.Generator().manual_seed(k)
                for p in model.parameters():
                    p.grad = torch.randn(p.shape, generator=g)
                opt.step()
            results.append(
                ([opt.state[p]["state1"].dtype for p in model.parameters()], [p.detach() for p in model.parameters()])
            )
        assert results[0][0] == results[1][0]
        start = [p.detach() for p in _model().parameters()]
        for i, (a, b, s) in enumerate(zip(results[0][1], results[1][1], start)):
            # the overridden weight (32-bit, its own lr) to float rounding; 8-bit states within
            # bitsandbytes' rounding (test_bnb_steps.py)
            tol = 1e-5 if results[0][0][i] == torch.float32 else 0.02
            assert float((a - b).norm()) <= tol * float((b - s).norm()), i
    finally:
        theirs_mng.initialize()
