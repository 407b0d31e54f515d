"""docs/torch.md's example runs as written."""

from __future__ import annotations

import os
import re

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("octopt.torch")

DOC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "torch.md")


def test_docs_example_runs(capsys):
    with open(DOC, encoding="utf-8") as f:
        blocks = re.findall(r"```python\n(.*?)```", f.read(), flags=re.DOTALL)
    assert len(blocks) == 1
    exec(compile(blocks[0], DOC, "exec"), {"__name__": "docs_torch_example"})  # noqa: S102 - our own docs
    out = capsys.readouterr().out
    assert "'bits': 32" in out and "'bits': 8, 'block_size': 256" in out
    loss = float(re.search(r"loss ([0-9.]+)", out).group(1))
    assert loss < 0.01
