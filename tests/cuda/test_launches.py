"""The launch structure of a CUDA step and the device counters it advances.

A step of every tensor is one kernel launch (LAMB/LARS: two), with nothing else recorded: no copy,
no memset, no event. The counters that the step's last tile advances on the device (per-tensor
step counts, the global step, the skipped-block counts) equal the CPU optimizer's after eager steps
and after replays of a captured step, with a tensor whose gradient is None and gradient blocks
holding NaN. Every test takes a CUDA case from tests/conftest.py and is skipped, with the reason, on a
machine without a usable GPU."""

from __future__ import annotations

import numpy as np
import pytest
from octopt import _octopt

# Tensor 0 never has a gradient; tensor 2 gets a NaN (one skipped block) on the steps in NAN_STEPS.
SIZES = (1000, 4097, 70001)
STEPS = 5
NAN_STEPS = (1, 2, 4)


def kernels(name: str) -> int:
    """Kernel launches of one step: LAMB and LARS take a second one for their trust ratios."""
    return 2 if name in ("LAMB", "LARS") else 1


def grads_for(step: int) -> list:
    out = []
    for i, n in enumerate(SIZES):
        if i == 0:
            out.append(None)
            continue
        rng = np.random.default_rng([n, step])
        g = rng.standard_normal(n).astype(np.float32) * np.float32(0.1)
        if i == 2 and step in NAN_STEPS:
            g[300] = np.nan
        out.append(g)
    return out


def new_stream(case):
    """A non-default stream of the case's framework and its raw handle."""
    if case.framework == "torch":
        s = case.module.cuda.Stream()
        return s, s.cuda_stream
    s = case.module.cuda.Stream(non_blocking=True)
    return s, s.ptr


def device_synchronize(case) -> None:
    """Waits for all work of the device (arrays written on one stream, stepped on another)."""
    if case.framework == "torch":
        case.module.cuda.synchronize()
    else:
        case.module.cuda.Device().synchronize()


@pytest.fixture
def make_pair_8bit(make_pair):
    """``make_pair_8bit(case, name)``: conftest's GPU/CPU optimizer pair with 8-bit state over SIZES."""
    return lambda case, name: make_pair(case, name, 8, n_list=SIZES)


def counters(opt) -> tuple:
    return (
        [t["step"] for t in opt.state_layout()],
        opt.state_dict()["global_step"],
        opt.skipped_blocks,
        opt.last_skipped_blocks,
    )


@pytest.fixture
def assert_same_as_cpu(assert_same_bytes, bytes_of):
    """``assert_same_as_cpu(case, twin, gpu, cpu, og, oc, name, when)``: counters, trust ratios and
    parameters of the GPU optimizer equal its CPU twin's."""
    return lambda *args: _assert_same_as_cpu(assert_same_bytes, bytes_of, *args)


def _assert_same_as_cpu(assert_same_bytes, bytes_of, case, twin, gpu, cpu, og, oc, name, when):
    assert counters(og) == counters(oc), when
    if name in ("LAMB", "LARS"):  # tensors with a gradient; see docs/cuda.md for a None gradient's
        assert og.trust_ratios()[1:] == oc.trust_ratios()[1:], when
    for i, (pg, pc) in enumerate(zip(gpu, cpu)):
        assert_same_bytes(f"{when}: params[{i}]", bytes_of(case, pg), bytes_of(twin, pc))


def test_step_records_one_kernel(cuda_array_case, optimizer_name, make_pair_8bit, assert_same_as_cpu):
    case, name = cuda_array_case, optimizer_name
    twin, gpu, cpu, og, oc = make_pair_8bit(case, name)
    stream, handle = new_stream(case)
    grads = [None if g is None else case.make(g) for g in grads_for(0)]
    device_synchronize(case)
    og.step(grads, stream=handle)  # eager: builds the plan and uploads the arguments
    _octopt._cuda_begin_capture(handle)
    try:
        og.step(grads, stream=handle)
    finally:
        kernels, nodes = _octopt._cuda_end_capture_count_nodes(handle)
    assert (kernels, nodes) == (kernels(name), kernels(name))
    # The captured graph was never run: the device is where the eager step left it.
    stream.synchronize()
    oc.step([None if g is None else twin.make(g) for g in grads_for(0)])
    assert_same_as_cpu(case, twin, gpu, cpu, og, oc, name, "after one eager step and a capture")


@pytest.mark.parametrize("name", ["Adam", "LAMB", "SGD", "AdEMAMix"])
def test_counters_after_eager_steps_match_cpu(cuda_array_case, name, make_pair_8bit, assert_same_as_cpu):
    case = cuda_array_case
    twin, gpu, cpu, og, oc = make_pair_8bit(case, name)
    for s in range(STEPS):
        gs = grads_for(s)
        og.step([None if g is None else case.make(g) for g in gs])
        oc.step([None if g is None else twin.make(g) for g in gs])
        assert_same_as_cpu(case, twin, gpu, cpu, og, oc, name, f"after eager step {s + 1}")
    assert og.skipped_blocks == len(NAN_STEPS)
    assert counters(og)[0] == [0, STEPS, STEPS]


class Captured:
    """One call of `fn` captured on a side stream of the case's framework, replayable."""

    def __init__(self, case, fn):
        self.case = case
        if case.framework == "torch":
            torch = case.module
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graph):
                fn(None)
        else:
            self.stream = case.module.cuda.Stream(non_blocking=True)
            self.stream.begin_capture()
            try:
                fn(self.stream.ptr)
            finally:
                self.graph = self.stream.end_capture()

    def replay(self) -> None:
        if self.case.framework == "torch":
            self.graph.replay()
        else:
            self.graph.launch(self.stream)


@pytest.mark.parametrize("name", ["Adam", "LAMB", "SGD", "AdEMAMix"])
def test_counters_after_graph_replays_match_cpu(cuda_array_case, name, make_pair_8bit, assert_same_as_cpu):
    case = cuda_array_case
    twin, gpu, cpu, og, oc = make_pair_8bit(case, name)
    first = grads_for(0)
    static = [None if g is None else case.make(g) for g in first]  # fixed addresses for the graph
    if case.framework == "torch":  # torch captures on a side stream; warm up on one too
        torch = case.module
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            og.step(static)
        torch.cuda.current_stream().wait_stream(side)
    else:
        og.step(static)
    oc.step([None if g is None else twin.make(g) for g in first])
    device_synchronize(case)
    graph = Captured(case, lambda handle: og.step(static, stream=handle))
    device_synchronize(case)
    assert_same_as_cpu(case, twin, gpu, cpu, og, oc, name, "after the warm-up step and the capture")
    for s in range(1, STEPS):
        gs = grads_for(s)
        for dst, g in zip(static, gs):
            if dst is not None:
                dst[...] = case.make(g)
        device_synchronize(case)  # the copies above ran on the framework's current stream
        graph.replay()
        device_synchronize(case)
        oc.step([None if g is None else twin.make(g) for g in gs])
        assert_same_as_cpu(case, twin, gpu, cpu, og, oc, name, f"after replay {s}")
    assert og.skipped_blocks == len(NAN_STEPS)
    assert counters(og)[0] == [0, STEPS, STEPS]
