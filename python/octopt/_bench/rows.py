"""One result row per (case, implementation), its derived columns, the step table and the issue's targets."""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field

from .cases import BYTES_PER_PARAM
from .table import format_table, ms

FUSED = "torch Adam fused"  # the reference of the "x fused" column

# The targets of issue 20 (fast on every CPU), per kernel path: octopt's step time over torch fused Adam's in
# the same case, as the median of the per-round ratios (the implementations take turns, so round i of both
# rows met the same phase of the machine), for 2^24 parameters in one tensor or split into several:
# (implementation, single tensor?, at most this ratio). A path missing from the table has no targets.
TARGETS = {
    "avx512": (
        ("octopt Adam 8-bit", True, 1.6),
        ("octopt Adam 8-bit", False, 1.6),
        ("octopt Adam 4-bit", True, 1.8),
        ("octopt Adam 32-bit", True, 1.05),
    ),
    "avx2": (
        ("octopt Adam 8-bit", True, 2.0),
        ("octopt Adam 8-bit", False, 2.0),
        ("octopt Adam 4-bit", True, 2.5),
        ("octopt Adam 32-bit", True, 1.05),
    ),
    "baseline": (
        ("octopt Adam 8-bit", True, 8.0),
        ("octopt Adam 4-bit", True, 10.0),
    ),
}
TARGET_SIZE = 1 << 24  # the parameters of every target's case


def target_path(simd: str) -> str:
    """The column of TARGETS for a kernel path of octopt.info()["simd"] (avx512vbmi is avx512's)."""
    return "avx512" if simd.startswith("avx512") else simd


def round_ratios(ours: Row, fused: Row) -> list[float]:
    """ours / fused step time of each round (both rows took one timed step per round, in turns)."""
    return [a / b for a, b in zip(ours.times_s, fused.times_s)]


@dataclass
class Row:
    case: str
    n: int
    tensors: int
    impl: str
    family: str
    bits: int
    times_s: list[float] = field(default_factory=list)  # wall time of each timed step
    cpu_s: list[float] = field(default_factory=list)  # the process's CPU time (all threads) in each step
    note: str = ""  # why the row was skipped

    @property
    def median(self) -> float:
        return statistics.median(self.times_s)

    @property
    def bytes_moved(self) -> float:
        return BYTES_PER_PARAM[self.bits] * self.n

    @property
    def gbps(self) -> float:
        return self.bytes_moved / self.median / 1e9

    def to_json(self, floor_gbps: float, fused: Row | None) -> dict:
        d = asdict(self)
        if self.times_s:
            d.update(
                median_s=self.median,
                min_s=min(self.times_s),
                max_s=max(self.times_s),
                cpu_median_s=statistics.median(self.cpu_s),
                ns_per_param=self.median / self.n * 1e9,
                bytes_moved=self.bytes_moved,
                gbps=self.gbps,
                of_floor=self.gbps / floor_gbps,
                floor_s=self.bytes_moved / (floor_gbps * 1e9),
                x_fused=self.median / fused.median if fused else None,
            )
        return d


def fused_of(rows: list[Row], case: str) -> Row | None:
    return next((r for r in rows if r.case == case and r.impl == FUSED and r.times_s), None)


def step_table(rows: list[Row], floor_gbps: float) -> str:
    head = (
        "case",
        "implementation",
        "bits",
        "ms/step",
        "spread (min-max)",
        "ns/param",
        "GB/s",
        "of floor",
        "x fused",
        "cpu ms",
        "cores",
    )
    lines: list = []
    for case in dict.fromkeys(r.case for r in rows):
        if lines:
            lines.append(None)
        fused = fused_of(rows, case)
        for r in (r for r in rows if r.case == case):
            if not r.times_s:
                lines.append((r.case, r.impl, str(r.bits), r.note))
                continue
            m, cpu = r.median, statistics.median(r.cpu_s)
            lines.append(
                (
                    r.case,
                    r.impl,
                    str(r.bits),
                    ms(m),
                    f"{ms(min(r.times_s))}-{ms(max(r.times_s))}",
                    f"{m / r.n * 1e9:.3f}",
                    f"{r.gbps:.1f}",
                    f"{r.gbps / floor_gbps:.0%}",
                    f"{m / fused.median:.2f}" if fused else "n/a",
                    ms(cpu),
                    f"{cpu / m:.2f}",
                )
            )
    return format_table(head, lines, left=2)


def targets(rows: list[Row], simd: str) -> list[dict]:
    out = []
    path = target_path(simd)
    for case in dict.fromkeys(r.case for r in rows):
        fused = fused_of(rows, case)
        for impl, single, limit in TARGETS.get(path, ()):
            ours = next((r for r in rows if r.case == case and r.impl == impl and r.times_s), None)
            if fused is None or ours is None or ours.n != TARGET_SIZE or (ours.tensors == 1) != single:
                continue
            ratios = round_ratios(ours, fused)
            ratio = statistics.median(ratios)
            cpu = statistics.median(ours.cpu_s) / statistics.median(fused.cpu_s)
            out.append(
                {
                    "case": case,
                    "path": path,
                    "target": f"{impl} <= {limit}x the time of {FUSED} ({path})",
                    "value": ratio,
                    "spread": [min(ratios), max(ratios)],
                    "ok": ratio <= limit,
                    "text": f"{ratio:.2f}x, median of {len(ratios)} rounds ({min(ratios):.2f}-{max(ratios):.2f};"
                    f" CPU time {cpu:.2f}x)",
                }
            )
    return out
