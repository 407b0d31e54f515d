"""State files: named arrays plus string metadata in a safetensors-compatible file.

Writes are atomic (temporary file, fsync, rename); reads validate the whole header and every CRC-32C
checksum before returning anything. Any safetensors reader can open the files. Specification:
``docs/format.md``.
"""

from __future__ import annotations

import json
import os
from typing import Any, Mapping, Union

import numpy as np

from . import _arrays, _octopt
from ._octopt import StateFileError

PathLike = Union[str, bytes, "os.PathLike[str]", "os.PathLike[bytes]"]

_BFLOAT16_MODES = ("uint16", "float32", "ml_dtypes")


def save(path: PathLike, tensors: Mapping[str, Any], metadata: Mapping[str, str] | None = None) -> None:
    """Writes ``tensors`` (name -> array, stored in the mapping's order) and ``metadata`` (str -> str) to
    ``path``, replacing any file there atomically.

    Arrays may be NumPy (any layout; copied to C order when needed), PyTorch (moved to the CPU),
    CuPy, or anything ``numpy.asarray`` accepts. bfloat16 arrays (PyTorch, or NumPy with ml_dtypes) are
    stored as ``BF16``. Keys ``octopt.format``, ``octopt.format_version`` and ``octopt.crc32c`` are written
    by this layer and may not be given.

    Raises ValueError / TypeError for a bad name, array or metadata entry (nothing is written) and
    OSError when the file system refuses (an existing file is then left as it was).
    """
    fn = "save"
    if not isinstance(tensors, Mapping):
        raise TypeError(f"{fn}: argument 'tensors' must be a mapping of name -> array, got {type(tensors).__name__}")
    metadata = {} if metadata is None else metadata
    if not isinstance(metadata, Mapping):
        raise TypeError(f"{fn}: argument 'metadata' must be a mapping of str -> str, got {type(metadata).__name__}")
    items = []
    for name, value in tensors.items():
        if not isinstance(name, str):
            raise TypeError(f"{fn}: tensor names must be str, got {type(name).__name__} ({name!r})")
        items.append(_host_array(name, value, fn))
    meta = {}
    for key, value in metadata.items():
        if not isinstance(key, str):
            raise TypeError(f"{fn}: metadata keys must be str, got {type(key).__name__} ({key!r})")
        if not isinstance(value, str):
            raise TypeError(f"{fn}: metadata key {key!r} must map to a str, got {type(value).__name__}")
        meta[key] = value
    _octopt.save_state_file(path, items, meta)


def load(path: PathLike, *, bfloat16: str = "uint16") -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """Reads a state file: ``(tensors, metadata)``, tensors in file order as NumPy arrays and the
    caller's metadata (without the ``octopt.format*`` / ``octopt.crc32c`` keys of this layer).

    NumPy has no bfloat16, so ``BF16`` tensors come back per ``bfloat16``: ``"uint16"`` (default) the raw
    bits (``(bits.astype(np.uint32) << 16).view(np.float32)`` widens them exactly), ``"float32"`` widened
    that way, ``"ml_dtypes"`` as ``ml_dtypes.bfloat16`` (needs that package).

    Raises StateFileError (a ValueError) when the file is corrupt, truncated or of an unknown format
    version, and OSError when it cannot be read.
    """
    if bfloat16 not in _BFLOAT16_MODES:
        raise ValueError(
            f"load: argument 'bfloat16' must be one of {', '.join(map(repr, _BFLOAT16_MODES))}, got {bfloat16!r}"
        )
    metadata, items = _octopt.load_state_file(path)
    tensors = {}
    for name, array, dtype in items:
        if dtype == "BF16":
            array = _from_bf16_bits(array, bfloat16)
        tensors[name] = array
    return tensors, metadata


def inspect(path: PathLike) -> dict:
    """What the file holds and what is wrong with it, without raising for its contents.

    Keys: ``path``, ``file_size``, ``header_size``, ``data_size``, ``valid`` (True exactly when
    :func:`load` would succeed), ``error`` (the message :func:`load` would raise, else None), ``format``,
    ``format_version``, ``metadata`` (everything stored, octopt's own keys included), ``header_checksum``
    and ``tensors``: a list of dicts with ``name``, ``dtype``, ``shape``, ``data_offsets``, ``nbytes``,
    ``crc32c`` (stored), ``crc32c_computed`` and ``checksum`` ("ok", "bad" or "missing"), plus
    ``checksums``: counts per status. Raises OSError only.
    """
    return json.loads(_octopt.inspect_state_file(path))


def _host_array(name: str, value: Any, fn: str) -> tuple:
    """(name, array[, dtype]) for the native writer: a C-contiguous host array in native byte order."""
    fw = _arrays.framework_of(value)
    if fw == "torch":
        t = value.detach()
        if t.device.type != "cpu":
            t = t.cpu()
        return (name, t.contiguous())
    if fw == "cupy":
        value = value.get()
    a = np.asarray(value)
    if a.dtype.name == "bfloat16":  # ml_dtypes: NumPy cannot export it, its bits can
        return (name, _c_order(a).view(np.uint16), "BF16")
    if a.dtype.hasobject or a.dtype.fields is not None:
        raise TypeError(f"{fn}: tensor {name!r} has dtype {a.dtype}, which state files cannot hold")
    if not a.dtype.isnative:
        a = a.astype(a.dtype.newbyteorder("="))
    return (name, _c_order(a))


def _c_order(a: np.ndarray) -> np.ndarray:
    # not np.ascontiguousarray: it turns a 0-d array into a 1-d one
    return a if a.flags.c_contiguous else a.copy(order="C")


def _from_bf16_bits(bits: np.ndarray, mode: str) -> np.ndarray:
    if mode == "uint16":
        return bits
    if mode == "float32":
        return (bits.astype(np.uint32) << np.uint32(16)).view(np.float32)
    try:
        import ml_dtypes
    except ImportError as e:
        raise TypeError("load: bfloat16='ml_dtypes' needs the ml_dtypes package (pip install ml_dtypes)") from e
    return bits.view(ml_dtypes.bfloat16)


__all__ = ["StateFileError", "inspect", "load", "save"]
