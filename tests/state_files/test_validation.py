"""State files (docs/format.md): validation. Every corruption (truncation, bit flip, malformed header or
entry, bad checksum) is a StateFileError that says what is wrong.
"""

from __future__ import annotations

import json
import os
import random
import re
import struct

import numpy as np
import pytest

import octopt
from octopt import _octopt
from octopt import state_file as sf
from octopt.state_file import StateFileError


# --------------------------------------------------------------------------------------------------
# Validation: every corruption is a StateFileError that says what is wrong


def test_state_file_error_is_a_value_error():
    assert issubclass(octopt.StateFileError, ValueError)
    assert octopt.StateFileError is StateFileError


def test_every_truncation(tmp_path, load_error):
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


def test_bit_flips_in_header_are_all_detected(tmp_path, flipper):
    path = tmp_path / "s.safetensors"
    sf.save(
        path,
        {"m": np.arange(4, dtype=np.float32), "e": np.zeros(0, np.float32), "s": np.array(3, np.int64)},
        {"octopt.step": "10", "lr": "0.001"},
    )
    (n,) = struct.unpack("<Q", path.read_bytes()[:8])
    with flipper(path) as f:
        for pos in range(8 + n):  # every bit of the length and the header
            for bit in range(8):
                with f.flipped(pos, bit), pytest.raises(StateFileError):
                    _octopt.load_state_file(f.path)


def test_bit_flips_in_data_are_detected(tmp_path, flipper, sample, load_error):
    path = tmp_path / "s.safetensors"
    sf.save(path, {"m": sample(100), "v": sample(50)})
    size = path.stat().st_size
    (n,) = struct.unpack("<Q", path.read_bytes()[:8])
    rng = random.Random(0)
    mismatch = "tensor '{}': checksum mismatch \\(stored [0-9a-f]{{8}}, computed [0-9a-f]{{8}}\\)"
    with flipper(path) as f:
        for _ in range(200):
            pos = rng.randrange(8 + n, size)
            name = "m" if pos - 8 - n < 400 else "v"
            with f.flipped(pos, rng.randrange(8)):
                assert re.search(mismatch.format(name), load_error(path))
                statuses = [t["checksum"] for t in sf.inspect(path)["tensors"]]
                assert statuses == (["bad", "ok"] if name == "m" else ["ok", "bad"])
    sf.load(path)  # restored


def test_header_checksum_covers_metadata(tmp_path, two_tensors, build, load_error, write):
    entries, data = two_tensors()
    good = build(entries, data, {"octopt.step": "10"})
    forged = good.replace(b'"octopt.step":"10"', b'"octopt.step":"19"')
    assert forged != good
    msg = load_error(write(tmp_path, forged))
    assert "header checksum mismatch (stored" in msg and "metadata or tensor table corrupt" in msg


CORRUPTIONS = {
    # name: (function of (build, entries, data) -> file bytes, expected message part)
    "format version": (
        lambda build, e, d: build(e, d, version="2"),
        "unsupported format version '2' (this build reads 1)",
    ),
    "no version": (lambda build, e, d: build(e, d, version=None), "metadata key 'octopt.format_version' is missing"),
    "no format": (
        lambda build, e, d: build(e, d, fmt=None),
        "metadata key 'octopt.format' is missing: not an octopt state",
    ),
    "other format": (
        lambda build, e, d: build(e, d, fmt="other"),
        "metadata key 'octopt.format' is 'other', expected 'octopt-state'",
    ),
    "no metadata": (lambda build, e, d: build(e, d, header_text=json.dumps(e)), "the header has no '__metadata__'"),
    "no crc table": (
        lambda build, e, d: build(e, d, crcs=False),
        "metadata key 'octopt.crc32c' is missing (no checksums)",
    ),
    "no crc for a tensor": (
        lambda build, e, d: build(e, d, crcs={"__header__": "00000000", "a": "00000000"}),
        "has no checksum for tensor 'b'",
    ),
    "no header crc": (
        lambda build, e, d: build(e, d, crcs={"a": "00000000", "b": "00000000"}),
        "has no header checksum ('__header__')",
    ),
    "crc for unknown tensor": (
        lambda build, e, d: build(e, d, crcs={"zz": "00000000"}),
        "has a checksum for 'zz', which is not a tensor in this file",
    ),
    "malformed crc": (
        lambda build, e, d: build(e, d, crcs={"a": "ABCDEF01"}),
        "entry 'a' must be 8 lowercase hex digits, got \"ABCDEF01\"",
    ),
    "crc table not json": (
        lambda build, e, d: build(e, d, {"octopt.crc32c": "{"}, crcs=False),
        "metadata key 'octopt.crc32c' is not valid JSON (at byte 1 of its value): "
        "expected a string key, found end of input",
    ),
    "bad json": (
        lambda build, e, d: struct.pack("<Q", 8) + b'{"a":1,]' + d,
        "header is not valid JSON (at byte 7 of the header): expected a string key, found character ']'",
    ),
    "trailing garbage": (
        lambda build, e, d: build(e, d, header_text=json.dumps({"__metadata__": {}}) + "x"),
        "unexpected character 'x' after the JSON value",
    ),
    "not an object": (
        lambda build, e, d: build(e, d, header_text="[1, 2]"),
        "header must be a JSON object, got an array",
    ),
    "duplicate tensor": (
        lambda build, e, d: build(e, d, header_text=json.dumps({"__metadata__": {}})[:-1] + ',"a":{},"b":{},"a":{}}'),
        'duplicate key "a" in an object',
    ),
    "duplicate metadata key": (
        lambda build, e, d: build(e, d, header_text='{"__metadata__":{"k":"1","k":"2"}}'),
        '(at byte 25 of the header): duplicate key "k" in an object',
    ),
    "deep nesting": (
        lambda build, e, d: build(e, d, header_text='{"__metadata__":{"k":' + "[" * 10 + "]" * 10 + "}}"),
        "nesting deeper than 8 levels",
    ),
    "invalid utf-8": (
        lambda build, e, d: struct.pack("<Q", 8) + b'{"\xff":1}' + d,
        "(at byte 2 of the header): invalid UTF-8 in a string",
    ),
    "lone surrogate": (
        lambda build, e, d: build(e, d, header_text='{"__metadata__":{"k":"\\udc00"}}'),
        "lone low surrogate",
    ),
    "leading zero": (
        lambda build, e, d: build(e, d, header_text='{"a":{"dtype":"U8","shape":[01]}}'),
        "leading zeros are not allowed",
    ),
    "metadata not string": (
        lambda build, e, d: build(e, d, header_text='{"__metadata__":{"step":10}}'),
        "metadata key 'step': value must be a string, got 10",
    ),
}

ENTRY_CORRUPTIONS = {
    # name: (entry of tensor 'a' in a file whose tensor 'b' follows at offset 24, expected message part)
    "unknown dtype": (
        {"dtype": "F128", "shape": [2, 3], "data_offsets": [0, 24]},
        "tensor 'a': unknown dtype 'F128' (known: F64, F32",
    ),
    "negative shape": (
        {"dtype": "F32", "shape": [-2, -3], "data_offsets": [0, 24]},
        "tensor 'a': shape[0] must be a non-negative integer, got -2",
    ),
    "fractional shape": (
        {"dtype": "F32", "shape": [2, 3.0], "data_offsets": [0, 24]},
        "tensor 'a': shape[1] must be a non-negative integer, got 3.0",
    ),
    "shape/offset mismatch": (
        {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 24]},
        "tensor 'a': shape [2, 2] of F32 needs 16 bytes but data_offsets [0, 24] span 24",
    ),
    "overflowing shape": (
        {"dtype": "F64", "shape": [2**62, 2**62], "data_offsets": [0, 24]},
        "tensor 'a': shape [4611686018427387904, 4611686018427387904] of F64 is too large",
    ),
    "end before begin": (
        {"dtype": "F32", "shape": [0], "data_offsets": [24, 0]},
        "tensor 'a': data_offsets [24, 0] end before they begin",
    ),
    "offsets beyond 64 bits": (
        {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 2**64]},
        "tensor 'a': data_offsets must be [begin, end] with non-negative integers",
    ),
    "unknown key": (
        {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24], "x": 1},
        "tensor 'a': unknown key 'x' (expected dtype, shape, data_offsets)",
    ),
    "missing key": ({"dtype": "F32", "data_offsets": [0, 24]}, "tensor 'a': missing key 'shape'"),
    "not an object": ([1], "tensor 'a': entry must be an object, got an array"),
    "gap at the start": (
        {"dtype": "F32", "shape": [2, 3], "data_offsets": [4, 28]},
        "tensor 'a': data_offsets [4, 28] leave a gap of 4 bytes after the header",
    ),
    "gap": (
        {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
        "tensor 'b': data_offsets [24, 28] leave a gap of 16 bytes after tensor 'a'",
    ),
}


JSON_CASES = [
    # (header text, the metadata it decodes to when it is valid JSON, else the expected error)
    (r'{"__metadata__":{"k":"\b\f\n\r\t\/\\\"\u0041\u00e9\ud83d\ude00"}}', {"k": '\b\f\n\r\t/\\"A\u00e9\U0001f600'}),
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
    ("", "expected a JSON value, found end of input"),
    ('{"a":{"dtype":"U8","shape":[1e0],"data_offsets":[0,1]}}', "shape[0] must be a non-negative integer, got 1.0"),
    ('{"a":{"dtype":"U8","shape":[-0],"data_offsets":[0,1]}}', "shape[0] must be a non-negative integer, got -0.0"),
    ('{"a":{"dtype":"U8","shape":[1.],"data_offsets":[0,1]}}', "expected a digit after the decimal point"),
    ('{"a":{"dtype":"U8","shape":[-],"data_offsets":[0,1]}}', "expected a digit, found character ']'"),
    ('{"a":{"dtype":"U8","shape":[1e],"data_offsets":[0,1]}}', "expected a digit in the exponent"),
    ('{"a":{"dtype":"U8","shape":[1e999],"data_offsets":[0,1]}}', "number out of the range of a double"),
    ('{"a":{"dtype":"U8","shape":true,"data_offsets":[0,1]}}', "shape must be an array, got true"),
    ('{"a":{"dtype":null,"shape":[1],"data_offsets":[0,1]}}', "dtype must be a string, got null"),
    (
        '{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1,2]}}',
        "data_offsets must be [begin, end] with non-negative integers, got [0,1,2]",
    ),
]


@pytest.mark.parametrize("text, expected", JSON_CASES, ids=[str(k) for k in range(len(JSON_CASES))])
def test_json_parser(tmp_path, text, expected, write, build, load_error):
    path = write(tmp_path, build({}, b"", header_text=text))
    if isinstance(expected, dict):
        report = sf.inspect(path)  # reports the metadata of a file that is not an octopt state file
        assert report["metadata"] == expected and "not an octopt state file" in report["error"]
    else:
        assert expected in load_error(path)


@pytest.mark.parametrize("case", sorted(CORRUPTIONS))
def test_corrupt_header(tmp_path, case, two_tensors, write, load_error, build):
    make, expected = CORRUPTIONS[case]
    entries, data = two_tensors()
    path = write(tmp_path, make(build, entries, data))
    msg = load_error(path)
    assert msg.startswith(f"read_state_file: '{path}': ")
    assert expected in msg
    report = sf.inspect(path)
    assert not report["valid"] and expected in report["error"]


@pytest.mark.parametrize("case", sorted(ENTRY_CORRUPTIONS))
def test_corrupt_tensor_entry(tmp_path, case, two_tensors, load_error, write, build):
    entry, expected = ENTRY_CORRUPTIONS[case]
    entries, data = two_tensors()
    entries["a"] = entry
    msg = load_error(write(tmp_path, build(entries, data, crcs={})))  # structure is checked before checksums
    assert expected in msg


def test_layout_errors(tmp_path, two_tensors, load_error, write, build):
    entries, data = two_tensors()
    entries["b"]["data_offsets"] = [20, 24]  # overlaps a
    entries["b"]["shape"] = [4]
    assert "tensor 'b': data_offsets [20, 24] overlap tensor 'a' [0, 24]" in load_error(
        write(tmp_path, build(entries, data[:24]))
    )
    entries, data = two_tensors()
    assert "4 unexpected bytes after the last tensor (data is 32 bytes, tensors end at 28)" in load_error(
        write(tmp_path, build(entries, data + b"1234"))
    )
    assert "header key '__x' starts with '__' (reserved): not a valid tensor name" in load_error(
        write(tmp_path, build({"__x": {"dtype": "U8", "shape": [0], "data_offsets": [0, 0]}}, b""))
    )


def test_huge_lengths_fail_before_allocating(tmp_path, two_tensors, build, load_error, write):
    entries, data = two_tensors()
    good = build(entries, data)
    assert "header length 9223372036854775808 exceeds the limit of 100000000 bytes" in load_error(
        write(tmp_path, struct.pack("<Q", 2**63) + good[8:])
    )
    assert "header length 99999999 exceeds the" in load_error(write(tmp_path, struct.pack("<Q", 99999999) + good[8:]))
    # a header promising 1 TiB of data in a file of a few hundred bytes
    big = {"a": {"dtype": "U8", "shape": [2**40], "data_offsets": [0, 2**40]}}
    msg = load_error(write(tmp_path, build(big, b"")))
    assert "tensors need 1099511627776 bytes of data but the file holds 0 after the header" in msg


def test_data_checksum_mismatch_names_tensor(tmp_path, two_tensors, write, build, load_error):
    entries, data = two_tensors()
    raw = bytearray(build(entries, data))
    raw[-1] ^= 0x80  # last byte of tensor 'b'
    path = write(tmp_path, bytes(raw))
    assert re.search(
        r"tensor 'b': checksum mismatch \(stored [0-9a-f]{8}, computed [0-9a-f]{8}\): "
        "data corrupt",
        load_error(path),
    )


def test_plain_safetensors_file_is_not_a_state_file(tmp_path, load_error):
    safetensors_numpy = pytest.importorskip("safetensors.numpy")
    path = tmp_path / "plain.safetensors"
    safetensors_numpy.save_file({"w": np.ones((2, 2), np.float32)}, str(path), metadata={"a": "b"})
    assert "metadata key 'octopt.format' is missing: not an octopt state file" in load_error(path)
    report = sf.inspect(path)
    assert not report["valid"] and report["metadata"] == {"a": "b"}
    assert [(t["name"], t["checksum"]) for t in report["tensors"]] == [("w", "missing")]
    safetensors_numpy.save_file({"w": np.ones(2, np.float32)}, str(path))  # no __metadata__ at all
    assert "the header has no '__metadata__': not an octopt state file" in load_error(path)
