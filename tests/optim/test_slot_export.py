"""A plan's slots exported and imported in another layout by the core (StepPlan.export_slot/import_slot,
cpp/include/octopt/state_convert.hpp), on octopt.Adam's plan."""

from __future__ import annotations

import numpy as np
import octopt
import pytest
from octopt import _slot_convert


def trained() -> octopt.Adam:
    w = np.linspace(-1, 1, 5000, dtype=np.float32)
    opt = octopt.Adam([w], lr=1e-2, bits=8)
    opt.step([np.linspace(1, -1, 5000, dtype=np.float32)])
    return opt


def test_export_as_float32_and_4bit_then_import_back():
    opt = trained()
    t = opt._tensors[0]
    spec = t.specs[0]
    codes, absmax = (np.array(b) for b in t.buffers[spec.index])
    values, _ = _slot_convert.export(opt._plan, 0, spec.index, 5000, _slot_convert.FLOAT, "export", ["exp_avg"])
    want = octopt.dequantize_blockwise(codes, absmax, opt.slot_map(spec), spec.block_size)
    np.testing.assert_array_equal(values, want)
    stored = opt._plan.slot_form(0, spec.index)
    assert (stored.bits, stored.block_size) == (8, spec.block_size)
    four = _slot_convert.form(4, 64, octopt.dynamic_map(True, bits=4))
    c4, a4 = _slot_convert.export(opt._plan, 0, spec.index, 5000, four, "export", ["exp_avg"])
    assert c4.shape == (2500,) and a4.shape == (79,)
    # the stored layout goes back bit for bit; the 4-bit one is re-quantized to 8 bits
    opt._plan.import_slot(0, spec.index, four, c4, a4, "import", ["exp_avg", "exp_avg_absmax"])
    assert not np.array_equal(np.array(t.buffers[spec.index][0]), codes)
    opt._plan.import_slot(0, spec.index, stored, codes, absmax, "import", ["exp_avg", "exp_avg_absmax"])
    np.testing.assert_array_equal(np.array(t.buffers[spec.index][0]), codes)


def test_bad_import_names_the_input_and_changes_nothing():
    opt = trained()
    t = opt._tensors[0]
    before = np.array(t.buffers[0][0])
    bad = np.full(5000, np.inf, np.float32)
    with pytest.raises(ValueError, match="import: 'exp_avg' holds NaN or Inf"):
        opt._plan.import_slot(0, 0, _slot_convert.FLOAT, bad, None, "import", ["exp_avg"])
    with pytest.raises(ValueError, match="import: 'exp_avg' must hold 5000 floating-point values, got 4 of float32"):
        opt._plan.import_slot(0, 0, _slot_convert.FLOAT, bad[:4], None, "import", ["exp_avg"])
    np.testing.assert_array_equal(np.array(t.buffers[0][0]), before)
    with pytest.raises(ValueError, match="tensor 0 has no state slot 2"):
        opt._plan.slot_form(0, 2)
