"""octopt.optax state of sharded parameters saves and restores with Orbax's standard checkpointer: on a mesh
of 4 CPU devices the restored state equals the saved one bit for bit and the resumed run equals the
uninterrupted one bit for bit (8 and 4 bits). Restored on 2 devices and on 1, where every shard of the
sharded weight is still a run of whole blocks, the state is the saved one bit for bit, and so is the resumed
run where the codes round to nearest (8-bit, and 4-bit with ``stochastic_rounding=False``); 4-bit codes that
round stochastically draw by the element's index in its shard, so on other shards they draw otherwise and the
run stays close, not equal. XLA_FLAGS must be set before jax is imported, so each device count runs in a
subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("jax", reason="jax is not installed")
pytest.importorskip("optax", reason="optax is not installed")
pytest.importorskip("orbax.checkpoint", reason="orbax-checkpoint is not installed")

SCRIPT = textwrap.dedent("""
    import json, sys
    import numpy as np, jax, optax
    import orbax.checkpoint as ocp
    import octopt.optax as oo
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    folder, mode = sys.argv[1], sys.argv[2]
    n = len(jax.devices())
    mesh = Mesh(np.array(jax.devices()).reshape(-1), ("x",))
    rng = np.random.default_rng(0)
    w0 = rng.standard_normal((64, 256)).astype(np.float32)  # row shards of 64 / n rows: whole blocks
    b0 = rng.standard_normal((4096 + 4,)).astype(np.float32)  # replicated, its last block partial
    c0 = rng.standard_normal((10,)).astype(np.float32)  # below min_8bit_size: 32-bit state, no absmax leaf
    grads = [{k: rng.standard_normal(v.shape).astype(np.float32) for k, v in (("w", w0), ("b", b0), ("c", c0))}
             for _ in range(6)]
    specs = {"w": P("x", None), "b": P(), "c": P()}
    put = lambda tree: {k: jax.device_put(v, NamedSharding(mesh, specs[k])) for k, v in tree.items()}

    def run(tx, params, state, gs):
        update = jax.jit(tx.update)
        for g in gs:
            updates, state = update(put(g), state, params)
            params = optax.apply_updates(params, updates)
        return params, state

    def leaves(tree):
        return [np.asarray(x) for x in jax.tree.leaves(tree)]

    out = {}
    for name in ("8", "4", "4-nearest"):
        bits = int(name[0])
        tx = oo.adamw(1e-2, bits=bits, weight_decay=0.01, **({"stochastic_rounding": False} if "nearest" in name else {}))
        path = f"{folder}/state{name}"
        if mode == "save":
            params = put({"w": w0, "b": b0, "c": c0})
            params, state = run(tx, params, tx.init(params), grads[:3])
            np.savez(f"{folder}/params{name}.npz", **{k: np.asarray(v) for k, v in params.items()})
            ckpt = ocp.StandardCheckpointer()
            ckpt.save(path, state)
            ckpt.wait_until_finished()
            np.savez(f"{folder}/saved{name}.npz", *leaves(state))
            params, state = run(tx, params, state, grads[3:])
            np.savez(f"{folder}/final{name}.npz", **{k: np.asarray(v) for k, v in params.items()})
        saved = list(np.load(f"{folder}/saved{name}.npz").values())
        saved_params = dict(np.load(f"{folder}/params{name}.npz"))
        params = put(saved_params)
        target = jax.tree.map(
            lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=a.sharding), tx.init(params)
        )
        restored = ocp.StandardCheckpointer().restore(path, target)
        assert len(saved) == len(leaves(restored)) and all(np.array_equal(a, b) for a, b in zip(leaves(restored), saved))
        assert restored.slot("mu")["w"].data.sharding.is_equivalent_to(NamedSharding(mesh, specs["w"]), 2)
        params, state = run(tx, params, restored, grads[3:])
        final = dict(np.load(f"{folder}/final{name}.npz"))
        out[name] = max(float(np.abs(np.asarray(params[k]) - final[k]).max()) for k in final)
    print("RESULT " + json.dumps({"devices": n, "max_diff": out}))
""")


def _run(devices: int, folder: str, mode: str) -> dict:
    env = dict(os.environ, XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}", JAX_PLATFORMS="cpu")
    r = subprocess.run(
        [sys.executable, "-c", SCRIPT, folder, mode], env=env, capture_output=True, text=True, timeout=300
    )
    assert r.returncode == 0, r.stdout + r.stderr
    line = next(x for x in r.stdout.splitlines() if x.startswith("RESULT "))
    return json.loads(line.removeprefix("RESULT "))


def test_orbax_round_trip_of_sharded_state_resumes_bit_identically(tmp_path):
    saved = _run(4, str(tmp_path), "save")
    assert saved == {"devices": 4, "max_diff": {"8": 0.0, "4": 0.0, "4-nearest": 0.0}}
    for devices in (2, 1):
        diff = _run(devices, str(tmp_path), "load")["max_diff"]
        assert diff["8"] == 0.0 and diff["4-nearest"] == 0.0, (devices, diff)
        # other stochastic draws: close (measured 0.018 on 2 devices), as two seeds of a 4-bit run are
        assert diff["4"] < 0.1, (devices, diff)
