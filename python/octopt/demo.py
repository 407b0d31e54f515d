"""``octopt demo``: a NumPy MLP on scikit-learn's digits, trained with 32-bit and 8-bit Adam state side by side.

Both runs start from the same weights and see the same mini-batches in the same order, so the only difference
between them is the width of Adam's state. Needs scikit-learn (the data ships inside it, no download) and, for
the plot, matplotlib; tqdm is used for the progress bar when installed.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import sys
import time
from dataclasses import dataclass, field

import numpy as np

from ._demo_mlp import evaluate, init_params, loss_and_grads
from ._demo_plot import plot

HIDDEN = (256, 256)  # 64*256 and 256*256 weights exceed min_8bit_size, so they get 8-bit state
BATCH = 64
LR = 2e-3  # peak rate; cosine-decayed to zero over the run
TEST_FRACTION = 0.2
MIN_8BIT_SIZE = 4096  # octopt's default, passed explicitly: the 10-wide output layer (2560) stays 32-bit
INSTALL_HINT = 'pip install "octopt[demo]"'


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--epochs", type=int, default=15, help="passes over the training set (default 15)")
    p.add_argument("--seed", type=int, default=0, help="seed for the split, initialization and batch order")
    p.add_argument("--out", default="octopt-demo.png", help="where to write the loss plot (default %(default)s)")
    p.add_argument("--no-plot", action="store_true", help="skip the plot (matplotlib not needed)")


# -- data --------------------------------------------------------------------------------------------------
def load_data(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    x = (x / 16.0).astype(np.float32)  # pixel intensities are 0..16
    order = np.random.default_rng(seed).permutation(len(y))
    n_test = int(round(TEST_FRACTION * len(y)))
    test, train = order[:n_test], order[n_test:]
    return x[train], y[train], x[test], y[test]


# -- training ----------------------------------------------------------------------------------------------
@dataclass
class RunResult:
    label: str
    step_losses: list[float] = field(default_factory=list)  # mini-batch loss before each step
    train_loss: float = 0.0  # full training set, after the last step
    test_acc: float = 0.0
    state_bytes: int = 0
    eight_bit_tensors: int = 0
    max_step_change: float = 0.0  # largest |change| of any weight in a single step; Adam keeps it near lr
    seconds: float = 0.0


def _progress(total: int, desc: str):
    try:
        from tqdm import tqdm

        return tqdm(total=total, desc=desc, unit="step", leave=True, dynamic_ncols=True)
    except ImportError:
        return _TextBar(total, desc)


class _TextBar:
    """Fallback progress bar on stderr when tqdm is not installed."""

    def __init__(self, total: int, desc: str, width: int = 30):
        self.total, self.desc, self.width, self.n, self.postfix = total, desc, width, 0, ""

    def update(self, k: int = 1) -> None:
        self.n += k
        if self.n == self.total or self.n % max(1, self.total // 50) == 0:
            filled = self.width * self.n // self.total
            bar = "#" * filled + "-" * (self.width - filled)
            sys.stderr.write(f"\r{self.desc}: [{bar}] {self.n}/{self.total} {self.postfix}")
            sys.stderr.flush()

    def set_postfix_str(self, s: str) -> None:
        self.postfix = s

    def close(self) -> None:
        sys.stderr.write("\n")


def train(bits: int, init: list[np.ndarray], batches: list[np.ndarray], data, seed: int) -> RunResult:
    import octopt

    x_train, y_train, x_test, y_test = data
    params = [p.copy() for p in init]
    opt = octopt.Adam(params, lr=LR, bits=bits, min_8bit_size=MIN_8BIT_SIZE, seed=seed)
    res = RunResult(f"{bits}-bit Adam")
    res.eight_bit_tensors = sum(any(s["bits"] == 8 for s in t["slots"].values()) for t in opt.state_layout())
    bar = _progress(len(batches), f"{res.label:>11}")
    t0 = time.perf_counter()
    for i, idx in enumerate(batches):
        # cosine decay to zero: the final weights settle instead of carrying the last batches' noise
        opt.param_groups[0]["lr"] = LR * 0.5 * (1.0 + math.cos(math.pi * i / len(batches)))
        loss, grads = loss_and_grads(params, x_train[idx], y_train[idx])
        before = [p.copy() for p in params]
        opt.step(grads)
        res.max_step_change = max(res.max_step_change, *(float(np.abs(p - b).max()) for p, b in zip(params, before)))
        res.step_losses.append(loss)
        bar.update(1)
        if i % 10 == 0:
            bar.set_postfix_str(f"loss {loss:.4f}")
    bar.close()
    res.seconds = time.perf_counter() - t0
    res.train_loss, _ = evaluate(params, x_train, y_train)
    _, res.test_acc = evaluate(params, x_test, y_test)
    res.state_bytes = opt.state_bytes()
    if opt.skipped_blocks:
        print(f"warning: {res.label} skipped {opt.skipped_blocks} blocks with non-finite gradients")
    return res


# -- output ------------------------------------------------------------------------------------------------
def print_summary(results: list[RunResult], n_tensors: int) -> None:
    header = ("run", "train loss", "test acc", "state bytes", "8-bit tensors", "max step |dw|", "time")
    rows = [
        (
            r.label,
            f"{r.train_loss:.4f}",
            f"{r.test_acc:.2%}",
            f"{r.state_bytes:,}",
            f"{r.eight_bit_tensors}/{n_tensors}",
            f"{r.max_step_change:.2g}",
            f"{r.seconds:.1f}s",
        )
        for r in results
    ]
    widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header))]
    print()
    for row in (header, *rows):
        print("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))))
    r32, r8 = results
    rel = (r8.train_loss - r32.train_loss) / r32.train_loss
    print(
        f"optimizer state: 32-bit {r32.state_bytes:,} bytes, 8-bit {r8.state_bytes:,} bytes "
        f"({r32.state_bytes / r8.state_bytes:.2f}x smaller)"
    )
    print(f"final train loss, 8-bit vs 32-bit: relative difference {rel:+.2%}")


def run(args: argparse.Namespace) -> int:
    missing = [
        pkg
        for mod, pkg, needed in (
            ("sklearn", "scikit-learn", True),
            ("matplotlib", "matplotlib", not args.no_plot),
        )
        if needed and not _importable(mod)
    ]
    if missing:
        print(
            f"octopt demo needs {' and '.join(missing)}, which {'is' if len(missing) == 1 else 'are'} not "
            f"installed; install with: {INSTALL_HINT}" + ("" if "scikit-learn" in missing else " (or pass --no-plot)"),
            file=sys.stderr,
        )
        return 1
    if args.epochs < 1:
        print(f"octopt demo: --epochs must be at least 1, got {args.epochs}", file=sys.stderr)
        return 2
    data = load_data(args.seed)
    n_train = len(data[1])
    sizes = (data[0].shape[1], *HIDDEN, 10)
    init = init_params(args.seed, sizes)
    rng = np.random.default_rng(args.seed + 2)
    batches = [
        perm[i : i + BATCH]
        for perm in (rng.permutation(n_train) for _ in range(args.epochs))
        for i in range(0, n_train, BATCH)
    ]
    steps_per_epoch = len(batches) // args.epochs
    print(
        f"load_digits: {n_train} train / {len(data[3])} test samples; MLP {'-'.join(map(str, sizes))} "
        f"({sum(p.size for p in init)} params); {args.epochs} epochs x {steps_per_epoch} steps, lr {LR}, "
        f"min_8bit_size {MIN_8BIT_SIZE}"
    )
    with _single_threaded_blas():
        results = [train(bits, init, batches, data, args.seed) for bits in (32, 8)]
    print_summary(results, len(init))
    if not args.no_plot:
        plot(results, args.out, steps_per_epoch, BATCH)
        print(f"loss curves written to {args.out}")
    return 0


def _single_threaded_blas():
    """The 64-row matmuls gain nothing from BLAS threads, and OpenBLAS's spinning threads compete with octopt's
    own pool for the cores: on a busy 2-core machine that made the 8-bit run ~25x slower. threadpoolctl comes
    with scikit-learn."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return contextlib.nullcontext()
    return threadpool_limits(limits=1, user_api="blas")


def _importable(module: str) -> bool:
    try:
        __import__(module)
    except ImportError:
        return False
    return True


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="octopt demo", description=__doc__.splitlines()[0])
    add_arguments(p)
    return run(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
