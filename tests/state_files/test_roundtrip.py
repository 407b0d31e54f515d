"""State files (docs/format.md): CRC-32C, round trips, safetensors compatibility, accepted inputs and the
format-version-1 fixture.
"""

from __future__ import annotations

import importlib.util
import json
import os
import random
import struct
from pathlib import Path

import numpy as np
import pytest

from octopt import _octopt
from octopt import state_file as sf


DATA = Path(__file__).parent / "data"
ALL_NUMPY_DTYPES = [
    "float64",
    "float32",
    "float16",
    "int64",
    "int32",
    "int16",
    "int8",
    "uint64",
    "uint32",
    "uint16",
    "uint8",
    "bool",
]
SAFETENSORS_NAME = {
    "float64": "F64",
    "float32": "F32",
    "float16": "F16",
    "int64": "I64",
    "int32": "I32",
    "int16": "I16",
    "int8": "I8",
    "uint64": "U64",
    "uint32": "U32",
    "uint16": "U16",
    "uint8": "U8",
    "bool": "BOOL",
}


# --------------------------------------------------------------------------------------------------
# CRC-32C


def test_crc32c_check_value_and_paths_agree(crc32c_reference):
    assert _octopt.crc32c(b"123456789") == 0xE3069283
    assert _octopt.crc32c(b"123456789", "portable") == 0xE3069283
    assert _octopt.crc32c(b"") == 0
    impls = ["portable"] + (["sse4.2"] if _octopt.crc32c_hardware() else [])
    rng = random.Random(1)
    blob = bytes(rng.getrandbits(8) for _ in range(5000))
    for n in list(range(0, 80)) + [255, 256, 1000, 4093]:
        for start in (0, 1, 3, 7):
            chunk = blob[start : start + n]
            want = _octopt.crc32c(chunk, "portable")
            assert all(_octopt.crc32c(chunk, i) == want for i in impls + ["auto"])
            if n < 80 and start == 0:
                assert want == crc32c_reference(chunk)
    assert _octopt.crc32c(blob, "portable") == crc32c_reference(blob)
    with pytest.raises(ValueError, match="crc32c: argument 'impl'"):
        _octopt.crc32c(b"x", "zlib")


# --------------------------------------------------------------------------------------------------
# Round trips and compatibility


@pytest.mark.parametrize("shape", [(), (0,), (3, 0, 2), (5,), (2, 3, 4)])
def test_round_trip_all_dtypes(tmp_path, shape, files_in):
    rng = np.random.default_rng(0)
    tensors = {}
    for name in ALL_NUMPY_DTYPES:
        if name == "bool":
            tensors[name] = rng.integers(0, 2, size=shape).astype(bool)
        elif name.startswith(("int", "uint")):
            info = np.iinfo(name)
            tensors[name] = rng.integers(info.min, info.max, size=shape, dtype=name, endpoint=True)
        else:
            tensors[name] = rng.standard_normal(size=shape).astype(name)
    meta = {"step": "7", "unicode \u00e9\U0001f600": '"quotes" \\ back\nslash \u2603', "empty": ""}
    path = tmp_path / "state.safetensors"
    sf.save(path, tensors, meta)
    got, got_meta = sf.load(path)
    assert list(got) == list(tensors)
    assert got_meta == meta
    for name, a in tensors.items():
        assert got[name].dtype == a.dtype and got[name].shape == a.shape
        np.testing.assert_array_equal(got[name], a)
    dtypes = [dtype for _, _, dtype in _octopt.load_state_file(path)[1]]
    assert dtypes == [SAFETENSORS_NAME[name] for name in tensors]
    assert files_in(tmp_path) == ["state.safetensors"]


def test_names_and_empty_files(tmp_path):
    path = tmp_path / "n.safetensors"
    names = ['quote " back \\ slash', "caf\u00e9/\U0001f600", "tab\tnew\nline", "x" * 1024, "_single"]
    sf.save(path, {n: np.array([k], np.int32) for k, n in enumerate(names)}, {"octopt.x": "y"})
    got, meta = sf.load(path)
    assert list(got) == names and [int(a[0]) for a in got.values()] == list(range(len(names)))
    assert meta == {"octopt.x": "y"}
    sf.save(path, {})
    assert sf.load(path) == ({}, {})
    assert sf.inspect(path)["data_size"] == 0


def test_replaced_file_keeps_its_permissions(tmp_path):
    path = tmp_path / "p.safetensors"
    sf.save(path, {"a": np.zeros(1)})
    os.chmod(path, 0o600)
    sf.save(path, {"a": np.ones(1)})
    assert (path.stat().st_mode & 0o777) == 0o600


def test_layout_is_safetensors(tmp_path, crc32c_reference, header_checksum):
    path = tmp_path / "s.safetensors"
    sf.save(path, {"x": np.ones(3, np.float32), "y": np.arange(2, dtype=np.int16)}, {"k": "v"})
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    assert n % 8 == 0 and len(raw) == 8 + n + 12 + 4
    header = json.loads(raw[8 : 8 + n])
    assert list(header) == ["__metadata__", "x", "y"]
    assert header["x"] == {"dtype": "F32", "shape": [3], "data_offsets": [0, 12]}
    assert header["y"] == {"dtype": "I16", "shape": [2], "data_offsets": [12, 16]}
    meta = header["__metadata__"]
    assert meta["octopt.format"] == "octopt-state" and meta["octopt.format_version"] == "1"
    assert meta["k"] == "v"
    crcs = json.loads(meta["octopt.crc32c"])
    assert crcs["x"] == f"{crc32c_reference(raw[8 + n : 8 + n + 12]):08x}"
    assert crcs["y"] == f"{crc32c_reference(raw[8 + n + 12 :]):08x}"
    entries = {k: v for k, v in header.items() if k != "__metadata__"}
    assert crcs["__header__"] == f"{header_checksum(meta, entries):08x}"


def test_safetensors_reads_our_files(tmp_path):
    safetensors_numpy = pytest.importorskip("safetensors.numpy")
    from safetensors import safe_open

    tensors = {name: (np.arange(6) % 2).astype(name).reshape(2, 3) for name in ALL_NUMPY_DTYPES}
    tensors["scalar"] = np.array(2.5, dtype=np.float32)
    tensors["empty"] = np.zeros((0, 3), dtype=np.float32)
    meta = {"octopt.step": "12", "x": "\u00e9"}
    path = tmp_path / "s.safetensors"
    sf.save(path, tensors, meta)
    loaded = safetensors_numpy.load_file(str(path))
    assert set(loaded) == set(tensors)
    for name, a in tensors.items():
        assert loaded[name].dtype == a.dtype
        np.testing.assert_array_equal(loaded[name], a)
    with safe_open(str(path), framework="np") as f:
        stored = f.metadata()
    assert {k: stored[k] for k in meta} == meta
    assert stored["octopt.format"] == "octopt-state" and "octopt.crc32c" in stored


def test_bfloat16_round_trip_with_torch(tmp_path):
    torch = pytest.importorskip("torch")
    from safetensors import safe_open

    bf = torch.tensor([1.0, -2.5, 0.0, 3.140625, float("inf")], dtype=torch.bfloat16)
    path = tmp_path / "bf.safetensors"
    sf.save(path, {"bf": bf, "f32": torch.arange(3, dtype=torch.float32), "t": torch.ones(2, 2).t()})
    with safe_open(str(path), framework="pt") as f:
        assert f.get_tensor("bf").dtype == torch.bfloat16
        assert torch.equal(f.get_tensor("bf"), bf)
        assert torch.equal(f.get_tensor("t"), torch.ones(2, 2))
    bits, _ = sf.load(path)
    assert bits["bf"].dtype == np.uint16
    np.testing.assert_array_equal(bits["bf"], bf.view(torch.int16).numpy().view(np.uint16))
    wide, _ = sf.load(path, bfloat16="float32")
    np.testing.assert_array_equal(wide["bf"], bf.float().numpy())
    items = _octopt.load_state_file(path)[1]
    assert [(name, dtype) for name, _, dtype in items] == [("bf", "BF16"), ("f32", "F32"), ("t", "F32")]
    with pytest.raises(ValueError, match="argument 'bfloat16'"):
        sf.load(path, bfloat16="float16")


def test_bfloat16_from_uint16_bits(tmp_path):
    path = tmp_path / "bf.safetensors"
    bits = np.array([0x3F80, 0x4000], dtype=np.uint16)
    _octopt.save_state_file(str(path), [("w", bits, "BF16")], {})
    got, _ = sf.load(path, bfloat16="float32")
    np.testing.assert_array_equal(got["w"], [1.0, 2.0])
    with pytest.raises(ValueError, match="dtype 'BF16' cannot be stored from an array of float32"):
        _octopt.save_state_file(str(path), [("w", np.zeros(2, np.float32), "BF16")], {})


def test_inputs_accepted(tmp_path):
    ro = np.arange(4, dtype=np.float32)
    ro.flags.writeable = False
    tensors = {
        "readonly": ro,
        "strided": np.arange(10, dtype=np.int32)[::2],
        "fortran": np.asfortranarray(np.arange(6, dtype=np.float64).reshape(2, 3)),
        "bigendian": np.arange(3, dtype=">u4"),
        "list": [1.5, 2.5],
        "scalar": 7,
    }
    paths = (tmp_path / "p.safetensors", str(tmp_path / "s.safetensors"), os.fsencode(tmp_path / "b.safetensors"))
    for path in paths:
        sf.save(path, tensors)
        got, meta = sf.load(path)
        assert meta == {}
        for name, a in tensors.items():
            np.testing.assert_array_equal(got[name], np.asarray(a))
        assert got["bigendian"].dtype == np.dtype("<u4")
        assert sf.inspect(path)["valid"]


def test_loaded_arrays_outlive_each_other_and_are_aligned(tmp_path):
    path = tmp_path / "a.safetensors"
    # 3 bytes of U8 first: the F64 after it sits at an odd offset and must come back as an aligned copy
    sf.save(path, {"u": np.array([1, 2, 3], np.uint8), "d": np.array([1.5, -2.0]), "f": np.arange(5, dtype=np.float32)})
    got, _ = sf.load(path)
    d = got.pop("d")
    del got
    assert d.ctypes.data % 8 == 0 and d.flags.aligned
    np.testing.assert_array_equal(d, [1.5, -2.0])
    d[0] = 9  # writable, and nobody else's memory
    assert d[0] == 9


def test_fixture_of_format_version_1_still_reads():
    spec = importlib.util.spec_from_file_location("make_state_file_v1", DATA / "make_state_file_v1.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    meta, items = _octopt.load_state_file(DATA / "state_file_v1.safetensors")
    assert meta == gen.METADATA
    want = gen.expected()
    assert [(n, d) for n, _, d in items] == [(n, d) for n, _, d in want]
    for (_, got, _), (_, a, _) in zip(items, want):
        assert got.dtype == a.dtype and got.shape == a.shape
        np.testing.assert_array_equal(got, a)
    report = sf.inspect(DATA / "state_file_v1.safetensors")
    assert report["valid"] and report["format_version"] == "1"


def test_writer_output_is_deterministic(tmp_path):
    """While the writer writes version 1, it reproduces the fixture byte for byte."""
    spec = importlib.util.spec_from_file_location("make_state_file_v1", DATA / "make_state_file_v1.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    out = tmp_path / "again.safetensors"
    gen.write(str(out))
    assert out.read_bytes() == (DATA / "state_file_v1.safetensors").read_bytes()


def test_hand_built_file_matches_spec(tmp_path, two_tensors, write, build):
    entries, data = two_tensors()
    path = write(tmp_path, build(entries, data, {"user": "x"}))
    got, meta = sf.load(path)
    assert meta == {"user": "x"}
    np.testing.assert_array_equal(got["a"], np.arange(6, dtype=np.float32).reshape(2, 3))
    # JSON escapes in names and values, including a surrogate pair
    entries = {"caf\u00e9\U0001f600": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}}
    raw = build(entries, b"\x05", {"k": "tab\t\u2603"})
    assert b"\\ud83d\\ude00" in raw  # json.dumps escapes non-ASCII
    got, meta = sf.load(write(tmp_path, raw))
    assert list(got) == ["caf\u00e9\U0001f600"] and meta == {"k": "tab\t\u2603"}
