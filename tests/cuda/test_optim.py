"""The CUDA fused optimizer step against the CPU backend: parameters and every state buffer are
bit-identical after several steps (nearest rounding), for every optimizer x state bits x param
dtype; a step captured in a CUDA graph replays like eager steps; a step enqueued on a stream sees
the gradient written before it on that stream; devices never mix. Every test takes a CUDA case
from tests/conftest.py and is skipped, with the reason, on a machine without a usable GPU."""

from __future__ import annotations

import numpy as np
import octopt
import pytest

SIZES = (1000, 4097, 70001)  # as in conftest.py
STEPS = 3


def grads_for(n: int, step: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng([seed, n, step])
    g = rng.standard_normal(n).astype(np.float32) * np.float32(10.0 ** rng.uniform(-3, 1))
    if n > 5000:
        g[300] = np.nan if step == 1 else g[300]  # one skipped block on step 1
    return g


def step_both(case, twin, og, oc, seed: int = 0) -> None:
    """STEPS steps of the GPU optimizer og and its CPU twin oc on the same gradients."""
    for s in range(STEPS):
        gs = [grads_for(n, s, seed=seed) for n in SIZES]
        og.step([case.make(g) for g in gs])
        oc.step([twin.make(g) for g in gs])


def assert_params_alike(case, twin, gpu, cpu, assert_same_bytes, bytes_of) -> None:
    for i, (pg, pc) in enumerate(zip(gpu, cpu)):
        assert_same_bytes(f"params[{i}]", bytes_of(case, pg), bytes_of(twin, pc))


def assert_states_alike(case, twin, sg, sc, assert_same_bytes, bytes_of) -> None:
    """Every quantized or fp32 state buffer (data and absmax) of two state dicts, byte for byte."""
    for i, (tg, tc) in enumerate(zip(sg["state"], sc["state"])):
        for slot, entry in tc["slots"].items():
            for key in ("data", "absmax"):
                if key in entry:
                    assert_same_bytes(
                        f"state[{i}].{slot}.{key}", bytes_of(case, tg["slots"][slot][key]), bytes_of(twin, entry[key])
                    )


@pytest.mark.parametrize("bits", [32, 8, 4])
def test_step_matches_cpu(cuda_array_case, optimizer_name, bits, make_pair, assert_same_bytes, bytes_of):
    case, name = cuda_array_case, optimizer_name
    twin, gpu, cpu, og, oc = make_pair(case, name, bits)
    step_both(case, twin, og, oc)
    assert og.skipped_blocks == oc.skipped_blocks
    assert_params_alike(case, twin, gpu, cpu, assert_same_bytes, bytes_of)
    sg, sc = og.state_dict(), oc.state_dict()
    assert sg["global_step"] == sc["global_step"] == STEPS
    assert [tg["step"] for tg in sg["state"]] == [tc["step"] for tc in sc["state"]]
    assert_states_alike(case, twin, sg, sc, assert_same_bytes, bytes_of)
    if name in ("LAMB", "LARS"):
        assert og.trust_ratios() == oc.trust_ratios()


def test_stochastic_rounding_matches_cpu(cuda_array_case, make_pair, assert_same_bytes, bytes_of):
    case = cuda_array_case
    twin, gpu, cpu, og, oc = make_pair(case, "AdamW", 8, stochastic_rounding=True, stochastic_bf16=True, seed=11)
    step_both(case, twin, og, oc, seed=3)
    assert_params_alike(case, twin, gpu, cpu, assert_same_bytes, bytes_of)


def test_percentile_matches_cpu(cuda_array_case, make_pair, assert_same_bytes, bytes_of):
    case = cuda_array_case
    twin, gpu, cpu, og, oc = make_pair(case, "Adam", 8, percentile=99.0)
    step_both(case, twin, og, oc, seed=5)
    assert_params_alike(case, twin, gpu, cpu, assert_same_bytes, bytes_of)


@pytest.mark.parametrize("name", ["AdamW", "SGD", "Adagrad"])
def test_fp8_state_map_matches_cpu(cuda_array_case, name, make_pair, assert_same_bytes, bytes_of):
    """state_map="fp8": the fp8 codebooks (signed and unsigned) reach the kernel; every byte as on the CPU."""
    case = cuda_array_case
    twin, gpu, cpu, og, oc = make_pair(case, name, 8, state_map="fp8")
    assert {s["map"] for t in oc.state_layout() for s in t["slots"].values()} >= {"fp8_e4m3"}
    step_both(case, twin, og, oc, seed=7)
    assert_params_alike(case, twin, gpu, cpu, assert_same_bytes, bytes_of)
    assert_states_alike(case, twin, og.state_dict(), oc.state_dict(), assert_same_bytes, bytes_of)


def test_none_grad_and_step_counts(cuda_array_case, make_pair, assert_same_bytes, bytes_of):
    case = cuda_array_case
    twin, gpu, cpu, og, oc = make_pair(case, "Adam", 8)
    for s in range(STEPS):
        gs = [grads_for(n, s) if (s + i) % 2 else None for i, n in enumerate(SIZES)]
        og.step([case.make(g) if g is not None else None for g in gs])
        oc.step([twin.make(g) if g is not None else None for g in gs])
    assert [t["step"] for t in og.state_layout()] == [t["step"] for t in oc.state_layout()]
    assert_params_alike(case, twin, gpu, cpu, assert_same_bytes, bytes_of)


@pytest.mark.parametrize("name", ["Adam", "LAMB", "SGD"])
def test_graph_replay_equals_eager_steps(name, torch_cuda, optimizer_options):
    torch = torch_cuda
    k = 4
    sizes = (4097, 70001)
    init = [torch.randn(n, device="cuda") for n in sizes]
    gen = torch.Generator(device="cuda").manual_seed(0)
    grads_seq = [[torch.randn(n, device="cuda", generator=gen) for n in sizes] for _ in range(k + 1)]

    # eager reference: k + 1 steps
    ref = [x.clone() for x in init]
    oe = getattr(octopt, name)(ref, **optimizer_options[name])
    for gs in grads_seq:
        oe.step(gs)

    params = [x.clone() for x in init]
    og = getattr(octopt, name)(params, **optimizer_options[name])
    static = [g.clone() for g in grads_seq[0]]
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        og.step(static)  # eager warm-up step: uploads the gradients' addresses and hyper-parameters
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        og.step(static)
    for gs in grads_seq[1:]:
        for dst, src in zip(static, gs):
            dst.copy_(src)
        graph.replay()
    torch.cuda.synchronize()
    for i, (a, b) in enumerate(zip(params, ref)):
        assert torch.equal(a, b), f"params[{i}] differs after graph replays"
    assert og.state_dict()["global_step"] == k + 1
    assert [t["step"] for t in og.state_layout()] == [k + 1] * len(sizes)


def test_capture_refuses_changed_arguments(torch_cuda):
    torch = torch_cuda
    p = [torch.randn(5000, device="cuda")]
    opt = octopt.Adam(p)
    g1 = [torch.randn(5000, device="cuda")]
    opt.step(g1)
    g2 = [torch.randn(5000, device="cuda")]
    graph = torch.cuda.CUDAGraph()
    with pytest.raises(ValueError, match=r"grads\[0\]"):
        with torch.cuda.graph(graph):
            opt.step(g2)


def test_upload_changes_lr_between_replays(torch_cuda):
    torch = torch_cuda
    p = [torch.randn(5000, device="cuda")]
    ref = [p[0].clone()]
    g = [torch.randn(5000, device="cuda")]
    opt, oref = octopt.SGD(p, lr=0.1), octopt.SGD(ref, lr=0.1)
    opt.step(g)
    oref.step(g)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        opt.step(g)
    opt.param_groups[0]["lr"] = 0.01
    opt.upload(g)
    graph.replay()
    oref.param_groups[0]["lr"] = 0.01
    oref.step(g)
    torch.cuda.synchronize()
    assert torch.equal(p[0], ref[0])


def test_step_on_stream_sees_gradient_written_before_it(torch_cuda):
    torch = torch_cuda
    n = 1 << 22
    p = [torch.zeros(n, device="cuda")]
    opt = octopt.SGD(p, lr=1.0)
    g = torch.zeros(n, device="cuda")
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        torch.cuda._sleep(50_000_000)  # keep the stream busy so a step that ignored it would run first
        g.fill_(2.0)
        opt.step([g])  # stream=None: torch's current stream, i.e. s
    s.synchronize()
    assert bool((p[0] == -2.0).all())


def test_device_mismatch_errors(cuda_array_case):
    case = cuda_array_case
    p = [case.make(np.ones(100, np.float32))]
    opt = octopt.Adam(p)
    cpu_grad = case.cpu_twin().make(np.ones(100, np.float32))
    with pytest.raises(ValueError, match=r"grads\[0\].*cpu.*cuda:0"):
        opt.step([cpu_grad])
    with pytest.raises(ValueError, match=r"params\[1\].*cpu"):
        octopt.Adam([case.make(np.ones(10, np.float32)), case.cpu_twin().make(np.ones(10, np.float32))])
    with pytest.raises(ValueError, match="strict"):
        octopt.Adam(p, strict=True)


def test_cupy_optimizer_state_on_device(cupy_cuda):
    cupy = cupy_cuda
    p = cupy.ones(5000, dtype=cupy.float32)
    opt = octopt.Adam([p])
    buffers = opt._tensors[0].buffers
    assert all(isinstance(d, cupy.ndarray) for d, _ in buffers.values())
    assert opt.step([cupy.ones(5000, dtype=cupy.float32)]) is None
    assert opt.skipped_blocks == 0
