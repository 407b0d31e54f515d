"""The implementations the step benchmark compares. Each factory takes fresh fp32 parameter copies and fixed
gradients (lists of NumPy arrays) and returns a zero-argument callable that performs one full optimizer step
and returns only when its results are in memory. Peers are imported lazily; one that cannot be imported is
left out with the reason."""

from __future__ import annotations

import logging
import os
import sys
from dataclasses import dataclass
from typing import Callable

import numpy as np

import octopt

Step = Callable[[], object]
Factory = Callable[[list, list], Step]
FAMILIES = ("octopt", "torch", "bnb", "torchao", "optax")


@dataclass(frozen=True)
class Impl:
    name: str  # the table's "implementation" column
    family: str  # one of FAMILIES: what --skip names
    bits: int  # state width: selects BYTES_PER_PARAM
    make: Factory
    slow: bool = False  # tens of ns per parameter: one warm-up, --slow-repeats steps, --slow-budget applies


def octopt_step(cls: type, bits: int) -> Factory:
    def make(params: list, grads: list) -> Step:
        opt = cls(params, bits=bits)
        return lambda: opt.step(grads)

    return make


def _torch_params(torch, params: list, grads: list) -> list:
    tensors = [torch.nn.Parameter(torch.from_numpy(p)) for p in params]  # shares the NumPy buffers
    for t, g in zip(tensors, grads):
        t.grad = torch.from_numpy(g)
    return tensors


def torch_step(torch, cls_name: str, **options) -> Factory:
    def make(params: list, grads: list) -> Step:
        return getattr(torch.optim, cls_name)(_torch_params(torch, params, grads), **options).step

    return make


def optax_step(jax, optax) -> Factory:
    """optax.adam under jax.jit with the parameters and the state donated, so XLA updates them in place."""
    jnp = jax.numpy
    tx = optax.adam(1e-3)

    def update(p, s, g):
        u, s = tx.update(g, s, p)
        return optax.apply_updates(p, u), s

    def make(params: list, grads: list) -> Step:
        jitted = jax.jit(update, donate_argnums=(0, 1))
        p = [jnp.asarray(x) for x in params]  # copies: a donated buffer must belong to XLA
        g = [jnp.asarray(x) for x in grads]
        held = [p, tx.init(p)]

        def step():
            held[0], held[1] = jitted(held[0], held[1], g)
            jax.block_until_ready(held)

        return step

    return make


def _import(family: str):
    """The modules a family needs, or raises: anything from a missing package to a broken native library."""
    if family == "torch":
        import torch

        return (torch,)
    if family == "bnb":
        import torch

        logging.getLogger("bitsandbytes").setLevel(logging.ERROR)  # an unrelated optional-kernel warning
        import bitsandbytes

        return torch, bitsandbytes
    if family == "torchao":
        import torch

        logging.getLogger("torchao").setLevel(logging.ERROR)  # its CUDA-only extensions fail to load on CPU
        import torchao
        import torchao.optim

        return torch, torchao
    if family == "optax":
        import jax
        import optax

        return jax, optax
    raise ValueError(f"peers._import: unknown family {family!r}; expected one of {FAMILIES}")


def _set_xla_threads(threads: int) -> str:
    """XLA's CPU thread pool is sized from XLA_FLAGS when jax first starts; too late once jax is imported."""
    if "jax" in sys.modules:
        return "jax was imported before the benchmark: XLA_FLAGS not set, XLA uses its default thread count"
    if "XLA_FLAGS" in os.environ:
        return f"'{os.environ['XLA_FLAGS']}' (kept as set)"
    os.environ["XLA_FLAGS"] = f"--xla_cpu_multi_thread_eigen=true intra_op_parallelism_threads={threads}"
    return f"'{os.environ['XLA_FLAGS']}'"


def implementations(threads: int, skip: tuple[str, ...] = ()) -> tuple[list[Impl], list[str], dict]:
    """(implementations, 'what: why' for each one left out, {package: version})."""
    octopt.set_num_threads(threads)
    impls: list[Impl] = []
    left_out: list[str] = []
    versions = {"numpy": np.__version__, "octopt": octopt.__version__, "octopt_simd": octopt.info().get("simd")}
    if "octopt" not in skip:
        for cls in (octopt.Adam, octopt.AdamW):
            impls += [Impl(f"octopt {cls.__name__} {b}-bit", "octopt", b, octopt_step(cls, b)) for b in (8, 4, 32)]
    for family in FAMILIES[1:]:
        if family in skip:
            left_out.append(f"{family}: --skip {family}")
            continue
        if family == "optax":
            versions["XLA_FLAGS"] = _set_xla_threads(threads)
        try:
            mods = _import(family)
        except Exception as e:  # noqa: BLE001 - a missing native library is not an ImportError
            left_out.append(f"{family}: not importable ({type(e).__name__}: {e})")
            continue
        versions[family] = mods[-1].__version__
        if family == "torch":
            (torch,) = mods
            torch.set_num_threads(threads)
            impls.append(Impl("torch Adam fused", family, 32, torch_step(torch, "Adam", fused=True)))
            impls.append(Impl("torch Adam foreach", family, 32, torch_step(torch, "Adam", foreach=True)))
        elif family == "bnb":
            torch, bnb = mods
            torch.set_num_threads(threads)
            impls.append(Impl("bnb Adam8bit", family, 8, _bnb_factory(torch, bnb), slow=True))
        elif family == "torchao":
            torch, torchao = mods
            torch.set_num_threads(threads)
            impls.append(Impl("torchao AdamW8bit", family, 8, _torchao_factory(torch), slow=True))
        else:
            impls.append(Impl("optax adam jit", family, 32, optax_step(*mods)))
    return impls, left_out, versions


def _bnb_factory(torch, bnb) -> Factory:
    def make(params: list, grads: list) -> Step:
        return bnb.optim.Adam8bit(_torch_params(torch, params, grads)).step

    return make


def _torchao_factory(torch) -> Factory:
    """torchao's AdamW8bit steps each tensor with a torch.compile'd function: the first step of each new shape
    compiles (seconds), which the warm-up step absorbs."""
    from torchao.optim import AdamW8bit

    def make(params: list, grads: list) -> Step:
        return AdamW8bit(_torch_params(torch, params, grads)).step

    return make
