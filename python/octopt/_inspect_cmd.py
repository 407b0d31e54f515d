"""``octopt inspect FILE``: the header, metadata, tensors and checksum status of a state file.

Exit status 0 when the file is a valid state file whose checksums all match, 1 otherwise (with the
reason on stderr).
"""

from __future__ import annotations

import argparse
import json
import sys

_OWN_KEYS = ("octopt.format", "octopt.format_version", "octopt.crc32c")
_MAX_VALUE = 120  # characters of a metadata value shown without --full


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "inspect",
        help="show a state file's header, metadata, tensors and checksum status",
        description="Show a state file's header, metadata, tensors and checksum status. "
        "Exit status 1 when the file is invalid or a checksum does not match.",
    )
    p.add_argument("file", help="the state file (.safetensors)")
    p.add_argument("--json", action="store_true", help="print the full report as JSON")
    p.add_argument("--full", action="store_true", help="do not shorten long metadata values")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from .state_file import inspect

    try:
        report = inspect(args.file)
    except OSError as e:
        print(f"octopt inspect: {e}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(report, indent=2, ensure_ascii=False))
    else:
        _print_report(report, args.full)
    if not report["valid"]:
        print(f"octopt inspect: {report['error']}", file=sys.stderr)
        return 1
    return 0


def _show(value: str, full: bool) -> str:
    s = value if value.isprintable() else json.dumps(value, ensure_ascii=False)
    if not full and len(s) > _MAX_VALUE:
        s = s[: _MAX_VALUE - 3] + "..."
    return s


def _print_report(r: dict, full: bool) -> None:
    rows = [("file", r["path"])]
    if r["header_size"] is None:
        rows.append(("size", f"{r['file_size']} bytes"))
    else:
        rows.append(("size", f"{r['file_size']} bytes (8 length + {r['header_size']} header + {r['data_size']} data)"))
    if r["format"] is not None or r["format_version"] is not None:
        rows.append(("format", f"{r['format'] or '?'}, version {r['format_version'] or '?'}"))
    rows.append(("header checksum", r["header_checksum"]))
    for k, (key, value) in enumerate((k, v) for k, v in r["metadata"].items() if k not in _OWN_KEYS):
        rows.append(("metadata" if k == 0 else "", f"{key} = {_show(value, full)}"))
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        print(f"{k:<{width}}  {v}")

    tensors = r["tensors"]
    c = r["checksums"]
    print(f"\n{len(tensors)} tensor(s): {c['ok']} ok, {c['bad']} bad, {c['missing']} missing checksum(s)")
    if tensors:
        table = [("name", "dtype", "shape", "bytes", "crc32c", "checksum")]
        for t in tensors:
            shape = "[" + ", ".join(map(str, t["shape"])) + "]"
            table.append((t["name"], t["dtype"], shape, str(t["nbytes"]), t["crc32c"] or "-", t["checksum"]))
        widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
        for row in table:
            cells = [
                cell.rjust(w) if i == 3 else cell.ljust(w)  # bytes right-aligned
                for i, (cell, w) in enumerate(zip(row, widths))
            ]
            print("  " + "  ".join(cells).rstrip())
    print()
    print("valid" if r["valid"] else "INVALID")
