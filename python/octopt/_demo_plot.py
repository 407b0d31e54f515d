"""The demo's plot: both runs' training-loss curves and their relative difference, written with matplotlib (Agg)."""

from __future__ import annotations

import os

import numpy as np


def _smooth(v: list[float], k: int) -> np.ndarray:
    a = np.asarray(v, dtype=np.float64)
    if len(a) < k:
        return a
    c = np.cumsum(np.insert(a, 0, 0.0))
    return (c[k:] - c[:-k]) / k  # running mean over k steps, aligned with the window's last step


def plot(results: list, path: str, steps_per_epoch: int, batch: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, ax_rel) = plt.subplots(
        2, 1, figsize=(8, 6.5), dpi=110, sharex=True, gridspec_kw={"height_ratios": (3, 1)}
    )
    k = steps_per_epoch
    smoothed = []
    for r, color, style in zip(results, ("tab:blue", "tab:orange"), ("--", "-")):
        steps = np.arange(1, len(r.step_losses) + 1)
        ax.plot(steps, r.step_losses, color=color, alpha=0.2, linewidth=0.8)
        sm = _smooth(r.step_losses, k)
        smoothed.append(sm)
        label = (
            f"{r.label}: final train loss {r.train_loss:.4f}, test acc {r.test_acc:.1%}, "
            f"state {r.state_bytes / 1024:.0f} KiB"
        )
        # 32-bit dashed and on top, so it stays visible where the two curves coincide
        ax.plot(
            steps[len(steps) - len(sm) :],
            sm,
            style,
            color=color,
            linewidth=2,
            label=label,
            zorder=3 - len(smoothed),
        )
    ax.set_yscale("log")
    ax.set_ylabel("training loss (cross-entropy)")
    ax.set_title(
        "octopt demo: MLP 64-256-256-10 on scikit-learn digits, 32-bit vs 8-bit Adam state\n"
        f"(faint: per batch; bold: mean of the last {k} steps)"
    )
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="upper right", fontsize=9)
    rel = 100.0 * (smoothed[1] / smoothed[0] - 1.0)
    ax_rel.plot(np.arange(len(steps) - len(rel) + 1, len(steps) + 1), rel, color="tab:gray", linewidth=1.5)
    ax_rel.axhline(0.0, color="black", linewidth=0.8)
    ax_rel.set_ylabel("8-bit / 32-bit - 1 (%)")
    ax_rel.set_xlabel(f"optimizer step (batch {batch}, {steps_per_epoch} steps per epoch)")
    ax_rel.grid(True, alpha=0.3)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
