"""docs/jax.md's example runs as written and does what it says."""

from __future__ import annotations

import os
import re

import pytest
from optax_helpers import oo  # noqa: F401 - skips the module without jax, optax or the handler

pytest.importorskip("flax.serialization", reason="the example saves state with flax")

DOC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "jax.md")


def test_jax_docs_example_runs(capsys):
    with open(DOC, encoding="utf-8") as f:
        blocks = re.findall(r"```python\n(.*?)```", f.read(), flags=re.DOTALL)
    assert len(blocks) == 1
    exec(compile(blocks[0], DOC, "exec"), {"__name__": "docs_jax_example"})  # noqa: S102 - our own docs
    out = capsys.readouterr().out
    loss = float(re.search(r"loss ([0-9.]+)", out).group(1))
    assert loss < 1.0
    assert "exp_avg of w: uint8 (64, 80) absmax (20,)" in out
    assert "in place: True" in out
