"""Which state slots an optimizer uses for a tensor, and how each is stored: the core's layout rules
(optim_table.hpp), read through the binding."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from . import _hparams, _octopt

# Names of the state slots (s0, s1, s2) per optimizer, and whether each holds signed values.
SLOTS = {name: tuple((s[0], s[1]) for s in e["slots"]) for name, e in _hparams.TABLE.items()}

_RULES = _octopt.layout_rules()
# The maps of quantized state: (bits, signed, state_map) -> the name state files record.
MAP_NAMES = dict(_RULES["maps"])


class SlotSpec(NamedTuple):
    index: int  # s0, s1, s2
    name: str
    signed: bool
    bits: int  # 32, 8 or 4
    block_size: int
    state_map: str = "dynamic"  # the map family of an 8-bit slot ("dynamic" for other bits)

    @property
    def map_name(self) -> str:
        return "float32" if self.bits == 32 else MAP_NAMES[(self.bits, self.signed, self.state_map)]


def layout_slots(kind: str, group: dict, numel: int, fn: str = "Optimizer") -> tuple[int, list[SlotSpec]]:
    """(block_size, slot specs) of one tensor of this group, as the core lays it out."""
    hp, lo = _hparams.convert_group(kind, group, fn)
    block_size, slots = _octopt.layout_tensor(kind, hp, lo, int(numel))
    return block_size, [SlotSpec(i, name, signed, bits, bs, m) for i, name, signed, bits, bs, _, m in slots]


def used_slots(kind: str, group: dict) -> list[int]:
    """State slots this optimizer needs under these hyper-parameters."""
    return [s.index for s in layout_slots(kind, group, 0)[1]]


def slot_map(spec: SlotSpec) -> np.ndarray:
    """The quantization map of a quantized slot."""
    return np.asarray(_octopt.state_map_values(spec.bits, spec.signed, spec.state_map), dtype=np.float32)


def initial_fill(spec: SlotSpec, init: float) -> tuple[int, float]:
    """(code byte, absmax) of a quantized slot whose every value is ``init``: absmax = |init| and the code
    nearest to sign(init) (0 when init == 0); 4-bit bytes hold the code twice."""
    return int(_octopt.slot_initial_code(spec.bits, spec.signed, float(init), spec.state_map)), float(init)


def initial_value(kind: str, spec: SlotSpec, group: dict) -> float:
    """The value a state slot starts from, as its definition says (Adagrad's sum: initial_accumulator_value)."""
    return float(_octopt.slot_initial_value(kind, spec.index, _hparams.to_layout(group, "initial_value")))
