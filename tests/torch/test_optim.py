"""octopt.torch: torch.optim.Optimizer subclasses over octopt's core, checked against the framework-neutral
octopt optimizers (bit for bit) and against torch.optim (training behaviour, semantics)."""

from __future__ import annotations

import subprocess
import sys

import octopt
import pytest

torch = pytest.importorskip("torch")
ot = pytest.importorskip("octopt.torch")

KINDS = ("Adam", "AdamW", "SGD", "RMSprop", "Adagrad", "Lion", "AdEMAMix", "LAMB", "LARS")
# options that make every state slot of each optimizer live
OPTIONS = {
    "SGD": dict(momentum=0.9),
    "RMSprop": dict(momentum=0.5, centered=True),
    "LARS": dict(momentum=0.9),
    "Adagrad": dict(initial_accumulator_value=0.1),
}
SHAPES = ((33, 130), (4097,), (7,), (64, 64))  # 8-bit, ragged 8-bit, tiny (32-bit), 8-bit


def make_params(seed: int = 0, dtype=torch.float32) -> list:
    g = torch.Generator().manual_seed(seed)
    return [torch.nn.Parameter(torch.randn(s, generator=g).to(dtype)) for s in SHAPES]


def grads_for(step: int, params: list) -> list:
    g = torch.Generator().manual_seed(1000 + step)
    return [torch.randn(p.shape, generator=g).to(p.dtype) for p in params]


def test_import_octopt_does_not_import_torch():
    code = "import sys, octopt; assert 'torch' not in sys.modules, 'import octopt imported torch'"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_all_classes_are_torch_optimizers():
    for name in KINDS:
        for cls in (getattr(ot, name), getattr(ot, name + "8bit")):
            assert issubclass(cls, torch.optim.Optimizer)
    assert ot.Adam8bit([torch.nn.Parameter(torch.zeros(4))]).param_groups[0]["bits"] == 8
    assert ot.Adam([torch.nn.Parameter(torch.zeros(4))]).param_groups[0]["bits"] == 32


@pytest.mark.parametrize("bits", (32, 8, 4))
@pytest.mark.parametrize("name", KINDS)
def test_identical_to_framework_neutral_optimizer(name, bits):
    ref_params, params = make_params(), make_params()
    opts = dict(OPTIONS.get(name, {}), lr=1e-2)
    ref = getattr(octopt, name)([p.detach() for p in ref_params], bits=bits, **opts)
    opt = getattr(ot, name)(params, bits=bits, **opts)
    ptrs = [p.data_ptr() for p in params]
    for step in range(4):
        gs = grads_for(step, params)
        if step == 2:
            gs[1] = None  # a parameter without a gradient is skipped by both
        ref.step(gs)
        for p, g in zip(params, gs):
            p.grad = g
        opt.step()
    assert [p.data_ptr() for p in params] == ptrs  # zero-copy: stepped in place
    for a, b in zip(params, ref_params):
        assert torch.equal(a.detach(), b.detach())
    for p, (t_ref) in zip(params, ref._tensors):
        st = opt.state[p]
        assert int(st["step"]) == t_ref.step
        for spec in t_ref.specs:
            data, absmax = t_ref.buffers[spec.index]
            assert torch.equal(st[spec.name].reshape(-1), data)
            if absmax is not None:
                assert torch.equal(st[spec.name + "_absmax"], absmax)
    assert opt.state_layout() == ref.state_layout()


def test_32bit_matches_torch_optim_adamw():
    params, ref_params = make_params(), make_params()
    opt = ot.AdamW(params, lr=1e-2, weight_decay=0.1)
    ref = torch.optim.AdamW(ref_params, lr=1e-2, weight_decay=0.1, foreach=False)
    for step in range(5):
        for p, q, g in zip(params, ref_params, grads_for(step, params)):
            p.grad, q.grad = g, g.clone()
        opt.step()
        ref.step()
    for a, b in zip(params, ref_params):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)


def _train(make_opt, steps: int = 200) -> float:
    """Trains a small MLP on a noisy regression task; returns the loss on held-out data."""
    torch.manual_seed(0)
    x = torch.randn(1536, 16)
    w_true = torch.randn(16, 4)
    y = torch.tanh(x @ w_true) + 0.1 * torch.randn(1536, 4)  # noise floor 0.01
    x_train, y_train, x_test, y_test = x[:1024], y[:1024], x[1024:], y[1024:]
    torch.manual_seed(1)
    model = torch.nn.Sequential(
        torch.nn.Linear(16, 128),
        torch.nn.GELU(),
        torch.nn.Linear(128, 128),
        torch.nn.GELU(),
        torch.nn.Linear(128, 4),
    )
    opt = make_opt(model.parameters())
    for _ in range(steps):
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x_train), y_train).backward()
        opt.step()
    with torch.no_grad():
        return float(torch.nn.functional.mse_loss(model(x_test), y_test))


def test_adamw8bit_trains_like_torch_adamw():
    ref = _train(lambda ps: torch.optim.AdamW(ps, lr=3e-3, weight_decay=1e-2))
    mine = _train(lambda ps: ot.AdamW8bit(ps, lr=3e-3, weight_decay=1e-2))
    assert ref < 0.1  # it learned (the untrained loss is about 0.9)
    assert abs(mine - ref) <= 0.05 * ref, (mine, ref)


def test_param_groups_and_add_param_group():
    a, b, c = (torch.nn.Parameter(torch.randn(5000)) for _ in range(3))
    opt = ot.Adam8bit([{"params": [a]}, {"params": [b], "lr": 0.1, "bits": 32}], lr=1e-3)
    assert [g["lr"] for g in opt.param_groups] == [1e-3, 0.1]
    opt.add_param_group({"params": c, "lr": 0.5})
    assert len(opt.param_groups) == 3 and opt.param_groups[2]["bits"] == 8
    layout = opt.state_layout()
    assert [s["slots"]["exp_avg"]["bits"] for s in layout] == [8, 32, 8]
    for p in (a, b, c):
        p.grad = torch.ones_like(p)
    before = [p.detach().clone() for p in (a, b, c)]
    opt.step()
    # Adam's first step moves every element by lr (sign of the gradient)
    for p, q, lr in zip((a, b, c), before, (1e-3, 0.1, 0.5)):
        torch.testing.assert_close(q - p.detach(), torch.full_like(q, lr), rtol=1e-3, atol=0)
    with pytest.raises(ValueError, match="more than one parameter group|appears more than once"):
        opt.add_param_group({"params": [a]})
    assert len(opt.param_groups) == 3
    with pytest.raises(ValueError, match=r"Adam8bit.add_param_group: 'lr' must be"):
        opt.add_param_group({"params": [torch.nn.Parameter(torch.zeros(3))], "lr": -1.0})
    assert len(opt.param_groups) == 3


def test_lr_scheduler_changes_the_next_step():
    p = torch.nn.Parameter(torch.zeros(4096))
    opt = ot.Adam8bit([p], lr=1.0)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    moves = []
    for _ in range(3):
        p.grad = torch.ones_like(p)
        before = p.detach().clone()
        opt.step()
        sched.step()
        moves.append(float((before - p.detach()).mean()))
    # Adam with a constant gradient moves by lr each step: 1, 0.5, 0.25
    assert moves == pytest.approx([1.0, 0.5, 0.25], rel=1e-3)
    assert opt.param_groups[0]["lr"] == 0.125


def test_closure_is_evaluated_with_grad_and_its_loss_returned():
    p = torch.nn.Parameter(torch.tensor([1.0, -2.0, 3.0]))
    opt = ot.SGD([p], lr=0.1)

    def closure():
        opt.zero_grad()
        loss = (p**2).sum()
        loss.backward()
        return loss

    with torch.no_grad():
        loss = opt.step(closure)
    assert float(loss.detach()) == 14.0
    torch.testing.assert_close(p.detach(), torch.tensor([0.8, -1.6, 2.4]))


def test_grad_none_skips_the_parameter():
    a, b = torch.nn.Parameter(torch.randn(5000)), torch.nn.Parameter(torch.randn(5000))
    frozen = torch.nn.Parameter(torch.randn(10), requires_grad=False)
    opt = ot.AdamW8bit([a, b, frozen])
    a.grad = torch.randn(5000)
    b_before = b.detach().clone()
    state_before = {k: v.clone() for k, v in opt.state[b].items()}
    opt.step()
    assert torch.equal(b.detach(), b_before)
    assert all(torch.equal(opt.state[b][k], v) for k, v in state_before.items())
    assert int(opt.state[a]["step"]) == 1 and int(opt.state[b]["step"]) == 0 and int(opt.state[frozen]["step"]) == 0


@pytest.mark.parametrize("set_to_none", (True, False))
def test_zero_grad(set_to_none):
    p = torch.nn.Parameter(torch.randn(10))
    opt = ot.Adam8bit([p])
    p.grad = torch.ones(10)
    opt.zero_grad(set_to_none=set_to_none)
    assert p.grad is None if set_to_none else torch.equal(p.grad, torch.zeros(10))


def test_sparse_and_complex_gradients_are_refused():
    emb = torch.nn.Embedding(100, 8, sparse=True)
    opt = ot.Adam8bit(emb.parameters())
    emb(torch.tensor([1, 2, 3])).sum().backward()
    before = emb.weight.detach().clone()
    with pytest.raises(TypeError, match=r"Adam8bit.step: the gradient of a parameter of shape \(100, 8\) is sparse"):
        opt.step()
    assert torch.equal(emb.weight.detach(), before)
    with pytest.raises(TypeError, match=r"Adam8bit: argument 'params\[0\]' is complex"):
        ot.Adam8bit([torch.nn.Parameter(torch.zeros(4, dtype=torch.complex64))])


def test_bad_inputs_raise_clear_errors():
    p = torch.nn.Parameter(torch.randn(10))
    with pytest.raises(ValueError, match=r"AdamW8bit: 'lr' must be in >= 0.0, got -0.1"):
        ot.AdamW8bit([p], lr=-0.1)
    with pytest.raises(ValueError, match=r"Adam: 'betas\[1\]' must be in \[0.0, 1.0\)"):
        ot.Adam([p], betas=(0.9, 1.5))
    with pytest.raises(ValueError, match=r"Adam: 'bits' must be 32, 8 or 4, got 7"):
        ot.Adam([p], bits=7)
    with pytest.raises(ValueError, match=r"SGD8bit: 'block_size' must be a power of two"):
        ot.SGD8bit([p], momentum=0.9, block_size=100)
    with pytest.raises(TypeError, match=r"Lion8bit: unexpected argument 'momentum'"):
        ot.Lion8bit([p], momentum=0.9)
    with pytest.raises(ValueError, match=r"Adam: argument 'amsgrad=True' is not supported"):
        ot.Adam([p], amsgrad=True)
    with pytest.raises(TypeError, match=r"Adam8bit: argument 'params\[0\]' must be float32, float16 or bfloat16"):
        ot.Adam8bit([torch.zeros(3, dtype=torch.float64, requires_grad=True)])
    with pytest.raises(ValueError, match=r"Adam8bit: argument 'params\[1\]' must be contiguous"):
        ot.Adam8bit([p, torch.nn.Parameter(torch.zeros(4, 5).t())])
    with pytest.raises(ValueError, match=r"Adam8bit: argument 'percentile' must be in \[0, 100\], got 120"):
        ot.Adam8bit([p], percentile=120)
    with pytest.raises(TypeError, match=r"Adam8bit: argument 'seed' must be an int"):
        ot.Adam8bit([p], seed=1.5)
    with pytest.raises(ValueError, match="empty parameter list"):
        ot.Adam8bit([])
    opt = ot.Adam8bit([p])
    opt.param_groups[0]["bits"] = 32
    p.grad = torch.ones(10)
    with pytest.raises(ValueError, match=r"Adam8bit.step: param group 0 has 'bits'=32 but its state was laid out"):
        opt.step()
    opt.param_groups[0]["bits"] = 8
    opt.param_groups[0]["lr"] = float("nan")
    with pytest.raises(ValueError, match=r"step: 'lr' must be finite"):
        opt.step()
    opt.param_groups[0]["lr"] = 1e-3
    p.data = torch.zeros(10)
    with pytest.raises(RuntimeError, match=r"Adam8bit.step: the memory of a parameter of shape \(10,\) was replaced"):
        opt.step()


def test_override_keeps_a_parameter_in_32_bits():
    model = torch.nn.Sequential(torch.nn.Embedding(1000, 16), torch.nn.Linear(16, 512))
    ot.override(model[0], bits=32)
    opt = ot.Adam8bit(model.parameters(), lr=1e-3)
    layout = opt.state_layout()
    assert layout[0]["slots"]["exp_avg"]["bits"] == 32  # the embedding, overridden
    assert layout[1]["slots"]["exp_avg"]["bits"] == 8  # the Linear weight (8192 elements)
    assert ot.get_override(model[0].weight) == {"bits": 32}
    with pytest.raises(ValueError, match="override: argument 'target' is already held"):
        ot.override(model[0].weight, bits=8)
    model(torch.tensor([[1, 2]])).sum().backward()
    opt.step()
    # a scheduler still reaches overridden parameters through their group
    opt.param_groups[0]["lr"] = 0.0
    w = model[0].weight.detach().clone()
    opt.step()
    assert torch.equal(model[0].weight.detach(), w)
    del opt
    import gc

    gc.collect()
    ot.override(model[0], bits=8)  # no optimizer holds it any more
    assert ot.get_override(model[0].weight) == {"bits": 8}
    with pytest.raises(ValueError, match="override: unknown option 'colour'"):
        ot.override(torch.nn.Parameter(torch.zeros(3)), colour=1)
    with pytest.raises(ValueError, match="override: 'bits' must be 32, 8 or 4"):
        ot.override(torch.nn.Parameter(torch.zeros(3)), bits=2)


def test_override_with_other_hyper_parameters_matches_separate_groups():
    a1, b1 = torch.nn.Parameter(torch.randn(5000)), torch.nn.Parameter(torch.randn(6000))
    a2, b2 = torch.nn.Parameter(a1.detach().clone()), torch.nn.Parameter(b1.detach().clone())
    ot.override(b1, block_size=64, weight_decay=0.5)
    opt1 = ot.AdamW8bit([a1, b1], lr=1e-2)
    opt2 = ot.AdamW8bit([{"params": [a2]}, {"params": [b2], "block_size": 64, "weight_decay": 0.5}], lr=1e-2)
    for step in range(3):
        for p, q, g in zip((a1, b1), (a2, b2), grads_for(step, [a1, b1])):
            p.grad, q.grad = g, g.clone()
        opt1.step()
        opt2.step()
    assert torch.equal(a1.detach(), a2.detach()) and torch.equal(b1.detach(), b2.detach())
    assert opt1.state_layout()[1]["slots"]["exp_avg"]["block_size"] == 64


def test_bf16_params_step_in_place():
    params = make_params(dtype=torch.bfloat16)
    opt = ot.AdamW8bit(params, lr=1e-2)
    ptrs = [p.data_ptr() for p in params]
    for p, g in zip(params, grads_for(0, params)):
        p.grad = g
    opt.step()
    assert [p.data_ptr() for p in params] == ptrs and params[0].dtype == torch.bfloat16


def test_empty_param_group():
    a = torch.nn.Parameter(torch.randn(5000))
    opt = ot.Adam8bit([{"params": []}, {"params": [a], "lr": 0.1}])
    a.grad = torch.ones_like(a)
    opt.step()
    sd = opt.state_dict()
    assert [g["params"] for g in sd["param_groups"]] == [[], [0]]
    opt.load_state_dict(sd)
    assert int(opt.state[a]["step"]) == 1
