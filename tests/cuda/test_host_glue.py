"""The host-side CUDA glue that a first GPU run meets (issue 21, findings 1-8 and 12): each test fails on the
code before the fix and passes after it. The reference is the CPU backend on the same values: with nearest
rounding every byte of the parameters, states and block scales must be equal. Skipped, with the reason,
without torch on a usable GPU (and the multi-GPU ones below two GPUs)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import octopt
import pytest

N_RAGGED = (4097, 70001)


def _values(n: int, seed: int, scale: float = 1.0) -> np.ndarray:
    return (np.random.default_rng([n, seed]).standard_normal(n) * scale).astype(np.float32)


def _gpu_cpu(torch, name: str, sizes, **opts):
    """(gpu params, cpu params, gpu optimizer, cpu optimizer) over the same values."""
    cpu = [_values(n, 0) for n in sizes]
    gpu = [torch.from_numpy(v.copy()).cuda() for v in cpu]
    cls = getattr(octopt, name)
    return gpu, cpu, cls(gpu, **opts), cls(cpu, **opts)


def _step_both(torch, og, oc, sizes, seed: int, stream=None, scale: float = 0.1) -> None:
    grads = [_values(n, 100 + seed, scale) for n in sizes]
    og.step([torch.from_numpy(g).cuda() for g in grads], stream=stream)
    oc.step(grads)


def _bytes(a) -> np.ndarray:
    if hasattr(a, "detach"):
        a = a.detach().cpu().contiguous()
        if a.dtype.itemsize == 2:
            import torch

            a = a.view(torch.int16)
        a = a.numpy()
    return np.ascontiguousarray(np.asarray(a)).reshape(-1).view(np.uint8)


def _assert_same(og, oc, gpu, cpu, when: str) -> None:
    for i, (pg, pc) in enumerate(zip(gpu, cpu)):
        diff = np.flatnonzero(_bytes(pg) != _bytes(pc))
        assert diff.size == 0, f"{when}: params[{i}]: {diff.size} bytes differ, first at {diff[0]}"
    for i, (tg, tc) in enumerate(zip(og.tensors, oc.tensors)):
        for slot in tc.buffers:
            for k, (a, b) in enumerate(zip(tg.buffers[slot], tc.buffers[slot])):
                if b is None:
                    continue
                what = "absmax" if k else "data"
                diff = np.flatnonzero(_bytes(a) != _bytes(b))
                assert diff.size == 0, f"{when}: tensor {i} slot {slot} {what}: {diff.size} bytes differ"
    assert og.skipped_blocks == oc.skipped_blocks, when


def _gpus(torch) -> int:
    return torch.cuda.device_count()


# -- finding 2: one shared-memory limit per device and kernel --------------------------------------


def test_a_later_plan_does_not_lower_an_earlier_plans_shared_memory(torch_cuda):
    """AdEMAMix at block size 4096 needs 71,764 B of shared memory, Adam 53,304 B: building the Adam plan
    second used to set the device's limit to 53,304 B and the next AdEMAMix step failed at launch."""
    torch = torch_cuda
    sizes = (70001,)
    ga, ca, oga, oca = _gpu_cpu(torch, "AdEMAMix", sizes, bits=8, block_size=4096)
    _step_both(torch, oga, oca, sizes, 0)  # builds the AdEMAMix plan
    gb, cb, ogb, ocb = _gpu_cpu(torch, "Adam", sizes, bits=8, block_size=4096)
    _step_both(torch, ogb, ocb, sizes, 0)  # builds the Adam plan
    _step_both(torch, oga, oca, sizes, 1)
    torch.cuda.synchronize()
    _assert_same(oga, oca, ga, ca, "AdEMAMix after an Adam plan")
    _assert_same(ogb, ocb, gb, cb, "Adam")


# -- findings 3 and 4: canonical NaN, absmax as the largest bit pattern ----------------------------


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("name,opts", [("Adam", dict(weight_decay=0.1)), ("RMSprop", dict(centered=True))])
@pytest.mark.parametrize("bits", [32, 8])
def test_nans_made_by_a_step_have_the_cpus_bits(torch_cuda, name, opts, bits, dtype):
    """An infinite parameter under weight decay, NaN parameters with odd payloads and centered RMSprop's
    overflowing variance make NaNs: the GPU's (0x7FFFFFFF) used to differ from the CPU's (0xFFC00000)."""
    torch = torch_cuda
    n = 4097
    p = _values(n, 0)
    p.view(np.uint32)[17] = 0x7FC12345
    p.view(np.uint32)[1017] = 0xFFC00001
    p[2500] = np.inf
    g = _values(n, 1, 0.01)
    g[3000:3010] = 1e30
    tdt = getattr(torch, dtype)
    gpu = [torch.from_numpy(p.copy()).to(tdt).cuda()]
    cpu = [torch.from_numpy(p.copy()).to(tdt)]
    cls = getattr(octopt, name)
    og, oc = cls(gpu, bits=bits, lr=1e-3, **opts), cls(cpu, bits=bits, lr=1e-3, **opts)
    for _ in range(2):
        og.step([torch.from_numpy(g).to(tdt).cuda()])
        oc.step([torch.from_numpy(g).to(tdt)])
    torch.cuda.synchronize()
    assert torch.isnan(cpu[0]).any()
    canonical = {4: 0x7FC00000, 2: 0x7FC0 if dtype == "bfloat16" else 0x7E00}
    for where, t in (("GPU", gpu[0]), ("CPU", cpu[0])):
        b = _bytes(t).view(np.uint32 if t.element_size() == 4 else np.uint16)
        odd = np.flatnonzero(torch.isnan(t.cpu()).numpy() & (b != canonical[t.element_size()]))
        if where == "CPU" and odd.size:  # the CPU's fused AVX-512 Adam loop canonicalizes in its own branch
            pytest.xfail(f"the CPU's NaNs are not canonical yet ({name} {dtype} {bits}-bit): cpp/src/cpu")
        assert odd.size == 0, f"{where}: NaN 0x{int(b[odd[0]]):X} at {odd[0]} is not canonical"
    _assert_same(og, oc, gpu, cpu, f"{name} {dtype} {bits}-bit")


@pytest.mark.parametrize("order", [(3, 200), (200, 3)])
def test_quantize_absmax_is_the_largest_bit_pattern_on_the_gpu(torch_cuda, order):
    """Two NaN payloads in a block: a float max kept whichever NaN the reduction met first."""
    torch = torch_cuda
    x = _values(4097, 3)
    x.view(np.uint32)[order[0]] = 0x7FC00005
    x.view(np.uint32)[order[1]] = 0xFFC00009
    c_cpu, a_cpu = np.empty(x.size, np.uint8), np.empty(17, np.float32)
    c_gpu, a_gpu = torch.empty(x.size, dtype=torch.uint8, device="cuda"), torch.empty(17, device="cuda")
    for xs, out in ((x, (c_cpu, a_cpu)), (torch.from_numpy(x).cuda(), (c_gpu, a_gpu))):
        with pytest.raises(ValueError, match="contains NaN or Inf"):  # after writing out=
            octopt.quantize_blockwise(xs, block_size=256, out=out)
    torch.cuda.synchronize()
    assert a_cpu.view(np.uint32)[0] == 0x7FC00009
    assert (_bytes(a_gpu) == _bytes(a_cpu)).all() and (_bytes(c_gpu) == _bytes(c_cpu)).all()


# -- findings 5 and 6: host writes and uploads ordered with the caller's streams -------------------


def test_load_is_ordered_with_a_non_blocking_stream(torch_cuda):
    """load_state_dict writes step counts and state through the legacy default stream, which a
    non-blocking stream does not wait for: the next step on such a stream must see what was loaded."""
    torch = torch_cuda
    sizes = (1 << 22, 4097)
    gsrc, csrc, ogs, ocs = _gpu_cpu(torch, "Adam", sizes, bits=8)
    for s in range(3):
        _step_both(torch, ogs, ocs, sizes, s)
    torch.cuda.synchronize()
    sd_gpu, sd_cpu = ogs.state_dict(), ocs.state_dict()
    gpu, cpu, og, oc = _gpu_cpu(torch, "Adam", sizes, bits=8)
    side = torch.cuda.Stream()  # torch's side streams are non-blocking
    with torch.cuda.stream(side):
        _step_both(torch, og, oc, sizes, 7, stream=side.cuda_stream)
        og.load_state_dict(sd_gpu)
        oc.load_state_dict(sd_cpu)
        _step_both(torch, og, oc, sizes, 3, stream=side.cuda_stream)
    side.synchronize()
    _assert_same(og, oc, gpu, cpu, "a step on a non-blocking stream right after load_state_dict")
    assert [t.step for t in og.tensors] == [t.step for t in oc.tensors] == [4, 4]


def test_upload_is_ordered_with_a_step_on_another_stream(torch_cuda):
    """A long step on stream A, then upload() of a new lr on stream B and a step on B: the step on A must
    use the old lr throughout (upload used to overwrite the arguments while A's tiles still read them)."""
    torch = torch_cuda
    sizes = (1 << 24,)
    gpu, cpu, og, oc = _gpu_cpu(torch, "Adam", sizes, bits=8, lr=1e-3)
    a, b = torch.cuda.Stream(), torch.cuda.Stream()
    grads = [_values(n, 5, 0.1) for n in sizes]
    g_gpu = [torch.from_numpy(g).cuda() for g in grads]
    torch.cuda.synchronize()
    og.step(g_gpu, stream=a.cuda_stream)
    oc.step(grads)
    og.param_groups[0]["lr"] = oc.param_groups[0]["lr"] = 1e-1
    og.upload(g_gpu, stream=b.cuda_stream)
    og.step(g_gpu, stream=b.cuda_stream)
    oc.step(grads)
    torch.cuda.synchronize()
    _assert_same(og, oc, gpu, cpu, "lr changed by upload() on another stream")


# -- finding 8: a plan cannot be built during capture ----------------------------------------------


def test_first_step_during_capture_is_a_value_error(torch_cuda):
    torch = torch_cuda
    gpu = [torch.from_numpy(_values(4097, 0)).cuda()]
    opt = octopt.Adam(gpu, bits=8)
    grads = [torch.from_numpy(_values(4097, 1)).cuda()]
    side = torch.cuda.Stream()
    torch.cuda.synchronize()
    octopt._octopt._cuda_begin_capture(side.cuda_stream)
    try:
        with pytest.raises(ValueError, match=r"step: argument 'stream' is being captured .* eager step"):
            opt.step(grads, stream=side.cuda_stream)
    finally:
        kernels, nodes = octopt._octopt._cuda_end_capture_count_nodes(side.cuda_stream)
    assert (kernels, nodes) == (0, 0)
    opt.step(grads, stream=side.cuda_stream)  # an eager step afterwards works
    side.synchronize()


# -- finding 12: parallel percentile selection and block sums, with the CPU's bits ----------------


@pytest.mark.parametrize("block_size", [256, 4096])
@pytest.mark.parametrize("bits", [8, 4])
def test_percentile_scaling_matches_cpu(torch_cuda, block_size, bits):
    torch = torch_cuda
    sizes = N_RAGGED
    gpu, cpu, og, oc = _gpu_cpu(torch, "Adam", sizes, bits=bits, block_size=block_size, percentile=99.0)
    for s in range(3):
        _step_both(torch, og, oc, sizes, s)
    # ties: a gradient of equal magnitudes makes equal keys in the state
    ties = [np.where(_values(n, 9) > 0, 0.5, -0.5).astype(np.float32) for n in sizes]
    og.step([torch.from_numpy(g).cuda() for g in ties])
    oc.step(ties)
    torch.cuda.synchronize()
    _assert_same(og, oc, gpu, cpu, f"percentile 99, block {block_size}, {bits}-bit")


@pytest.mark.parametrize("name", ["LAMB", "LARS"])
def test_trust_ratio_sums_match_cpu_at_1m(torch_cuda, name):
    torch = torch_cuda
    sizes = (1_000_003, 4097)
    gpu, cpu, og, oc = _gpu_cpu(torch, name, sizes, bits=8, weight_decay=0.01)
    for s in range(2):
        _step_both(torch, og, oc, sizes, s)
    torch.cuda.synchronize()
    assert og.trust_ratios() == oc.trust_ratios()
    _assert_same(og, oc, gpu, cpu, name)


# -- findings 1 and 7: the array's device, and no context created on another ----------------------


def test_quantize_runs_on_the_arrays_device(torch_cuda):
    """An array on cuda:1 while cuda:0 is current: the launch must go to cuda:1."""
    torch = torch_cuda
    if _gpus(torch) < 2:
        pytest.skip("needs two GPUs")
    x = _values(70001, 4)
    c_cpu, a_cpu = octopt.quantize_blockwise(x)
    torch.cuda.set_device(0)
    c, a = octopt.quantize_blockwise(torch.from_numpy(x).to("cuda:1"))
    assert c.device.index == 1 and torch.cuda.current_device() == 0
    y = octopt.dequantize_blockwise(c, a, shape=x.shape)
    torch.cuda.synchronize(1)
    assert (_bytes(c) == _bytes(c_cpu)).all() and (_bytes(a) == _bytes(a_cpu)).all()
    assert y.device.index == 1


_NO_CONTEXT_SCRIPT = textwrap.dedent(
    """
    import ctypes, threading, sys
    import numpy as np, torch, octopt
    cuda = ctypes.CDLL("libcuda.so.1")
    def primary_active(dev):
        flags, active = ctypes.c_uint(), ctypes.c_int()
        assert cuda.cuDevicePrimaryCtxGetState(dev, ctypes.byref(flags), ctypes.byref(active)) == 0
        return bool(active.value)
    p = torch.ones(70001, device="cuda:1")
    opt = octopt.Adam([p], bits=8)
    opt.step([torch.full_like(p, 0.1)])
    torch.cuda.synchronize(1)
    if primary_active(0):
        print("SKIP device 0 already has a context"); sys.exit(0)
    out = {}
    t = threading.Thread(target=lambda: out.update(sd=opt.state_dict()))
    t.start(); t.join()
    assert "sd" in out
    print("ACTIVE" if primary_active(0) else "CLEAN")
    """
)


def test_a_thread_without_context_gets_none_on_gpu0(torch_cuda):
    """state_dict() from a thread with no CUDA context (an async checkpoint thread), for an optimizer on
    cuda:1: restoring the 'previous' device 0 used to create a primary context there."""
    torch = torch_cuda
    if _gpus(torch) < 2:
        pytest.skip("needs two GPUs")
    r = subprocess.run([sys.executable, "-c", _NO_CONTEXT_SCRIPT], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    if r.stdout.startswith("SKIP"):
        pytest.skip(r.stdout.strip())
    assert r.stdout.strip().endswith("CLEAN"), r.stdout
