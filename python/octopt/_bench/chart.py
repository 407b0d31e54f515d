"""The step benchmark's PNG: ns per parameter of every implementation in every case (log scale), each bar
with its bandwidth floor marked, and the memory row when it was measured."""

from __future__ import annotations

import numpy as np

from .cases import BYTES_PER_PARAM
from .memory import MIB
from .results import pyplot
from .rows import Row


def plot_step(rows: list[Row], floor_gbps: float, memory: list[dict], path: str, title: str) -> str | None:
    plt = pyplot()
    if plt is None:
        return None
    cases = list(dict.fromkeys(r.case for r in rows))
    impls = list(dict.fromkeys(r.impl for r in rows))
    fig, axes = plt.subplots(
        1,
        2 if memory else 1,
        figsize=(15 if memory else 11, 7),
        dpi=110,
        gridspec_kw={"width_ratios": (3, 1)} if memory else None,
        squeeze=False,
    )
    ax = axes[0][0]
    width = 0.85 / len(impls)
    colors = plt.get_cmap("tab20")(np.linspace(0, 1, max(len(impls), 2)))
    for i, impl in enumerate(impls):
        for j, case in enumerate(cases):
            r = next((r for r in rows if r.case == case and r.impl == impl and r.times_s), None)
            if r is None:
                continue
            x = j + (i - (len(impls) - 1) / 2) * width
            ax.bar(x, r.median / r.n * 1e9, width, color=colors[i], label=impl if j == 0 or i else None)
            floor_ns = BYTES_PER_PARAM[r.bits] / floor_gbps  # GB/s is bytes per ns
            ax.plot(
                [x - width / 2, x + width / 2],
                [floor_ns] * 2,
                color="black",
                linewidth=1.5,
                label="bandwidth floor" if (i, j) == (0, 0) else None,
            )
    handles, labels = ax.get_legend_handles_labels()
    uniq = dict(zip(labels, handles))
    ax.legend(uniq.values(), uniq.keys(), fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=4)
    ax.set_yscale("log")
    ax.set_xticks(range(len(cases)), cases)
    ax.set_xlabel("case: parameters (xK = split into K tensors)")
    ax.set_ylabel("ns per parameter per step (median; lower is better)")
    ax.set_title(
        f"{title}\nblack tick: bytes the step must move / {floor_gbps:.1f} GB/s (best STREAM copy/triad)", fontsize=10
    )
    ax.grid(True, axis="y", which="both", alpha=0.3)
    if memory:
        mx = axes[0][1]
        names = [m["impl"] for m in memory]
        y = np.arange(len(names))
        mx.barh(y, [m["state_bytes"] / MIB for m in memory], color="tab:blue", label="optimizer state")
        state = [m["state_bytes"] / MIB for m in memory]
        mx.barh(
            y,
            [max(m["temporaries_kib"], 0) / 1024 for m in memory],
            left=state,
            color="tab:red",
            label="step-time temporaries",
        )
        mx.set_xlim(0, 1.15 * max(s + max(m["temporaries_kib"], 0) / 1024 for s, m in zip(state, memory)))
        mx.set_yticks(y, names, fontsize=8)
        mx.invert_yaxis()
        mx.set_xlabel("MiB")
        mx.set_title(f"memory, {memory[0]['n']:,} params", fontsize=10)
        mx.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def plot_overhead(rows: list, path: str, title: str) -> str | None:
    """The overhead section's PNG: microseconds of overhead per tensor for each measured row (the fastest
    round's estimate; the error bar spans the rounds), with the issue's target drawn on the octopt rows."""
    plt = pyplot()
    if plt is None:
        return None
    done = [r for r in rows if r.step_rounds_s]
    labels = [f"{r.name}\n{r.tensors}x{r.elems}, {r.bits}-bit" for r in done]
    values = [r.per_tensor_s * 1e6 for r in done]
    rounds = [[x * 1e6 for x in r.paired_s] for r in done]
    fig, ax = plt.subplots(figsize=(max(8, 0.9 * len(done) + 2), 6), dpi=110)
    x = np.arange(len(done))
    colors = ["tab:green" if r.ok else "tab:red" if r.ok is False else "tab:gray" for r in done]
    ax.bar(
        x,
        values,
        color=colors,
        yerr=[
            [max(v - min(rs), 0) for v, rs in zip(values, rounds)],
            [max(max(rs) - v, 0) for v, rs in zip(values, rounds)],
        ],
        capsize=3,
    )
    for i, r in enumerate(done):
        if r.target_us:
            ax.plot(
                [i - 0.4, i + 0.4],
                [r.target_us] * 2,
                color="black",
                linewidth=1.5,
                label="target" if i == next(j for j, q in enumerate(done) if q.target_us) else None,
            )
    ax.set_xticks(x, labels, fontsize=7, rotation=60, ha="right")
    ax.set_ylabel("overhead per tensor, us ((step - one-tensor step) / (N - 1))")
    ax.set_title(f"{title}\ngreen: meets the target, red: misses it, gray: reference (no target)", fontsize=10)
    ax.grid(True, axis="y", alpha=0.3)
    if any(r.target_us for r in done):
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path
