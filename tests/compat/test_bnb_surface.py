"""octopt.bnb.optim's surface against bitsandbytes': the classes, their signatures and defaults, and the
errors of bad arguments."""

from __future__ import annotations

import inspect

import octopt.bnb as obnb
import pytest
import torch

# Every optimizer class bitsandbytes 0.50 exports in bnb.optim (checked live below where it imports).
BNB_CLASSES = sorted(
    [f"{b}{s}" for b in ("Adam", "AdamW", "AdEMAMix", "Lion") for s in ("", "8bit", "32bit")]
    + [f"Paged{b}{s}" for b in ("Adam", "AdamW", "AdEMAMix", "Lion") for s in ("", "8bit", "32bit")]
    + [f"{b}{s}" for b in ("LAMB", "LARS", "RMSprop", "SGD", "Adagrad") for s in ("", "8bit", "32bit")]
    + ["PytorchLARS"]
)
EXTRA = ("percentile_clipping", "block_wise")  # keyword-only: bitsandbytes < 0.48's arguments
NEEDS_LR = ("SGD", "LARS")  # lr has no default


def _build(name: str, params: list, **kw):
    cls = getattr(obnb.optim, name)
    if name.startswith(NEEDS_LR) and "lr" not in kw:
        kw["lr"] = 0.1
    if name.startswith(NEEDS_LR) and name != "PytorchLARS":
        kw.setdefault("momentum", 0.9)  # bitsandbytes refuses momentum=0
    return cls(params, **kw)


def test_every_class_of_bitsandbytes_is_here(bnb):
    theirs = sorted(n for n in dir(bnb.optim) if isinstance(getattr(bnb.optim, n), type) and n != "GlobalOptimManager")
    assert theirs == BNB_CLASSES
    assert all(hasattr(obnb.optim, n) for n in theirs + ["GlobalOptimManager"])


@pytest.mark.parametrize("name", BNB_CLASSES)
def test_signature_is_bitsandbytes_own(bnb, name):
    theirs = inspect.signature(getattr(bnb.optim, name).__init__)
    ours = inspect.signature(getattr(obnb.optim, name).__init__)
    mine = list(ours.parameters.values())
    n = len(theirs.parameters)
    assert inspect.Signature(mine[:n]) == theirs  # names, kinds, order, defaults and annotations
    assert [p.name for p in mine[n:]] == ([] if name == "PytorchLARS" else list(EXTRA))
    assert all(p.kind is p.KEYWORD_ONLY for p in mine[n:])


@pytest.mark.parametrize("name", BNB_CLASSES)
def test_every_class_builds_with_bitsandbytes_defaults_and_steps(name):
    w = torch.nn.Parameter(torch.randn(4096 + 3))
    opt = _build(name, [w])
    w.grad = torch.randn_like(w)
    before = w.detach().clone()
    opt.step()
    assert not torch.equal(before, w.detach())
    assert isinstance(opt, torch.optim.Optimizer)
    if name != "PytorchLARS":
        bits8 = "8bit" in name
        assert opt.state[w]["state1"].dtype == (torch.uint8 if bits8 else torch.float32)
        assert opt.param_groups[0].keys() >= {"lr", "betas", "eps", "weight_decay"}


# (class, arguments, exception, message): what bitsandbytes raises for them
BAD = [
    ("Adam", dict(lr=-1.0), ValueError, "Invalid learning rate: -1.0"),
    ("AdamW8bit", dict(eps=-1.0), ValueError, "Invalid epsilon value: -1.0"),
    ("Adam8bit", dict(betas=(0.9, 1.0)), ValueError, "Invalid beta parameter at index 1: 1.0"),
    ("AdEMAMix", dict(betas=(0.9, 0.999, 1.5)), ValueError, "Invalid beta parameter at index 2: 1.5"),
    ("Lion8bit", dict(weight_decay=-0.1), ValueError, "Invalid weight_decay value: -0.1"),
    ("Adam8bit", dict(amsgrad=True), ValueError, "Adam8bit does not support amsgrad=True"),
    ("PagedAdamW8bit", dict(optim_bits=8), ValueError, "PagedAdamW8bit only supports optim_bits=32"),
    ("LAMB8bit", dict(max_unorm=0.5), ValueError, "LAMB8bit only supports max_unorm=1.0"),
    ("LAMB8bit", dict(amsgrad=True), ValueError, "LAMB8bit does not support amsgrad=True"),
    ("SGD", dict(lr=0.1), NotImplementedError, "SGD without momentum is not supported!"),
    ("LARS8bit", dict(lr=0.1), NotImplementedError, "LARS without momentum is not supported!"),
    ("SGD8bit", dict(lr=0.1, momentum=1.0), ValueError, "Invalid beta parameter at index 0: 1.0"),
    ("RMSprop", dict(alpha=0), NotImplementedError, "RMSprop with alpha==0.0 is not supported!"),
    ("RMSprop8bit", dict(centered=True), NotImplementedError, "Centered RMSprop is not supported!"),
    ("Adagrad", dict(lr_decay=0.1), ValueError, "Lr Decay != 0.0 not supported!"),
    ("Adagrad32bit", dict(initial_accumulator_value=0.1), ValueError, "Initial accumulator value != 0.0"),
    ("Adagrad8bit", dict(optim_bits=32), ValueError, "Adagrad8bit only supports optim_bits=8"),
    ("Adagrad", dict(eps=-1.0), ValueError, "Invalid epsilon value: -1.0"),
    ("PytorchLARS", dict(lr=-0.1), ValueError, "Invalid learning rate: -0.1"),
    ("PytorchLARS", dict(momentum=-0.1), ValueError, "Invalid momentum value: -0.1"),
    ("PytorchLARS", dict(nesterov=True), ValueError, "Nesterov momentum requires a momentum and zero dampening"),
]


@pytest.mark.parametrize("name, kwargs, error, message", BAD, ids=[f"{b[0]}-{next(iter(b[1]))}" for b in BAD])
def test_bad_arguments_raise_what_bitsandbytes_raises(name, kwargs, error, message):
    with pytest.raises(error, match=message.replace("(", r"\(").replace(")", r"\)")):
        getattr(obnb.optim, name)([torch.nn.Parameter(torch.zeros(3))], **kwargs)


@pytest.mark.parametrize("name, kwargs, error, message", BAD, ids=[f"{b[0]}-{next(iter(b[1]))}" for b in BAD])
def test_bad_arguments_live(bnb, name, kwargs, error, message):
    with pytest.raises(error) as theirs:
        getattr(bnb.optim, name)([torch.nn.Parameter(torch.zeros(3))], **kwargs)
    assert message in str(theirs.value)


def test_unsupported_bits_fail_at_the_first_step_as_in_bitsandbytes():
    w = torch.nn.Parameter(torch.zeros(10))
    opt = obnb.optim.Adam([w], optim_bits=4)  # bitsandbytes accepts it here ...
    w.grad = torch.ones_like(w)
    with pytest.raises(NotImplementedError, match="Amount of optimizer bits not supported: 4"):
        opt.step()  # ... and refuses when it lays the state out


def test_old_arguments_are_checked():
    w = [torch.nn.Parameter(torch.zeros(3))]
    with pytest.raises(ValueError, match="'percentile_clipping' must be in \\[1, 100\\]"):
        obnb.optim.Adam8bit(w, percentile_clipping=0)
    with pytest.raises(TypeError, match="'percentile_clipping' must be an int"):
        obnb.optim.Adam8bit(w, percentile_clipping=5.0)
    with pytest.raises(TypeError, match="Adam8bit: .*unexpected keyword argument 'bits'"):
        obnb.optim.Adam8bit(w, bits=8)
    obnb.optim.Adam8bit(w, block_wise=False)  # accepted: octopt's state is always block-wise


def test_betas_as_a_string_like_bitsandbytes():
    opt = obnb.optim.AdamW([torch.nn.Parameter(torch.zeros(3))], betas="(0.8, 0.9)")
    assert list(opt.param_groups[0]["betas"]) == [0.8, 0.9]
