"""STREAM-style memory bandwidth on the host: copy and triad over float32 arrays, the yardstick for the
"fraction of the bandwidth floor" columns.

Bytes are counted as STREAM counts them: each array element read once and written once, write-allocate
traffic not counted. copy ``a = b`` moves 8 B per element; triad ``a = b + s * c`` moves 12 B.
NumPy has no fused triad, so it runs in chunks of ``CHUNK`` elements: ``t = s * c[chunk]`` into a buffer
that stays in cache, then ``a[chunk] = b[chunk] + t``; main memory sees only the reads of b and c and the
write of a, as in STREAM. Both kernels split the arrays over threads (NumPy releases the GIL in copies
and ufuncs).
"""

from __future__ import annotations

import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

N = 1 << 26  # elements per array: 256 MiB each, far beyond any cache
CHUNK = 1 << 16  # triad chunk: a 256 KiB buffer that stays in L2
BYTES_PER_ELEMENT = {"copy": 8, "triad": 12}
SCALAR = np.float32(3.0)


@dataclass
class StreamResult:
    kernel: str  # "copy" or "triad"
    threads: int
    n: int  # float32 elements per array
    times_s: list[float] = field(default_factory=list)

    @property
    def gbps(self) -> float:
        return BYTES_PER_ELEMENT[self.kernel] * self.n / statistics.median(self.times_s) / 1e9


def _triad(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> None:
    t = np.empty(min(CHUNK, a.size), np.float32)
    for i in range(0, a.size, CHUNK):
        j = min(i + CHUNK, a.size)
        np.multiply(c[i:j], SCALAR, out=t[: j - i])
        np.add(b[i:j], t[: j - i], out=a[i:j])


def measure(kernel: str, threads: int, repeats: int, n: int = N) -> StreamResult:
    """`repeats` timed runs of `kernel` after one untimed run, split over `threads` threads."""
    if kernel not in BYTES_PER_ELEMENT:
        raise ValueError(f"bandwidth.measure: kernel must be one of {sorted(BYTES_PER_ELEMENT)}, got {kernel!r}")
    rng = np.random.default_rng(1)
    b = rng.standard_normal(n, dtype=np.float32)
    a = np.empty_like(b)
    c = rng.standard_normal(n, dtype=np.float32) if kernel == "triad" else None
    parts = [np.array_split(x, threads) if x is not None else [None] * threads for x in (a, b, c)]
    work = list(zip(*parts))

    def one(abc: tuple) -> None:
        if kernel == "copy":
            np.copyto(abc[0], abc[1])
        else:
            _triad(*abc)

    result = StreamResult(kernel, threads, n)
    with ThreadPoolExecutor(threads) as pool:
        for r in range(repeats + 1):
            t0 = time.perf_counter()
            if threads == 1:
                one(work[0])
            else:
                list(pool.map(one, work))
            if r:
                result.times_s.append(time.perf_counter() - t0)
    return result
