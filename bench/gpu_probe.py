"""The probes of bench/gpu_check.sh, one per command-line name, each short and self-contained: a GPU result
against the CPU backend on the same values (byte for byte, with nearest rounding) or against the eager
steps it stands for. Prints one line per probe, ``PASS|SKIP|FAIL <probe>: <detail>`` (SKIP: the machine
cannot run it, e.g. one GPU where it needs two); exits 1 when any failed, 77 when all were skipped, else 0.
Needs torch with CUDA (the JAX probe also jax with its CUDA plugin).

    python bench/gpu_probe.py NAME [NAME ...]
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import octopt

SKIP = 77


class Skip(Exception):
    pass


def _torch():
    import torch

    if not torch.cuda.is_available() or not octopt.cuda_available():
        raise RuntimeError(f"no usable GPU: torch {torch.cuda.is_available()}, octopt {octopt.info()}")
    return torch


def values(n: int, seed: int, scale: float = 1.0) -> np.ndarray:
    return (np.random.default_rng([n, seed]).standard_normal(n) * scale).astype(np.float32)


def as_bytes(a) -> np.ndarray:
    if hasattr(a, "detach"):
        import torch

        a = a.detach().cpu().contiguous()
        if a.dtype in (torch.bfloat16, torch.float16):
            a = a.view(torch.int16)
        a = a.numpy()
    return np.ascontiguousarray(np.asarray(a)).reshape(-1).view(np.uint8)


def pair(name: str, sizes, **opts):
    """(gpu params, cpu params, gpu optimizer, cpu optimizer) over the same values."""
    torch = _torch()
    cpu = [values(n, 0) for n in sizes]
    gpu = [torch.from_numpy(v.copy()).cuda() for v in cpu]
    cls = getattr(octopt, name)
    return gpu, cpu, cls(gpu, **opts), cls(cpu, **opts)


def grads_for(sizes, step: int, nan_at: dict | None = None) -> list:
    out = []
    for i, n in enumerate(sizes):
        if n is None:
            out.append(None)
            continue
        g = values(n, 100 + step, 0.1)
        if nan_at and i in nan_at:
            g[nan_at[i]] = np.nan
        out.append(g)
    return out


def step_both(og, oc, grads, stream=None) -> None:
    torch = _torch()
    og.step([None if g is None else torch.from_numpy(g).cuda() for g in grads], stream=stream)
    oc.step(grads)


def assert_same(og, oc, gpu, cpu, when: str) -> None:
    _torch().cuda.synchronize()
    for i, (pg, pc) in enumerate(zip(gpu, cpu)):
        d = np.flatnonzero(as_bytes(pg) != as_bytes(pc))
        assert d.size == 0, f"{when}: params[{i}]: {d.size} bytes differ, first at byte {d[0]}"
    for i, (tg, tc) in enumerate(zip(og.tensors, oc.tensors)):
        for slot, bufs in tc.buffers.items():
            for k, (a, b) in enumerate(zip(tg.buffers[slot], bufs)):
                if b is not None:
                    d = np.flatnonzero(as_bytes(a) != as_bytes(b))
                    assert d.size == 0, f"{when}: tensor {i} slot {slot} {'absmax' if k else 'data'}: {d.size} bytes"
    assert (og.skipped_blocks, og.last_skipped_blocks) == (oc.skipped_blocks, oc.last_skipped_blocks), when
    # an empty tensor's gradient has a null address in torch, which the CUDA path takes for None (docs/cuda.md)
    steps = [(tg.step, tc.step) for tg, tc, p in zip(og.tensors, oc.tensors, cpu) if np.asarray(p).size]
    assert all(a == b for a, b in steps), f"{when}: step counts {steps}"


# -- probes ---------------------------------------------------------------------------------------


def probe_adam_step() -> str:
    """One Adam 8-bit step (the compute-sanitizer target), then one of each other kernel path: LAMB's
    two launches, percentile scaling, functional quantize/dequantize."""
    torch = _torch()
    sizes = (4097, 70001)
    gpu, cpu, og, oc = pair("Adam", sizes, bits=8)
    step_both(og, oc, grads_for(sizes, 0))
    assert_same(og, oc, gpu, cpu, "Adam 8-bit")
    for name, opts in (("LAMB", {}), ("Adam", dict(percentile=99.0))):
        gpu, cpu, og, oc = pair(name, sizes, bits=8, **opts)
        step_both(og, oc, grads_for(sizes, 0))
        assert_same(og, oc, gpu, cpu, f"{name} {opts}")
    x = values(70001, 3)
    c, a = octopt.quantize_blockwise(torch.from_numpy(x).cuda())
    y = octopt.dequantize_blockwise(c, a, shape=x.shape)
    cc, ca = octopt.quantize_blockwise(x)
    assert (as_bytes(c) == as_bytes(cc)).all() and (as_bytes(a) == as_bytes(ca)).all(), "quantize"
    assert (as_bytes(y) == as_bytes(octopt.dequantize_blockwise(cc, ca, shape=x.shape))).all(), "dequantize"
    return "Adam 8-bit, LAMB 8-bit, percentile 99, quantize/dequantize: equal to the CPU"


def probe_parity() -> str:
    done = []
    for name, bits, sizes, opts in (
        ("Adam", 8, (4097, 70001), {}),
        ("Adam", 4, (4097, 70001), {}),
        ("AdEMAMix", 8, (4097, 70001), dict(block_size=4096)),
        ("LAMB", 8, (1_000_003,), dict(weight_decay=0.01)),
        ("LARS", 8, (1_000_003,), dict(weight_decay=0.01)),
    ):
        gpu, cpu, og, oc = pair(name, sizes, bits=bits, **opts)
        for s in range(3):
            step_both(og, oc, grads_for(sizes, s))
        assert_same(og, oc, gpu, cpu, f"{name} {bits}-bit {sizes}")
        if name in ("LAMB", "LARS"):
            assert og.trust_ratios() == oc.trust_ratios(), f"{name} trust ratios"
        done.append(f"{name} {bits}-bit")
    return ", ".join(done) + ": 3 steps each, every byte equal to the CPU"


def probe_two_plans() -> str:
    sizes = (70001,)
    ga, ca, oga, oca = pair("AdEMAMix", sizes, bits=8, block_size=4096)
    step_both(oga, oca, grads_for(sizes, 0))
    gb, cb, ogb, ocb = pair("Adam", sizes, bits=8, block_size=4096)
    step_both(ogb, ocb, grads_for(sizes, 0))
    step_both(oga, oca, grads_for(sizes, 1))
    assert_same(oga, oca, ga, ca, "AdEMAMix stepped after an Adam plan was built")
    assert_same(ogb, ocb, gb, cb, "Adam")
    return "AdEMAMix (71,764 B smem) after Adam (53,304 B) at block size 4096: both equal to the CPU"


def probe_edge_cases() -> str:
    sizes = (0, 1000, 4097, 70001)
    gpu, cpu, og, oc = pair("Adam", sizes, bits=8)
    for s in range(3):
        gs = grads_for(sizes, s, nan_at={3: [5, 40000]} if s != 1 else None)
        gs[1] = None  # a parameter without a gradient
        step_both(og, oc, gs)
        assert_same(og, oc, gpu, cpu, f"step {s}")
    assert og.skipped_blocks == oc.skipped_blocks == 4, (og.skipped_blocks, oc.skipped_blocks)
    return f"empty tensor, None gradient, NaN blocks: skipped {og.skipped_blocks} = CPU, steps {[t.step for t in og.tensors]}"


def probe_graph() -> str:
    """Warm-up on a side stream, capture, replays, upload() of a new lr, replays: against eager CPU steps."""
    torch = _torch()
    sizes = (4097, 70001)
    gpu, cpu, og, oc = pair("Adam", sizes, bits=8, lr=1e-3)
    static = [torch.from_numpy(g).cuda() for g in grads_for(sizes, 0)]
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        og.step(static)
    torch.cuda.current_stream().wait_stream(side)
    oc.step(grads_for(sizes, 0))
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        og.step(static)
    for s in range(1, 5):
        if s == 3:  # a new lr reaches the graph through upload()
            og.param_groups[0]["lr"] = oc.param_groups[0]["lr"] = 3e-2
            og.upload(static)
        for dst, g in zip(static, grads_for(sizes, s)):
            dst.copy_(torch.from_numpy(g))
        graph.replay()
        oc.step(grads_for(sizes, s))
        assert_same(og, oc, gpu, cpu, f"replay {s}")
    return "side-stream warm-up, capture, 4 replays with upload(lr) before the third: equal to eager CPU steps"


def probe_multi_gpu() -> str:
    torch = _torch()
    if torch.cuda.device_count() < 2:
        raise Skip("one GPU")
    x = values(70001, 4)
    torch.cuda.set_device(0)
    c, a = octopt.quantize_blockwise(torch.from_numpy(x).to("cuda:1"))
    cc, ca = octopt.quantize_blockwise(x)
    torch.cuda.synchronize(1)
    assert (as_bytes(c) == as_bytes(cc)).all() and (as_bytes(a) == as_bytes(ca)).all(), "quantize on cuda:1"
    script = textwrap.dedent(
        """
        import ctypes, threading, torch, octopt
        cu = ctypes.CDLL("libcuda.so.1")
        def active(d):
            f, a = ctypes.c_uint(), ctypes.c_int()
            assert cu.cuDevicePrimaryCtxGetState(d, ctypes.byref(f), ctypes.byref(a)) == 0
            return bool(a.value)
        p = torch.ones(70001, device="cuda:1")
        opt = octopt.Adam([p], bits=8)
        opt.step([torch.full_like(p, 0.1)])
        torch.cuda.synchronize(1)
        before = active(0)
        t = threading.Thread(target=opt.state_dict); t.start(); t.join()
        print(before, active(0))
        """
    )
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=90)
    assert r.returncode == 0, r.stderr[-1500:]
    before, after = r.stdout.split()[-2:]
    assert before == "True" or after == "False", f"a thread without context created one on GPU 0 ({r.stdout})"
    return f"quantize on cuda:1 with cuda:0 current equal to the CPU; GPU 0 context before/after: {before}/{after}"


def probe_paged() -> str:
    torch = _torch()
    from octopt.bnb import optim as bnb_optim

    p0 = torch.from_numpy(values(70001, 0))
    p = torch.nn.Parameter(p0.clone().cuda())
    opt = bnb_optim.PagedAdamW8bit([p], lr=1e-3)
    p.grad = torch.from_numpy(values(70001, 1, 0.1)).cuda()
    opt.step()
    torch.cuda.synchronize()
    moved = (p.detach().cpu() - p0).abs()
    # Adam's first step moves every element by about lr (plus the decay's lr * wd * |p|)
    assert torch.isfinite(p).all() and 0 < float(moved.max()) <= 1.2e-3, float(moved.max())
    return f"PagedAdamW8bit: one step on managed memory, max |step| = {float(moved.max()):.2e} (lr 1e-3)"


def probe_xla() -> str:
    import jax
    import octopt.optax as oo

    try:
        gpu = jax.devices("gpu")[0]
    except RuntimeError as e:
        raise Skip(f"jax sees no GPU ({e})") from e
    if not octopt._octopt.xla_ffi_cuda_built():
        raise AssertionError("octopt was built without the CUDA XLA FFI handler")
    cpu_dev = jax.devices("cpu")[0]
    p0, g = [values(70001, 0)], [values(70001, 1, 0.1)]
    out = []
    for dev in (gpu, cpu_dev):
        tx = oo.torch_style.adamw(1e-3, bits=8)
        params = [jax.device_put(a, dev) * 1 for a in p0]
        state = tx.init(params)
        params, state = tx.step(params, [jax.device_put(a, dev) * 1 for a in g], state)
        out.append((np.asarray(params[0]), state))
    assert (as_bytes(out[0][0]) == as_bytes(out[1][0])).all(), "XLA handler: GPU params differ from the CPU's"
    return "octopt.optax adamw 8-bit, one fused step through the CUDA XLA handler: params equal to the CPU handler's"


PROBES = {
    "adam_step": probe_adam_step,
    "parity": probe_parity,
    "two_plans": probe_two_plans,
    "edge_cases": probe_edge_cases,
    "graph": probe_graph,
    "multi_gpu": probe_multi_gpu,
    "paged": probe_paged,
    "xla": probe_xla,
}


def main(names: list[str]) -> int:
    unknown = [n for n in names if n not in PROBES]
    if not names or unknown:
        print(f"usage: gpu_probe.py NAME [NAME ...]; names: {', '.join(PROBES)}", file=sys.stderr)
        return 2
    results = []
    for name in names:
        try:
            print(f"PASS {name}: {PROBES[name]()}", flush=True)
            results.append("PASS")
        except Skip as e:
            print(f"SKIP {name}: {e}", flush=True)
            results.append("SKIP")
        except Exception as e:  # noqa: BLE001 - every failure is reported with its probe's name
            print(f"FAIL {name}: {type(e).__name__}: {e}", flush=True)
            results.append("FAIL")
    if "FAIL" in results:
        return 1
    return SKIP if all(r == "SKIP" for r in results) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
