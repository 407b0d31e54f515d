"""Fixtures of the state-file tests: a reference CRC-32C, hand-built files, bit flips in place.

Corrupt files are built by hand here (``build``), with an implementation of the header checksum written
from the specification (docs/format.md), so the tests also check the spec against the C++ writer. Each
helper is a fixture that returns the function; data/ holds the files written by earlier versions.
"""

from __future__ import annotations

import json
import os
import pathlib
import struct
from collections.abc import Callable
from types import ModuleType

import numpy as np
import pytest

from octopt import state_file as sf
from octopt.state_file import StateFileError


def _crc32c_reference(data: bytes) -> int:
    """Bit-at-a-time CRC-32C, straight from the definition (reflected polynomial 0x82F63B78)."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def _sample(n: int) -> np.ndarray:
    return np.random.default_rng(n).standard_normal(n).astype(np.float32)


def _files_in(folder) -> list[str]:
    return sorted(os.listdir(folder))


# --------------------------------------------------------------------------------------------------
# Hand-built files


def _header_checksum(metadata: dict, entries: dict) -> int:
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
    return _crc32c_reference(out)


def _layout(tensors: list[tuple[str, str, list, bytes]]) -> tuple[dict, bytes]:
    """Header entries and data of contiguous tensors (name, dtype, shape, raw bytes)."""
    entries, data = {}, b""
    for name, dtype, shape, raw in tensors:
        entries[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    return entries, data


def _build(
    entries: dict,
    data: bytes,
    metadata: dict | None = None,
    *,
    crcs: dict | None = None,
    version: str | None = "1",
    fmt: str | None = "octopt-state",
    header_text: str | None = None,
) -> bytes:
    """A state file with the given header entries and data; checksums computed unless `crcs` is given
    (then it is the octopt.crc32c table, or False for none)."""
    meta = dict(metadata or {})
    if fmt is not None:
        meta["octopt.format"] = fmt
    if version is not None:
        meta["octopt.format_version"] = version
    if crcs is None:
        table = {"__header__": f"{_header_checksum(meta, entries):08x}"}
        for name, e in entries.items():
            b, end = e["data_offsets"]
            table[name] = f"{_crc32c_reference(data[b:end]):08x}"
        meta["octopt.crc32c"] = json.dumps(table)
    elif crcs is not False:
        meta["octopt.crc32c"] = json.dumps(crcs)
    if header_text is None:
        header_text = json.dumps({"__metadata__": meta, **entries}, separators=(",", ":"))
    head = header_text.encode()
    head += b" " * (-len(head) % 8)
    return struct.pack("<Q", len(head)) + head + data


def _write(tmp_path, content: bytes, name: str = "f.safetensors") -> pathlib.Path:
    p = tmp_path / name
    p.write_bytes(content)
    return p


def _two_tensors():
    return _layout(
        [("a", "F32", [2, 3], np.arange(6, dtype=np.float32).tobytes()), ("b", "U8", [4], bytes([1, 2, 3, 4]))]
    )


class _Flipper:
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


def _load_error(path) -> str:
    with pytest.raises(StateFileError) as e:
        sf.load(path)
    return str(e.value)


# --------------------------------------------------------------------------------------------------
# Fixtures


@pytest.fixture
def crc32c_reference() -> Callable[[bytes], int]:
    """``crc32c_reference(data)``: CRC-32C computed bit by bit from its definition."""
    return _crc32c_reference


@pytest.fixture
def header_checksum() -> Callable[[dict, dict], int]:
    """``header_checksum(metadata, entries)``: the header checksum as docs/format.md defines it."""
    return _header_checksum


@pytest.fixture
def layout() -> Callable[[list], tuple]:
    """``layout([(name, dtype, shape, raw bytes), ...])``: header entries and data of contiguous tensors."""
    return _layout


@pytest.fixture
def build() -> Callable[..., bytes]:
    """``build(entries, data, metadata=None, *, crcs=None, version="1", fmt="octopt-state",
    header_text=None)``: the bytes of a hand-built state file (see ``_build``)."""
    return _build


@pytest.fixture
def write() -> Callable[..., pathlib.Path]:
    """``write(tmp_path, content, name="f.safetensors")``: the path of a new file holding ``content``."""
    return _write


@pytest.fixture
def two_tensors() -> Callable[[], tuple]:
    """``two_tensors()``: entries and data of a float32 (2, 3) tensor 'a' followed by a uint8 (4,) 'b'."""
    return _two_tensors


@pytest.fixture
def files_in() -> Callable[..., list]:
    """``files_in(folder)``: the sorted names in a folder."""
    return _files_in


@pytest.fixture
def sample() -> Callable[[int], np.ndarray]:
    """``sample(n)``: n float32 normal values, seeded by n."""
    return _sample


@pytest.fixture
def flipper() -> type:
    """``with flipper(path) as f: with f.flipped(pos, bit): ...``: a file with one bit inverted, in place."""
    return _Flipper


@pytest.fixture
def load_error() -> Callable[..., str]:
    """``load_error(path)``: the message of the StateFileError that loading ``path`` raises."""
    return _load_error


@pytest.fixture(scope="session")
def make_adam8_v1(import_file) -> ModuleType:
    """data/make_adam8_v1.py, the generator of the optimizer state file that octopt 0.1.0 wrote."""
    return import_file(pathlib.Path(__file__).parent / "data" / "make_adam8_v1.py")


@pytest.fixture(scope="session")
def fuzz_state_file(import_file) -> ModuleType:
    """fuzz/fuzz_state_file.py: the state-file fuzzer (its Target, mutator and drivers)."""
    return import_file(pathlib.Path(__file__).parent / "fuzz" / "fuzz_state_file.py")
