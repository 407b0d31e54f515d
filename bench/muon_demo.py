"""8-bit and 4-bit Muon against 32-bit Muon on `octopt demo`'s task (load_digits, MLP 64-256-256-10, batch 64,
15 epochs, the same batches): Muon (octopt.Muon, momentum at the given bits) on the weight matrices, 32-bit Adam on
the biases, cosine-decayed rates. Prints the train loss after the same steps and the test accuracy per width."""

from __future__ import annotations

import math

import numpy as np

import octopt
from octopt._demo_mlp import evaluate, init_params, loss_and_grads
from octopt.demo import BATCH, HIDDEN, load_data

EPOCHS, MUON_LR, ADAM_LR = 15, 0.02, 2e-3


def run(bits: int, seed: int = 0) -> tuple[float, float, int]:
    x_train, y_train, x_test, y_test = data = load_data(seed)
    params = init_params(seed, (x_train.shape[1], *HIDDEN, 10))
    rng = np.random.default_rng(seed)
    n = len(y_train)
    batches = [perm[i : i + BATCH] for perm in (rng.permutation(n) for _ in range(EPOCHS)) for i in range(0, n, BATCH)]
    muon = octopt.Muon(params[0::2], lr=MUON_LR, weight_decay=0.0, bits=bits)
    adam = octopt.Adam(params[1::2], lr=ADAM_LR, bits=32)
    for i, idx in enumerate(batches):
        scale = 0.5 * (1.0 + math.cos(math.pi * i / len(batches)))
        muon.param_groups[0]["lr"], adam.param_groups[0]["lr"] = MUON_LR * scale, ADAM_LR * scale
        _, grads = loss_and_grads(params, x_train[idx], y_train[idx])
        muon.step(grads[0::2])
        adam.step(grads[1::2])
    loss, _ = evaluate(params, x_train, y_train)
    _, acc = evaluate(params, x_test, y_test)
    del data
    return loss, acc, muon.state_bytes()


def main() -> None:
    rows = {bits: run(bits) for bits in (32, 8, 4)}
    print(f"{'momentum':>9} | {'train loss':>10} | {'test acc':>8} | {'Muon state bytes':>16}")
    for bits, (loss, acc, nbytes) in rows.items():
        print(f"{bits:>6}-bit | {loss:10.5f} | {acc:8.4f} | {nbytes:16d}")


if __name__ == "__main__":
    main()
