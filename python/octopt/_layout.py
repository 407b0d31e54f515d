"""Which state slots an optimizer uses for a tensor, and how each is stored."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from . import maps

# Names of the state slots (s0, s1, s2) per optimizer, and whether each holds signed values.
SLOTS = {
    "adam": (("exp_avg", True), ("exp_avg_sq", False)),
    "adamw": (("exp_avg", True), ("exp_avg_sq", False)),
    "lamb": (("exp_avg", True), ("exp_avg_sq", False)),
    "ademamix": (("m1", True), ("nu", False), ("m2", True)),
    "sgd": (("momentum_buffer", True),),
    "lars": (("momentum_buffer", True),),
    "lion": (("exp_avg", True),),
    "rmsprop": (("square_avg", False), ("momentum_buffer", True), ("grad_avg", True)),
    "adagrad": (("sum", False),),
}

FIRST_MOMENTS = ("exp_avg", "m1", "momentum_buffer")

# Codebook registry of a plan: (bits, signed) -> index, and the map each denotes.
CODEBOOKS = {(8, True): 0, (8, False): 1, (4, True): 2, (4, False): 3}
MAP_NAMES = {(8, True): "dynamic_signed_8", (8, False): "dynamic_unsigned_8", (4, True): "dynamic_signed_4",
             (4, False): "log2_step0.8_nozero_4"}


class SlotSpec(NamedTuple):
    index: int  # s0, s1, s2
    name: str
    signed: bool
    bits: int  # 32, 8 or 4
    block_size: int

    @property
    def map_name(self) -> str:
        return "float32" if self.bits == 32 else MAP_NAMES[(self.bits, self.signed)]


def used_slots(kind: str, group: dict) -> list[int]:
    """State slots this optimizer needs under these hyper-parameters."""
    if kind in ("sgd", "lars"):
        return [0] if group["momentum"] != 0 else []
    if kind == "rmsprop":
        return [0] + ([1] if group["momentum"] > 0 else []) + ([2] if group["centered"] else [])
    return list(range(len(SLOTS[kind])))


def plan_slots(kind: str, group: dict, numel: int) -> tuple[int, list[SlotSpec]]:
    """(block_size, slot specs) for one tensor of this group."""
    bits = group["bits"]
    if numel < group["min_8bit_size"]:
        bits = 32  # small tensors keep 32-bit state: their quantization overhead outweighs the saving
    block_size = group["block_size"] or (128 if bits == 4 else 256)
    specs = []
    for k in used_slots(kind, group):
        name, signed = SLOTS[kind][k]
        b = bits
        if name in FIRST_MOMENTS and bits != 32 and group["first_moment_bits"] is not None:
            b = group["first_moment_bits"]
        specs.append(SlotSpec(k, name, signed, b, block_size))
    return block_size, specs


def slot_map(spec: SlotSpec) -> np.ndarray:
    """The quantization map of a quantized slot (the table behind CODEBOOKS)."""
    if (spec.bits, spec.signed) == (4, False):
        return maps.log2_map(4)
    return maps.dynamic_map(spec.signed, bits=spec.bits)


def initial_fill(spec: SlotSpec, init: float) -> tuple[int, float]:
    """(code byte, absmax) of a quantized slot whose every value is ``init``: absmax = |init| and
    the code nearest to sign(init) (0 when init == 0); 4-bit bytes hold the code twice."""
    q = slot_map(spec)
    code = int(np.argmin(np.abs(q.astype(np.float64) - (1.0 if init > 0 else 0.0))))
    if spec.bits == 4:
        code = code | (code << 4)
    return code, float(init)


def initial_value(kind: str, spec: SlotSpec, group: dict) -> float:
    """The value a state slot starts from: Adagrad's sum starts at initial_accumulator_value."""
    return float(group["initial_accumulator_value"]) if (kind == "adagrad" and spec.index == 0) else 0.0
