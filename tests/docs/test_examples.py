"""docs/numpy.md's example runs as written and does what it says."""

import os
import re

DOC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "numpy.md")


def test_numpy_docs_example_runs(capsys):
    with open(DOC, encoding="utf-8") as f:
        blocks = re.findall(r"```python\n(.*?)```", f.read(), flags=re.DOTALL)
    assert len(blocks) == 1
    exec(compile(blocks[0], DOC, "exec"), {"__name__": "docs_numpy_example"})  # noqa: S102 - our own docs
    out = capsys.readouterr().out
    assert "codes uint8 (4097,) absmax (17,)" in out
    loss = float(re.search(r"loss ([0-9.e-]+)", out).group(1))
    assert loss < 1e-2
    per_param = float(re.search(r"state bytes per parameter ([0-9.]+)", out).group(1))
    assert per_param == 2 + 8 / 256
    assert "'bits': 8, 'block_size': 256" in out


def test_readme_example_runs(capsys):
    readme = os.path.join(os.path.dirname(DOC), os.pardir, "README.md")
    with open(readme, encoding="utf-8") as f:
        blocks = re.findall(r"```python\n(.*?)```", f.read(), flags=re.DOTALL)
    assert blocks
    for block in blocks:
        exec(compile(block, readme, "exec"), {"__name__": "readme_example"})  # noqa: S102 - our own docs
    assert "bytes of state per parameter" in capsys.readouterr().out
