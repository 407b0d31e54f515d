"""Fuzz harness for the state-file reader, through its Python entry points.

Each input is written to a file on a tmpfs and read with ``octopt.state_file.load``,
``octopt._octopt.inspect_state_file`` and ``Optimizer.load``. A bug is:
  * any exception other than ``octopt.StateFileError`` / ``OSError`` / ``ValueError`` (a crash of the
    process is one too);
  * ``inspect`` disagreeing with ``load`` (its "valid" is documented to be true exactly when load succeeds);
  * a loaded tensor whose size is not what the header and the report say.

Two drivers (tests/state_files/fuzz/README.md):
  python tests/state_files/fuzz/fuzz_state_file.py tests/state_files/fuzz/corpus -runs=100000  # atheris
  python tests/state_files/fuzz/fuzz_state_file.py --builtin 100000 [--seed S]  # the mutator here
Both mutate the seed corpus with byte-level mutations and with structure-aware ones that edit the JSON
header and rewrite the checksums (_stfile.build), so that inputs get past the CRC checks to the later
validation. octopt's native code is not built with coverage instrumentation: atheris sees only the
Python side, so its guidance is weak and the structure-aware mutator does most of the work either way.
"""

from __future__ import annotations

import json
import os
import random
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import _stfile  # noqa: E402
import numpy as np  # noqa: E402
import octopt  # noqa: E402
from octopt import _octopt, state_file  # noqa: E402

CORPUS = HERE / "corpus"
REGRESSIONS = HERE / "regressions"
ALLOWED = (octopt.StateFileError, OSError, ValueError)

# The optimizer the corpus's optimizer state file was written by (make_corpus); Optimizer.load is
# fuzzed against one like it.
OPT_SHAPES = ((300,), (5, 7))


def make_optimizer() -> octopt.Optimizer:
    return octopt.Adam([np.zeros(s, np.float32) for s in OPT_SHAPES], bits=8, min_8bit_size=0, seed=1)


class FuzzBug(AssertionError):
    pass


class Target:
    """Runs one input through the readers; raises FuzzBug (or the unexpected exception) for a bug."""

    def __init__(self, folder: str | None = None):
        if folder is None:
            folder = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
        self._dir = tempfile.TemporaryDirectory(prefix="octopt-fuzz-", dir=folder)
        self.path = os.path.join(self._dir.name, "input.octopt")
        self._fd = None
        self.opt = make_optimizer()
        self.opt_before = _opt_state(self.opt)
        self.loaded = 0  # inputs that loaded (passed every check)

    def close(self) -> None:
        self._dir.cleanup()

    def unlinked(self) -> None:
        """Reads the inputs through /proc/self/fd of a file already removed, so that nothing is left
        behind by a process that ends without cleaning up (libFuzzer exits without running Python's
        atexit handlers). Linux only."""
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        self.close()
        self.path = f"/proc/self/fd/{self._fd}"

    def __call__(self, data: bytes) -> None:
        if self._fd is not None:
            os.ftruncate(self._fd, 0)
            os.pwrite(self._fd, data, 0)
        else:
            with open(self.path, "wb") as f:
                f.write(data)
        error = None
        try:
            tensors, metadata = state_file.load(self.path)
        except ALLOWED as e:
            error = e
        report = json.loads(_octopt.inspect_state_file(self.path))  # raises only OSError
        if report["valid"] != (error is None):
            raise FuzzBug(
                f"inspect says valid={report['valid']} (error {report['error']!r}) but load "
                f"{'raised ' + type(error).__name__ + ': ' + str(error) if error else 'succeeded'}"
            )
        if error is not None:
            if not isinstance(error, octopt.StateFileError):
                raise FuzzBug(f"load raised {type(error).__name__}, not StateFileError: {error}")
            # the same problem, reported under each function's own name
            if report["error"].partition(": ")[2] != str(error).partition(": ")[2]:
                raise FuzzBug(f"inspect reports {report['error']!r} but load raised {str(error)!r}")
            return
        self.loaded += 1
        by_name = {t["name"]: t for t in report["tensors"]}
        if list(tensors) != [t["name"] for t in report["tensors"]]:
            raise FuzzBug(f"load gave tensors {list(tensors)}, inspect {list(by_name)}")
        for name, a in tensors.items():
            t = by_name[name]
            if list(a.shape) != t["shape"] or a.nbytes != t["nbytes"]:
                raise FuzzBug(f"tensor {name!r}: loaded shape {a.shape} / {a.nbytes} bytes, header {t}")
        if "octopt.optimizer" in metadata:
            try:
                self.opt.load(self.path)
            except (ValueError, OSError):
                after = _opt_state(self.opt)
                if after != self.opt_before:
                    raise FuzzBug("a failed Optimizer.load changed the optimizer") from None
            else:  # it loaded: back to the reference state for the next input
                self.opt = make_optimizer()


def _opt_state(opt) -> list:
    sd = opt.state_dict()
    out = [repr((sd["global_step"], sd["param_groups"]))]
    for s in sd["state"]:
        out.append(s["step"])
        for slot in s["slots"].values():
            out += [np.asarray(slot["data"]).tobytes(), np.asarray(slot.get("absmax", np.zeros(0))).tobytes()]
    return out


# -- mutations ------------------------------------------------------------------------------------

INTERESTING_INTS = [
    0,
    1,
    2,
    7,
    8,
    255,
    256,
    1023,
    1024,
    1025,
    2**31 - 1,
    2**31,
    2**32 - 1,
    2**32,
    2**53 + 1,
    2**62,
    2**63 - 1,
    2**63,
    2**64 - 1,
    2**64,
    -1,
    -(2**63),
    10**30,
]
INTERESTING_VALUES = INTERESTING_INTS + [0.5, -0.0, 1e308, "", "3", None, True, [], {}, [1, 2], {"a": 1}]
INTERESTING_STRINGS = [
    "",
    "__x",
    "__metadata__",
    "__header__",
    "a" * 1025,
    "\ud800",
    "é",
    "\u0000",
    "x.y",
    "octopt.format",
    "octopt.crc32c",
    "octopt.format_version",
    "0" * 8,
    "ffffffff",
]
DTYPES = [
    "F64",
    "F32",
    "F16",
    "BF16",
    "I64",
    "I32",
    "I16",
    "I8",
    "U64",
    "U32",
    "U16",
    "U8",
    "BOOL",
    "F8",
    "f32",
    "",
    "C64",
]
BYTE_VALUES = [
    0x00,
    0x01,
    0x7F,
    0x80,
    0xFF,
    ord("{"),
    ord("}"),
    ord('"'),
    ord("\\"),
    ord(","),
    ord(":"),
    ord("0"),
    ord("9"),
    ord("-"),
    ord(" "),
    ord("["),
]


def _pick_int(r: random.Random) -> int:
    return r.choice(INTERESTING_INTS) if r.random() < 0.7 else r.randrange(-5, 5000)


def _mutate_bytes(data: bytes, r: random.Random, other: bytes) -> bytes:
    b = bytearray(data)
    for _ in range(r.choice((1, 1, 1, 2, 3, 8))):
        op = r.randrange(9)
        n = len(b)
        if op == 0 and n:
            b[r.randrange(n)] ^= 1 << r.randrange(8)
        elif op == 1 and n:
            b[r.randrange(n)] = r.choice(BYTE_VALUES) if r.random() < 0.6 else r.randrange(256)
        elif op == 2:
            at = r.randrange(n + 1)
            b[at:at] = bytes(r.randrange(256) for _ in range(r.randrange(1, 9)))
        elif op == 3 and n:
            at = r.randrange(n)
            del b[at : at + r.randrange(1, 64)]
        elif op == 4 and n:
            del b[r.randrange(n + 1) :]
        elif op == 5 and n:
            at, ln = r.randrange(n), r.randrange(1, 32)
            b[at:at] = b[at : at + ln]
        elif op == 6:  # the header length
            v = r.choice(
                (
                    0,
                    1,
                    2,
                    7,
                    len(b) - 8,
                    len(b) - 7,
                    len(b),
                    2**63,
                    2**64 - 1,
                    100_000_001,
                    int.from_bytes(b[:8], "little") + r.choice((-8, -1, 1, 8)),
                )
            )
            b[:8] = (v & 0xFFFFFFFFFFFFFFFF).to_bytes(8, "little")
        elif op == 7 and other:  # splice
            at = r.randrange(n + 1)
            o = r.randrange(len(other))
            b[at:] = other[o : o + r.randrange(1, 4096)]
        elif op == 8:  # a run of digits in the header
            end = min(len(b), 8 + int.from_bytes(b[:8], "little") if len(b) >= 8 else 0)
            digits = [k for k in range(8, end) if 48 <= b[k] <= 57]
            if digits:
                k = r.choice(digits)
                j = k
                while j < len(b) and 48 <= b[j] <= 57:
                    j += 1
                b[k:j] = str(_pick_int(r)).encode()
    return bytes(b)


def _mutate_value(v, r: random.Random):
    if isinstance(v, list) and v and r.random() < 0.6:
        v = list(v)
        k = r.randrange(len(v))
        op = r.randrange(4)
        if op == 0:
            v[k] = r.choice(INTERESTING_VALUES)
        elif op == 1:
            del v[k]
        elif op == 2:
            v.insert(k, r.choice(INTERESTING_VALUES))
        else:
            v[k] = _mutate_value(v[k], r)
        return v
    if isinstance(v, dict) and v and r.random() < 0.6:
        v = dict(v)
        k = r.choice(list(v))
        op = r.randrange(3)
        if op == 0:
            del v[k]
        elif op == 1:
            v[k] = _mutate_value(v[k], r)
        else:
            v[r.choice(INTERESTING_STRINGS)] = r.choice(INTERESTING_VALUES)
        return v
    if isinstance(v, int) and not isinstance(v, bool) and r.random() < 0.7:
        return _pick_int(r)
    return r.choice(INTERESTING_VALUES + INTERESTING_STRINGS)


def _mutate_structure(data: bytes, r: random.Random) -> bytes | None:
    parts = _stfile.split(data)
    if parts is None:
        return None
    header, body = parts
    header = dict(header)
    names = [k for k in header if k != "__metadata__"]
    op = r.randrange(10)
    if op <= 3 and names:  # a tensor entry
        name = r.choice(names)
        e = header[name]
        if isinstance(e, dict):
            e = dict(e)
            field = r.choice(("dtype", "shape", "shape", "data_offsets", "extra"))
            if field == "dtype":
                e["dtype"] = r.choice(DTYPES)
            elif field == "extra":
                e[r.choice(("extra", "dtype", "shape"))] = r.choice(INTERESTING_VALUES)
            else:
                e[field] = _mutate_value(e.get(field), r) if r.random() < 0.8 else r.choice(INTERESTING_VALUES)
            if field == "shape" and r.random() < 0.5 and isinstance(e.get("shape"), list):
                e["shape"] = e["shape"] + [r.choice((0, 0, 1, 2**62, 2**63 - 1, 2**32))]
        else:
            e = r.choice(INTERESTING_VALUES)
        header[name] = e
    elif op == 4 and names:  # rename / drop / duplicate a tensor
        name = r.choice(names)
        e = header.pop(name)
        if r.random() < 0.7:
            header[r.choice(INTERESTING_STRINGS + [name + "x"])] = e
    elif op == 5:  # an empty tensor somewhere in the data order
        end = len(body)
        at = r.choice((0, end, r.randrange(end + 1)))
        header[r.choice(("z", "zz", "\u00e9"))] = {
            "dtype": r.choice(DTYPES),
            "shape": [0] + [_pick_int(r)],
            "data_offsets": [at, at],
        }
    else:  # metadata: octopt's keys, the optimizer's JSON documents
        meta = header.get("__metadata__")
        if not isinstance(meta, dict):
            header["__metadata__"] = r.choice(INTERESTING_VALUES)
        else:
            meta = dict(meta)
            key = r.choice(list(meta) + ["new"])
            value = meta.get(key)
            if isinstance(value, str) and value[:1] in "[{" and r.random() < 0.8:
                try:
                    doc = json.loads(value)
                    meta[key] = json.dumps(_mutate_value(doc, r) if r.random() < 0.5 else _mutate_deep(doc, r))
                except ValueError:
                    meta[key] = r.choice(INTERESTING_STRINGS)
            elif r.random() < 0.2:
                meta.pop(key, None)
            else:
                meta[key] = r.choice(INTERESTING_STRINGS + ["1", "2", "-1", "octopt-state", "adam", "sgd", "9" * 30])
            header["__metadata__"] = meta
    if r.random() < 0.1:
        body = _mutate_bytes(body, r, b"") if body else body
    try:
        return _stfile.build(header, body, fix_checksums=r.random() < 0.9)
    except (ValueError, TypeError, UnicodeEncodeError):
        return None


def _mutate_deep(doc, r: random.Random):
    """Mutates a value somewhere inside a nested JSON document."""
    if isinstance(doc, (list, dict)) and doc and r.random() < 0.75:
        doc = list(doc) if isinstance(doc, list) else dict(doc)
        key = r.randrange(len(doc)) if isinstance(doc, list) else r.choice(list(doc))
        doc[key] = _mutate_deep(doc[key], r)
        return doc
    return _mutate_value(doc, r)


def mutate(data: bytes, r: random.Random, corpus: list[bytes]) -> bytes:
    other = r.choice(corpus) if corpus else b""
    if r.random() < 0.55:
        out = _mutate_structure(data, r)
        if out is not None:
            return out
    return _mutate_bytes(data, r, other)


def load_corpus(folders=(CORPUS, REGRESSIONS)) -> list[bytes]:
    out = []
    for folder in folders:
        if folder.is_dir():
            out += [p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file() and p.suffix != ".md"]
    return out


def run_builtin(runs: int, seed: int = 0, crash_dir: Path | None = None, target: Target | None = None) -> int:
    """Runs the corpus, then `runs` mutated inputs; returns how many ran clean. A bug is written to
    crash_dir (when given) and re-raised."""
    corpus = load_corpus()
    if not corpus:
        raise RuntimeError("empty seed corpus: run make_corpus.py")
    own = target is None
    target = target or Target()
    r = random.Random(seed)
    pool = list(corpus)  # the corpus grows with inputs that loaded: they are the interesting ones
    done = 0
    try:
        for k in range(len(corpus) + runs):
            data = corpus[k] if k < len(corpus) else mutate(r.choice(pool), r, pool)
            loaded = target.loaded
            try:
                target(data)
            except BaseException:
                if crash_dir is not None:
                    crash_dir.mkdir(parents=True, exist_ok=True)
                    (crash_dir / f"crash-{seed}-{k}.bin").write_bytes(data)
                raise
            done += 1
            if target.loaded > loaded and len(pool) < 2000:
                pool.append(data)
    finally:
        if own:
            target.close()
    return done


def main(argv: list[str]) -> int:
    if len(argv) > 1 and argv[1] == "--builtin":
        runs = int(argv[2]) if len(argv) > 2 else 100_000
        seed = int(argv[argv.index("--seed") + 1]) if "--seed" in argv else 0
        n = run_builtin(runs, seed, crash_dir=Path.cwd())
        print(f"fuzz_state_file: {n} inputs ran clean (builtin mutator, seed {seed})")
        return 0
    import atheris

    # Python coverage (octopt's Python layer and this harness) is the only feedback libFuzzer gets:
    # without it every input looks alike and the corpus collapses to one.
    atheris.instrument_all()
    target = Target()
    target.unlinked()
    corpus = load_corpus()

    def test_one_input(data: bytes) -> None:
        target(data)

    def custom_mutator(data: bytes, max_size: int, seed: int) -> bytes:
        r = random.Random(seed)
        if r.random() < 0.3:
            return atheris.Mutate(data, max_size)
        return mutate(data, r, corpus)[: max(max_size, 8)]

    atheris.Setup(argv, test_one_input, custom_mutator=custom_mutator)
    atheris.Fuzz()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
