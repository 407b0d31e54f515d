"""octopt.optax step benchmark: optax.adamw (fp32 state, jitted) against octopt.optax.adamw8bit through
update + optax.apply_updates (jitted) and through the fused, donating step, plus the NumPy path
(octopt.AdamW, 8-bit) as the core's reference, in one process on the CPU.

    PYTHONPATH=/tmp/site-x python bench/optax_step.py [--sizes 2^22 2^22x64] [--repeats 10] [--threads 2]

A case is N fp32 parameters (2^E or an integer), optionally split into xK equal tensors (each tensor is
one FFI call of octopt.optax, so K shows the per-call cost). Gradients are fixed random arrays.
"""

from __future__ import annotations

import argparse
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np
import octopt
import octopt.optax
import optax


def parse_case(text: str) -> tuple[int, int]:
    size, _, k = text.partition("x")
    n = 2 ** int(size[2:]) if size.startswith("2^") else int(size)
    return n, int(k or 1)


def timed(fn, repeats: int) -> float:
    fn()  # warm-up: compilation, state allocation
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", nargs="+", default=["2^22", "2^22x64"])
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    octopt.set_num_threads(args.threads)
    print(
        f"octopt {octopt.__version__} from {octopt.__file__}; jax {jax.__version__}, optax {optax.__version__}; "
        f"{args.threads} octopt thread(s)"
    )
    print(f"{'case':>10} {'implementation':<34} {'ms/step':>9} {'vs optax':>9} {'state B/param':>14}")
    for text in args.sizes:
        n, k = parse_case(text)
        rng = np.random.default_rng(0)
        p_np = [rng.standard_normal(n // k).astype(np.float32) for _ in range(k)]
        g_np = [rng.standard_normal(n // k).astype(np.float32) for _ in range(k)]
        grads = [jnp.asarray(g) for g in g_np]

        def transform(tx):
            params = [jnp.asarray(p) * 1 for p in p_np]
            state = tx.init(params)

            @jax.jit
            def step(params, state):
                updates, state = tx.update(grads, state, params)
                return optax.apply_updates(params, updates), state

            box = [params, state]

            def run():
                box[0], box[1] = step(box[0], box[1])
                jax.block_until_ready(box[0])

            return run, state

        def fused():
            tx = octopt.optax.adamw8bit(1e-3)
            box = [[jnp.asarray(p) * 1 for p in p_np]]
            box.append(tx.init(box[0]))

            def run():
                box[0], box[1] = tx.step(box[0], grads, box[1])
                jax.block_until_ready(box[0])

            return run, box[1]

        def numpy_path():
            opt = octopt.AdamW([p.copy() for p in p_np], lr=1e-3, bits=8)
            return (lambda: opt.step(g_np)), None

        def state_bytes(state) -> float:
            return sum(x.nbytes for x in jax.tree.leaves(state)) / n

        rows = []
        for name, make in (
            ("optax.adamw (fp32 state)", lambda: transform(optax.adamw(1e-3))),
            ("octopt.optax.adamw8bit update", lambda: transform(octopt.optax.adamw8bit(1e-3))),
            ("octopt.optax.adamw8bit .step", fused),
            ("octopt.AdamW(bits=8) NumPy path", numpy_path),
        ):
            run, state = make()
            t = timed(run, args.repeats)
            rows.append((name, t, state_bytes(state) if state is not None else 2 + 8 / 256))
            del run, state
        base = rows[0][1]
        for name, t, sb in rows:
            print(f"{text:>10} {name:<34} {t * 1e3:9.2f} {base / t:8.2f}x {sb:14.3f}")


if __name__ == "__main__":
    main()
