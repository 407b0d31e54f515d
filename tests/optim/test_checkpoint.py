"""Optimizer.save / Optimizer.load through octopt.state_file (safetensors-compatible state files)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("octopt.state_file")

import octopt


SHAPES = ((4097,), (5000,), (33, 65))

CONFIGS = {
    "adam-8bit": (octopt.Adam, lambda ps: ps, {"lr": 1e-2, "bits": 8}),
    "adam-4bit-stochastic": (
        octopt.Adam,
        lambda ps: ps,
        {"lr": 1e-2, "bits": 4, "stochastic_rounding": True, "seed": 5},
    ),
    "sgd-momentum-8bit": (octopt.SGD, lambda ps: ps, {"lr": 1e-2, "momentum": 0.9, "bits": 8}),
    "adamw-multigroup": (
        octopt.AdamW,
        lambda ps: [
            {"params": ps[:1], "bits": 4, "lr": 1e-2},
            {"params": ps[1:], "bits": 8, "block_size": 128},
        ],
        {"lr": 3e-3},
    ),
}


def _run(make, grad_sequence, config, framework, steps, params=None, path=None, load=None):
    cls, groups, kw = CONFIGS[config]
    params = params or [make(p, framework) for p in _initial()]
    opt = cls(groups(params), **kw)
    if load is not None:
        opt.load(load)
    grads = grad_sequence(np.random.default_rng(21), SHAPES, 10)
    for gs in grads[10 - steps :] if load is not None else grads[:steps]:
        opt.step([make(g, framework) for g in gs])
    if path is not None:
        opt.save(path)
    return opt, params


def _initial():
    rng = np.random.default_rng(20)
    return [rng.standard_normal(s).astype(np.float32) for s in SHAPES]


@pytest.mark.parametrize("framework", ["numpy", "torch"])
@pytest.mark.parametrize("config", list(CONFIGS))
def test_save_load_continue_is_bit_identical(
    tmp_path,
    config,
    framework,
    assert_params_bit_equal,
    assert_snapshots_equal,
    make,
    grad_sequence,
    snapshot,
    to_numpy,
):
    if framework == "torch":
        pytest.importorskip("torch")
    path = tmp_path / "opt.safetensors"
    opt, params = _run(make, grad_sequence, config, framework, 5, path=path)
    resumed_params = [make(to_numpy(p), framework) for p in params]
    for gs in grad_sequence(np.random.default_rng(21), SHAPES, 10)[5:]:
        opt.step([make(g, framework) for g in gs])
    resumed, _ = _run(make, grad_sequence, config, framework, 5, params=resumed_params, load=path)
    assert_params_bit_equal(resumed_params, params)
    assert_snapshots_equal(snapshot(resumed), snapshot(opt))


def test_file_opens_with_safetensors(tmp_path, state_arrays, make, grad_sequence):
    st = pytest.importorskip("safetensors.numpy")
    path = tmp_path / "opt.safetensors"
    opt, _ = _run(make, grad_sequence, "adamw-multigroup", "numpy", 3, path=path)
    tensors = st.load_file(str(path))
    state = state_arrays(opt)
    # every state array is in the file, unchanged: quantized slots as codes + absmax, 32-bit ones as floats
    assert len(tensors) == len(state)
    for key, want in state.items():
        i, slot, part = key.split(".")
        name = [
            n
            for n in tensors
            if n.split(".")[1] == i and n.split(".")[2] == slot and (part == "absmax") == n.endswith("absmax")
        ]
        assert len(name) == 1, (key, sorted(tensors))
        np.testing.assert_array_equal(tensors[name[0]].reshape(-1), want.reshape(-1))
    from safetensors import safe_open

    with safe_open(str(path), "np") as f:
        meta = f.metadata()
    assert "adamw" in meta.values()


def _fresh(kind="adam", bits=8, shapes=SHAPES):
    rng = np.random.default_rng(30)
    params = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    cls = {"adam": octopt.Adam, "sgd": octopt.SGD, "adamw": octopt.AdamW}[kind]
    kw = {"momentum": 0.9} if kind == "sgd" else {}
    opt = cls(params, lr=1e-3, bits=bits, **kw)
    opt.step([rng.standard_normal(s).astype(np.float32) for s in shapes])
    return opt


MISMATCHES = [
    ("other shape, same sizes", {"shapes": ((4097,), (50, 100), (33, 65))}, r"shape \(5000,\).*\(50, 100\)"),
    ("other sizes", {"shapes": ((4097,), (5001,), (33, 65))}, r"5000 elements.*5001"),
    ("fewer tensors", {"shapes": ((4097,), (5000,))}, r"3 tensors.*2 parameters"),
    ("other optimizer", {"kind": "sgd"}, r"'adam'.*'sgd'"),
    ("other bits", {"bits": 4}, r"bits=8.*4"),
    ("32-bit state", {"bits": 32}, r"bits=8.*32"),
]


@pytest.mark.parametrize("what, kw, pattern", MISMATCHES, ids=[m[0] for m in MISMATCHES])
def test_load_mismatch_raises_and_changes_nothing(tmp_path, what, kw, pattern, snapshot, assert_snapshots_equal):
    path = tmp_path / "opt.safetensors"
    _fresh().save(path)
    opt = _fresh(**kw)
    before = snapshot(opt)
    with pytest.raises(ValueError, match=pattern):
        opt.load(path)
    assert_snapshots_equal(snapshot(opt), before)


def _saved_bytes(tmp_path):
    path = tmp_path / "good.safetensors"
    _fresh().save(path)
    return path.read_bytes()


def _data_start(blob):
    return 8 + int.from_bytes(blob[:8], "little")


@pytest.mark.parametrize(
    "cut", ["empty", "4 bytes", "length only", "mid header", "header only", "mid data", "last byte"]
)
def test_truncated_file_raises_state_file_error(tmp_path, cut, snapshot, assert_snapshots_equal):
    blob = _saved_bytes(tmp_path)
    start = _data_start(blob)
    size = {
        "empty": 0,
        "4 bytes": 4,
        "length only": 8,
        "mid header": (8 + start) // 2,
        "header only": start,
        "mid data": (start + len(blob)) // 2,
        "last byte": len(blob) - 1,
    }[cut]
    path = tmp_path / "cut.safetensors"
    path.write_bytes(blob[:size])
    opt = _fresh()
    before = snapshot(opt)
    with pytest.raises(octopt.StateFileError):
        opt.load(path)
    assert_snapshots_equal(snapshot(opt), before)


@pytest.mark.parametrize(
    "where", ["first data byte", "middle of the data", "last byte", "header length", "header brace"]
)
def test_bit_flipped_file_raises_state_file_error(tmp_path, where, snapshot, assert_snapshots_equal):
    blob = bytearray(_saved_bytes(tmp_path))
    start = _data_start(blob)
    at = {
        "first data byte": start,
        "middle of the data": (start + len(blob)) // 2,
        "last byte": len(blob) - 1,
        "header length": 2,
        "header brace": 8,
    }[where]
    blob[at] ^= 0x04
    path = tmp_path / "flipped.safetensors"
    path.write_bytes(bytes(blob))
    opt = _fresh()
    before = snapshot(opt)
    with pytest.raises(octopt.StateFileError):
        opt.load(path)
    assert_snapshots_equal(snapshot(opt), before)


def test_state_file_error_is_a_value_error():
    assert issubclass(octopt.StateFileError, ValueError)


def test_a_state_file_that_is_not_an_optimizer_state(tmp_path, snapshot, assert_snapshots_equal):
    from octopt import state_file

    path = tmp_path / "other.safetensors"
    state_file.save(str(path), {"x": np.zeros(3, np.float32)}, {"note": "not an optimizer"})
    opt = _fresh()
    before = snapshot(opt)
    with pytest.raises(octopt.StateFileError, match="not an octopt optimizer state file"):
        opt.load(path)
    assert_snapshots_equal(snapshot(opt), before)


def test_missing_file_raises_oserror(tmp_path, snapshot, assert_snapshots_equal):
    opt = _fresh()
    before = snapshot(opt)
    with pytest.raises(OSError):
        opt.load(tmp_path / "nope.safetensors")
    assert_snapshots_equal(snapshot(opt), before)


def test_save_replaces_an_existing_file(tmp_path, assert_snapshots_equal, snapshot):
    path = tmp_path / "opt.safetensors"
    path.write_bytes(b"old contents")
    opt = _fresh()
    opt.save(path)
    other = _fresh()
    other.step([np.ones(s, np.float32) for s in SHAPES])
    other.load(path)
    assert_snapshots_equal(snapshot(other), snapshot(opt) | {"params": snapshot(other)["params"]})
