"""Hyper-parameters of the optimizer family as the core's optimizer table defines them: the group keys,
each optimizer's defaults, and the conversion of a param-group dict into the core's HyperParams and
LayoutOptions. Ranges are checked by the core (once, where the values are set); this module only checks
what a conversion needs (numbers are numbers, ``betas`` is a tuple)."""

from __future__ import annotations

from typing import Any

import numpy as np

from . import _octopt

# The core's table (cpp/include/octopt/optim_table.hpp), read once.
TABLE: dict[str, dict] = {e["name"]: e for e in _octopt.optimizer_table()}
HPARAMS: list[dict] = list(_octopt.hparam_table())
_TYPES = {h["key"]: h["type"] for h in HPARAMS}

# Keys of a param group that fix the state layout: set when a group is added, never changed afterwards.
LAYOUT_KEYS = ("bits", "block_size", "min_8bit_size", "first_moment_bits", "state_map")
# The values of the layout key "state_map": the maps of 8-bit state ("dynamic": bitsandbytes' dynamic maps,
# "fp8": the values of an fp8 e4m3 number).
STATE_MAPS: tuple[str, ...] = tuple(_octopt.layout_rules()["state_maps"])
# Keys a param group may hold, beyond "params": the table's hyper-parameters (the betas as one tuple),
# Adagrad's initial_accumulator_value and the layout keys.
GROUP_KEYS = (
    tuple(dict.fromkeys(("betas" if k.startswith("betas[") else k) for k in (h["key"] for h in HPARAMS)))
    + ("initial_accumulator_value",)
    + LAYOUT_KEYS
)
_REAL_KEYS = tuple(k for k in GROUP_KEYS if _TYPES.get(k) in ("real", "optional_real"))
_FLAG_KEYS = tuple(k for k in GROUP_KEYS if _TYPES.get(k) == "flag")

# Defaults shared by every optimizer (a default HyperParams and LayoutOptions): the values of the keys an
# optimizer does not take.
COMMON_DEFAULTS: dict[str, Any] = dict(TABLE["adam"]["defaults"])


def has_tensor_scalar(kind: str) -> bool:
    """Whether the optimizer carries a per-tensor scalar beside its slots (NAdam's mu_product; the table's
    tensor_scalars: at most one)."""
    return bool(TABLE[kind]["tensor_scalars"])


def tensor_scalar_name(kind: str) -> str | None:
    """The state-dict key of the optimizer's per-tensor scalar (its definition's name: torch's), or None."""
    scalars = TABLE[kind]["tensor_scalars"]
    return scalars[0][0] if scalars else None


def checked_tensor_scalar(kind: str, v: Any, where: str) -> float:
    """The optimizer's per-tensor scalar read from a state dict entry (a number, or a one-element tensor's
    item), checked against the range its definition declares."""
    name, _initial, lo, hi = TABLE[kind]["tensor_scalars"][0]
    if v is None:
        raise ValueError(f"{where} lacks {TABLE[kind]['class_name']}'s '{name}'")
    if hasattr(v, "numel") and hasattr(v, "item"):  # a torch tensor, as torch.optim keeps it
        if v.numel() != 1:
            raise ValueError(f"{where} has a '{name}' tensor of {v.numel()} elements; expected one")
        v = v.item()
    if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)) or not lo <= float(v) <= hi:
        raise ValueError(f"{where} has a bad '{name}' {v!r}; expected a number in [{lo:g}, {hi:g}]")
    return float(v)


def defaults(kind: str) -> dict[str, Any]:
    """Every group key with the optimizer's default."""
    return dict(TABLE[kind]["defaults"])


def _number(v: Any, key: str, fn: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) and not hasattr(v, "__float__"):
        raise TypeError(f"{fn}: '{key}' must be a number, got {type(v).__name__}")
    return float(v)


def _layout_int(v: Any, key: str, fn: str, none_ok: bool, message: str) -> int:
    if v is None and none_ok:
        return 0
    limit = 2**63 if key == "min_8bit_size" else 2**31  # the core's integer widths
    if isinstance(v, bool) or not isinstance(v, int) or not -limit <= v < limit:
        raise ValueError(f"{fn}: '{key}' must be {message}, got {v!r}")
    return int(v)


def to_core(kind: str, group: dict, fn: str = "step") -> Any:
    """The group's hyper-parameters as the core's HyperParams (numbers checked to be numbers)."""
    hp = _octopt.HyperParams()
    betas = group["betas"]
    if not isinstance(betas, (tuple, list)) or len(betas) not in (2, 3):
        raise ValueError(f"{fn}: 'betas' must be a tuple of 2 (or 3 for AdEMAMix and Adan) values, got {betas!r}")
    want = 3 if TABLE[kind]["num_betas"] == 3 else 2
    if len(betas) != want:  # a third beta would be silently ignored
        what = f"(beta1, beta2, beta3) for {TABLE[kind]['class_name']}" if want == 3 else f"(beta1, beta2) for {kind}"
        raise ValueError(f"{fn}: 'betas' must be {what}, got {betas!r}")
    for i, (field, b) in enumerate(zip(("beta1", "beta2", "beta3"), betas)):
        setattr(hp, field, _number(b, f"betas[{i}]", fn))
    for key in _REAL_KEYS:
        v = group[key]
        if v is None and _TYPES[key] == "optional_real":
            continue
        setattr(hp, key, _number(v, key, fn))
    for key in _FLAG_KEYS:
        setattr(hp, key, bool(group[key]))
    return hp


def to_layout(group: dict, fn: str) -> Any:
    """The group's layout options as the core's LayoutOptions."""
    lo = _octopt.LayoutOptions()
    lo.bits = _layout_int(group["bits"], "bits", fn, False, "32, 8 or 4")
    lo.first_moment_bits = _layout_int(group["first_moment_bits"], "first_moment_bits", fn, True, "None, 32, 8 or 4")
    lo.block_size = _layout_int(group["block_size"], "block_size", fn, True, "a power of two in [32, 4096]")
    lo.min_8bit_size = _layout_int(group["min_8bit_size"], "min_8bit_size", fn, False, "an int >= 0")
    lo.initial_accumulator_value = _number(group["initial_accumulator_value"], "initial_accumulator_value", fn)
    lo.state_map = state_map(group.get("state_map", "dynamic"), fn)
    return lo


def state_map(v: Any, fn: str) -> str:
    """The layout option ``state_map`` checked: one of STATE_MAPS."""
    if not isinstance(v, str) or v not in STATE_MAPS:
        raise ValueError(f"{fn}: 'state_map' must be {' or '.join(map(repr, STATE_MAPS))}, got {v!r}")
    return v


def check_keys(kind: str, group: dict, fn: str) -> None:
    for key in group:
        if key != "params" and key not in GROUP_KEYS:
            raise ValueError(f"{fn}: unknown option '{key}' for {kind}")


def convert_group(kind: str, group: dict, fn: str) -> tuple[Any, Any]:
    """(HyperParams, LayoutOptions) of a complete group, validated by the core. Raises TypeError/ValueError
    naming the bad key."""
    check_keys(kind, group, fn)
    hp = to_core(kind, group, fn)
    _octopt.validate_hparams(kind, hp, fn)
    lo = to_layout(group, fn)
    _octopt.validate_layout(lo, fn)
    return hp, lo


def validate_group(kind: str, group: dict, fn: str) -> None:
    """Raises TypeError/ValueError naming the bad hyper-parameter (the core's checks)."""
    convert_group(kind, group, fn)
