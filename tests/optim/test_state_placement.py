"""Large host state buffers start where the core places them within a 4 KiB page (cpp/src/state_placement.hpp,
python/octopt/_placement.py): at least a quarter page from the parameter and from each other, 64-byte aligned,
contiguous and writeable, and a step gives exactly what it gives with state allocated plainly. The placement
rule itself is tested in tests/cpp/test_state_placement.cpp."""

from __future__ import annotations

import numpy as np
import octopt
import pytest
from octopt import _arrays

MIN_BYTES = 1 << 20  # the core places host buffers of this many bytes or more

PAGE = 4096
N = 2**20 + 1  # float32 state of 4 MiB + 4 bytes and 8-bit codes of 1 MiB + 1: both placed; ragged blocks


def address(a) -> int:
    return int(a.data_ptr()) if hasattr(a, "data_ptr") else int(a.__array_interface__["data"][0])


def page_distance(a: int, b: int) -> int:
    d = (a - b) % PAGE
    return min(d, PAGE - d)


def plain_factory(count, dtype, param, info, slot, buffer, page_offset):
    return _arrays.empty(param, info, (count,), dtype)


@pytest.mark.parametrize("bits", [32, 8])
def test_large_state_is_placed_clear_of_the_parameter(cpu_array_case, bits):
    rng = np.random.default_rng(3)
    p = cpu_array_case.make(rng.standard_normal(N))
    opt = octopt.Adam([p], bits=bits)
    placed = [address(p) % PAGE]
    for data, absmax in opt.tensors[0].buffers.values():
        for buf in (data, absmax):
            if buf is None or buf.nbytes < MIN_BYTES:
                continue
            where = address(buf)
            assert where % 64 == 0
            assert all(page_distance(where, other) >= PAGE // 4 for other in placed), (where % PAGE, placed)
            placed.append(where % PAGE)
            if cpu_array_case.framework == "torch":
                assert buf.is_contiguous()
            else:
                assert buf.flags.c_contiguous and buf.flags.writeable
    assert len(placed) == 3  # the parameter and Adam's two moments (8-bit: their codes)


@pytest.mark.parametrize("bits", [32, 8, 4])
def test_placement_changes_no_result(cpu_array_case, bits):
    rng = np.random.default_rng(4)
    values = rng.standard_normal(N)
    grads = [rng.standard_normal(N).astype(np.float32) * np.float32(0.1) for _ in range(3)]
    results = []
    for factory in (None, plain_factory):
        p = cpu_array_case.make(values)
        opt = octopt.Adam([p], lr=1e-2, bits=bits, _state_factory=factory)
        for g in grads:
            opt.step([cpu_array_case.make(g, dtype="float32")])
        sd = opt.state_dict()["state"][0]["slots"]
        results.append((cpu_array_case.to_numpy(p), {k: np.asarray(v["data"]).copy() for k, v in sd.items()}))
    (p_placed, s_placed), (p_plain, s_plain) = results
    np.testing.assert_array_equal(p_placed, p_plain)
    for name in s_plain:
        np.testing.assert_array_equal(s_placed[name], s_plain[name])


def test_bitsandbytes_namespace_places_its_state():
    torch = pytest.importorskip("torch")
    bnb_optim = pytest.importorskip("octopt.bnb.optim")
    p = torch.nn.Parameter(torch.randn(N))
    p.grad = torch.randn(N) * 0.1
    opt = bnb_optim.Adam8bit([p])
    opt.step()
    state = opt.state[p]
    placed = [p.data_ptr() % PAGE]
    for name in ("state1", "state2"):
        where = state[name].data_ptr()
        assert where % 64 == 0
        assert all(page_distance(where, other) >= PAGE // 4 for other in placed), (name, where % PAGE, placed)
        placed.append(where % PAGE)
