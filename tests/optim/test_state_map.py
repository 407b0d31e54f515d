"""The layout option ``state_map``: 8-bit state in fp8 e4m3 codes (octopt.fp8_map()) instead of the dynamic
maps. Codes against the NumPy reference, errors, state dicts and state files."""

from __future__ import annotations

import json

import numpy as np
import octopt
import pytest
from octopt import state_file

N = 8192


def _grad(seed: int, n: int = N) -> np.ndarray:
    rng = np.random.default_rng(seed)
    # a wide dynamic range inside each block, so that tiny values meet fp8's subnormals and zero
    g = rng.standard_normal(n) * np.exp(rng.uniform(-12, 0, n))
    g[::101] = 0.0
    return g.astype(np.float32)


def _codes(opt, slot: str) -> tuple[np.ndarray, np.ndarray]:
    entry = opt.state_dict()["state"][0]["slots"][slot]
    return np.asarray(entry["data"]), np.asarray(entry["absmax"])


def test_fp8_state_layout():
    opt = octopt.AdamW([np.zeros(N, np.float32)], bits=8, state_map="fp8")
    slots = opt.state_layout()[0]["slots"]
    assert slots == {s: {"bits": 8, "block_size": 256, "map": "fp8_e4m3"} for s in ("exp_avg", "exp_avg_sq")}
    assert opt.state_bytes() == 2 * (N + 4 * N // 256)  # as the dynamic 8-bit maps
    assert opt.param_groups[0]["state_map"] == "fp8"
    # the option changes nothing where no state is quantized
    small = octopt.AdamW([np.zeros(10, np.float32)], bits=8, state_map="fp8")
    assert small.state_layout()[0]["slots"]["exp_avg"]["map"] == "float32"
    assert octopt.AdamW([np.zeros(N, np.float32)], bits=32, state_map="fp8").state_bytes() == 2 * 4 * N


@pytest.mark.parametrize(
    "kw, message",
    [
        (dict(bits=4, state_map="fp8"), "'state_map' 'fp8' is an 8-bit map, but 'bits' is 4"),
        (
            dict(bits=8, first_moment_bits=4, state_map="fp8"),
            "'state_map' 'fp8' is an 8-bit map, but 'first_moment_bits' is 4",
        ),
        (dict(bits=8, state_map="fp4"), "'state_map' must be 'dynamic' or 'fp8', got 'fp4'"),
        (dict(bits=8, state_map=8), "'state_map' must be 'dynamic' or 'fp8', got 8"),
        (dict(bits=8, state_map=None), "'state_map' must be 'dynamic' or 'fp8', got None"),
    ],
)
def test_bad_state_map(kw, message):
    with pytest.raises(ValueError, match="^AdamW: " + message):
        octopt.AdamW([np.zeros(N, np.float32)], **kw)


def test_state_map_is_fixed_once_the_group_exists():
    w = np.zeros(N, np.float32)
    opt = octopt.AdamW([w], bits=8, state_map="fp8")
    opt.param_groups[0]["state_map"] = "dynamic"
    with pytest.raises(ValueError, match="'state_map'='dynamic' but its state was laid out with 'fp8'"):
        opt.step([w.copy()])


def test_map_values_and_names_of_the_core():
    q = octopt._octopt.state_map_values(8, True, "fp8")
    assert np.array_equal(np.asarray(q, np.float32), octopt.fp8_map())
    assert np.array_equal(octopt._octopt.state_map_values(8, False, "fp8"), q)  # unsigned: the same values
    with pytest.raises(ValueError, match="fp8 map has 8 bits"):
        octopt._octopt.state_map_values(4, True, "fp8")
    with pytest.raises(ValueError, match="state_map_values: 'state_map' must be"):
        octopt._octopt.state_map_values(8, True, "e5m2")


def test_codes_are_the_nearest_fp8_map_entry(ref_blockwise):
    """SGD's momentum buffer starts as the gradient itself and Adagrad's sum as g*g (one float32 product),
    so the codes after one step are the block-wise quantization of known values: the nearest fp8_map
    entry (signed), and for the unsigned sum the nearest one that is not zero unless the value is."""
    q = octopt.fp8_map()
    g = _grad(1)
    sgd = octopt.SGD([np.zeros(N, np.float32)], lr=0.1, momentum=0.9, bits=8, state_map="fp8")
    sgd.step([g])
    codes, absmax = _codes(sgd, "momentum_buffer")
    want, want_absmax = ref_blockwise.quantize(g, q, 256)
    assert np.array_equal(absmax, want_absmax)
    assert np.array_equal(codes, want)

    ada = octopt.Adagrad([np.zeros(N, np.float32)], bits=8, state_map="fp8")
    ada.step([g])
    codes, absmax = _codes(ada, "sum")
    v = g * g
    want, want_absmax = ref_blockwise.quantize(v, q, 256)
    r = ref_blockwise.ratios(v, want_absmax, 256, np.arange(N))
    floor = int(np.flatnonzero(q > 0)[0])  # keep_nonzero: a positive value never decodes to zero
    lifted = (r > 0) & (q[want] == 0)
    assert lifted.sum() > 10  # the case is exercised
    want[lifted] = floor
    assert np.array_equal(absmax, want_absmax)
    assert np.array_equal(codes, want)
    assert np.all((q[codes] > 0) == (v > 0))


def test_fp8_trajectory_is_close_to_float32_adamw():
    rng = np.random.default_rng(0)
    w0 = rng.standard_normal(N).astype(np.float32)
    runs = {}
    for name, kw in {"f32": dict(bits=32), "fp8": dict(bits=8, state_map="fp8"), "dyn": dict(bits=8)}.items():
        w = w0.copy()
        opt = octopt.AdamW([w], lr=1e-2, **kw)
        for s in range(20):
            opt.step([_grad(100 + s) + 0.1 * w])
        runs[name] = w
    moved = np.linalg.norm(runs["f32"] - w0)
    # fp8 has 3 mantissa bits where the dynamic map has up to 6: a coarser second moment, same direction
    assert np.linalg.norm(runs["fp8"] - runs["f32"]) < 0.05 * moved
    assert np.linalg.norm(runs["dyn"] - runs["f32"]) < 0.05 * moved


def _run(opt, w, steps, start=0):
    for s in range(start, start + steps):
        opt.step([_grad(200 + s)])
    return w


def _continue_alike(a, w, b, w2):
    """Two more steps of the original and of the restored optimizer give the same parameters."""
    _run(a, w, 2, 3)
    _run(b, w2, 2, 3)
    assert np.array_equal(w, w2)


def test_state_dict_round_trip():
    w = np.random.default_rng(3).standard_normal(N).astype(np.float32)
    a = octopt.Adam([w], bits=8, state_map="fp8")
    _run(a, w, 3)
    sd = a.state_dict()
    assert sd["param_groups"][0]["state_map"] == "fp8"
    assert sd["state"][0]["slots"]["exp_avg"]["map"] == "fp8_e4m3"
    w2 = w.copy()
    b = octopt.Adam([w2], bits=8, state_map="fp8")
    b.load_state_dict(sd)
    _continue_alike(a, w, b, w2)
    with pytest.raises(ValueError, match="state_map='fp8' in the state but 'dynamic' here"):
        octopt.Adam([w.copy()], bits=8).load_state_dict(sd)


def test_state_file_round_trip(tmp_path):
    path = tmp_path / "fp8.octopt"
    w = np.random.default_rng(4).standard_normal(N).astype(np.float32)
    a = octopt.AdamW([w], bits=8, state_map="fp8")
    _run(a, w, 3)
    a.save(path)
    tensors, meta = state_file.load(path)
    assert json.loads(meta["octopt.hparams"])[0]["state_map"] == "fp8"
    assert json.loads(meta["octopt.tensors"])[0]["slots"]["exp_avg_sq"]["map"] == "fp8_e4m3"
    w2 = w.copy()
    b = octopt.AdamW([w2], bits=8, state_map="fp8")
    b.load(path)
    _continue_alike(a, w, b, w2)
    with pytest.raises(ValueError, match='state_map="fp8" in the file but "dynamic" here'):
        octopt.AdamW([w.copy()], bits=8).load(path)

    # a file whose map name is unknown, and one written before the option existed (no state_map key)
    for hp_edit, slot_map, message in [
        (None, "fp8_e5m2", 'slot \'exp_avg\' has map="fp8_e5m2" in the file but "fp8_e4m3" here'),
        ("drop", "fp8_e4m3", 'state_map="dynamic" in the file but "fp8" here'),
    ]:
        layout = json.loads(meta["octopt.tensors"])
        layout[0]["slots"]["exp_avg"]["map"] = slot_map
        groups = json.loads(meta["octopt.hparams"])
        if hp_edit == "drop":
            del groups[0]["state_map"]
        edited = dict(meta, **{"octopt.tensors": json.dumps(layout), "octopt.hparams": json.dumps(groups)})
        bad = tmp_path / "edited.octopt"
        state_file.save(bad, tensors, edited)
        with pytest.raises(ValueError, match=message.replace("(", r"\(")):
            octopt.AdamW([w.copy()], bits=8, state_map="fp8").load(bad)
