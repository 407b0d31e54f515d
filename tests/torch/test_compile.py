"""torch.compile'd training loops with octopt.torch optimizers: the model compiled, and a whole compiled
training step (dynamo breaks the graph at the optimizer step, which runs eagerly in one native call).

The default backend here is "aot_eager": it runs dynamo and AOTAutograd, which is where an optimizer
can break a compiled loop, in seconds; "inductor" also works but compiles C++ for ~40 s on a small CPU
machine, so it runs only with OCTOPT_TEST_INDUCTOR=1."""

from __future__ import annotations

import os

import pytest

torch = pytest.importorskip("torch")
ot = pytest.importorskip("octopt.torch")

BACKENDS = (
    "aot_eager",
    pytest.param(
        "inductor",
        marks=pytest.mark.skipif(
            os.environ.get("OCTOPT_TEST_INDUCTOR") != "1",
            reason="inductor compiles C++ (~40 s here); set OCTOPT_TEST_INDUCTOR=1 to run it",
        ),
    ),
)


def _run(backend: str | None, compile_step: bool, steps: int = 20):
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(16, 128),
        torch.nn.ReLU(),
        torch.nn.Linear(128, 64),
        torch.nn.ReLU(),
        torch.nn.Linear(64, 1),
    )
    opt = ot.AdamW8bit(model.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.LinearLR(opt, start_factor=1.0, end_factor=0.5, total_iters=steps)
    fwd = model if backend is None else torch.compile(model, backend=backend)
    x = torch.randn(64, 16)
    y = x.sum(1, keepdim=True)
    ptrs = [p.data_ptr() for p in model.parameters()]

    def train_step():
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(fwd(x), y)
        loss.backward()
        opt.step()
        return loss.detach()

    step = torch.compile(train_step, backend=backend) if (compile_step and backend is not None) else train_step
    losses = []
    for _ in range(steps):
        losses.append(float(step()))
        sched.step()
    assert [p.data_ptr() for p in model.parameters()] == ptrs
    return losses, [p.detach().clone() for p in model.parameters()]


@pytest.mark.parametrize("compile_step", (False, True), ids=("model", "train_step"))
@pytest.mark.parametrize("backend", BACKENDS)
def test_compiled_training_loop_runs_and_matches_eager(backend, compile_step):
    torch._dynamo.reset()
    eager_losses, eager_params = _run(None, False)
    losses, params = _run(backend, compile_step)
    assert losses[-1] < 0.5 * losses[0]
    assert losses == pytest.approx(eager_losses, rel=1e-4, abs=1e-6)
    for a, b in zip(params, eager_params):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
