"""The ``octopt`` command."""

from __future__ import annotations

import argparse
import sys

from . import _inspect_cmd


def _cmd_info(args: argparse.Namespace) -> int:
    from .runtime import info

    i = info()
    rows = [
        ("octopt", i["version"]),
        ("compiler", i["compiler"]),
        ("SIMD level in use", i["simd"]),
        ("CPU features", i["cpu_features"] or "-"),
        ("CPU threads", str(i["threads"])),
        (
            "CUDA built",
            "yes" + (f" (runtime {i['cuda_runtime']})" if i["cuda_runtime"] else "") if i["cuda_built"] else "no",
        ),
        ("CUDA available", f"yes ({i['cuda_devices']} device(s))" if i["cuda_available"] else "no"),
        (
            "XLA FFI handler",
            ("yes (octopt.optax: CPU" + (", CUDA)" if i["xla_ffi_cuda_built"] else ")"))
            if i["xla_ffi_built"]
            else "no",
        ),
        ("C library", i["c_library"] or "not built"),
    ]
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        print(f"{k:<{width}}  {v}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="octopt", description="Block-wise quantized optimizer states.")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("info", help="print the build: version, compiler, SIMD level, threads, CUDA, XLA FFI").set_defaults(
        func=_cmd_info
    )
    from . import demo

    demo_help = "train a small MLP on scikit-learn digits with 32-bit vs 8-bit Adam state, plot the losses"
    demo_parser = sub.add_parser("demo", help=demo_help, description=demo_help)
    demo.add_arguments(demo_parser)
    demo_parser.set_defaults(func=demo.run)
    _inspect_cmd.register(sub)
    from ._bench import step_cmd

    bench_help = "benchmark one CPU optimizer step against torch/bitsandbytes/torchao/optax, plus peak memory"
    bench_parser = sub.add_parser(
        "bench", help=bench_help, description=step_cmd.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    step_cmd.add_arguments(bench_parser)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
