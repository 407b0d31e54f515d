"""State files (docs/format.md): round trips, safetensors compatibility, validation of corrupt files,
atomic writes, ``inspect`` and the ``octopt inspect`` command.

Corrupt files are built by hand here (``build``), with an implementation of the header checksum written
from the specification, so these tests also check the spec against the C++ writer.
"""

from __future__ import annotations

import importlib.util
import json
import os
import pathlib
import random
import re
import resource
import signal
import struct
import subprocess
import sys

import numpy as np
import pytest

import octopt
from octopt import _octopt
from octopt import state_file as sf
from octopt.cli import main as cli_main
from octopt.state_file import StateFileError

DATA = pathlib.Path(__file__).parent / "data"
ALL_NUMPY_DTYPES = ["float64", "float32", "float16", "int64", "int32", "int16", "int8", "uint64", "uint32",
                    "uint16", "uint8", "bool"]
SAFETENSORS_NAME = {"float64": "F64", "float32": "F32", "float16": "F16", "int64": "I64", "int32": "I32",
                    "int16": "I16", "int8": "I8", "uint64": "U64", "uint32": "U32", "uint16": "U16",
                    "uint8": "U8", "bool": "BOOL"}


def crc32c_reference(data: bytes) -> int:
    """Bit-at-a-time CRC-32C, straight from the definition (reflected polynomial 0x82F63B78)."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def sample(n: int) -> np.ndarray:
    return np.random.default_rng(n).standard_normal(n).astype(np.float32)


def files_in(folder) -> list[str]:
    return sorted(os.listdir(folder))


# --------------------------------------------------------------------------------------------------
# Hand-built files


def header_checksum(metadata: dict, entries: dict) -> int:
    """docs/format.md, "Header checksum"."""
    def u64(v):
        return struct.pack("<Q", v)

    def s(v):
        b = v.encode()
        return u64(len(b)) + b

    kv = sorted((k.encode(), v) for k, v in metadata.items() if k != "octopt.crc32c")
    out = u64(len(kv)) + b"".join(u64(len(k)) + k + s(v) for k, v in kv)
    order = sorted(entries.items(), key=lambda e: tuple(e[1]["data_offsets"]))
    out += u64(len(order))
    for name, e in order:
        out += s(name) + s(e["dtype"]) + u64(len(e["shape"])) + b"".join(u64(d) for d in e["shape"])
        out += u64(e["data_offsets"][0]) + u64(e["data_offsets"][1])
    return crc32c_reference(out)


def layout(tensors: list[tuple[str, str, list, bytes]]) -> tuple[dict, bytes]:
    """Header entries and data of contiguous tensors (name, dtype, shape, raw bytes)."""
    entries, data = {}, b""
    for name, dtype, shape, raw in tensors:
        entries[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    return entries, data


def build(entries: dict, data: bytes, metadata: dict | None = None, *, crcs: dict | None = None,
          version: str | None = "1", fmt: str | None = "octopt-state",
          header_text: str | None = None) -> bytes:
    """A state file with the given header entries and data; checksums computed unless `crcs` is given
    (then it is the octopt.crc32c table, or False for none)."""
    meta = dict(metadata or {})
    if fmt is not None:
        meta["octopt.format"] = fmt
    if version is not None:
        meta["octopt.format_version"] = version
    if crcs is None:
        table = {"__header__": f"{header_checksum(meta, entries):08x}"}
        for name, e in entries.items():
            b, end = e["data_offsets"]
            table[name] = f"{crc32c_reference(data[b:end]):08x}"
        meta["octopt.crc32c"] = json.dumps(table)
    elif crcs is not False:
        meta["octopt.crc32c"] = json.dumps(crcs)
    if header_text is None:
        header_text = json.dumps({"__metadata__": meta, **entries}, separators=(",", ":"))
    head = header_text.encode()
    head += b" " * (-len(head) % 8)
    return struct.pack("<Q", len(head)) + head + data


def write(tmp_path, content: bytes, name: str = "f.safetensors") -> pathlib.Path:
    p = tmp_path / name
    p.write_bytes(content)
    return p


def two_tensors():
    return layout([("a", "F32", [2, 3], np.arange(6, dtype=np.float32).tobytes()),
                   ("b", "U8", [4], bytes([1, 2, 3, 4]))])


class Flipper:
    """Flips bits of a file in place (rewriting whole files is slow on ext4, which flushes replaced data)."""

    def __init__(self, path):
        self.path = str(path)
        self.fd = os.open(self.path, os.O_RDWR)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        os.close(self.fd)

    def flipped(self, pos: int, bit: int):
        """Context: the file with bit `bit` of byte `pos` inverted."""
        fd = self.fd

        class Flip:
            def __enter__(self):
                self.old = os.pread(fd, 1, pos)
                os.pwrite(fd, bytes([self.old[0] ^ (1 << bit)]), pos)

            def __exit__(self, *exc):
                os.pwrite(fd, self.old, pos)

        return Flip()


def load_error(path) -> str:
    with pytest.raises(StateFileError) as e:
        sf.load(path)
    return str(e.value)


# --------------------------------------------------------------------------------------------------
# CRC-32C


def test_crc32c_check_value_and_paths_agree():
    assert _octopt.crc32c(b"123456789") == 0xE3069283
    assert _octopt.crc32c(b"123456789", "portable") == 0xE3069283
    assert _octopt.crc32c(b"") == 0
    impls = ["portable"] + (["sse4.2"] if _octopt.crc32c_hardware() else [])
    rng = random.Random(1)
    blob = bytes(rng.getrandbits(8) for _ in range(5000))
    for n in list(range(0, 80)) + [255, 256, 1000, 4093]:
        for start in (0, 1, 3, 7):
            chunk = blob[start:start + n]
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
def test_round_trip_all_dtypes(tmp_path, shape):
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
    meta = {"step": "7", "unicode \u00e9\U0001F600": "\"quotes\" \\ back\nslash \u2603", "empty": ""}
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
    names = ['quote " back \\ slash', "caf\u00e9/\U0001F600", "tab\tnew\nline", "x" * 1024, "_single"]
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


def test_layout_is_safetensors(tmp_path):
    path = tmp_path / "s.safetensors"
    sf.save(path, {"x": np.ones(3, np.float32), "y": np.arange(2, dtype=np.int16)}, {"k": "v"})
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    assert n % 8 == 0 and len(raw) == 8 + n + 12 + 4
    header = json.loads(raw[8:8 + n])
    assert list(header) == ["__metadata__", "x", "y"]
    assert header["x"] == {"dtype": "F32", "shape": [3], "data_offsets": [0, 12]}
    assert header["y"] == {"dtype": "I16", "shape": [2], "data_offsets": [12, 16]}
    meta = header["__metadata__"]
    assert meta["octopt.format"] == "octopt-state" and meta["octopt.format_version"] == "1"
    assert meta["k"] == "v"
    crcs = json.loads(meta["octopt.crc32c"])
    assert crcs["x"] == f"{crc32c_reference(raw[8 + n:8 + n + 12]):08x}"
    assert crcs["y"] == f"{crc32c_reference(raw[8 + n + 12:]):08x}"
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
    paths = (tmp_path / "p.safetensors", str(tmp_path / "s.safetensors"),
             os.fsencode(tmp_path / "b.safetensors"))
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
    sf.save(path, {"u": np.array([1, 2, 3], np.uint8), "d": np.array([1.5, -2.0]),
                   "f": np.arange(5, dtype=np.float32)})
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


def test_hand_built_file_matches_spec(tmp_path):
    entries, data = two_tensors()
    path = write(tmp_path, build(entries, data, {"user": "x"}))
    got, meta = sf.load(path)
    assert meta == {"user": "x"}
    np.testing.assert_array_equal(got["a"], np.arange(6, dtype=np.float32).reshape(2, 3))
    # JSON escapes in names and values, including a surrogate pair
    entries = {"caf\u00e9\U0001F600": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}}
    raw = build(entries, b"\x05", {"k": "tab\t\u2603"})
    assert b"\\ud83d\\ude00" in raw  # json.dumps escapes non-ASCII
    got, meta = sf.load(write(tmp_path, raw))
    assert list(got) == ["caf\u00e9\U0001F600"] and meta == {"k": "tab\t\u2603"}


# --------------------------------------------------------------------------------------------------
# Validation: every corruption is a StateFileError that says what is wrong


def test_state_file_error_is_a_value_error():
    assert issubclass(octopt.StateFileError, ValueError)
    assert octopt.StateFileError is StateFileError


def test_every_truncation(tmp_path):
    path = tmp_path / "s.safetensors"
    sf.save(path, {"a": np.arange(5, dtype=np.float32), "b": np.arange(3, dtype=np.uint8)}, {"k": "v"})
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    cut = tmp_path / "cut.safetensors"
    cut.write_bytes(raw)
    for size in range(len(raw) - 1, -1, -1):
        os.truncate(cut, size)
        msg = load_error(cut)
        assert msg.startswith(f"read_state_file: '{cut}': ")
        if size < 8:
            assert f"file is {size} bytes, too short for the 8-byte header length" in msg
        elif size < 8 + n:
            assert f"header length {n} exceeds the {size - 8} bytes that follow it (truncated?)" in msg
        else:
            assert f"tensors need 23 bytes of data but the file holds {size - 8 - n} after the header" in msg
        assert not sf.inspect(cut)["valid"]


def test_bit_flips_in_header_are_all_detected(tmp_path):
    path = tmp_path / "s.safetensors"
    sf.save(path, {"m": np.arange(4, dtype=np.float32), "e": np.zeros(0, np.float32),
                   "s": np.array(3, np.int64)}, {"octopt.step": "10", "lr": "0.001"})
    (n,) = struct.unpack("<Q", path.read_bytes()[:8])
    with Flipper(path) as f:
        for pos in range(8 + n):  # every bit of the length and the header
            for bit in range(8):
                with f.flipped(pos, bit), pytest.raises(StateFileError):
                    _octopt.load_state_file(f.path)


def test_bit_flips_in_data_are_detected(tmp_path):
    path = tmp_path / "s.safetensors"
    sf.save(path, {"m": sample(100), "v": sample(50)})
    size = path.stat().st_size
    (n,) = struct.unpack("<Q", path.read_bytes()[:8])
    rng = random.Random(0)
    mismatch = "tensor '{}': checksum mismatch \\(stored [0-9a-f]{{8}}, computed [0-9a-f]{{8}}\\)"
    with Flipper(path) as f:
        for _ in range(200):
            pos = rng.randrange(8 + n, size)
            name = "m" if pos - 8 - n < 400 else "v"
            with f.flipped(pos, rng.randrange(8)):
                assert re.search(mismatch.format(name), load_error(path))
                statuses = [t["checksum"] for t in sf.inspect(path)["tensors"]]
                assert statuses == (["bad", "ok"] if name == "m" else ["ok", "bad"])
    sf.load(path)  # restored


def test_header_checksum_covers_metadata(tmp_path):
    entries, data = two_tensors()
    good = build(entries, data, {"octopt.step": "10"})
    forged = good.replace(b'"octopt.step":"10"', b'"octopt.step":"19"')
    assert forged != good
    msg = load_error(write(tmp_path, forged))
    assert "header checksum mismatch (stored" in msg and "metadata or tensor table corrupt" in msg


CORRUPTIONS = {
    # name: (function of (entries, data) -> file bytes, expected message part)
    "format version": (lambda e, d: build(e, d, version="2"),
                       "unsupported format version '2' (this build reads 1)"),
    "no version": (lambda e, d: build(e, d, version=None), "metadata key 'octopt.format_version' is missing"),
    "no format": (lambda e, d: build(e, d, fmt=None),
                  "metadata key 'octopt.format' is missing: not an octopt state"),
    "other format": (lambda e, d: build(e, d, fmt="other"),
                     "metadata key 'octopt.format' is 'other', expected 'octopt-state'"),
    "no metadata": (lambda e, d: build(e, d, header_text=json.dumps(e)), "the header has no '__metadata__'"),
    "no crc table": (lambda e, d: build(e, d, crcs=False),
                     "metadata key 'octopt.crc32c' is missing (no checksums)"),
    "no crc for a tensor": (lambda e, d: build(e, d, crcs={"__header__": "00000000", "a": "00000000"}),
                            "has no checksum for tensor 'b'"),
    "no header crc": (lambda e, d: build(e, d, crcs={"a": "00000000", "b": "00000000"}),
                      "has no header checksum ('__header__')"),
    "crc for unknown tensor": (lambda e, d: build(e, d, crcs={"zz": "00000000"}),
                               "has a checksum for 'zz', which is not a tensor in this file"),
    "malformed crc": (lambda e, d: build(e, d, crcs={"a": "ABCDEF01"}),
                      "entry 'a' must be 8 lowercase hex digits, got \"ABCDEF01\""),
    "crc table not json": (lambda e, d: build(e, d, {"octopt.crc32c": "{"}, crcs=False),
                           "metadata key 'octopt.crc32c' is not valid JSON (at byte 1 of its value): "
                           "expected a string key, found end of input"),
    "bad json": (lambda e, d: struct.pack("<Q", 8) + b'{"a":1,]' + d,
                 "header is not valid JSON (at byte 7 of the header): "
                 "expected a string key, found character ']'"),
    "trailing garbage": (lambda e, d: build(e, d, header_text=json.dumps({"__metadata__": {}}) + "x"),
                         "unexpected character 'x' after the JSON value"),
    "not an object": (lambda e, d: build(e, d, header_text="[1, 2]"),
                      "header must be a JSON object, got an array"),
    "duplicate tensor": (lambda e, d: build(e, d, header_text=json.dumps({"__metadata__": {}})[:-1] +
                                           ',"a":{},"b":{},"a":{}}'),
                         "duplicate key \"a\" in an object"),
    "duplicate metadata key": (lambda e, d: build(e, d, header_text='{"__metadata__":{"k":"1","k":"2"}}'),
                               "(at byte 25 of the header): duplicate key \"k\" in an object"),
    "deep nesting": (lambda e, d: build(
                         e, d, header_text='{"__metadata__":{"k":' + "[" * 10 + "]" * 10 + "}}"),
                     "nesting deeper than 8 levels"),
    "invalid utf-8": (lambda e, d: struct.pack("<Q", 8) + b'{"\xff":1}' + d,
                      "(at byte 2 of the header): invalid UTF-8 in a string"),
    "lone surrogate": (lambda e, d: build(e, d, header_text='{"__metadata__":{"k":"\\udc00"}}'),
                       "lone low surrogate"),
    "leading zero": (lambda e, d: build(e, d, header_text='{"a":{"dtype":"U8","shape":[01]}}'),
                     "leading zeros are not allowed"),
    "metadata not string": (lambda e, d: build(e, d, header_text='{"__metadata__":{"step":10}}'),
                            "metadata key 'step': value must be a string, got 10"),
}

ENTRY_CORRUPTIONS = {
    # name: (entry of tensor 'a' in a file whose tensor 'b' follows at offset 24, expected message part)
    "unknown dtype": ({"dtype": "F128", "shape": [2, 3], "data_offsets": [0, 24]},
                      "tensor 'a': unknown dtype 'F128' (known: F64, F32"),
    "negative shape": ({"dtype": "F32", "shape": [-2, -3], "data_offsets": [0, 24]},
                       "tensor 'a': shape[0] must be a non-negative integer, got -2"),
    "fractional shape": ({"dtype": "F32", "shape": [2, 3.0], "data_offsets": [0, 24]},
                         "tensor 'a': shape[1] must be a non-negative integer, got 3.0"),
    "shape/offset mismatch": ({"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 24]},
                              "tensor 'a': shape [2, 2] of F32 needs 16 bytes but data_offsets [0, 24] "
                              "span 24"),
    "overflowing shape": ({"dtype": "F64", "shape": [2**62, 2**62], "data_offsets": [0, 24]},
                          "tensor 'a': shape [4611686018427387904, 4611686018427387904] of F64 is too large"),
    "end before begin": ({"dtype": "F32", "shape": [0], "data_offsets": [24, 0]},
                         "tensor 'a': data_offsets [24, 0] end before they begin"),
    "offsets beyond 64 bits": ({"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 2**64]},
                               "tensor 'a': data_offsets must be [begin, end] with non-negative integers"),
    "unknown key": ({"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24], "x": 1},
                    "tensor 'a': unknown key 'x' (expected dtype, shape, data_offsets)"),
    "missing key": ({"dtype": "F32", "data_offsets": [0, 24]}, "tensor 'a': missing key 'shape'"),
    "not an object": ([1], "tensor 'a': entry must be an object, got an array"),
    "gap at the start": ({"dtype": "F32", "shape": [2, 3], "data_offsets": [4, 28]},
                "tensor 'a': data_offsets [4, 28] leave a gap of 4 bytes after the header"),
    "gap": ({"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
            "tensor 'b': data_offsets [24, 28] leave a gap of 16 bytes after tensor 'a'"),
}


JSON_CASES = [
    # (header text, the metadata it decodes to when it is valid JSON, else the expected error)
    (r'{"__metadata__":{"k":"\b\f\n\r\t\/\\\"\u0041\u00e9\ud83d\ude00"}}',
     {"k": "\b\f\n\r\t/\\\"A\u00e9\U0001F600"}),
    (' \t\n\r{ "__metadata__" : { "k" : "v" , "j":"\u00e9" } } \n', {"k": "v", "j": "\u00e9"}),
    (r'{"__metadata__":{"k":"\x"}}', "invalid escape sequence '\\x'"),
    (r'{"__metadata__":{"k":"\ud800"}}', "high surrogate not followed by a low surrogate"),
    (r'{"__metadata__":{"k":"\ud800\u0041"}}', "high surrogate not followed by a low surrogate"),
    (r'{"__metadata__":{"k":"\u12G4"}}', "invalid hex digit in a \\u escape: character 'G'"),
    ('{"__metadata__":{"k":"a\nb"}}', "unescaped control character byte 0x0a in a string"),
    ('{"__metadata__":{"k":"abc', "unterminated string"),
    ('{"__metadata__":{},}', "expected a string key, found character '}'"),
    ('{"__metadata__":{"k":["a",]}}', "expected a JSON value, found character ']'"),
    ('{"__metadata__":{"k":tru}}', "invalid literal (expected 'true')"),
    ('{"__metadata__" {}}', "expected ':' after an object key, found character '{'"),
    ('{"__metadata__":{}} {}', "unexpected character '{' after the JSON value"),
    ('', "expected a JSON value, found end of input"),
    ('{"a":{"dtype":"U8","shape":[1e0],"data_offsets":[0,1]}}',
     "shape[0] must be a non-negative integer, got 1.0"),
    ('{"a":{"dtype":"U8","shape":[-0],"data_offsets":[0,1]}}',
     "shape[0] must be a non-negative integer, got -0.0"),
    ('{"a":{"dtype":"U8","shape":[1.],"data_offsets":[0,1]}}', "expected a digit after the decimal point"),
    ('{"a":{"dtype":"U8","shape":[-],"data_offsets":[0,1]}}', "expected a digit, found character ']'"),
    ('{"a":{"dtype":"U8","shape":[1e],"data_offsets":[0,1]}}', "expected a digit in the exponent"),
    ('{"a":{"dtype":"U8","shape":[1e999],"data_offsets":[0,1]}}', "number out of the range of a double"),
    ('{"a":{"dtype":"U8","shape":true,"data_offsets":[0,1]}}', "shape must be an array, got true"),
    ('{"a":{"dtype":null,"shape":[1],"data_offsets":[0,1]}}', "dtype must be a string, got null"),
    ('{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1,2]}}',
     "data_offsets must be [begin, end] with non-negative integers, got [0,1,2]"),
]


@pytest.mark.parametrize("text, expected", JSON_CASES, ids=[str(k) for k in range(len(JSON_CASES))])
def test_json_parser(tmp_path, text, expected):
    path = write(tmp_path, build({}, b"", header_text=text))
    if isinstance(expected, dict):
        report = sf.inspect(path)  # reports the metadata of a file that is not an octopt state file
        assert report["metadata"] == expected and "not an octopt state file" in report["error"]
    else:
        assert expected in load_error(path)


@pytest.mark.parametrize("case", sorted(CORRUPTIONS))
def test_corrupt_header(tmp_path, case):
    make, expected = CORRUPTIONS[case]
    entries, data = two_tensors()
    path = write(tmp_path, make(entries, data))
    msg = load_error(path)
    assert msg.startswith(f"read_state_file: '{path}': ")
    assert expected in msg
    report = sf.inspect(path)
    assert not report["valid"] and expected in report["error"]


@pytest.mark.parametrize("case", sorted(ENTRY_CORRUPTIONS))
def test_corrupt_tensor_entry(tmp_path, case):
    entry, expected = ENTRY_CORRUPTIONS[case]
    entries, data = two_tensors()
    entries["a"] = entry
    msg = load_error(write(tmp_path, build(entries, data, crcs={})))  # structure is checked before checksums
    assert expected in msg


def test_layout_errors(tmp_path):
    entries, data = two_tensors()
    entries["b"]["data_offsets"] = [20, 24]  # overlaps a
    entries["b"]["shape"] = [4]
    assert "tensor 'b': data_offsets [20, 24] overlap tensor 'a' [0, 24]" in load_error(
        write(tmp_path, build(entries, data[:24])))
    entries, data = two_tensors()
    assert "4 unexpected bytes after the last tensor (data is 32 bytes, tensors end at 28)" in load_error(
        write(tmp_path, build(entries, data + b"1234")))
    assert "header key '__x' starts with '__' (reserved): not a valid tensor name" in load_error(
        write(tmp_path, build({"__x": {"dtype": "U8", "shape": [0], "data_offsets": [0, 0]}}, b"")))


def test_huge_lengths_fail_before_allocating(tmp_path):
    entries, data = two_tensors()
    good = build(entries, data)
    assert "header length 9223372036854775808 exceeds the limit of 100000000 bytes" in load_error(
        write(tmp_path, struct.pack("<Q", 2**63) + good[8:]))
    assert "header length 99999999 exceeds the" in load_error(
        write(tmp_path, struct.pack("<Q", 99999999) + good[8:]))
    # a header promising 1 TiB of data in a file of a few hundred bytes
    big = {"a": {"dtype": "U8", "shape": [2**40], "data_offsets": [0, 2**40]}}
    msg = load_error(write(tmp_path, build(big, b"")))
    assert "tensors need 1099511627776 bytes of data but the file holds 0 after the header" in msg


def test_data_checksum_mismatch_names_tensor(tmp_path):
    entries, data = two_tensors()
    raw = bytearray(build(entries, data))
    raw[-1] ^= 0x80  # last byte of tensor 'b'
    path = write(tmp_path, bytes(raw))
    assert re.search(r"tensor 'b': checksum mismatch \(stored [0-9a-f]{8}, computed [0-9a-f]{8}\): "
                     "data corrupt", load_error(path))


def test_plain_safetensors_file_is_not_a_state_file(tmp_path):
    safetensors_numpy = pytest.importorskip("safetensors.numpy")
    path = tmp_path / "plain.safetensors"
    safetensors_numpy.save_file({"w": np.ones((2, 2), np.float32)}, str(path), metadata={"a": "b"})
    assert "metadata key 'octopt.format' is missing: not an octopt state file" in load_error(path)
    report = sf.inspect(path)
    assert not report["valid"] and report["metadata"] == {"a": "b"}
    assert [(t["name"], t["checksum"]) for t in report["tensors"]] == [("w", "missing")]
    safetensors_numpy.save_file({"w": np.ones(2, np.float32)}, str(path))  # no __metadata__ at all
    assert "the header has no '__metadata__': not an octopt state file" in load_error(path)


# --------------------------------------------------------------------------------------------------
# I/O errors and atomic writes


def test_os_errors(tmp_path):
    missing = tmp_path / "missing.safetensors"
    with pytest.raises(FileNotFoundError, match=re.escape(f"read_state_file: cannot open '{missing}'")):
        sf.load(missing)
    with pytest.raises(FileNotFoundError, match=re.escape(f"inspect_state_file: cannot open '{missing}'")):
        sf.inspect(missing)
    with pytest.raises(IsADirectoryError, match="read_state_file: cannot read"):
        sf.load(tmp_path)
    with pytest.raises(StateFileError, match="read_state_file: '/dev/null': not a regular file"):
        sf.load("/dev/null")


def test_atomic_replace_leaves_no_temporaries(tmp_path):
    path = tmp_path / "s.safetensors"
    sf.save(path, {"a": np.zeros(3, np.float32)}, {"v": "1"})
    sf.save(path, {"a": np.ones(3, np.float32)}, {"v": "2"})
    got, meta = sf.load(path)
    assert meta == {"v": "2"} and got["a"].tolist() == [1, 1, 1]
    assert files_in(tmp_path) == ["s.safetensors"]


def test_failed_writes_keep_the_old_file(tmp_path):
    path = tmp_path / "s.safetensors"
    sf.save(path, {"a": np.arange(3, dtype=np.float32)}, {"v": "old"})
    before = path.read_bytes()

    with pytest.raises(TypeError, match="save_state_file: tensor 'c' has element type complex64"):
        sf.save(path, {"a": np.zeros(3, np.float32), "c": np.zeros(2, np.complex64)})
    with pytest.raises(ValueError, match="metadata key 'octopt.crc32c' is reserved"):
        sf.save(path, {}, {"octopt.crc32c": "x"})
    with pytest.raises(ValueError, match="tensor name '__a' starts with '__' \\(reserved\\)"):
        sf.save(path, {"__a": np.zeros(1)})
    with pytest.raises(ValueError, match="tensor name '' is empty"):
        sf.save(path, {"": np.zeros(1)})
    with pytest.raises(ValueError, match="is longer than 1024 bytes"):
        sf.save(path, {"x" * 1025: np.zeros(1)})
    with pytest.raises(TypeError, match="metadata key 'v' must map to a str, got int"):
        sf.save(path, {}, {"v": 1})
    # the rename fails: the target is a folder
    folder = tmp_path / "folder"
    folder.mkdir()
    with pytest.raises(IsADirectoryError,
                       match=re.escape(f"cannot rename the temporary file onto '{folder}'")):
        sf.save(folder, {"a": np.zeros(1)})
    # the temporary cannot be created: the parent is a regular file (fails for root too)
    with pytest.raises(NotADirectoryError, match="write_state_file: cannot create a temporary file next to"):
        sf.save(path / "child.safetensors", {"a": np.zeros(1)})
    # the disk fills up half way through the data (a file-size limit stands in for a full disk)
    old_handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (4096, hard))
    try:
        with pytest.raises(OSError,
                           match=re.escape(f"write_state_file: cannot write '{path}' (temporary")) as e:
            sf.save(path, {"big": np.zeros(100_000, np.uint8)})
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, old_handler)
    assert "File too large" in str(e.value)
    assert path.read_bytes() == before
    assert files_in(tmp_path) == ["folder", "s.safetensors"]


def test_save_argument_errors(tmp_path):
    path = tmp_path / "s.safetensors"
    with pytest.raises(TypeError, match="save: argument 'tensors' must be a mapping"):
        sf.save(path, [("a", np.zeros(1))])
    with pytest.raises(TypeError, match="save: tensor names must be str, got int"):
        sf.save(path, {1: np.zeros(1)})
    with pytest.raises(TypeError, match="tensor 'o' has dtype object"):
        sf.save(path, {"o": np.array([None])})
    with pytest.raises(TypeError, match="save_state_file: each entry of 'tensors' must be"):
        _octopt.save_state_file(str(path), [np.zeros(1)], {})
    with pytest.raises(TypeError, match="save_state_file: tensor 'x' must be an array"):
        _octopt.save_state_file(str(path), [("x", "not an array")], {})
    with pytest.raises(ValueError, match="must be C-contiguous"):
        _octopt.save_state_file(str(path), [("x", np.zeros((4, 4))[:, 1])], {})
    assert not path.exists()


# --------------------------------------------------------------------------------------------------
# inspect and the command line


def test_inspect_report(tmp_path):
    path = tmp_path / "s.safetensors"
    sf.save(path, {"m": np.arange(4, dtype=np.float32), "c": np.arange(3, dtype=np.uint8)},
            {"octopt.step": "5"})
    r = sf.inspect(path)
    assert r["valid"] and r["error"] is None
    assert (r["format"], r["format_version"], r["header_checksum"]) == ("octopt-state", "1", "ok")
    assert r["file_size"] == path.stat().st_size == 8 + r["header_size"] + r["data_size"]
    assert r["metadata"]["octopt.step"] == "5"
    rows = [(t["name"], t["dtype"], t["shape"], t["data_offsets"], t["nbytes"], t["checksum"])
            for t in r["tensors"]]
    assert rows == [("m", "F32", [4], [0, 16], 16, "ok"), ("c", "U8", [3], [16, 19], 3, "ok")]
    assert all(t["crc32c"] == t["crc32c_computed"] for t in r["tensors"])
    assert r["checksums"] == {"ok": 2, "bad": 0, "missing": 0}

    entries, data = two_tensors()
    r = sf.inspect(write(tmp_path, build(entries, data, crcs={"__header__": "00000000", "a": "00000000"})))
    assert not r["valid"] and "no checksum for tensor 'b'" in r["error"]
    assert [t["checksum"] for t in r["tensors"]] == ["bad", "missing"] and r["header_checksum"] == "bad"

    r = sf.inspect(write(tmp_path, b"\x01\x02"))
    assert not r["valid"] and "too short" in r["error"] and r["tensors"] == [] and r["header_size"] is None


def test_cli_inspect(tmp_path, capsys):
    good = tmp_path / "good.safetensors"
    sf.save(good, {"m": np.arange(4, dtype=np.float32), "q": np.arange(3, dtype=np.uint8)},
            {"octopt.step": "5"})
    assert cli_main(["inspect", str(good)]) == 0
    out = capsys.readouterr().out
    assert "octopt-state, version 1" in out and "octopt.step = 5" in out and "valid" in out
    assert re.search(r"m\s+F32\s+\[4\]\s+16\s+[0-9a-f]{8}\s+ok", out)
    assert re.search(r"q\s+U8\s+\[3\]\s+3\s+[0-9a-f]{8}\s+ok", out)

    raw = bytearray(good.read_bytes())
    raw[-1] ^= 1
    bad = write(tmp_path, bytes(raw), "bad.safetensors")
    assert cli_main(["inspect", str(bad)]) == 1
    captured = capsys.readouterr()
    assert re.search(r"q\s+U8\s+\[3\]\s+3\s+[0-9a-f]{8}\s+bad", captured.out) and "INVALID" in captured.out
    assert "tensor 'q': checksum mismatch" in captured.err

    assert cli_main(["inspect", "--json", str(bad)]) == 1
    assert json.loads(capsys.readouterr().out)["checksums"] == {"ok": 1, "bad": 1, "missing": 0}

    cut = write(tmp_path, bytes(raw[:20]), "cut.safetensors")
    assert cli_main(["inspect", str(cut)]) == 1
    assert "exceeds the 12 bytes that follow it (truncated?)" in capsys.readouterr().err

    assert cli_main(["inspect", str(tmp_path / "missing")]) == 1
    assert "No such file or directory" in capsys.readouterr().err


def test_cli_inspect_exit_status_in_a_process(tmp_path):
    entries, data = two_tensors()
    bad = bytearray(build(entries, data))
    bad[-1] ^= 1
    path = write(tmp_path, bytes(bad))
    proc = subprocess.run([sys.executable, "-m", "octopt", "inspect", str(path)], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 1 and "tensor 'b': checksum mismatch" in proc.stderr
