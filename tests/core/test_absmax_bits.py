"""absmax of a block is the largest magnitude bit pattern (DESIGN.md, Numerics): two NaNs with different
payloads give the larger masked pattern wherever they sit in the block, on every CPU kernel variant; the
CUDA twin of this test is in tests/cuda/test_blockwise.py. A float max that keeps the first NaN it meets
(the CUDA quantize kernel's reduction before) depends on the order of the reduction."""

import numpy as np
import pytest

import octopt
from octopt import _octopt

ISAS = ("baseline", "avx2", "avx512", "avx512vbmi")


@pytest.fixture
def isa_restore():
    yield
    _octopt.set_simd_level("")


def _block(first: int, second: int, n: int = 4097) -> np.ndarray:
    x = np.random.default_rng(3).standard_normal(n).astype(np.float32)
    x[600] = np.inf
    x.view(np.uint32)[first] = 0x7FC00005  # quiet NaN, small payload
    x.view(np.uint32)[second] = 0xFFC00009  # negative quiet NaN, larger payload: masked 0x7FC00009
    return x


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("order", [(3, 200), (200, 3)], ids=["small-first", "large-first"])
def test_absmax_is_the_largest_bit_pattern(isa, order, isa_restore, isa_available):
    if not isa_available(isa):
        pytest.skip(f"this CPU cannot run the {isa} kernels")
    _octopt.set_simd_level(isa)
    x = _block(*order)
    codes, absmax = np.empty(x.size, np.uint8), np.empty(-(-x.size // 256), np.float32)
    # NaN input raises, after the outputs given with out= have been written
    with pytest.raises(ValueError, match="contains NaN or Inf"):
        octopt.quantize_blockwise(x, block_size=256, out=(codes, absmax))
    bits = absmax.view(np.uint32)
    assert bits[0] == 0x7FC00009, hex(int(bits[0]))
    assert bits[2] == 0x7F800000  # the block holding inf and no NaN
    finite = np.abs(x[256:512]).max()
    assert absmax[1] == finite
