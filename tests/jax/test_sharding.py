"""Sharded parameters are stepped shard-locally: under jit on a mesh of 4 CPU devices the compiled
step has no all-gather, and the result equals the unsharded step (bit for bit when every shard is
a run of whole blocks, within quantization error otherwise). XLA_FLAGS must be set before jax is
imported, so the check runs in a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("jax", reason="jax is not installed")
pytest.importorskip("optax", reason="optax is not installed")

SCRIPT = textwrap.dedent("""
    import numpy as np, jax, jax.numpy as jnp, optax
    import octopt.optax as oo
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    assert len(jax.devices()) == 4, jax.devices()
    mesh = Mesh(np.array(jax.devices()).reshape(2, 2), ("x", "y"))
    rng = np.random.default_rng(0)
    w0 = rng.standard_normal((64, 256)).astype(np.float32)  # a row shard along x: 32 x 256 = 32 whole blocks
    b0 = rng.standard_normal((4096 + 4,)).astype(np.float32)
    grads = [(rng.standard_normal(w0.shape).astype(np.float32), rng.standard_normal(b0.shape).astype(np.float32))
             for _ in range(3)]

    def run(w_spec, fused):
        put = lambda a, s: jax.device_put(a, NamedSharding(mesh, s))
        tx = oo.adamw8bit(1e-2)
        params = {"w": put(w0, w_spec), "b": put(b0, P())}
        state = tx.init(params)
        update = jax.jit(tx.update)
        for k, (gw, gb) in enumerate(grads):
            g = {"w": put(gw, w_spec), "b": put(gb, P())}
            if k == 0:
                hlo = update.lower(g, state, params).compile().as_text()
                for op in ("all-gather", "all-to-all", "all-reduce", "collective-permute"):
                    assert op not in hlo, (w_spec, op)
                # one call for the parameters split over the mesh, one for the replicated ones
                assert hlo.count('custom_call_target="octopt_step"') == (1 if w_spec == P() else 2), hlo
            if fused:
                params, state = tx.step(params, g, state)
            else:
                updates, state = update(g, state, params)
                params = optax.apply_updates(params, updates)
        codes = state.slot("exp_avg")["w"]
        want = NamedSharding(mesh, w_spec)
        assert params["w"].sharding.is_equivalent_to(want, 2), params["w"].sharding
        assert codes.data.sharding.is_equivalent_to(want, 2), codes.data.sharding
        return np.asarray(params["w"]), codes

    ref, ref_codes = run(P(), fused=True)
    for spec in (P("x", None), P(None, "y"), P("x", "y")):
        for fused in (False, True):
            w, codes = run(spec, fused)
            if spec == P("x", None) and fused:
                # each shard is whole blocks: the same blocks as unsharded, so the same bits
                assert np.array_equal(w, ref), spec
                assert np.array_equal(np.asarray(codes.data), np.asarray(ref_codes.data))
                assert np.array_equal(np.asarray(codes.absmax), np.asarray(ref_codes.absmax))
            # other layouts quantize other blocks: equal within the 8-bit state's error
            np.testing.assert_allclose(w, ref, rtol=0, atol=2e-3)
            assert codes.absmax.shape == (64,)  # 16384 elements: 64 blocks of 256, also split over shards
    print("sharded ok")
""")


def test_sharded_params_step_shard_locally_without_all_gather():
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=4", JAX_PLATFORMS="cpu")
    r = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "sharded ok" in r.stdout


def test_lamb_refuses_sharded_params():
    code = textwrap.dedent("""
        import numpy as np, jax, octopt.optax as oo
        from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
        mesh = Mesh(np.array(jax.devices()), ("x",))
        p = jax.device_put(np.ones((8, 1024), np.float32), NamedSharding(mesh, P("x", None)))
        try:
            oo.lamb8bit(1e-3).init({"w": p})
        except ValueError as e:
            print(e)
    """)
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=4", JAX_PLATFORMS="cpu")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "octopt.optax.lamb8bit.init: argument 'params['w']' is sharded" in r.stdout


if __name__ == "__main__":  # pragma: no cover
    pytest.main([__file__])
