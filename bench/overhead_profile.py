"""Where the per-tensor time of a CPU step goes today, piece by piece, and what the cheapest hand-offs of
N gradients to native code cost. A snapshot tool for designing a fast step path: unlike bench/overhead.py it
reaches into octopt's internals (Optimizer._plan, _tensors, the torch adapter's wrappers) as they are at the
time of writing, and it prints "n/a" for a piece whose internals have changed.

    cmake -S . -B build/dev -DOCTOPT_BUILD_PYTHON=ON && cmake --build build/dev   # leaves build/dev/cpp/liboctopt.a
    PYTHONPATH=python python bench/overhead_profile.py [--tensors 256] [--elems 64] [--core-lib PATH]

Each piece is timed on its own, replicating the lines of the step path it stands for, over the same N
tensors: the figure is the minimum over rounds of the mean of a batch of calls, divided by N (a piece that
runs once per step is also shown per tensor, marked "per step"). Native probes come from
bench/handoff_probe (a throwaway nanobind module and a C++ harness over octopt's core library), built with
CMake into build/handoff-probe on first use. bench/README.md, "Per-step overhead", has the results.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import os
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PROBE_SRC = os.path.join(HERE, "handoff_probe")
PROBE_BUILD = os.path.join(ROOT, "build", "handoff-probe")


CLOCK = {"cpu": time.process_time, "wall": time.perf_counter}
clock_now = CLOCK["cpu"]


def best_call_s(fn, rounds: int, batch: int) -> float:
    """Minimum over `rounds` of the mean seconds of one call in a batch of `batch` calls (timeit's rule), on
    the process's CPU clock by default: at one thread it leaves out the time other processes held the core."""
    best = float("inf")
    clock = clock_now
    gc.disable()
    try:
        fn()
        for _ in range(rounds):
            t0 = clock()
            for _ in range(batch):
                fn()
            best = min(best, (clock() - t0) / batch)
    finally:
        gc.enable()
    return best


class Report:
    def __init__(self, n: int, rounds: int, batch: int):
        self.n, self.rounds, self.batch = n, rounds, batch
        self.lines: list[tuple[str, str, str]] = []

    def section(self, title: str) -> None:
        self.lines.append((title, "", ""))

    def time(self, label: str, fn, per_step: bool = False, minus: float = 0.0) -> float:
        """Seconds per call of `fn` (less `minus`), recorded per tensor."""
        try:
            s = best_call_s(fn, self.rounds, self.batch) - minus
        except Exception as e:  # noqa: BLE001 - internals of an older/newer octopt: report, go on
            self.lines.append((label, "n/a", f"{type(e).__name__}: {e}"[:80]))
            return float("nan")
        self.add(label, s, per_step)
        return s

    def add(self, label: str, seconds: float, per_step: bool = False, note: str = "") -> None:
        us = seconds * 1e6
        text = f"{us / self.n:8.3f}"
        if per_step:
            note = f"per step {us:.2f} us" + (f"; {note}" if note else "")
        self.lines.append((label, text, note))

    def print(self) -> None:
        width = max(len(a) for a, b, _ in self.lines if b)
        for a, b, c in self.lines:
            if not b:
                print(f"\n{a}")
                print(f"  {'piece':<{width}}  us/tensor  note")
            else:
                print(f"  {a:<{width}}  {b:>9}  {c}")


# -- the native probes ----------------------------------------------------------------------------------
def build_probe(core_lib: str | None) -> tuple[object | None, str | None]:
    """(the _handoff_probe module or None, path of core_step or None), building them when missing."""
    exe = os.path.join(PROBE_BUILD, "core_step")
    need = (
        not any(f.startswith("_handoff_probe") for f in os.listdir(PROBE_BUILD)) if os.path.isdir(PROBE_BUILD) else True
    )
    if need or (core_lib and not os.path.exists(exe)):
        cfg = [
            "cmake",
            "-S",
            PROBE_SRC,
            "-B",
            PROBE_BUILD,
            "-DCMAKE_BUILD_TYPE=Release",
            f"-DPython_EXECUTABLE={sys.executable}",
        ]
        if core_lib:
            cfg.append(f"-DOCTOPT_CORE_LIB={os.path.abspath(core_lib)}")
        for cmd in (cfg, ["cmake", "--build", PROBE_BUILD, "-j2"]):
            p = subprocess.run(cmd, capture_output=True, text=True, check=False)
            if p.returncode:
                print(f"probe build failed ({' '.join(cmd[:2])}):\n{p.stdout[-2000:]}{p.stderr[-2000:]}")
                return None, None
    sys.path.insert(0, PROBE_BUILD)
    try:
        probe = importlib.import_module("_handoff_probe")
    except ImportError as e:
        print(f"probe not importable: {e}")
        probe = None
    return probe, exe if os.path.exists(exe) else None


def core_figures(exe: str | None, n: int, threads: int) -> dict:
    """{(bits, elems): (ns N tensors, ns one tensor, ns compute_scalars x N, ns validate_step x N,
    ns per make_levels call)} from the C++ harness."""
    if not exe:
        return {}
    p = subprocess.run([exe, str(n), "15", "101", str(threads)], capture_output=True, text=True, check=False)
    out = {}
    for line in p.stdout.splitlines():
        f = line.split()
        if f and f[0] == "core":
            out[(int(f[1]), int(f[3]))] = tuple(float(x) for x in f[5:10])
    return out


# -- the NumPy path -------------------------------------------------------------------------------------
def numpy_path(rep: Report, probe, core: dict, elems: int, bits: int) -> None:
    import octopt
    from octopt import _arrays, _hparams

    n = rep.n
    rng = np.random.default_rng(0)
    params = [rng.standard_normal(elems, dtype=np.float32) for _ in range(n)]
    grads = [rng.standard_normal(elems, dtype=np.float32) * np.float32(1e-2) for _ in range(n)]
    opt = octopt.Adam(params, bits=bits, min_8bit_size=0)
    one = octopt.Adam([np.concatenate(params)], bits=bits, min_8bit_size=0)
    one_g = [np.concatenate(grads)]
    rep.section(f"NumPy path: octopt.Adam({n} x {elems} float32, bits={bits}).step(grads)")
    total = rep.time("whole step (N tensors)", lambda: opt.step(grads))
    kernel = rep.time("whole step, ONE tensor of N*E elements (kernel)", lambda: one.step(one_g))
    rep.add("= per-tensor overhead (N - 1 in the denominator below)", (total - kernel) * n / (n - 1))

    tensors, groups = opt._tensors, opt.param_groups
    kind = opt.kind
    hps = [_hparams.to_core(kind, g) for g in groups]
    steps = np.array([t.step + 1 for t in tensors], dtype=np.int64)
    one_hps = [_hparams.to_core(kind, g) for g in one.param_groups]
    one_steps = np.array([one._tensors[0].step + 1], dtype=np.int64)
    sr, sbf = bool(opt.stochastic_rounding), opt.stochastic_bf16
    native = rep.time(
        "native plan.step(N grads), args prepared", lambda: opt._plan.step(grads, steps, hps, False, sr, sbf, 0.0, 0)
    )
    native_one = rep.time(
        "native plan.step(ONE grad of N*E)", lambda: one._plan.step(one_g, one_steps, one_hps, False, sr, sbf, 0.0, 0)
    )
    rep.add("Python side of octopt.Optimizer.step (whole - native)", total - native)
    lock = opt._step_lock
    rep.time("  step() lock acquire + release", lambda: (lock.acquire(blocking=False), lock.release()), per_step=True)
    rep.time("  framework_of(grads) + list(grads)", lambda: (_arrays.framework_of(grads), list(grads)), per_step=True)

    def shape_loop():
        for i, (t, g) in enumerate(zip(tensors, grads)):
            shape = getattr(g, "shape", None)
            if shape is not None and tuple(shape) != t.info.shape:
                raise AssertionError

    rep.time("  shape check loop (getattr, tuple(shape) != info.shape)", shape_loop)
    rep.time(
        "  _hparams.validate_group x groups",
        lambda: [_hparams.validate_group(kind, g, "step") for g in groups],
        per_step=True,
    )
    rep.time("  _hparams.to_core x groups", lambda: [_hparams.to_core(kind, g) for g in groups], per_step=True)
    rep.time(
        "  np.fromiter of the step counts",
        lambda: np.fromiter(
            (t.step + (g is not None) for t, g in zip(tensors, grads)), dtype=np.int64, count=len(grads)
        ),
    )
    rep.time(
        "  kgrads = [kernel_arg(g) ...] (framework_of per grad)",
        lambda: [_arrays.kernel_arg(g) if g is not None else None for g in grads],
    )
    info0 = tensors[0].info
    rep.time("  stream_handle", lambda: _arrays.stream_handle(info0, None, "step"), per_step=True)

    counts = [0] * n

    def advance():
        for i, g in enumerate(grads):
            if g is not None:
                counts[i] += 1

    rep.time("  t.step += 1 loop (stand-in: list counters)", advance)
    rep.add("native per tensor: (plan.step N - plan.step one) / (N - 1)", (native - native_one) * n / (n - 1))
    if probe is not None:
        noop = best_call_s(lambda: probe.noop(grads), rep.rounds, rep.batch)
        seq = rep.time("  sequence access grads[i] (nb::sequence)", lambda: probe.seq_only(grads), minus=noop)
        cast = best_call_s(lambda: probe.ndarray_cast(grads), rep.rounds, rep.batch) - noop
        rep.add("  nb::try_cast<ndarray<ro>> (NumPy __dlpack__ + import)", cast - seq)
        checked = best_call_s(lambda: probe.ndarray_cast_checked(grads, elems), rep.rounds, rep.batch) - noop
        rep.add("  'grads[i]' std::string + contiguity/dtype/size checks", checked - cast)
        rep.time("  (alternative) buffer protocol instead of DLPack", lambda: probe.buffers(grads, elems), minus=noop)
    c = core.get((bits, elems))
    if c:
        rep.add("  core octopt::step per tensor, no Python: (N - one) / (N - 1)", (c[0] - c[1]) * 1e-9 * n / (n - 1))
        rep.add("    of which validate_step (a std::string per tensor)", c[3] * 1e-9)
        if bits != 32:
            rep.add(
                "    of which make_levels, once per quantized state per chunk",
                2 * c[4] * 1e-9 * n,
                note=f"2 states x {c[4]:.0f} ns",
            )
        rep.add("  core compute_scalars (in the binding's loop)", c[2] * 1e-9)


# -- the torch path -------------------------------------------------------------------------------------
def torch_path(rep: Report, probe, elems: int, bits: int) -> None:
    import octopt.torch as ot
    import torch
    from octopt import _arrays

    n = rep.n
    rng = np.random.default_rng(0)
    params = [torch.nn.Parameter(torch.from_numpy(rng.standard_normal(elems, dtype=np.float32))) for _ in range(n)]
    for p in params:
        p.grad = torch.from_numpy(rng.standard_normal(elems, dtype=np.float32) * np.float32(1e-2))
    opt = ot.AdamW(params, bits=bits, min_8bit_size=0)
    big = torch.nn.Parameter(torch.cat([p.detach() for p in params]))
    big.grad = torch.cat([p.grad for p in params])
    one = ot.AdamW([big], bits=bits, min_8bit_size=0)
    rep.section(f"torch path: octopt.torch.AdamW({n} x {elems} float32, bits={bits}).step()")
    total = rep.time("whole step (N tensors)", opt.step)
    kernel = rep.time("whole step, ONE tensor of N*E elements (kernel)", one.step)
    rep.add("= per-tensor overhead", (total - kernel) * n / (n - 1))

    core = opt._core
    grads = [p.grad.detach() for p in params]
    with torch.no_grad():
        core_s = rep.time("octopt.Optimizer.step(detached grads) inside it", lambda: core.step(grads))
    rep.add("adapter (TorchOptimizer.step minus the core step)", total - core_s)

    # the two wrappers around TorchOptimizer.step, each timed around a function that does nothing
    def nothing(self):
        return None

    hooked, undynamo = torch.optim.Optimizer.profile_hook_step(nothing), torch._disable_dynamo(nothing)
    rep.time("  torch.optim profile_hook_step wrapper (record_function, hooks)", lambda: hooked(opt), per_step=True)
    rep.time("  @torch._disable_dynamo wrapper", lambda: undynamo(opt), per_step=True)
    rep.time("  _sync (param_groups -> core groups)", lambda: opt._sync("step"), per_step=True)

    def nograd():
        with torch.no_grad():
            pass

    rep.time("  with torch.no_grad()", nograd, per_step=True)
    base = best_call_s(lambda: [p for p in params], rep.rounds, rep.batch)
    rep.time("  loop: p.data_ptr() != ptrs[i]", lambda: [p.data_ptr() for p in params], minus=base)
    rep.time("  loop: p.grad", lambda: [p.grad for p in params], minus=base)
    gl = [p.grad for p in params]
    strided = torch.strided
    rep.time("  loop: g.layout != torch.strided", lambda: [g.layout != strided for g in gl], minus=base)
    rep.time("  loop: g.is_complex()", lambda: [g.is_complex() for g in gl], minus=base)
    rep.time("  loop: g.detach()", lambda: [g.detach() for g in gl], minus=base)
    rep.time("  loop: g.is_contiguous()", lambda: [g.is_contiguous() for g in gl], minus=base)
    rep.time(
        "  loop itself (enumerate, t.param, append)", lambda: [t.param for _, t in enumerate(core._tensors)], minus=0.0
    )
    rep.add("core step on torch tensors, per tensor beyond the NumPy path's:", float("nan"))
    rep.time(
        "  kernel_arg: framework_of (type(a).__module__) + a.detach() again",
        lambda: [_arrays.kernel_arg(g) for g in grads],
        minus=base,
    )
    if probe is not None:
        noop = best_call_s(lambda: probe.noop(grads), rep.rounds, rep.batch)
        seq = best_call_s(lambda: probe.seq_only(grads), rep.rounds, rep.batch) - noop
        rep.time(
            "  nb::try_cast<ndarray<ro>> of a torch tensor (Tensor.__dlpack__ in Python)",
            lambda: probe.ndarray_cast(grads),
            minus=noop + seq,
        )


# -- hand-off alternatives ------------------------------------------------------------------------------
def handoffs(rep: Report, probe, elems: int) -> None:
    import torch

    n = rep.n
    rng = np.random.default_rng(0)
    params = [torch.nn.Parameter(torch.from_numpy(rng.standard_normal(elems, dtype=np.float32))) for _ in range(n)]
    for p in params:
        p.grad = torch.from_numpy(rng.standard_normal(elems, dtype=np.float32))
    grads = [p.grad for p in params]
    want = sum(g.data_ptr() for g in grads)
    rep.section(
        f"hand-off of {n} torch gradients ({elems} float32 each) to one native call; each "
        "figure is the whole call (Python part + native part) / N"
    )
    noop = best_call_s(lambda: probe.noop(grads), rep.rounds, rep.batch)
    rep.add("(one native call with one argument, per step)", noop, per_step=True)
    data_ptr = torch.Tensor.data_ptr
    to_dlpack = torch._C._to_dlpack

    cases = {
        "DLPack per tensor via nanobind (today: Tensor.__dlpack__)": lambda: probe.ndarray_cast(grads),
        "capsules [torch._C._to_dlpack(g)] then nanobind": lambda: probe.capsules([to_dlpack(g) for g in grads]),
        "[g.data_ptr() for g in grads] -> std::vector<uintptr_t>": lambda: probe.ptr_vector(
            [g.data_ptr() for g in grads]
        ),
        "[g.data_ptr() for g in grads] -> list read in C++": lambda: probe.ptr_list([g.data_ptr() for g in grads]),
        "list(map(Tensor.data_ptr, grads)) -> list read in C++": lambda: probe.ptr_list(list(map(data_ptr, grads))),
        "np.fromiter(map(Tensor.data_ptr, grads)) -> int64 array": lambda: probe.ptr_array(
            np.fromiter(map(data_ptr, grads), np.int64, n)
        ),
        "C++ calls g.data_ptr() on each (list of tensors)": lambda: probe.torch_data_ptr(grads),
        "C++: dtype is torch.float32, numel, is_contiguous, is_cpu, data_ptr": lambda: probe.torch_checked(
            grads, torch.float32, elems
        ),
        "C++ from the params: p.grad, then the same checks": lambda: probe.torch_param_grads(
            params, torch.float32, elems
        ),
    }
    for label, fn in cases.items():
        got = fn()
        if got != want:
            raise AssertionError(f"{label}: pointer sum {got} != {want}")
        rep.time(label, fn, minus=noop)

    # A cache of each gradient's (pointer, dtype, shape) can only hit when the grad objects survive from one
    # step to the next, i.e. zero_grad(set_to_none=False); torch's default makes new ones every step. The
    # key cannot include ._version: backward's accumulation and zero_() bump it every step.
    cached_ids = list(map(id, grads))
    ptrs = [g.data_ptr() for g in grads]

    def cache_check():
        gs = [p.grad for p in params]
        if list(map(id, gs)) == cached_ids:
            return probe.ptr_list(ptrs)
        raise AssertionError

    rep.time("cache hit (zero_grad(set_to_none=False)): [p.grad], ids compared, cached ptrs", cache_check, minus=noop)
    rep.time("  of which [p.grad for p in params]", lambda: [p.grad for p in params])
    rep.time("  of which list(map(id, grads))", lambda: list(map(id, grads)))
    rep.time("  (a ._version read per grad, for comparison)", lambda: [g._version for g in grads])
    arrays = [g.numpy() for g in grads]
    rep.section(f"hand-off of {n} NumPy gradients ({elems} float32 each)")
    rep.time("DLPack per array via nanobind (today)", lambda: probe.ndarray_cast(arrays), minus=noop)
    rep.time("buffer protocol in C++ (PyObject_GetBuffer)", lambda: probe.buffers(arrays, elems), minus=noop)
    rep.time(
        "[a.ctypes.data for a in arrays] -> list", lambda: probe.ptr_list([a.ctypes.data for a in arrays]), minus=noop
    )
    rep.time(
        "[a.__array_interface__['data'][0] ...] -> list",
        lambda: probe.ptr_list([a.__array_interface__["data"][0] for a in arrays]),
        minus=noop,
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="bench/overhead_profile.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--tensors", type=int, default=256)
    p.add_argument("--elems", type=int, default=64, help="float32 elements per tensor (default 64)")
    p.add_argument("--bits", type=int, nargs="+", default=[32, 8], choices=(32, 8, 4))
    p.add_argument("--rounds", type=int, default=15, help="batches per piece; the fastest counts (default 15)")
    p.add_argument("--batch", type=int, default=30, help="calls per batch (default 30)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument(
        "--clock",
        choices=tuple(CLOCK),
        default="cpu",
        help="process CPU time (default; steadier on a shared machine at 1 thread) or wall time",
    )
    p.add_argument(
        "--core-lib",
        default=os.path.join(ROOT, "build", "dev", "cpp", "liboctopt.a"),
        help="octopt's core library for the C++ harness (default: build/dev's)",
    )
    args = p.parse_args(argv)
    global clock_now
    clock_now = CLOCK[args.clock]
    import octopt

    octopt.set_num_threads(args.threads)
    probe, exe = build_probe(args.core_lib if os.path.exists(args.core_lib) else None)
    core = core_figures(exe, args.tensors, args.threads)
    print(
        f"octopt {octopt.__version__} from {os.path.dirname(octopt.__file__)}; {args.tensors} tensors x "
        f"{args.elems} float32; {args.threads} thread(s); {args.clock} clock; load avg {os.getloadavg()}"
    )
    rep = Report(args.tensors, args.rounds, args.batch)
    for bits in args.bits:
        numpy_path(rep, probe, core, args.elems, bits)
    try:
        import torch

        torch.set_num_threads(args.threads)
    except ImportError:
        torch = None
    if torch is not None:
        for bits in args.bits:
            torch_path(rep, probe, args.elems, bits)
        if probe is not None:
            handoffs(rep, probe, args.elems)
    rep.print()
    print(f"\nload avg at the end {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
