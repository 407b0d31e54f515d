"""One result row per (case, implementation), its derived columns, the step table and the issue's targets."""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field

from .cases import BYTES_PER_PARAM
from .table import format_table, ms

FUSED = "torch Adam fused"  # the reference of the "x fused" column

# The targets of the exact step (issue 12), octopt's median step time over torch fused Adam's in the same
# case, for cases of at least 2^24 parameters: (implementation, single tensor?, at most this ratio). The
# 4-bit target is for 2^24 parameters only.
TARGETS = (
    ("octopt Adam 8-bit", True, 1.4),
    ("octopt Adam 8-bit", False, 1.5),
    ("octopt Adam 4-bit", True, 1.5),
    ("octopt Adam 32-bit", True, 1.0),
    ("octopt Adam 32-bit", False, 1.0),
)
FOUR_BIT_CASES = 1 << 24  # the 4-bit target's size


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


def targets(rows: list[Row]) -> list[dict]:
    out = []
    for case in dict.fromkeys(r.case for r in rows):
        fused = fused_of(rows, case)
        for impl, single, limit in TARGETS:
            ours = next((r for r in rows if r.case == case and r.impl == impl and r.times_s), None)
            if fused is None or ours is None or ours.n < 1 << 24 or (ours.tensors == 1) != single:
                continue
            if "4-bit" in impl and ours.n != FOUR_BIT_CASES:
                continue
            ratio = ours.median / fused.median
            cpu = statistics.median(ours.cpu_s) / statistics.median(fused.cpu_s)
            out.append(
                {
                    "case": case,
                    "target": f"{impl} <= {limit}x the time of {FUSED}",
                    "value": ratio,
                    "ok": ratio <= limit,
                    "text": f"{ratio:.2f}x (CPU time {cpu:.2f}x)",
                }
            )
    return out
