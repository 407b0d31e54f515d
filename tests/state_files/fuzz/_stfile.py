"""Builds state files byte by byte, with valid checksums, from a header the fuzzer may have mutated.

An independent writer of the layout in docs/format.md (8-byte little-endian header length, JSON header
padded with spaces to 8 bytes, data section), so that mutations of the header's *structure* (shapes,
dtypes, offsets, metadata) reach the reader's later checks instead of stopping at a checksum.
"""

from __future__ import annotations

import json
import struct

from octopt import _octopt

CRC_KEY = "octopt.crc32c"


def _u64(v: int) -> bytes:
    return struct.pack("<Q", v & 0xFFFFFFFFFFFFFFFF)


def _str(s: str) -> bytes:
    b = s.encode("utf-8", "surrogatepass")
    return _u64(len(b)) + b


def header_checksum(metadata: dict, tensors: list) -> int:
    """docs/format.md "Header checksum": metadata sorted by key (without octopt.crc32c), then the
    tensors in data order, strings length-prefixed, numbers as u64 little-endian."""
    meta = sorted((k, v) for k, v in metadata.items() if k != CRC_KEY)
    b = bytearray(_u64(len(meta)))
    for k, v in meta:
        b += _str(k) + _str(v)
    b += _u64(len(tensors))
    for name, e in tensors:
        b += _str(name) + _str(str(e.get("dtype")))
        shape = e.get("shape") if isinstance(e.get("shape"), list) else []
        b += _u64(len(shape))
        for d in shape:
            b += _u64(d if isinstance(d, int) else 0)
        offs = e.get("data_offsets") if isinstance(e.get("data_offsets"), list) else [0, 0]
        for o in (offs + [0, 0])[:2]:
            b += _u64(o if isinstance(o, int) else 0)
    return _octopt.crc32c(bytes(b))


def _sort_key(e: dict) -> tuple:
    offs = e.get("data_offsets")
    if isinstance(offs, list) and len(offs) == 2 and all(isinstance(o, int) for o in offs):
        return tuple(offs)
    return (0, 0)


def build(header: dict, data: bytes, *, fix_checksums: bool = True) -> bytes:
    """A file holding `header` (a dict as the JSON header; "__metadata__" included) and `data`. With
    fix_checksums the octopt.crc32c table is recomputed for whatever the header now says."""
    header = dict(header)
    meta = header.get("__metadata__")
    if fix_checksums and isinstance(meta, dict) and all(isinstance(v, str) for v in meta.values()):
        tensors = sorted(
            ((k, v) for k, v in header.items() if k != "__metadata__" and isinstance(v, dict)),
            key=lambda kv: _sort_key(kv[1]),
        )
        crcs = {"__header__": f"{header_checksum(meta, tensors):08x}"}
        for name, e in tensors:
            b, end = _sort_key(e)
            crcs[name] = f"{_octopt.crc32c(data[b:end]):08x}"
        meta = dict(meta)
        meta[CRC_KEY] = json.dumps(crcs, separators=(",", ":"))
        header["__metadata__"] = meta
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8", "surrogatepass")
    text += b" " * ((8 - (8 + len(text)) % 8) % 8)
    return _u64(len(text)) + text + data


def split(blob: bytes) -> tuple[dict, bytes] | None:
    """(header, data) of a well-formed file, or None."""
    if len(blob) < 8:
        return None
    n = int.from_bytes(blob[:8], "little")
    if n > len(blob) - 8:
        return None
    try:
        header = json.loads(blob[8 : 8 + n])
    except (ValueError, UnicodeDecodeError):
        return None
    return (header, blob[8 + n :]) if isinstance(header, dict) else None
