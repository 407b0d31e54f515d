"""Import of a state slot in another layout, checked by the core (cpp/include/octopt/state_convert.hpp): the
messages of bad incoming state, through octopt.torch's load_state_dict and through the binding itself."""

from __future__ import annotations

import numpy as np
import octopt
import pytest

torch = pytest.importorskip("torch")
ot = pytest.importorskip("octopt.torch")

from octopt import _slot_convert  # noqa: E402

N = 5000
FN = "AdamW8bit.load_state_dict: the state of parameter 0"


def trained() -> tuple:
    w = torch.nn.Parameter(torch.linspace(-1, 1, N))
    opt = ot.AdamW8bit([w], lr=1e-2)
    w.grad = torch.linspace(1, -1, N)
    opt.step()
    return w, opt


def bnb_entry(absmax_blocks: int) -> dict:
    qmap = torch.from_numpy(octopt.dynamic_map(True))
    return {
        "step": 1,
        "state1": torch.zeros(N, dtype=torch.uint8),
        "qmap1": qmap,
        "absmax1": torch.ones(absmax_blocks),
        "state2": torch.zeros(N, dtype=torch.uint8),
        "qmap2": torch.from_numpy(octopt.dynamic_map(False)),
        "absmax2": torch.ones(20),
    }


def test_bnb_absmax_that_fits_no_block_size_is_refused_and_changes_nothing():
    w, opt = trained()
    before = {k: v.clone() for k, v in opt.state[w].items()}
    sd = opt.state_dict()
    del sd["octopt"]
    sd["state"][0] = bnb_entry(4)
    with pytest.raises(
        ValueError, match=rf"{FN}: 'absmax1' has 4 blocks, which fits no block size \(tried 256, 2048\)"
    ):
        opt.load_state_dict(sd)
    assert all(torch.equal(opt.state[w][k], v) for k, v in before.items())
    sd["state"][0] = bnb_entry(20)  # blocks of 256: accepted
    opt.load_state_dict(sd)


def test_native_codes_of_no_known_size_are_refused():
    w, opt = trained()
    sd = opt.state_dict()
    del sd["octopt"]  # no layout metadata: bits and block size are inferred from the sizes
    sd["state"][0]["exp_avg"] = torch.zeros(N - 7, dtype=torch.uint8)
    with pytest.raises(ValueError, match=rf"{FN}: 'exp_avg' has 4993 codes, which fits neither 8-bit \(5000\)"):
        opt.load_state_dict(sd)
    sd = opt.state_dict()
    del sd["octopt"]
    sd["state"][0]["exp_avg_absmax"] = torch.ones(4)
    with pytest.raises(ValueError, match=rf"{FN}: 'exp_avg_absmax' has 4 blocks, which fits no block size"):
        opt.load_state_dict(sd)


def test_float_state_of_another_dtype_is_converted():
    w, opt = trained()
    sd = opt.state_dict()
    del sd["octopt"]
    values = torch.linspace(-1e-3, 1e-3, N, dtype=torch.float64)
    sd["state"][0]["exp_avg"] = values
    del sd["state"][0]["exp_avg_absmax"]
    opt.load_state_dict(sd)
    st = opt.state[w]
    got = octopt.dequantize_blockwise(st["exp_avg"].reshape(-1), st["exp_avg_absmax"], octopt.dynamic_map(True), 256)
    assert torch.allclose(got, values.float(), rtol=0, atol=2e-5)
    sd["state"][0]["exp_avg"] = torch.arange(N)
    with pytest.raises(ValueError, match=rf"{FN}: 'exp_avg' must hold 5000 floating-point values, got 5000 of int64"):
        opt.load_state_dict(sd)


def test_binding_checks_forms_and_arrays():
    q = octopt.dynamic_map(True, bits=4)
    loose = _slot_convert.form(4, 32, q, packed=False)
    codes = np.zeros(40, np.uint8)
    codes[5] = 16
    with pytest.raises(ValueError, match="where: 'm' holds 4-bit codes one per byte, but one is 16"):
        _slot_convert.convert(40, loose, codes, np.ones(2, np.float32), _slot_convert.FLOAT, "where", ["m"])
    seg = _slot_convert.form(8, 32, octopt.dynamic_map(True), segments=(0, 50, 40), offset=0)
    with pytest.raises(ValueError, match=r"where: 'm' has segments that do not ascend over its elements \[0, 40\)"):
        _slot_convert.convert(
            40, seg, np.zeros(40, np.uint8), np.ones(4, np.float32), _slot_convert.FLOAT, "where", ["m"]
        )
    with pytest.raises(ValueError, match="'m' absmax must hold 2 float32 values .block size 32., got 2 of float64"):
        _slot_convert.convert(
            40,
            _slot_convert.form(8, 32, octopt.dynamic_map(True)),
            np.zeros(40, np.uint8),
            np.ones(2),
            _slot_convert.FLOAT,
            "where",
            ["m"],
        )
    with pytest.raises(TypeError, match="convert_slot: argument 'out_values' must be float32"):
        octopt._octopt.convert_slot(
            4,
            _slot_convert.FLOAT,
            np.zeros(4, np.float32),
            None,
            _slot_convert.FLOAT,
            np.zeros(4, np.float64),
            None,
            "where",
            ["m"],
        )
