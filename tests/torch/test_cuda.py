"""octopt.torch on CUDA tensors (skipped without a GPU): the fused CUDA step equals the CPU step bit for bit,
state lives on the parameter's device, a step is enqueued on the current stream without waiting for the GPU,
parameters on two GPUs (and on the CPU and a GPU) share one optimizer, ``optimizer.step()`` is captured in a
CUDA graph and replayed (a new lr reaches the graph through ``upload()``), a compiled training step runs, and
a state dict saved on the CPU loads onto CUDA parameters."""

from __future__ import annotations

import io
import time

import pytest

torch = pytest.importorskip("torch")
ot = pytest.importorskip("octopt.torch")

CLASSES = (
    ("AdamW", dict(bits=32)),
    ("AdamW8bit", {}),
    ("AdamW", dict(bits=4)),
    ("Lion8bit", {}),
    ("SGD8bit", dict(momentum=0.9)),
    ("LAMB8bit", {}),
    ("NAdam8bit", {}),
)
SHAPES = ((300, 37), (4097,), (7,))


def _params(device, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.nn.Parameter(torch.randn(s, generator=g).to(device)) for s in SHAPES]


def _grads(step, device):
    g = torch.Generator().manual_seed(100 + step)
    return [torch.randn(s, generator=g).to(device) for s in SHAPES]


def _run(cls_name, opts, device, steps=3, params=None):
    params = params if params is not None else _params(device)
    opt = getattr(ot, cls_name)(params, lr=1e-2, min_8bit_size=0, **opts)
    for s in range(steps):
        for p, g in zip(params, _grads(s, device)):
            p.grad = g
        opt.step()
    return params, opt


@pytest.mark.parametrize(("cls_name", "opts"), CLASSES, ids=[f"{c}-{o}" for c, o in CLASSES])
def test_cuda_step_equals_the_cpu_step_and_keeps_state_on_the_device(torch_cuda, cls_name, opts):
    cpu, cpu_opt = _run(cls_name, opts, "cpu")
    cuda, cuda_opt = _run(cls_name, opts, "cuda")
    for a, b in zip(cuda, cpu):
        assert torch.equal(a.detach().cpu(), b.detach())
    for p, q in zip(cuda, cpu):
        st, ref = cuda_opt.state[p], cpu_opt.state[q]
        for k, v in st.items():
            if k in ("step", "mu_product"):
                assert float(v) == float(ref[k])
                continue
            assert v.device == p.device, f"state '{k}' is on {v.device}"
            assert torch.equal(v.cpu(), ref[k])
    assert cuda_opt.state_bytes() == cpu_opt.state_bytes()


def test_a_step_is_enqueued_on_the_current_stream_without_waiting(torch_cuda):
    params, opt = _run("AdamW8bit", {}, "cuda", steps=1)  # the first step builds the device plan
    expected, _ = _run("AdamW8bit", {}, "cpu", steps=2)
    for p, g in zip(params, _grads(1, "cuda")):
        p.grad = g
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        torch.cuda._sleep(2_000_000_000)  # keeps the side stream busy for a second or so
        torch.cuda.set_sync_debug_mode("error")  # a synchronizing torch call in the step raises
        try:
            t0 = time.perf_counter()
            opt.step()
            host = time.perf_counter() - t0
        finally:
            torch.cuda.set_sync_debug_mode("default")
        snapshot = [p.detach().clone() for p in params]  # ordered after the step on the same stream
    side.synchronize()
    assert host < 0.2, f"step() took {host:.3f} s on the host: it waited for the GPU"
    for a, b in zip(snapshot, expected):
        assert torch.equal(a.cpu(), b.detach())


def test_parameters_on_two_gpus_share_one_optimizer(torch_cuda):
    if torch.cuda.device_count() < 2:
        pytest.skip("needs 2 GPUs")
    cpu = _params("cpu")
    mixed = [torch.nn.Parameter(p.detach().to(f"cuda:{i % 2}")) for i, p in enumerate(cpu)]
    opt = ot.AdamW8bit(mixed, lr=1e-2, min_8bit_size=0)
    ref = ot.AdamW8bit(cpu, lr=1e-2, min_8bit_size=0)
    for s in range(3):
        for p, q, g in zip(mixed, cpu, _grads(s, "cpu")):
            p.grad, q.grad = g.to(p.device), g
        opt.step()
        ref.step()
    for p, q in zip(mixed, cpu):
        assert torch.equal(p.detach().cpu(), q.detach())
        assert all(v.device == p.device for k, v in opt.state[p].items() if k != "step")


def test_cpu_and_cuda_parameters_share_one_optimizer(torch_cuda):
    cpu = _params("cpu")
    mixed = [torch.nn.Parameter(p.detach().to("cuda" if i % 2 else "cpu")) for i, p in enumerate(cpu)]
    opt = ot.AdamW(mixed, lr=1e-2, bits=8, min_8bit_size=0)
    ref = ot.AdamW(cpu, lr=1e-2, bits=8, min_8bit_size=0)
    for s in range(3):
        for p, q, g in zip(mixed, cpu, _grads(s, "cpu")):
            p.grad, q.grad = g.to(p.device), g
        opt.step()
        ref.step()
    for p, q in zip(mixed, cpu):
        assert torch.equal(p.detach().cpu(), q.detach())


def test_step_captured_in_a_cuda_graph_replays_like_eager_steps(torch_cuda):
    params = _params("cuda")
    opt = ot.AdamW8bit(params, lr=1e-2, min_8bit_size=0)
    static = [torch.zeros_like(p) for p in params]
    for p, g in zip(params, static):
        p.grad = g  # the graph reads these tensors: refill them, never replace them
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up: the eager first step builds the device plan
        for g, new in zip(static, _grads(0, "cuda")):
            g.copy_(new)
        opt.step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        opt.step()
    for s in range(1, 4):
        for g, new in zip(static, _grads(s, "cuda")):
            g.copy_(new)
        if s == 3:  # an lr schedule: change the group, upload, replay
            opt.param_groups[0]["lr"] = 5e-3
            opt.upload()
        graph.replay()
    torch.cuda.synchronize()
    ref = _params("cpu")
    ref_opt = ot.AdamW8bit(ref, lr=1e-2, min_8bit_size=0)
    for s in range(4):
        if s == 3:
            ref_opt.param_groups[0]["lr"] = 5e-3
        for q, g in zip(ref, _grads(s, "cpu")):
            q.grad = g
        ref_opt.step()
    for p, q in zip(params, ref):
        assert torch.equal(p.detach().cpu(), q.detach())
    assert float(opt.state[params[0]]["step"]) == 4


@pytest.mark.parametrize("backend", ("aot_eager",))
def test_compiled_training_step_on_cuda(torch_cuda, backend):
    def run(compiled):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1)).cuda()
        opt = ot.AdamW8bit(model.parameters(), lr=1e-2, min_8bit_size=0)
        x = torch.randn(32, 16, device="cuda")
        y = x.sum(1, keepdim=True)

        def train_step():
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()  # dynamo breaks the graph here; the step runs eagerly
            return loss.detach()

        step = torch.compile(train_step, backend=backend) if compiled else train_step
        losses = [float(step()) for _ in range(10)]
        return losses, [p.detach().cpu() for p in model.parameters()]

    torch._dynamo.reset()
    eager, eager_params = run(False)
    losses, params = run(True)
    assert losses[-1] < losses[0]
    assert losses == pytest.approx(eager, rel=1e-4, abs=1e-6)
    for a, b in zip(params, eager_params):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_a_state_dict_saved_on_the_cpu_loads_onto_cuda_parameters(torch_cuda):
    cpu, cpu_opt = _run("AdamW8bit", {}, "cpu", steps=2)
    buf = io.BytesIO()
    torch.save(cpu_opt.state_dict(), buf)
    buf.seek(0)
    sd = torch.load(buf, weights_only=True)
    cuda = [torch.nn.Parameter(p.detach().cuda()) for p in cpu]
    opt = ot.AdamW8bit(cuda, lr=1e-2, min_8bit_size=0)
    opt.load_state_dict(sd)
    for p, q in zip(cuda, cpu):
        for k, v in opt.state[p].items():
            if k != "step":
                assert v.device == p.device and torch.equal(v.cpu(), cpu_opt.state[q][k])
    for s in range(2, 4):
        for p, q, g in zip(cuda, cpu, _grads(s, "cpu")):
            p.grad, q.grad = g.cuda(), g
        opt.step()
        cpu_opt.step()
    for p, q in zip(cuda, cpu):
        assert torch.equal(p.detach().cpu(), q.detach())
