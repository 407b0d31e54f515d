"""The C ABI's CUDA path (the same entry points with device pointers and a stream): 8-bit and 4-bit Adam
on torch CUDA tensors through ctypes gives the same parameters, bit for bit, as octopt.Adam on the same
tensors, and block-wise quantization on the device equals Python's. Skipped without a GPU."""

from __future__ import annotations

import ctypes as C

import numpy as np
import octopt
import pytest

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("bits", [8, 4])
def test_cuda_step_matches_python(torch_cuda, clib, capi, bits):
    torch = torch_cuda
    gen = torch.Generator(device="cuda").manual_seed(0)
    shapes = [(4097,), (33, 65)]
    init = [torch.randn(s, device="cuda", generator=gen) for s in shapes]
    grads = [[torch.randn(s, device="cuda", generator=gen) for s in shapes] for _ in range(3)]
    py_params = [p.clone() for p in init]
    py = octopt.Adam(py_params, bits=bits, min_8bit_size=0, lr=1e-2)
    c_params = [p.clone() for p in init]
    h = C.c_void_p()
    assert clib.octopt_optimizer_create(b"adam", C.byref(h)) == capi.OK
    for key, value in ((b"bits", bits), (b"min_8bit_size", 0), (b"lr", 1e-2)):
        assert clib.octopt_set(h, key, float(value)) == capi.OK
    stream = torch.cuda.current_stream()
    try:
        for p in c_params:
            shape = (C.c_int64 * p.dim())(*p.shape)
            status = clib.octopt_add_param(h, 0, p.data_ptr(), capi.FLOAT32, shape, p.dim(), 0, None)
            assert status == capi.OK, capi.last_error(clib)
        for g in grads:
            py.step(g)
            ptrs = (C.c_void_p * len(g))(*[x.data_ptr() for x in g])
            skipped = C.c_int64()
            status = clib.octopt_step(h, ptrs, None, len(g), C.c_void_p(stream.cuda_stream), C.byref(skipped))
            assert status == capi.OK, capi.last_error(clib)
            assert skipped.value == -1  # enqueued, never synchronized
        torch.cuda.synchronize()
        for a, b in zip(py_params, c_params):
            assert a.cpu().numpy().tobytes() == b.cpu().numpy().tobytes()
    finally:
        clib.octopt_optimizer_destroy(h)


def test_cuda_quantize_matches_python(torch_cuda, clib, capi):
    torch = torch_cuda
    x = torch.randn(4097, device="cuda")
    codes, absmax = octopt.quantize_blockwise(x, block_size=64)
    c_codes = torch.empty_like(codes)
    c_absmax = torch.empty_like(absmax)
    stream = C.c_void_p(torch.cuda.current_stream().cuda_stream)
    status = clib.octopt_quantize_blockwise(
        x.data_ptr(), capi.FLOAT32, x.numel(), None, 0, 64, 8, 0, 0, c_codes.data_ptr(), c_absmax.data_ptr(), 0,
        stream,
    )  # fmt: skip
    assert status == capi.OK, capi.last_error(clib)
    torch.cuda.synchronize()
    assert np.array_equal(c_codes.cpu().numpy(), codes.cpu().numpy())
    assert c_absmax.cpu().numpy().tobytes() == absmax.cpu().numpy().tobytes()
