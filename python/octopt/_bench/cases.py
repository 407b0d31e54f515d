"""Benchmark cases (a parameter count, optionally split into equal tensors) and the bytes an optimizer step
must move per parameter, the numerator of every GB/s and bandwidth-floor figure."""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_SIZES = ("2^20", "2^24", "2^26", "2^24x256")
QUICK_SIZES = ("2^20", "2^22", "2^20x256")

# Minimum bytes one Adam(W) step moves per parameter (each read and each write counted once; write-allocate
# not counted), whatever an implementation really does. fp32: read p, g, m, v and write p, m, v (7 x 4 B).
# 8-bit: read p, g (4 + 4) and the m, v codes (1 + 1), write p (4) and the codes (1 + 1), plus the absmax of
# m and v (2 x 4 B per 256-element block, counted once). 4-bit: half-byte codes, 128-element blocks.
BYTES_PER_PARAM = {32: 28.0, 8: 16.0 + 8 / 256, 4: 14.0 + 8 / 128}


@dataclass(frozen=True)
class Case:
    label: str  # as written on the command line, e.g. "2^24x256"
    n: int  # total fp32 parameters
    tensors: int  # equal-sized tensors the parameters are split into

    @property
    def tensor_size(self) -> int:
        return self.n // self.tensors


def parse_size(text: str) -> int:
    """``2^E``, ``2**E``, ``A<<B`` or a plain integer."""
    t = text.strip().lower()
    try:
        for op in ("^", "**"):
            if op in t:
                base, exp = t.split(op, 1)
                return int(base) ** int(exp)
        if "<<" in t:
            a, b = t.split("<<", 1)
            return int(a) << int(b)
        return int(t)
    except ValueError:
        raise ValueError(f"parse_size: '{text}' is not an integer, 2^E, 2**E or A<<B") from None


def parse_case(token: str) -> Case:
    """``N`` or ``NxK``: N parameters (see parse_size), split into K equal tensors."""
    size, _, parts = token.lower().partition("x")
    try:
        n, k = parse_size(size), int(parts) if parts else 1
    except ValueError:
        n = k = 0
    if n <= 0 or k <= 0 or n % k:
        raise ValueError(f"parse_case: bad size '{token}': need N > 0 divisible by the tensor count K (NxK)")
    return Case(token, n, k)
