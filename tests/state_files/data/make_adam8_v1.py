"""Generator of ``adam8_v1.safetensors``: an octopt 0.1.0 optimizer state file kept as a fixture.

Never regenerate it with a newer version: it proves that later versions still load what 0.1.0 wrote.
The run is deterministic; tests/state_files/test_optimizer_v1_fixture.py repeats it and compares.

    PYTHONPATH=<octopt install> python tests/state_files/data/make_adam8_v1.py
"""

from __future__ import annotations

import os

import numpy as np

FIXTURE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "adam8_v1.safetensors")
STEPS = 5


def build():
    """(optimizer, params, gradient generator) of the fixture's run, before any step."""
    import octopt

    params = [
        np.linspace(-1, 1, 4097, dtype=np.float32).reshape(17, 241),  # 8-bit state, ragged last block
        np.linspace(0, 1, 300, dtype=np.float32),  # below min_8bit_size: 32-bit state
        np.linspace(1, -1, 8192, dtype=np.float32),
    ]  # 4-bit group
    opt = octopt.Adam(
        [{"params": params[:2]}, {"params": params[2:], "bits": 4, "lr": 5e-3}], lr=1e-2, weight_decay=0.01, bits=8
    )
    return opt, params


def gradients(step: int, params: list) -> list:
    rng = np.random.default_rng(1000 + step)
    return [rng.standard_normal(p.shape).astype(np.float32) for p in params]


def run(steps: int = STEPS):
    opt, params = build()
    for s in range(steps):
        opt.step(gradients(s, params))
    return opt, params


if __name__ == "__main__":
    opt, _ = run()
    opt.save(FIXTURE)
    print("wrote", FIXTURE)
