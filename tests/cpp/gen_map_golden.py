"""Prints the golden map entries of test_qmap.cpp from bitsandbytes' own map constructors.

Run with bitsandbytes installed:  python3 tests/cpp/gen_map_golden.py
The 4-bit dynamic map of bitsandbytes is padded to 256 entries with zeros; octopt's is not, so the
padding is dropped here (the 16 distinct values, in order).
"""

import struct

import bitsandbytes.functional as F


def bits(x):
    return struct.unpack("<I", struct.pack("<f", x))[0]


def spots(name, values, indices):
    body = ", ".join(f"{{{i}, 0x{bits(values[i]):08x}u}}" for i in indices)
    print(f"// {name}\n{{{body}}}")


signed = F.create_dynamic_map(True).tolist()
unsigned = F.create_dynamic_map(False).tolist()
four = F.create_dynamic_map(True, 3, 4).tolist()
four = [v for v in four if v != 0.0]
four.insert(sum(v < 0 for v in four), 0.0)
spots("dynamic_map(true)", signed, [0, 1, 2, 37, 100, 126, 127, 128, 129, 200, 253, 254, 255])
spots("dynamic_map(false)", unsigned, [0, 1, 2, 64, 127, 128, 191, 254, 255])
spots("dynamic_map(true, 3, 4)", four, range(16))
