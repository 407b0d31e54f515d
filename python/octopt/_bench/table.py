"""Plain-text tables: a header, a rule, left-aligned text columns and right-aligned numbers."""

from __future__ import annotations


def ms(seconds: float) -> str:
    v = seconds * 1e3
    return f"{v:.2f}" if v >= 1 else f"{v:.3g}"


def format_table(head: tuple[str, ...], lines: list[tuple[str, ...] | None], left: int = 1) -> str:
    """`lines` of cells; None is a blank separator line. The first `left` columns are left-aligned. A line
    with fewer cells than `head` puts its last cell (e.g. a skip reason) after the others, unpadded."""
    full = [x for x in lines if x is not None and len(x) == len(head)]
    widths = [max(len(head[i]), *(len(x[i]) for x in full)) for i in range(len(head))]
    out = [
        "  ".join(h.ljust(w) if i < left else h.rjust(w) for i, (h, w) in enumerate(zip(head, widths))),
        "  ".join("-" * w for w in widths),
    ]
    for x in lines:
        if x is None:
            out.append("")
            continue
        short = len(x) < len(head)
        cells = x[:-1] if short else x
        text = [v.ljust(w) if i < left else v.rjust(w) for i, (v, w) in enumerate(zip(cells, widths))]
        if short:
            text.append(x[-1])
        out.append("  ".join(text).rstrip())
    return "\n".join(out)
