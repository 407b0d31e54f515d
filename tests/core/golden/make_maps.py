"""Writes maps.json: bitsandbytes' quantization maps, the golden values of tests/core/test_maps.py.

Run from anywhere with bitsandbytes (and torch) installed:  python tests/core/golden/make_maps.py
Each map is stored as the hex of its float32 values' uint32 bit patterns, so the comparison is
bit for bit and the file reads the same on every platform.
"""

from __future__ import annotations

import json
from pathlib import Path

import bitsandbytes
import bitsandbytes.functional as bnbf
import numpy as np
import torch

OUT = Path(__file__).with_name("maps.json")


def to_hex(values: torch.Tensor) -> list[str]:
    bits = values.detach().cpu().to(torch.float32).numpy().view(np.uint32)
    return [f"{int(b):08x}" for b in bits]


def distinct(values: torch.Tensor) -> torch.Tensor:
    # bitsandbytes pads maps of fewer than 8 bits to 256 entries with zeros; the map is the distinct values
    return torch.unique(values, sorted=True)


def main() -> None:
    maps = {
        "dynamic_signed_8": ("create_dynamic_map(True, 7, 8)", bnbf.create_dynamic_map(True, 7, 8)),
        "dynamic_unsigned_8": ("create_dynamic_map(False, 7, 8)", bnbf.create_dynamic_map(False, 7, 8)),
        "dynamic_signed_4": (
            "distinct values of create_dynamic_map(True, 3, 4)",
            distinct(bnbf.create_dynamic_map(True, 3, 4)),
        ),
        "linear_signed_8": ("create_linear_map(True, 8)", bnbf.create_linear_map(True, 8)),
        "linear_unsigned_8": ("create_linear_map(False, 8)", bnbf.create_linear_map(False, 8)),
        "fp8_e4m3": ("create_fp8_map(True, 4, 3, 8)", bnbf.create_fp8_map(True, 4, 3, 8)),
    }
    assert distinct(bnbf.create_dynamic_map(True, 3, 4)).numel() == 16
    header = {
        "generator": "tests/core/golden/make_maps.py",
        "bitsandbytes": bitsandbytes.__version__,
        "torch": torch.__version__,
        "format": "float32 values as 8 hex digits of their uint32 bit pattern",
    }
    # json.dumps would put each value on a line of its own; eight to a line reads better in a diff
    entries = []
    for name, (source, values) in maps.items():
        hexes = [json.dumps(h) for h in to_hex(values)]
        rows = ",\n      ".join(", ".join(hexes[i : i + 8]) for i in range(0, len(hexes), 8))
        entries.append(
            f'  {json.dumps(name)}: {{\n    "source": {json.dumps(source)},\n'
            f'    "float32_hex": [\n      {rows}\n    ]\n  }}'
        )
    head = ",\n".join(f"  {json.dumps(k)}: {json.dumps(v)}" for k, v in header.items())
    text = "{\n" + head + ',\n  "maps": {\n' + ",\n".join("  " + e.replace("\n", "\n  ") for e in entries)
    text += "\n  }\n}\n"
    json.loads(text)  # the hand-laid layout must still be valid JSON
    OUT.write_text(text)
    print(f"wrote {OUT} ({len(maps)} maps)")


if __name__ == "__main__":
    main()
