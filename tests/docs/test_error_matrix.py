# ruff: noqa: E501  (one case per line: the table rows are long)
"""The bad-input matrix of docs/errors.md, walked case by case.

CASES below is the single source: each case is one row of the table between the
``<!-- error-matrix:begin -->`` and ``<!-- error-matrix:end -->`` markers of docs/errors.md.
``test_doc_table_matches_cases`` fails when the two drift; ``python tests/docs/test_error_matrix.py``
rewrites the table from CASES (and ``--probe`` prints what each call really raises).

A CLI row has the exception column ``exit 1``: ``octopt inspect`` reports a bad file on stderr
and returns 1 instead of raising; the message regex is matched against its stderr.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import stat
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest

import octopt
from octopt import StateFileError
from octopt import state_file

DOC = Path(__file__).resolve().parents[2] / "docs" / "errors.md"
BEGIN = "<!-- error-matrix:begin -->"
END = "<!-- error-matrix:end -->"


class CliFailure(Exception):
    """Stands for ``octopt inspect`` returning 1; the message is its stderr."""


@dataclass(frozen=True)
class Case:
    id: str
    entry: str  # the public entry point
    bad: str  # the bad-input class
    exc: type  # the exception raised (CliFailure: exit status 1)
    pattern: str  # regex searched in str(exception)
    call: Callable[[Path], Any]  # takes a fresh temporary directory
    torch: bool = False  # needs PyTorch

    def exc_name(self) -> str:
        return "exit 1" if self.exc is CliFailure else self.exc.__name__

    def row(self) -> str:
        return f"| {self.id} | {self.entry} | {self.bad} | {self.exc_name()} | `{self.pattern}` |"


# -- helpers -----------------------------------------------------------------------------------
def x32(n: int = 1000) -> np.ndarray:
    return np.random.default_rng(0).standard_normal(n).astype(np.float32)


def ro(a: np.ndarray) -> np.ndarray:
    a.flags.writeable = False
    return a


def q(n: int = 1000, **kw):
    return octopt.quantize_blockwise(x32(n), **kw)


def adam(*params, **kw) -> octopt.Adam:
    return octopt.Adam(list(params) or [x32()], **kw)


def grads_for(opt) -> list:
    return [np.zeros_like(p) for p in opt.params]


def saved(d: Path, **kw) -> Path:
    opt = adam(x32(), bits=8, **kw)
    opt.step([x32()])
    p = d / "opt.safetensors"
    opt.save(p)
    return p


def state_file_at(d: Path) -> Path:
    p = d / "s.safetensors"
    state_file.save(p, {"a": x32(100), "b": np.arange(10, dtype=np.int32)}, {"k": "v"})
    return p


def truncated(p: Path, keep: int) -> Path:
    data = p.read_bytes()
    p.write_bytes(data[:keep])
    return p


def flipped(p: Path, offset: int) -> Path:
    data = bytearray(p.read_bytes())
    data[offset] ^= 0x10
    p.write_bytes(bytes(data))
    return p


def header_edit(p: Path, old: bytes, new: bytes) -> Path:
    data = p.read_bytes()
    assert len(old) == len(new) and old in data, (old, new)
    p.write_bytes(data.replace(old, new, 1))
    return p


def readonly_dir(d: Path) -> Path:
    if os.geteuid() == 0:  # root writes through file modes; sysfs refuses file creation even to root
        return Path("/sys/octopt-error-matrix.safetensors")
    sub = d / "ro"
    sub.mkdir()
    sub.chmod(stat.S_IRUSR | stat.S_IXUSR)
    return sub / "out.safetensors"


def disk_full(fn: Callable[[], Any], limit: int = 4096) -> Any:
    """Runs fn with a 4 KiB file-size limit, which stands in for a full disk (root ignores quotas)."""
    import resource
    import signal

    old = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
    try:
        return fn()
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, old)


def inspect_cli(path: Path) -> None:
    from octopt import cli

    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        rc = cli.main(["inspect", os.fspath(path)])
    if rc != 0:
        raise CliFailure(f"exit {rc}: {err.getvalue()}")


def torch_mod():
    return pytest.importorskip("torch")


def tparam(n: int = 1000):
    torch = torch_mod()
    return torch.nn.Parameter(torch.from_numpy(x32(n)))


def tadam(*params, **kw):
    import octopt.torch as ot

    return ot.Adam(list(params) or [tparam()], **kw)


def tstep_with_grad(grad) -> None:
    p = tparam()
    opt = tadam(p, bits=8)
    p.grad = grad
    opt.step()


def tsaved(d: Path):
    torch = torch_mod()
    p = tparam()
    opt = tadam(p, bits=8)
    p.grad = torch.ones_like(p)
    opt.step()
    return opt, p


Q = "quantize_blockwise"
DQ = "dequantize_blockwise"

# fmt: off
CASES: list[Case] = [
    # ---- functional quantize_blockwise -------------------------------------------------------
    Case("q-dtype-int32", Q, "wrong dtype", TypeError, r"^quantize_blockwise: argument 'x' must have dtype float32 or float16 or bfloat16, got int32",
         lambda d: octopt.quantize_blockwise(np.arange(100, dtype=np.int32))),
    Case("q-dtype-float64", Q, "wrong dtype", TypeError, r"^quantize_blockwise: argument 'x' must have dtype .*got float64",
         lambda d: octopt.quantize_blockwise(x32().astype(np.float64))),
    Case("q-not-array", Q, "wrong dtype (not an array)", TypeError, r"^quantize_blockwise: argument 'x' must be a NumPy, PyTorch or CuPy array, got list",
         lambda d: octopt.quantize_blockwise([1.0, 2.0])),
    Case("q-strided", Q, "non-contiguous stride", ValueError, r"^quantize_blockwise: argument 'x' must be C-contiguous",
         lambda d: octopt.quantize_blockwise(x32()[::2])),
    Case("q-transposed", Q, "non-contiguous stride", ValueError, r"^quantize_blockwise: argument 'x' must be C-contiguous",
         lambda d: octopt.quantize_blockwise(x32(4096).reshape(64, 64).T)),
    Case("q-nan", Q, "NaN/Inf", ValueError, r"^quantize_blockwise: argument 'x' contains NaN or Inf \(1 block\(s\) affected\)",
         lambda d: octopt.quantize_blockwise(np.array([1.0, np.nan], np.float32))),
    Case("q-inf", Q, "NaN/Inf", ValueError, r"^quantize_blockwise: argument 'x' contains NaN or Inf",
         lambda d: octopt.quantize_blockwise(np.array([1.0, np.inf], np.float32))),
    Case("q-block-zero", Q, "invalid block size", ValueError, r"^quantize_blockwise: argument 'block_size' must be a power of two in \[32, 4096\], got 0",
         lambda d: octopt.quantize_blockwise(x32(), block_size=0)),
    Case("q-block-negative", Q, "invalid block size", ValueError, r"^quantize_blockwise: argument 'block_size' must be a power of two .*got -64",
         lambda d: octopt.quantize_blockwise(x32(), block_size=-64)),
    Case("q-block-not-pow2", Q, "invalid block size", ValueError, r"^quantize_blockwise: argument 'block_size' must be a power of two .*got 100",
         lambda d: octopt.quantize_blockwise(x32(), block_size=100)),
    Case("q-block-huge", Q, "huge block size", ValueError, r"^quantize_blockwise: argument 'block_size' must be a power of two .*got 1099511627776",
         lambda d: octopt.quantize_blockwise(x32(), block_size=2**40)),
    Case("q-block-float", Q, "invalid block size (type)", TypeError, r"^quantize_blockwise: argument 'block_size' must be an int, got float",
         lambda d: octopt.quantize_blockwise(x32(), block_size=256.0)),
    Case("q-bits", Q, "invalid bits", ValueError, r"^quantize_blockwise: argument 'bits' must be 4 or 8, got 3",
         lambda d: octopt.quantize_blockwise(x32(), bits=3)),
    Case("q-rounding", Q, "invalid option", ValueError, r"^quantize_blockwise: argument 'rounding' must be 'nearest' or 'stochastic', got 'up'",
         lambda d: octopt.quantize_blockwise(x32(), rounding="up")),
    Case("q-qmap-size", Q, "wrong shape/size (map)", ValueError, r"^quantize_blockwise: argument 'qmap' must have 256 entries for bits=8, got 17",
         lambda d: octopt.quantize_blockwise(x32(), qmap=np.zeros(17, np.float32))),
    Case("q-qmap-2d", Q, "wrong shape/size (map)", ValueError, r"^quantize_blockwise: argument 'qmap' must be 1-D, got shape \(16, 16\)",
         lambda d: octopt.quantize_blockwise(x32(), qmap=np.zeros((16, 16), np.float32))),
    Case("q-qmap-nan", Q, "NaN/Inf (map)", ValueError, r"^quantize_blockwise: argument 'qmap' must be finite; entry 0 is nan",
         lambda d: octopt.quantize_blockwise(x32(), qmap=np.full(256, np.nan, np.float32))),
    Case("q-out-readonly", Q, "read-only output", ValueError, r"^quantize_blockwise: argument 'out\[0\] \(codes\)' is read-only",
         lambda d: octopt.quantize_blockwise(x32(), out=(ro(np.zeros(1000, np.uint8)), np.zeros(4, np.float32)))),
    # ---- functional dequantize_blockwise -----------------------------------------------------
    Case("dq-codes-dtype", DQ, "wrong dtype", TypeError, r"^dequantize_blockwise: argument 'codes' must have dtype uint8, got int16",
         lambda d: octopt.dequantize_blockwise(q()[0].astype(np.int16), q()[1])),
    Case("dq-absmax-dtype", DQ, "wrong dtype", TypeError, r"^dequantize_blockwise: argument 'absmax' must have dtype float32, got float64",
         lambda d: octopt.dequantize_blockwise(q()[0], q()[1].astype(np.float64))),
    Case("dq-absmax-size", DQ, "wrong shape/size", ValueError, r"^dequantize_blockwise: argument 'absmax' holds 3 values but 1000 elements in blocks of 256 need 4",
         lambda d: octopt.dequantize_blockwise(q()[0], q()[1][:-1])),
    Case("dq-codes-strided", DQ, "non-contiguous stride", ValueError, r"^dequantize_blockwise: argument 'codes' must be C-contiguous",
         lambda d: octopt.dequantize_blockwise(np.repeat(q()[0], 2)[::2], q()[1])),
    Case("dq-block-mismatch", DQ, "invalid block size", ValueError, r"^dequantize_blockwise: argument 'absmax' holds 4 values but 1000 elements in blocks of 64 need 16",
         lambda d: octopt.dequantize_blockwise(q()[0], q()[1], block_size=64)),
    Case("dq-block-not-pow2", DQ, "invalid block size", ValueError, r"^dequantize_blockwise: argument 'block_size' must be a power of two .*got 100",
         lambda d: octopt.dequantize_blockwise(q()[0], q()[1], block_size=100)),
    Case("dq-out-readonly", DQ, "read-only output", ValueError, r"^dequantize_blockwise: argument 'out' is read-only",
         lambda d: octopt.dequantize_blockwise(*q(), out=ro(np.zeros(1000, np.float32)))),
    Case("dq-out-shape", DQ, "wrong shape/size (out)", ValueError, r"^dequantize_blockwise: argument 'out' has 999 elements, which does not match 1000 8-bit code bytes",
         lambda d: octopt.dequantize_blockwise(*q(), out=np.zeros(999, np.float32))),
    Case("dq-out-dtype", DQ, "wrong dtype (out)", TypeError, r"^dequantize_blockwise: argument 'out' must have dtype .*got float64",
         lambda d: octopt.dequantize_blockwise(*q(), out=np.zeros(1000, np.float64))),
    # ---- maps --------------------------------------------------------------------------------
    Case("map-dynamic-bits", "dynamic_map", "invalid bits", ValueError, r"^dynamic_map: argument 'bits' must be 4 or 8, got 9",
         lambda d: octopt.dynamic_map(bits=9)),
    Case("map-linear-bits", "linear_map", "invalid bits", ValueError, r"^linear_map: argument 'bits' must be 4 or 8, got 0",
         lambda d: octopt.linear_map(bits=0)),
    Case("map-log2-step-nan", "log2_map", "non-finite hyper-parameter", ValueError, r"log2_map: argument 'step' must be in \(0, 8\], got nan",
         lambda d: octopt.log2_map(step=float("nan"))),
    Case("map-log2-step-negative", "log2_map", "negative hyper-parameter", ValueError, r"log2_map: argument 'step' must be in \(0, 8\], got -0\.5",
         lambda d: octopt.log2_map(step=-0.5)),
    Case("map-quantile-empty", "quantile_map", "empty tensor", ValueError, r"^quantile_map: argument 'x' has no finite values",
         lambda d: octopt.quantile_map(np.zeros(0, np.float32))),
    Case("map-quantile-dtype", "quantile_map", "wrong dtype", TypeError, r"^quantile_map: argument 'x' must be an array of numbers",
         lambda d: octopt.quantile_map(np.array(["a", "b"]))),
    # ---- optimizer construction --------------------------------------------------------------
    Case("opt-param-int", "Adam(...)", "wrong dtype", TypeError, r"^Adam: argument 'params\[0\]' must have dtype .*got int32",
         lambda d: octopt.Adam([np.zeros(10, np.int32)])),
    Case("opt-param-float64", "Adam(...)", "wrong dtype", TypeError, r"^Adam: argument 'params\[0\]' must have dtype .*got float64",
         lambda d: octopt.Adam([np.zeros(10, np.float64)])),
    Case("opt-param-strided", "Adam(...)", "non-contiguous stride", ValueError, r"^Adam: argument 'params\[0\]' must be C-contiguous",
         lambda d: octopt.Adam([x32()[::2]])),
    Case("opt-param-readonly", "Adam(...)", "read-only", ValueError, r"^Adam: argument 'params\[0\]' is read-only",
         lambda d: octopt.Adam([ro(x32())])),
    Case("opt-param-duplicate", "Adam(...)", "two params sharing memory", ValueError, r"^Adam: argument 'params\[1\]' appears more than once",
         lambda d: (lambda p: octopt.Adam([p, p]))(x32())),
    Case("opt-param-overlap", "Adam(...)", "two params sharing memory", ValueError, r"^Adam: argument 'params\[1\]' overlaps the memory of params\[0\]",
         lambda d: (lambda p: octopt.Adam([p[:600], p[400:]]))(x32())),
    Case("opt-params-empty", "Adam(...)", "zero-size groups", ValueError, r"^Adam: got an empty parameter list",
         lambda d: octopt.Adam([])),
    Case("opt-lr-negative", "Adam(...)", "negative hyper-parameter", ValueError, r"^Adam: 'lr' must be in >= 0\.0, got -1\.0",
         lambda d: octopt.Adam([x32()], lr=-1.0)),
    Case("opt-lr-nan", "Adam(...)", "non-finite hyper-parameter", ValueError, r"^Adam: 'lr' must be finite, got nan",
         lambda d: octopt.Adam([x32()], lr=float("nan"))),
    Case("opt-eps-inf", "Adam(...)", "non-finite hyper-parameter", ValueError, r"^Adam: 'eps' must be finite, got inf",
         lambda d: octopt.Adam([x32()], eps=float("inf"))),
    Case("opt-wd-negative", "Adam(...)", "negative hyper-parameter", ValueError, r"^Adam: 'weight_decay' must be in >= 0\.0, got -0\.1",
         lambda d: octopt.Adam([x32()], weight_decay=-0.1)),
    Case("opt-beta1-one", "Adam(...)", "betas outside [0,1)", ValueError, r"^Adam: 'betas\[0\]' must be in \[0\.0, 1\.0\), got 1\.0",
         lambda d: octopt.Adam([x32()], betas=(1.0, 0.999))),
    Case("opt-beta2-negative", "Adam(...)", "betas outside [0,1)", ValueError, r"^Adam: 'betas\[1\]' must be in \[0\.0, 1\.0\), got -0\.1",
         lambda d: octopt.Adam([x32()], betas=(0.9, -0.1))),
    Case("opt-betas-length", "Adam(...)", "wrong shape/size (betas)", ValueError, r"^Adam: 'betas' must be a tuple of 2 \(or 3 for AdEMAMix and Adan\) values",
         lambda d: octopt.Adam([x32()], betas=(0.9,))),
    Case("opt-bits", "Adam(...)", "invalid bits", ValueError, r"^Adam: 'bits' must be 32, 8 or 4, got 6",
         lambda d: octopt.Adam([x32()], bits=6)),
    Case("opt-block-not-pow2", "Adam(...)", "invalid block size", ValueError, r"^Adam: 'block_size' must be a power of two in \[32, 4096\], got 100",
         lambda d: octopt.Adam([x32()], bits=8, block_size=100)),
    Case("opt-block-huge", "Adam(...)", "huge block size", ValueError, r"^Adam: 'block_size' must be a power of two .*got 1099511627776",
         lambda d: octopt.Adam([x32()], bits=8, block_size=2**40)),
    Case("opt-unknown-option", "Adam(...)", "invalid option", TypeError, r"^Adam: unexpected option 'foo'",
         lambda d: octopt.Adam([x32()], foo=1)),
    Case("opt-percentile", "Adam(...)", "invalid hyper-parameter", ValueError, r"^Adam: 'percentile' must be in \[0, 100\], got 101",
         lambda d: octopt.Adam([x32()], percentile=101)),
    Case("opt-seed-negative", "Adam(...)", "negative hyper-parameter", ValueError, r"^Adam: argument 'seed' must be in \[0, 18446744073709551615\], got -1",
         lambda d: octopt.Adam([x32()], seed=-1)),
    Case("lion-beta-one", "Lion(...)", "betas outside [0,1)", ValueError, r"^Lion: 'betas\[1\]' must be in \[0\.0, 1\.0\), got 1\.5",
         lambda d: octopt.Lion([x32()], betas=(0.9, 1.5))),
    Case("sgd-momentum-negative", "SGD(...)", "negative hyper-parameter", ValueError, r"^SGD: 'momentum' must be in >= 0\.0, got -0\.5",
         lambda d: octopt.SGD([x32()], lr=0.1, momentum=-0.5)),
    # ---- optimizer step ----------------------------------------------------------------------
    Case("step-grad-dtype", "Optimizer.step", "wrong dtype", TypeError, r"^step: argument 'grads\[0\]' must be float32 or the parameter's dtype",
         lambda d: adam().step([np.zeros(1000, np.float64)])),
    Case("step-grad-shape", "Optimizer.step", "wrong shape/size", ValueError, r"^step: argument 'grads\[0\]' has shape \(999,\) but parameter 0 has shape \(1000,\)",
         lambda d: adam().step([np.zeros(999, np.float32)])),
    Case("step-grad-count", "Optimizer.step", "wrong shape/size (count)", ValueError, r"^step: expected 1 gradients \(one per parameter\), got 0",
         lambda d: adam().step([])),
    Case("step-grad-strided", "Optimizer.step", "non-contiguous stride", ValueError, r"^step: argument 'grads\[0\]' must be C-contiguous",
         lambda d: adam().step([np.zeros(2000, np.float32)[::2]])),
    Case("step-grad-is-param", "Optimizer.step", "aliasing of param and grad", ValueError, r"^step: argument 'grads\[0\]' is the parameter itself",
         lambda d: (lambda o: o.step(o.params))(adam())),
    Case("step-grad-overlaps-param", "Optimizer.step", "aliasing of param and grad (partial)", ValueError, r"^step: argument 'grads\[0\]' overlaps its parameter's memory",
         lambda d: (lambda buf: octopt.Adam([buf[:1000]]).step([buf[500:1500]]))(np.zeros(1500, np.float32))),
    Case("step-grad-nan-strict", "Optimizer.step", "NaN/Inf (strict=True)", ValueError, r"^step: 4 block\(s\) of the gradients hold NaN or Inf \(strict=True\); nothing was changed",
         lambda d: adam(strict=True).step([np.full(1000, np.nan, np.float32)])),
    Case("step-grad-not-array", "Optimizer.step", "wrong dtype (not an array)", TypeError, r"^step: argument 'grads\[0\]' must be an array .*got list",
         lambda d: adam().step([[0.0] * 1000])),
    Case("step-grads-is-array", "Optimizer.step", "wrong shape/size (one array, not a list)", TypeError, r"^step: argument 'grads' must be a sequence of arrays",
         lambda d: adam().step(np.zeros(1000, np.float32))),
    Case("step-lr-nan-in-group", "Optimizer.step", "non-finite hyper-parameter (set on a group)", ValueError, r"^step: 'lr' must be finite, got nan",
         lambda d: (lambda o: (o.param_groups[0].__setitem__("lr", float("nan")), o.step(grads_for(o))))(adam())),
    Case("step-beta-in-group", "Optimizer.step", "betas outside [0,1) (set on a group)", ValueError, r"^step: 'betas\[0\]' must be in \[0\.0, 1\.0\), got 1\.0",
         lambda d: (lambda o: (o.param_groups[0].__setitem__("betas", (1.0, 0.9)), o.step(grads_for(o))))(adam())),
    # ---- optimizer load_state_dict -----------------------------------------------------------
    Case("lsd-not-dict", "Optimizer.load_state_dict", "wrong type", ValueError, r"^load_state_dict: expected a dict with 'optimizer', 'param_groups' and 'state'",
         lambda d: adam().load_state_dict([])),
    Case("lsd-other-optimizer", "Optimizer.load_state_dict", "wrong optimizer", ValueError, r"^load_state_dict: the state is for optimizer 'sgd' but this optimizer is 'adam'",
         lambda d: adam().load_state_dict(octopt.SGD([x32()], lr=0.1).state_dict())),
    Case("lsd-size", "Optimizer.load_state_dict", "wrong shape/size", ValueError, r"^load_state_dict: tensor 0 has 999 elements in the state but parameter 0 has 1000",
         lambda d: adam().load_state_dict(adam(x32(999)).state_dict())),
    Case("lsd-bits", "Optimizer.load_state_dict", "wrong layout (bits)", ValueError, r"^load_state_dict: param group 0 has bits=32 in the state but 8 here",
         lambda d: adam(bits=8).load_state_dict(adam(bits=32).state_dict())),
    Case("lsd-data-dtype", "Optimizer.load_state_dict", "wrong dtype", ValueError, r"^load_state_dict: tensor 0: 'exp_avg' must hold 1000 floating-point values, got 1000 of int32",
         lambda d: (lambda sd: (sd["state"][0]["slots"]["exp_avg"].__setitem__(
             "data", sd["state"][0]["slots"]["exp_avg"]["data"].astype(np.int32)), adam().load_state_dict(sd)))(
             adam().state_dict())),
    Case("lsd-step-negative", "Optimizer.load_state_dict", "negative count", ValueError, r"^load_state_dict: tensor 0: bad step count -1",
         lambda d: (lambda sd: (sd["state"][0].__setitem__("step", -1), adam().load_state_dict(sd)))(
             adam().state_dict())),
    # ---- optimizer save / load ---------------------------------------------------------------
    Case("save-dir-readonly", "Optimizer.save", "directory that cannot be written", PermissionError, r"write_state_file: cannot create a temporary file next to .*Permission denied",
         lambda d: adam().save(readonly_dir(d))),
    Case("save-disk-full", "Optimizer.save", "no disk space (file-size limit)", OSError, r"write_state_file: cannot write '.*' \(temporary",
         lambda d: disk_full(lambda: adam(np.zeros(100_000, np.float32)).save(d / "full.safetensors"))),
    Case("save-dir-missing", "Optimizer.save", "missing directory", FileNotFoundError, r"write_state_file: cannot create a temporary file next to .*No such file or directory",
         lambda d: adam().save(d / "nope" / "x.safetensors")),
    Case("load-missing", "Optimizer.load", "missing file", FileNotFoundError, r"read_state_file: cannot open .*missing\.safetensors.*No such file or directory",
         lambda d: adam().load(d / "missing.safetensors")),
    Case("load-directory", "Optimizer.load", "a directory, not a file", IsADirectoryError, r"read_state_file: cannot read .*Is a directory",
         lambda d: adam().load(d)),
    Case("load-truncated", "Optimizer.load", "truncated file", StateFileError, r"^read_state_file: .*header length 1\d+ exceeds the 192 bytes that follow it \(truncated\?\)",
         lambda d: adam(bits=8).load(truncated(saved(d), 200))),
    Case("load-empty-file", "Optimizer.load", "truncated file (0 bytes)", StateFileError, r"^read_state_file: .*file is 0 bytes, too short for the 8-byte header length",
         lambda d: adam(bits=8).load(truncated(saved(d), 0))),
    Case("load-bitflip-data", "Optimizer.load", "bit-flipped file", StateFileError, r"^read_state_file: .*tensor 'state\.0\.exp_avg_sq': checksum mismatch .*data corrupt",
         lambda d: adam(bits=8).load(flipped(saved(d), -5))),
    Case("load-wrong-version", "Optimizer.load", "wrong-version file", StateFileError, r"^read_state_file: .*unsupported format version '9' \(this build reads 1\)",
         lambda d: adam(bits=8).load(header_edit(saved(d), b'"octopt.format_version":"1"',
                                                 b'"octopt.format_version":"9"'))),
    Case("load-plain-state-file", "Optimizer.load", "not an optimizer file", StateFileError, r"^load: .*is not an octopt optimizer state file",
         lambda d: adam().load(state_file_at(d))),
    Case("load-other-shape", "Optimizer.load", "wrong shape/size", ValueError, r"^load: .*: tensor 0 has 1000 elements in the file but parameter 0 has 999",
         lambda d: adam(x32(999), bits=8).load(saved(d))),
    Case("load-other-optimizer", "Optimizer.load", "wrong optimizer", ValueError, r"^load: .*: the file holds state for optimizer 'adam' but this optimizer is 'adamw'",
         lambda d: octopt.AdamW([x32()], bits=8).load(saved(d))),
    # ---- state_file --------------------------------------------------------------------------
    Case("sf-save-not-mapping", "state_file.save", "wrong type", TypeError, r"^save: argument 'tensors' must be a mapping of name -> array, got list",
         lambda d: state_file.save(d / "x.safetensors", [x32()])),
    Case("sf-save-name-type", "state_file.save", "wrong type (name)", TypeError, r"^save: tensor names must be str, got int",
         lambda d: state_file.save(d / "x.safetensors", {1: x32()})),
    Case("sf-save-dtype", "state_file.save", "wrong dtype", TypeError, r"^save_state_file: tensor 'a' has element type complex64, which state files cannot hold",
         lambda d: state_file.save(d / "x.safetensors", {"a": np.zeros(3, np.complex64)})),
    Case("sf-save-object", "state_file.save", "wrong dtype (object)", TypeError, r"^save: tensor 'a' has dtype object, which state files cannot hold",
         lambda d: state_file.save(d / "x.safetensors", {"a": np.array([object()])})),
    Case("sf-save-meta-value", "state_file.save", "wrong type (metadata)", TypeError, r"^save: metadata key 'k' must map to a str, got int",
         lambda d: state_file.save(d / "x.safetensors", {"a": x32()}, {"k": 1})),
    Case("sf-save-reserved-key", "state_file.save", "reserved metadata key", ValueError, r"^write_state_file: metadata key 'octopt\.crc32c' is reserved",
         lambda d: state_file.save(d / "x.safetensors", {"a": x32()}, {"octopt.crc32c": "0"})),
    Case("sf-save-dir-readonly", "state_file.save", "directory that cannot be written", PermissionError, r"write_state_file: cannot create a temporary file next to .*Permission denied",
         lambda d: state_file.save(readonly_dir(d), {"a": x32()})),
    Case("sf-save-dir-missing", "state_file.save", "missing directory", FileNotFoundError, r"write_state_file: cannot create a temporary file next to .*No such file or directory",
         lambda d: state_file.save(d / "nope" / "x.safetensors", {"a": x32()})),
    Case("sf-load-missing", "state_file.load", "missing file", FileNotFoundError, r"read_state_file: cannot open .*No such file or directory",
         lambda d: state_file.load(d / "missing.safetensors")),
    Case("sf-load-directory", "state_file.load", "a directory, not a file", IsADirectoryError, r"read_state_file: cannot read .*Is a directory",
         lambda d: state_file.load(d)),
    Case("sf-load-empty", "state_file.load", "truncated file (0 bytes)", StateFileError, r"^read_state_file: .*file is 0 bytes, too short for the 8-byte header length",
         lambda d: state_file.load(truncated(state_file_at(d), 0))),
    Case("sf-load-truncated-header", "state_file.load", "truncated file (in the header)", StateFileError, r"^read_state_file: .*header length \d+ exceeds the 12 bytes that follow it \(truncated\?\)",
         lambda d: state_file.load(truncated(state_file_at(d), 20))),
    Case("sf-load-truncated-data", "state_file.load", "truncated file (in the data)", StateFileError, r"^read_state_file: .*tensors need 440 bytes of data but the file holds 436 after the header",
         lambda d: state_file.load(truncated(state_file_at(d), state_file_at(d).stat().st_size - 4))),
    Case("sf-load-bitflip-data", "state_file.load", "bit-flipped file (data)", StateFileError, r"^read_state_file: .*tensor 'b': checksum mismatch .*data corrupt",
         lambda d: state_file.load(flipped(state_file_at(d), -3))),
    Case("sf-load-bitflip-header", "state_file.load", "bit-flipped file (header)", StateFileError, r"^read_state_file: .*header checksum mismatch .*metadata or tensor table corrupt",
         lambda d: state_file.load(header_edit(state_file_at(d), b'"k":"v"', b'"k":"w"'))),
    Case("sf-load-bad-length", "state_file.load", "corrupt file (header length)", StateFileError, r"^read_state_file: .*header length \d+ exceeds the limit of 100000000 bytes \(corrupt file\?\)",
         lambda d: state_file.load(flipped(state_file_at(d), 6))),
    Case("sf-load-garbage", "state_file.load", "corrupt file (not a state file)", StateFileError, r"^read_state_file: .*header length \d+ exceeds the limit of 100000000 bytes",
         lambda d: (lambda p: (p.write_bytes(b"hello world, not a state file" * 4), state_file.load(p)))(d / "g")),
    Case("sf-load-wrong-version", "state_file.load", "wrong-version file", StateFileError, r"^read_state_file: .*unsupported format version '9' \(this build reads 1\)",
         lambda d: state_file.load(header_edit(state_file_at(d), b'"octopt.format_version":"1"',
                                               b'"octopt.format_version":"9"'))),
    Case("sf-load-bfloat16-mode", "state_file.load", "invalid option", ValueError, r"^load: argument 'bfloat16' must be one of 'uint16', 'float32', 'ml_dtypes', got 'bf16'",
         lambda d: state_file.load(state_file_at(d), bfloat16="bf16")),
    Case("sf-inspect-missing", "state_file.inspect", "missing file", FileNotFoundError, r"inspect_state_file: cannot open .*No such file or directory",
         lambda d: state_file.inspect(d / "missing.safetensors")),
    # ---- CLI octopt inspect ------------------------------------------------------------------
    Case("cli-inspect-missing", "octopt inspect", "missing file", CliFailure, r"octopt inspect: .*cannot open .*No such file or directory",
         lambda d: inspect_cli(d / "missing.safetensors")),
    Case("cli-inspect-directory", "octopt inspect", "a directory, not a file", CliFailure, r"octopt inspect: .*cannot read .*Is a directory",
         lambda d: inspect_cli(d)),
    Case("cli-inspect-truncated", "octopt inspect", "truncated file", CliFailure, r"octopt inspect: .*header length \d+ exceeds the 12 bytes that follow it",
         lambda d: inspect_cli(truncated(state_file_at(d), 20))),
    Case("cli-inspect-bitflip", "octopt inspect", "bit-flipped file", CliFailure, r"octopt inspect: .*tensor 'b': checksum mismatch",
         lambda d: inspect_cli(flipped(state_file_at(d), -3))),
    Case("cli-inspect-wrong-version", "octopt inspect", "wrong-version file", CliFailure, r"octopt inspect: .*unsupported format version '9'",
         lambda d: inspect_cli(header_edit(state_file_at(d), b'"octopt.format_version":"1"',
                                           b'"octopt.format_version":"9"'))),
    # ---- octopt.torch ------------------------------------------------------------------------
    Case("torch-param-int", "octopt.torch.Adam(...)", "wrong dtype", TypeError, r"^Adam: argument 'params\[0\]' must be float32, float16 or bfloat16, got torch\.int32",
         lambda d: tadam(torch_mod().zeros(10, dtype=torch_mod().int32)), torch=True),
    Case("torch-param-float64", "octopt.torch.Adam(...)", "wrong dtype", TypeError, r"^Adam: argument 'params\[0\]' must be float32, float16 or bfloat16, got torch\.float64",
         lambda d: tadam(torch_mod().zeros(10, dtype=torch_mod().float64, requires_grad=True)), torch=True),
    Case("torch-param-strided", "octopt.torch.Adam(...)", "non-contiguous stride", ValueError, r"^Adam: argument 'params\[0\]' must be contiguous",
         lambda d: tadam(torch_mod().zeros(64, 64).t().requires_grad_()), torch=True),
    Case("torch-param-shared", "octopt.torch.Adam(...)", "two params sharing memory", ValueError, r"^Adam: argument 'params\[1\]' overlaps the memory of params\[0\]",
         lambda d: (lambda b: tadam(b[:600], b[400:]))(torch_mod().zeros(1000)), torch=True),
    Case("torch-params-empty", "octopt.torch.Adam(...)", "zero-size groups", ValueError, r"optimizer got an empty parameter list",
         lambda d: (torch_mod(), __import__("octopt.torch").torch.Adam([])), torch=True),
    Case("torch-lr-negative", "octopt.torch.Adam(...)", "negative hyper-parameter", ValueError, r"^Adam: 'lr' must be in >= 0\.0, got -1\.0",
         lambda d: tadam(tparam(), lr=-1.0), torch=True),
    Case("torch-lr-nan", "octopt.torch.Adam(...)", "non-finite hyper-parameter", ValueError, r"^Adam: 'lr' must be finite, got nan",
         lambda d: tadam(tparam(), lr=float("nan")), torch=True),
    Case("torch-beta-one", "octopt.torch.Adam(...)", "betas outside [0,1)", ValueError, r"^Adam: 'betas\[1\]' must be in \[0\.0, 1\.0\), got 1\.0",
         lambda d: tadam(tparam(), betas=(0.9, 1.0)), torch=True),
    Case("torch-block-not-pow2", "octopt.torch.Adam(...)", "invalid block size", ValueError, r"^Adam: 'block_size' must be a power of two .*got 100",
         lambda d: tadam(tparam(), bits=8, block_size=100), torch=True),
    Case("torch-step-grad-nan-strict", "octopt.torch optimizer .step()", "NaN/Inf (strict=True)", ValueError, r"^step: 4 block\(s\) of the gradients hold NaN or Inf \(strict=True\)",
         lambda d: (lambda p: (lambda o: (setattr(p, "grad", torch_mod().full_like(p, float("nan"))), o.step()))(
             tadam(p, strict=True)))(tparam()), torch=True),
    Case("torch-lsd-other-size", "octopt.torch optimizer .load_state_dict", "wrong shape/size", ValueError, r"^Adam\.load_state_dict: the state of parameter 0: 'exp_avg' must hold 999 floating-point values, got 1000",
         lambda d: tadam(tparam(999), bits=8).load_state_dict(tsaved(d)[0].state_dict()), torch=True),
    Case("torch-lsd-garbage", "octopt.torch optimizer .load_state_dict", "wrong type", TypeError, r"^Adam\.load_state_dict: argument 'state_dict' must be a dict with 'state'",
         lambda d: tadam(tparam(), bits=8).load_state_dict({"state": 1}), torch=True),
]
# fmt: on


# -- the doc table -----------------------------------------------------------------------------
HEADER = ["| id | entry point | bad input | exception | message (regex) |", "|---|---|---|---|---|"]


def render_table() -> str:
    return "\n".join(HEADER + [c.row() for c in CASES])


def doc_rows() -> list[str]:
    text = DOC.read_text(encoding="utf-8")
    body = text.split(BEGIN, 1)[1].split(END, 1)[0]
    return [line.strip() for line in body.strip().splitlines() if line.strip().startswith("|")]


def write_doc() -> None:
    text = DOC.read_text(encoding="utf-8")
    head, rest = text.split(BEGIN, 1)
    tail = rest.split(END, 1)[1]
    DOC.write_text(f"{head}{BEGIN}\n{render_table()}\n{END}{tail}", encoding="utf-8")


def test_case_ids_unique_and_patterns_fit_a_table() -> None:
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids))
    for c in CASES:
        assert c.pattern, c.id
        assert "|" not in c.pattern and "`" not in c.pattern, c.id
        re.compile(c.pattern)


def test_doc_table_matches_cases() -> None:
    rows = doc_rows()
    assert rows[:2] == HEADER
    doc_ids = [r.split("|")[1].strip() for r in rows[2:]]
    case_ids = [c.id for c in CASES]
    assert set(doc_ids) - set(case_ids) == set(), "rows of docs/errors.md without a case"
    assert set(case_ids) - set(doc_ids) == set(), "cases missing from docs/errors.md"
    assert rows[2:] == [c.row() for c in CASES], "docs/errors.md drifted: run python tests/docs/test_error_matrix.py"


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_error_matrix(case: Case, tmp_path: Path) -> None:
    if case.torch:
        pytest.importorskip("torch")
    try:
        with pytest.raises(case.exc, match=case.pattern) as info:
            case.call(tmp_path)
    finally:
        for sub in tmp_path.iterdir():
            if sub.is_dir():
                sub.chmod(0o755)
    if case.exc is not CliFailure:
        assert type(info.value) is case.exc or case.exc is StateFileError, (type(info.value), case.exc)


def _probe() -> None:
    import tempfile

    for c in CASES:
        with tempfile.TemporaryDirectory() as d:
            try:
                c.call(Path(d))
                out = "NO EXCEPTION"
            except BaseException as e:  # noqa: BLE001
                out = f"{type(e).__name__}: {e}"
            finally:
                for sub in Path(d).iterdir():
                    if sub.is_dir():
                        sub.chmod(0o755)
        print(f"{c.id}\t[{c.exc_name()}]\t{out}")


if __name__ == "__main__":
    if "--probe" in sys.argv:
        _probe()
    else:
        write_doc()
        print(f"wrote {len(CASES)} rows to {DOC}")
