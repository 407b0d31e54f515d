"""The FSDP2 + torch.distributed.checkpoint example of docs/torch.md, run as torchrun runs it: 2 ranks with
RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT set (tests/docs runs the same block as one
process)."""

from __future__ import annotations

import contextlib
import os
import re
import socket
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

DOC = Path(__file__).resolve().parents[2] / "docs" / "torch.md"


def _fsdp_block() -> str:
    blocks = re.findall(r"^```python[ \t]*\n(.*?)^```", DOC.read_text(encoding="utf-8"), re.DOTALL | re.MULTILINE)
    found = [b for b in blocks if "fully_shard" in b and "dcp.save" in b]
    assert len(found) == 1, "docs/torch.md should hold one FSDP2 + DCP example"
    return found[0]


def as_torchrun(ctx, code: str, port: int) -> str:
    os.environ.update(
        RANK=str(ctx.rank),
        LOCAL_RANK=str(ctx.rank),
        WORLD_SIZE=str(ctx.world_size),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
    )
    os.chdir(ctx.folder)  # the example writes its checkpoint to ./checkpoint, shared by the ranks
    out = []
    exec(
        compile(code, str(DOC), "exec"), {"__name__": "__main__", "print": lambda *a: out.append(" ".join(map(str, a)))}
    )  # noqa: S102
    return "\n".join(out)


def _free_port() -> int:
    with contextlib.closing(socket.socket()) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_fsdp2_example_runs_on_2_ranks(launch, gloo):
    outputs = launch(gloo, 2, as_torchrun, _fsdp_block(), _free_port(), join_group=False)
    m = re.search(r"2 rank\(s\): loss ([0-9.]+) at the start, ([0-9.]+) at step 50, ([0-9.]+) at step 51", outputs[0])
    assert m, outputs[0]
    start, saved, resumed = (float(v) for v in m.groups())
    assert saved < 0.1 * start  # it trained
    assert resumed < 2 * saved  # and resumed where it stopped (a fresh optimizer or model starts far higher)
    assert "the resumed run equals the uninterrupted one: True" in outputs[0]
    per_param = float(re.search(r"optimizer checkpoint: ([0-9.]+) bytes per parameter", outputs[0]).group(1))
    assert 2.0 < per_param <= 2.2
    assert outputs[1] == ""  # only rank 0 prints
