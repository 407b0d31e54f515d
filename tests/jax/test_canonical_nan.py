"""The CPU XLA handler's updates (p_new - p, computed in the extension's own code) store NaNs as the
canonical quiet NaN 0x7FC00000, like every other store (issue 21, finding 3): an infinite parameter under
weight decay makes inf - inf, a NaN parameter with a payload passes it through the subtraction on x86."""

import numpy as np
import pytest

jax = pytest.importorskip("jax", reason="jax is not installed")
pytest.importorskip("optax", reason="optax is not installed")
import octopt  # noqa: E402

pytestmark = pytest.mark.skipif(
    not octopt._octopt.xla_ffi_built(), reason="octopt was built without the XLA FFI handler"
)


@pytest.mark.parametrize("bits", [32, 8])
def test_update_mode_stores_canonical_nans(bits):
    import octopt.optax as oo

    p = np.random.default_rng(0).standard_normal(4097).astype(np.float32)
    p[10] = np.inf
    p.view(np.uint32)[20] = 0x7FC12345
    p.view(np.uint32)[30] = 0xFFC00001
    g = (np.random.default_rng(1).standard_normal(4097) * 1e-2).astype(np.float32)
    tx = oo.torch_style.adamw(1e-2, bits=bits, weight_decay=0.1)
    cpu = jax.devices("cpu")[0]
    params = [jax.device_put(p, cpu)]
    state = tx.init(params)
    updates, _ = jax.jit(tx.update)([jax.device_put(g, cpu)], state, params)
    u = np.asarray(updates[0])
    nan = np.isnan(u)
    assert nan[[10, 20, 30]].all()
    bits_u = u.view(np.uint32)[nan]
    assert (bits_u == 0x7FC00000).all(), [hex(int(b)) for b in bits_u[:5]]
