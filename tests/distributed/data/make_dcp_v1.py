"""Writes dcp_v1/: a torch.distributed.checkpoint of an FSDP2 model and its octopt.torch.AdamW8bit state in
the form octopt wrote before state-dict format 2 (8-bit state dequantized to float32 DTensors laid out like
the parameters). The fixture in this folder was written by octopt at commit 8a5cc8b:

    PYTHONPATH=<that build> python tests/distributed/data/make_dcp_v1.py

Later versions write the same form inside ``octopt.torch.dequantized_state_dict(optimizer)``; the test
(test_checkpoint_v1.py) imports ``build`` and ``STEPS`` from here.
"""

from __future__ import annotations

import contextlib
import shutil
import sys
import tempfile
from pathlib import Path

import torch

HERE = Path(__file__).parent
FIXTURE = HERE / "dcp_v1"
STEPS = 3
WORLD = 2


def build(device="cpu"):
    """The model (weights of 41 x 13: 21 + 20 rows on 2 ranks) and its optimizer."""
    from torch.distributed.fsdp import fully_shard

    import octopt.torch as ot

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(13, 41), torch.nn.Tanh(), torch.nn.Linear(41, 3)).to(device)
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer)
    fully_shard(model)
    return model, ot.AdamW8bit(model.parameters(), lr=1e-2, weight_decay=0.01, min_8bit_size=0)


def batch(step):
    g = torch.Generator().manual_seed(500 + step)
    return torch.randn(8, 13, generator=g), torch.randn(8, 3, generator=g)


def train(model, opt, steps):
    for s in steps:
        x, y = batch(s)
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        opt.zero_grad()


def _rank(rank: int, store: str, out: str) -> None:
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    import octopt.torch as ot

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=WORLD)
    model, opt = build()
    train(model, opt, range(STEPS))
    form = getattr(ot, "dequantized_state_dict", None)
    with form(opt) if form is not None else contextlib.nullcontext():
        model_sd, optim_sd = get_state_dict(model, opt)
    dcp.save({"model": model_sd, "optim": optim_sd}, checkpoint_id=out)
    dist.destroy_process_group()


def main() -> None:
    import torch.multiprocessing as mp

    tmp = tempfile.mkdtemp()
    out = FIXTURE if len(sys.argv) < 2 else Path(sys.argv[1])
    shutil.rmtree(out, ignore_errors=True)
    mp.start_processes(_rank, args=(f"{tmp}/store", str(out)), nprocs=WORLD, start_method="fork")
    print(f"wrote {out}: {sum(f.stat().st_size for f in out.iterdir())} bytes")


if __name__ == "__main__":
    main()
