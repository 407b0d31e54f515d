"""Peak memory of a training step of a GPT-2-small-sized model (124M parameters, random tokens) with
torch.optim.AdamW (float32 state) against octopt.torch.AdamW8bit and AdamW4bit, in one process and with FSDP2
over several ranks.

    python bench/memory.py [--ranks 1,2,4] [--optimizers torch,octopt8,octopt4] [--device cpu|cuda]
                           [--steps 3] [--seq 128] [--batch 1] [--out FILE]

Every (ranks, optimizer) case runs in fresh processes (one per rank, joined through a file store as torchrun
would), so each peak belongs to one case. Per rank it reports the optimizer state (the bytes of the state
tensors of the local shards: torch's exp_avg/exp_avg_sq, octopt's state_bytes()), the peak resident set
(ru_maxrss: model, gradients, state, activations, the interpreter and torch, with glibc's mmap threshold
fixed so that freed buffers are returned; the RSS after building the model and optimizer is shown as a
baseline), and on CUDA torch.cuda.max_memory_allocated. FSDP2 builds the model on the
meta device and materializes only each rank's shards, as FSDP2's documentation recommends.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

GPT2_SMALL = dict(vocab=50257, context=1024, layers=12, width=768, heads=12)
OPTIMIZERS = ("torch", "octopt8", "octopt4")
LABELS = {"torch": "torch.optim.AdamW", "octopt8": "octopt AdamW8bit", "octopt4": "octopt AdamW4bit"}


def gpt2(torch, vocab: int, context: int, layers: int, width: int, heads: int):
    nn, F = torch.nn, torch.nn.functional

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(width), nn.LayerNorm(width)
            self.qkv, self.proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
            self.fc, self.out = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)

        def forward(self, x):
            b, t, c = x.shape
            q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, heads, c // heads).permute(2, 0, 3, 1, 4)
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(a.transpose(1, 2).reshape(b, t, c))
            return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))

    class GPT2(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte, self.wpe = nn.Embedding(vocab, width), nn.Embedding(context, width)
            self.blocks = nn.ModuleList(Block() for _ in range(layers))
            self.ln_f = nn.LayerNorm(width)

        def forward(self, idx):
            x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
            for blk in self.blocks:
                x = blk(x)
            return self.ln_f(x) @ self.wte.weight.t()  # the output head is the token embedding (tied)

    return GPT2()


def _rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def worker(args: argparse.Namespace) -> None:
    import torch
    import torch.distributed as dist

    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // world))
    device = torch.device("cpu" if args.device == "cpu" else f"cuda:{rank}")
    if args.device == "cuda":
        torch.cuda.set_device(device)
    if world > 1:
        backend = "gloo" if args.device == "cpu" else "nccl"
        dist.init_process_group(backend, init_method=f"file://{args.store}", rank=rank, world_size=world)
    torch.manual_seed(0)
    if world > 1:
        from torch.distributed.fsdp import fully_shard

        with torch.device("meta"):
            model = gpt2(torch, **GPT2_SMALL)
        for blk in model.blocks:
            fully_shard(blk)
        fully_shard(model)
        model.to_empty(device=device)
        with torch.no_grad():
            for p in model.parameters():
                p.normal_(0.0, 0.02)
    else:
        model = gpt2(torch, **GPT2_SMALL).to(device)
    n_params = sum(p.numel() for p in model.parameters())
    local_params = sum((p.to_local() if hasattr(p, "to_local") else p).numel() for p in model.parameters())
    if args.optimizer == "torch":
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    else:
        import octopt.torch as ot

        opt = ot.AdamW(model.parameters(), lr=1e-4, bits=8 if args.optimizer == "octopt8" else 4)
    rss_before = _rss_mib()  # model and optimizer built (octopt allocates its state here, torch at the first step)
    if args.device == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    g = torch.Generator().manual_seed(rank)
    times = []
    for _ in range(args.steps):
        idx = torch.randint(0, GPT2_SMALL["vocab"], (args.batch, args.seq + 1), generator=g).to(device)
        t0 = time.perf_counter()
        logits = model(idx[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), idx[:, 1:].flatten())
        loss.backward()
        loss = loss.detach()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if args.device == "cuda":
            torch.cuda.synchronize(device)
        times.append(time.perf_counter() - t0)
    if args.optimizer == "torch":

        def nbytes(t):
            t = t.to_local() if hasattr(t, "to_local") else t
            return t.numel() * t.element_size()

        state = sum(nbytes(v) for s in opt.state.values() for k, v in s.items() if k != "step")
    else:
        state = opt.state_bytes()
    result = {
        "rank": rank,
        "world": world,
        "optimizer": args.optimizer,
        "params": n_params,
        "local_params": local_params,
        "state_bytes": state,
        "rss_before_step_mib": rss_before,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "step_s": min(times),
        "loss": loss.item(),
    }
    if args.device == "cuda":
        result["max_allocated_mib"] = torch.cuda.max_memory_allocated(device) / 2**20
    with open(f"{args.result}.{rank}", "w") as f:
        json.dump(result, f)
    if world > 1:
        dist.barrier()
        dist.destroy_process_group()


def run_case(args: argparse.Namespace, world: int, optimizer: str) -> list[dict]:
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, __file__, "--worker", "--optimizer", optimizer, "--device", args.device]
        cmd += ["--steps", str(args.steps), "--seq", str(args.seq), "--batch", str(args.batch)]
        cmd += ["--store", f"{tmp}/store", "--result", f"{tmp}/result"]
        # glibc raises its mmap threshold after big frees and then serves buffers of up to 32 MiB (a block's
        # gathered weights) from heaps it never returns: a fixed threshold makes every big buffer an mmap
        # returned on free, so the peak RSS measures live memory rather than heap fragmentation
        env = dict(os.environ, MALLOC_MMAP_THRESHOLD_=os.environ.get("MALLOC_MMAP_THRESHOLD_", "131072"))
        procs = [subprocess.Popen(cmd, env=dict(env, RANK=str(r), WORLD_SIZE=str(world))) for r in range(world)]
        if any(p.wait() != 0 for p in procs):
            raise SystemExit(f"memory.py: the case {optimizer} on {world} rank(s) failed")
        return [json.load(open(f"{tmp}/result.{r}")) for r in range(world)]


def table(rows: list[list[dict]], device: str) -> str:
    head = "| ranks | optimizer | params per rank | state per rank (MiB) | state bytes/param | RSS before the first step (MiB) | peak RSS per rank (MiB) |"
    sep = "|---|---|---|---|---|---|---|"
    if device == "cuda":
        head += " max allocated (MiB) |"
        sep += "---|"
    lines = [head, sep]
    for case in rows:
        r = max(case, key=lambda x: x["peak_rss_mib"])  # the rank with the highest peak
        line = (
            f"| {r['world']} | {LABELS[r['optimizer']]} | {r['local_params'] / 1e6:.1f}M | "
            f"{max(x['state_bytes'] for x in case) / 2**20:.0f} | {r['state_bytes'] / r['local_params']:.2f} | "
            f"{r['rss_before_step_mib']:.0f} | {r['peak_rss_mib']:.0f} |"
        )
        if device == "cuda":
            line += f" {max(x['max_allocated_mib'] for x in case):.0f} |"
        lines.append(line)
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", default="1,2,4")
    ap.add_argument("--optimizers", default=",".join(OPTIMIZERS))
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--out", help="also write the results as JSON here")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--optimizer", help=argparse.SUPPRESS)
    ap.add_argument("--store", help=argparse.SUPPRESS)
    ap.add_argument("--result", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args)
        return
    import octopt

    print(
        f"octopt from {Path(octopt.__file__).parent}; GPT-2 small {GPT2_SMALL}; batch {args.batch} x {args.seq} tokens"
    )
    rows = []
    for world in (int(w) for w in args.ranks.split(",")):
        for opt in args.optimizers.split(","):
            t0 = time.perf_counter()
            rows.append(run_case(args, world, opt))
            r = rows[-1][0]
            print(
                f"  {world} rank(s), {LABELS[opt]}: state {r['state_bytes'] / 2**20:.0f} MiB, peak RSS "
                f"{r['peak_rss_mib']:.0f} MiB, step {r['step_s']:.2f} s ({time.perf_counter() - t0:.0f} s)",
                flush=True,
            )
    print(table(rows, args.device))
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
