"""Shared helpers of the state-file tests (test_state_file_*.py): a reference CRC-32C, hand-built files,
bit flips in place.

Corrupt files are built by hand here (``build``), with an implementation of the header checksum written
from the specification, so the tests also check the spec against the C++ writer.
"""

from __future__ import annotations

import json
import os
import pathlib
import struct

import numpy as np
import pytest

from octopt import state_file as sf
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
